//! `SqliteStore::leave_for_exit`, what a command's process does with its
//! store instead of closing it: a committed store leaves nothing behind that
//! another writer waits on, and a store still inside a transaction is
//! closed, rolling the transaction back, not left holding the write lock.
//! Both run in one process, where a connection that was left still holds
//! whatever it held (the test's process does not exit), so a write lock
//! left behind would make the second store's write fail.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use inbox_engine::store::TxMode;
use inbox_engine::{Engine, Request, Response, Store, UlidIds};
use inbox_host_native::{HostClock, host_ids};
use inbox_sqlite::{open_existing, open_or_create};

fn initialized() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("team.db");
    open_or_create(&db).unwrap().initialize().unwrap();
    (dir, db)
}

fn send(
    db: &Path,
    subject: &str,
) -> (
    Engine<inbox_sqlite::SqliteStore, HostClock, UlidIds>,
    Response,
) {
    let (store, _) = open_existing(db, None).unwrap();
    let mut engine = Engine::new(store, HostClock::system(), host_ids());
    let request = Request::from_json(&format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"{subject}"}}"#
    ))
    .unwrap();
    let response = engine.execute(request);
    (engine, response)
}

fn subjects(db: &Path) -> Vec<String> {
    let (store, _) = open_existing(db, None).unwrap();
    let mut stmt = store
        .connection()
        .prepare("SELECT subject FROM threads ORDER BY subject")
        .unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_store_left_after_its_commit_keeps_the_commit_and_no_lock() {
    let (_dir, db) = initialized();
    let (engine, first) = send(&db, "first");
    assert!(first.is_ok(), "{}", first.to_json());
    engine.into_parts().0.leave_for_exit();

    // The next writer goes ahead at once: the left connection holds no
    // write lock and no writer turn.
    let (_engine, second) = send(&db, "second");
    assert!(second.is_ok(), "{}", second.to_json());
    assert_eq!(subjects(&db), ["first", "second"]);
}

#[test]
fn a_store_left_inside_a_transaction_is_closed_and_rolled_back() {
    let (_dir, db) = initialized();
    let (mut store, _) = open_existing(&db, None).unwrap();
    store.begin(TxMode::Write).unwrap();
    store
        .connection()
        .execute(
            "INSERT INTO settings (key, value) VALUES ('left_behind', '1')",
            [],
        )
        .unwrap();
    store.leave_for_exit();

    let (_engine, after) = send(&db, "after");
    assert!(after.is_ok(), "{}", after.to_json());
    let (store, _) = open_existing(&db, None).unwrap();
    let left: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM settings WHERE key = 'left_behind'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "the open transaction was rolled back");
}
