//! A batch (`SqliteStore::begin_batch`) runs many engine commands in one
//! write transaction: each command is still atomic (a refused one leaves
//! nothing, the others stay), and the batch commits all of them or, rolled
//! back, none. Other connections see nothing until the batch commits.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{Engine, ManualClock, Request, SequentialIds, Store};
use inbox_sqlite::{SqliteStore, open_existing, open_or_create};

fn threads(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("SELECT count(*) FROM threads", [], |row| row.get(0))
        .unwrap()
}

fn send(subject: &str) -> Request {
    Request::from_json(&format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"{subject}"}}"#
    ))
    .unwrap()
}

fn engine(store: SqliteStore) -> Engine<SqliteStore, ManualClock, SequentialIds> {
    let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
    Engine::new(store, clock, SequentialIds::new())
}

#[test]
fn a_batch_keeps_every_command_that_succeeded_and_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("batch.db");
    let mut store = open_or_create(&path).unwrap();
    store.initialize().unwrap();
    drop(store);

    let (store, _) = open_existing(&path, None).unwrap();
    let mut engine = engine(store);
    engine.store_mut().begin_batch().unwrap();
    assert!(engine.execute(send("One")).is_ok());
    // A refused command: its savepoint is rolled back, the batch goes on.
    let refused = engine.execute(
        Request::from_json(r#"{"command":"claim","agent":"worker","thread_id":"thr_missing"}"#)
            .unwrap(),
    );
    assert!(!refused.is_ok(), "{}", refused.to_json());
    assert!(engine.execute(send("Two")).is_ok());
    assert_eq!(threads(&path), 0, "nothing is visible before the commit");
    engine.store_mut().end_batch(true).unwrap();
    assert_eq!(threads(&path), 2);

    engine.store_mut().begin_batch().unwrap();
    assert!(engine.execute(send("Three")).is_ok());
    engine.store_mut().end_batch(false).unwrap();
    assert_eq!(threads(&path), 2, "a batch rolled back keeps nothing");
    // The store goes on as an ordinary one.
    assert!(engine.execute(send("Four")).is_ok());
    assert_eq!(threads(&path), 3);
    assert!(engine.store_mut().end_batch(true).is_err(), "no batch open");
}

#[test]
fn a_group_keeps_or_drops_its_commands_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.db");
    let mut store = open_or_create(&path).unwrap();
    store.initialize().unwrap();
    let mut engine = engine(store);
    assert!(engine.store_mut().begin_group().is_err(), "only in a batch");
    engine.store_mut().begin_batch().unwrap();
    engine.store_mut().begin_group().unwrap();
    assert!(engine.execute(send("Dropped one")).is_ok());
    assert!(engine.execute(send("Dropped two")).is_ok());
    engine.store_mut().end_group(false).unwrap();
    engine.store_mut().begin_group().unwrap();
    assert!(engine.execute(send("Kept")).is_ok());
    engine.store_mut().end_group(true).unwrap();
    engine.store_mut().end_batch(true).unwrap();
    assert_eq!(threads(&path), 1);
}
