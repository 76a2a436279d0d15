//! `Store::update_thread` on every store (the in-memory reference, SQLite on
//! a real file, a real PostgreSQL server): it writes a thread's changing
//! fields, and refuses, leaving the stored thread as it was, an update of a
//! thread that is not stored or one that would change a field fixed when the
//! thread was opened. The SQL stores SET only the changing columns (so that
//! their indexes on fixed columns are not rewritten by every command); this
//! is what keeps them from silently dropping a change to another field.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{MemoryStore, Priority, Status, Store, Thread, Timestamp, TxMode};
use inbox_host_native::open_or_create;

fn opened() -> Thread {
    let at = Timestamp::parse("2026-01-01T00:00:00.000Z").unwrap();
    Thread {
        thread_id: "thr_1".into(),
        run_id: Some("run_1".into()),
        task_id: None,
        subject: "Port the parser".into(),
        created_by: "lead".into(),
        assigned_to: "worker".into(),
        status: Status::Pending,
        priority: Priority::Normal,
        attempts: 0,
        max_attempts: 3,
        latest_message_id: Some("msg_1".into()),
        last_event_id: 1,
        created_at: at,
        updated_at: at,
    }
}

/// `update_thread` in a write transaction; a refusal may come from the call
/// or, for a store that queues its writes, from the commit.
fn update(store: &mut dyn Store, thread: &Thread) -> Result<(), String> {
    store.begin(TxMode::Write).unwrap();
    match store.update_thread(thread) {
        Ok(()) => store.commit().map_err(|e| e.to_string()),
        Err(e) => {
            store.rollback().unwrap();
            Err(e.to_string())
        }
    }
}

fn stored(store: &mut dyn Store) -> Thread {
    store.begin(TxMode::Read).unwrap();
    let state = store
        .thread("thr_1")
        .unwrap()
        .expect("the thread is stored");
    store.commit().unwrap();
    state.thread
}

/// Every fixed field changed on its own, named for the failure message.
fn fixed_field_changes() -> Vec<(&'static str, Thread)> {
    let base = opened();
    let change = |f: fn(&mut Thread)| {
        let mut t = base.clone();
        f(&mut t);
        t
    };
    vec![
        ("run_id", change(|t| t.run_id = None)),
        ("task_id", change(|t| t.task_id = Some("t-9".into()))),
        ("subject", change(|t| t.subject = "Another subject".into())),
        ("created_by", change(|t| t.created_by = "someone".into())),
        ("assigned_to", change(|t| t.assigned_to = "other".into())),
        ("priority", change(|t| t.priority = Priority::High)),
        ("max_attempts", change(|t| t.max_attempts = 9)),
        (
            "created_at",
            change(|t| t.created_at = t.created_at.plus_millis(1)),
        ),
    ]
}

fn check(store: &mut dyn Store, name: &str) {
    store.initialize().unwrap();
    store.begin(TxMode::Write).unwrap();
    store.insert_thread(&opened()).unwrap();
    store.commit().unwrap();

    // The changing fields are written.
    let mut claimed = opened();
    claimed.status = Status::Claimed;
    claimed.attempts = 1;
    claimed.latest_message_id = Some("msg_2".into());
    claimed.last_event_id = 2;
    claimed.updated_at = claimed.updated_at.plus_millis(5);
    update(store, &claimed).unwrap();
    assert_eq!(
        stored(store),
        claimed,
        "{name}: the changing fields are written"
    );

    // A fixed field's change is refused, and nothing is written.
    for (field, mut changed) in fixed_field_changes() {
        changed.status = Status::Done;
        let error = update(store, &changed).expect_err(field);
        assert!(
            error.contains("would change a field fixed when"),
            "{name}, {field}: {error}"
        );
        assert_eq!(stored(store), claimed, "{name}, {field}: nothing written");
    }

    // So is an update of a thread that is not stored.
    let mut missing = claimed.clone();
    missing.thread_id = "thr_2".into();
    let error = update(store, &missing).unwrap_err();
    assert!(error.contains("thr_2 does not exist"), "{name}: {error}");
}

#[test]
fn the_memory_store_writes_changing_fields_and_refuses_fixed_ones() {
    check(&mut MemoryStore::new(), "memory");
}

#[test]
fn sqlite_writes_changing_fields_and_refuses_fixed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_or_create(&dir.path().join("inbox.db")).unwrap();
    check(&mut store, "sqlite");
}

/// With the `postgres` feature, as scripts/test runs the tests.
#[cfg(feature = "postgres")]
#[test]
fn postgres_writes_changing_fields_and_refuses_fixed_ones() {
    let Some(server) = inbox_pg_cluster::PgCluster::start_or_skip("thread_updates") else {
        return;
    };
    let mut store = inbox_host_native::PgStore::with_config(server.config("postgres")).unwrap();
    check(&mut store, "postgres");
}
