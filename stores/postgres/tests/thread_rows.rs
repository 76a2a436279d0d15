//! A thread's row on every store (the in-memory reference, SQLite on a real
//! file, a real PostgreSQL server).
//!
//! - `Store::update_thread` writes a thread's changing fields, and refuses,
//!   leaving the stored thread as it was, an update of a thread that is not
//!   stored or one that would change a field fixed when the thread was
//!   opened. The SQL stores SET only the changing columns (so that their
//!   indexes on fixed columns are not rewritten by every command); this is
//!   what keeps them from silently dropping a change to another field.
//!   The same holds when the thread was read first in the transaction, as
//!   the engine does, and the status stays (SQLite then leaves the status
//!   out of its `SET`, so that a progress note does not rewrite the status
//!   indexes), and when the status read is not the one stored any more.
//! - `Store::threads` returns a released lease only when the query asks for
//!   released leases, and a held one always, through every shape of
//!   statement (a plain filter, an agent's two merged index scans, the
//!   merge of several statuses). Leaving released leases out also leaves
//!   out an unreleased lease on a thread in no holder's status, as
//!   `ThreadQuery::keep_lease_of` says.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::store::{ThreadOrder, ThreadQuery};
use inbox_engine::{Lease, MemoryStore, Priority, Status, Store, Thread, Timestamp, TxMode};
use inbox_sqlite::open_or_create;

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
    write(store, thread, false)
}

/// [`update`] after reading the thread in the same transaction, as the
/// engine does before every change.
fn read_then_update(store: &mut dyn Store, thread: &Thread) -> Result<(), String> {
    write(store, thread, true)
}

fn write(store: &mut dyn Store, thread: &Thread, read_first: bool) -> Result<(), String> {
    store.begin(TxMode::Write).unwrap();
    if read_first {
        store.thread(&thread.thread_id).unwrap();
    }
    match store.update_thread(thread) {
        Ok(()) => store.commit().map_err(|e| e.to_string()),
        Err(e) => {
            store.rollback().unwrap();
            Err(e.to_string())
        }
    }
}

/// Every fixed field's change, with `status`, is refused by `write` and
/// leaves `kept` stored.
fn refuses_fixed_changes(
    store: &mut dyn Store,
    name: &str,
    status: Status,
    read_first: bool,
    kept: &Thread,
) {
    for (field, changed) in fixed_field_changes() {
        let changed = Thread { status, ..changed };
        let error = write(store, &changed, read_first).expect_err(field);
        assert!(
            error.contains("would change a field fixed when"),
            "{name}, {field}, read first {read_first}: {error}"
        );
        assert_eq!(&stored(store), kept, "{name}, {field}: nothing written");
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
    refuses_fixed_changes(store, name, Status::Done, false, &claimed);

    // So is an update of a thread that is not stored.
    let mut missing = claimed.clone();
    missing.thread_id = "thr_2".into();
    let error = update(store, &missing).unwrap_err();
    assert!(error.contains("thr_2 does not exist"), "{name}: {error}");

    // Read first, the status kept: the changing fields are written, a fixed
    // field's change is still refused.
    let mut noted = claimed.clone();
    noted.latest_message_id = Some("msg_3".into());
    noted.last_event_id = 3;
    read_then_update(store, &noted).unwrap();
    assert_eq!(
        stored(store),
        noted,
        "{name}: a status-keeping change is written"
    );
    refuses_fixed_changes(store, name, noted.status, true, &noted);

    // Read first, then the status changed by another write of the same
    // transaction: the thread read says Claimed, the row says Blocked.
    let mut blocked = noted.clone();
    blocked.status = Status::Blocked;
    blocked.last_event_id = 4;
    let mut back = blocked.clone();
    back.status = Status::Claimed;
    back.last_event_id = 5;
    store.begin(TxMode::Write).unwrap();
    store.thread("thr_1").unwrap();
    store.update_thread(&blocked).unwrap();
    store.update_thread(&back).unwrap();
    store.commit().unwrap();
    assert_eq!(stored(store), back, "{name}: the last status is stored");
}

/// Four threads of `lead`'s for `worker`: `thr_1` done, its lease
/// released; `thr_2` claimed, its lease held; `thr_3` pending, never
/// claimed; `thr_4` pending with an unreleased lease, which the engine never
/// writes (every way out of a holder's status releases the lease), so a
/// read that leaves released leases out need not look for it.
fn store_leases(store: &mut dyn Store) {
    let lease = |thread: &Thread, released: bool| Lease {
        thread_id: thread.thread_id.clone(),
        agent: "worker".into(),
        lease_token: 1,
        attempt: 1,
        lease_seconds: 60,
        claimed_at: thread.created_at,
        expires_at: thread.created_at.plus_seconds(60),
        released_at: released.then(|| thread.created_at.plus_seconds(5)),
    };
    store.begin(TxMode::Write).unwrap();
    for (n, status, released) in LEASES {
        let mut thread = opened();
        thread.thread_id = format!("thr_{n}");
        thread.status = status;
        thread.created_at = thread.created_at.plus_millis(n);
        store.insert_thread(&thread).unwrap();
        if let Some(released) = released {
            store.put_lease(&lease(&thread, released)).unwrap();
        }
    }
    store.commit().unwrap();
}

/// [`store_leases`]'s threads: number, status, and whether its lease was
/// released (`None`: no lease).
const LEASES: [(i64, Status, Option<bool>); 4] = [
    (1, Status::Done, Some(true)),
    (2, Status::Claimed, Some(false)),
    (3, Status::Pending, None),
    (4, Status::Pending, Some(false)),
];

/// Each thread `query` finds, with whether it came with a lease and that
/// lease's release.
fn leases_read(store: &mut dyn Store, query: &ThreadQuery) -> Vec<(String, Option<bool>)> {
    store.begin(TxMode::Read).unwrap();
    let states = store.threads(query).unwrap();
    store.commit().unwrap();
    states
        .into_iter()
        .map(|s| {
            let released = s.lease.map(|l| l.released_at.is_some());
            (s.thread.thread_id, released)
        })
        .collect()
}

fn check_leases(store: &mut dyn Store, name: &str) {
    store.initialize().unwrap();
    store_leases(store);
    let all = ThreadQuery::all(ThreadOrder::NewestFirst, 10);
    let with = |statuses: &[Status]| ThreadQuery {
        statuses: statuses.to_vec(),
        ..all.clone()
    };
    let shapes = [
        ("every thread", all.clone()),
        (
            "an agent's",
            ThreadQuery {
                agent: Some("lead".into()),
                ..all.clone()
            },
        ),
        ("one status", with(&[Status::Pending])),
        (
            "several statuses",
            with(&[Status::Pending, Status::Claimed, Status::Done]),
        ),
    ];
    for (shape, query) in shapes {
        assert!(query.released_leases, "released leases are read by default");
        // Newest first: thr_4 down to thr_1, those of the query's statuses.
        let found = LEASES
            .iter()
            .rev()
            .filter(|(_, status, _)| query.statuses.is_empty() || query.statuses.contains(status));
        let every: Vec<_> = found
            .clone()
            .map(|(n, _, released)| (format!("thr_{n}"), *released))
            .collect();
        assert_eq!(
            leases_read(store, &query),
            every,
            "{name}, {shape}: every lease when released leases are asked for"
        );
        let held: Vec<_> = found
            .map(|(n, _, released)| {
                let held = *n == 2;
                (format!("thr_{n}"), released.filter(|_| held))
            })
            .collect();
        let live = ThreadQuery {
            released_leases: false,
            ..query
        };
        assert_eq!(
            leases_read(store, &live),
            held,
            "{name}, {shape}: only a held lease (unreleased, on a thread in a holder's status) \
             when released leases are not asked for"
        );
    }
}

/// `check` on SQLite in a fresh file.
fn on_sqlite(check: fn(&mut dyn Store, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_or_create(&dir.path().join("inbox.db")).unwrap();
    check(&mut store, "sqlite");
}

/// `check` on a throwaway PostgreSQL server.
fn on_postgres(check: fn(&mut dyn Store, &str)) {
    let Some(server) = inbox_pg_cluster::PgCluster::start_or_skip("thread_rows") else {
        return;
    };
    let mut store = inbox_postgres::PgStore::with_config(server.config("postgres")).unwrap();
    check(&mut store, "postgres");
}

#[test]
fn the_memory_store_writes_changing_fields_and_refuses_fixed_ones() {
    check(&mut MemoryStore::new(), "memory");
}

#[test]
fn the_memory_store_reads_a_released_lease_only_when_asked() {
    check_leases(&mut MemoryStore::new(), "memory");
}

#[test]
fn sqlite_writes_changing_fields_and_refuses_fixed_ones() {
    on_sqlite(check);
}

/// SQLite rewrites the index entries of every column an `UPDATE` sets,
/// changed or not: an update that keeps the status must leave the status
/// indexes' pages alone. Counted in WAL frames (one per page written).
#[test]
fn sqlite_rewrites_no_status_index_when_the_status_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let mut store = open_or_create(&path).unwrap();
    store.initialize().unwrap();
    store.begin(TxMode::Write).unwrap();
    store.insert_thread(&opened()).unwrap();
    store.commit().unwrap();
    let wal = dir.path().join("inbox.db-wal");
    let mut pages_written = |thread: &Thread| {
        let before = std::fs::metadata(&wal).unwrap().len();
        read_then_update(&mut store, thread).unwrap();
        (std::fs::metadata(&wal).unwrap().len() - before) / (24 + 2048)
    };
    let mut thread = opened();
    thread.last_event_id = 2;
    let kept = pages_written(&thread);
    thread.status = Status::Claimed;
    thread.last_event_id = 3;
    let changed = pages_written(&thread);
    // The thread's own page; with a new status also its entries in
    // `threads_queue` and `threads_status`.
    assert_eq!(
        (kept, changed),
        (1, 3),
        "pages written: status kept, status changed"
    );
}

#[test]
fn sqlite_reads_a_released_lease_only_when_asked() {
    on_sqlite(check_leases);
}

#[test]
fn postgres_writes_changing_fields_and_refuses_fixed_ones() {
    on_postgres(check);
}

#[test]
fn postgres_reads_a_released_lease_only_when_asked() {
    on_postgres(check_leases);
}
