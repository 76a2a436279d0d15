//! The sandbox holds: whatever a component does (trap mid-transaction, loop
//! forever, allocate without end, leave a transaction open), the host
//! returns a clean error, rolls back, keeps the database intact and serves
//! the next call. Uses the real fault component and the real engine
//! component; the databases are real SQLite files.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use std::path::Path;

use inbox_engine::store::{EventQuery, MessageQuery, ThreadQuery};
use inbox_engine::{
    EventId, Executor, MemoryStore, Message, Request, Store, StoreError, StoreInfo, Thread,
    ThreadState, TxMode,
};
use inbox_plugin_host::{Limits, PluginError};
use inbox_sqlite::SqliteStore;

const SMALL: Limits = Limits {
    fuel: 50_000_000,
    memory_bytes: 16 << 20,
};

fn sqlite(dir: &Path) -> (SqliteStore, std::path::PathBuf) {
    let path = dir.join("inbox.db");
    let mut store = inbox_sqlite::open::open_or_create(&path).unwrap();
    store.initialize().unwrap();
    (store, path)
}

/// Thread ids in the file, read by a separate connection.
fn threads_on_disk(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let mut statement = conn
        .prepare("SELECT thread_id FROM threads ORDER BY thread_id")
        .unwrap();
    statement
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_component_that_traps_mid_transaction_leaves_no_partial_write() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = sqlite(dir.path());
    let mut engine = common::fault_plugin(SMALL)
        .instantiate(store, common::clock(), 1)
        .unwrap();

    let error = engine.execute_json("trap-mid-transaction").unwrap_err();
    assert!(matches!(error, PluginError::Trapped { .. }), "{error}");
    assert_eq!(error.code(), "plugin_trapped");
    assert!(error.to_string().contains("unreachable"), "{error}");
    assert!(error.to_string().contains("rolled back"), "{error}");
    assert!(
        engine.store_mut().connection().is_autocommit(),
        "a transaction is still open"
    );
    assert_eq!(
        threads_on_disk(&path),
        Vec::<String>::new(),
        "the insert was committed"
    );

    // The instance was replaced: the same engine serves the next call.
    let next = engine.execute_json("version").unwrap();
    assert_eq!(next.exit_code, 0);
}

#[test]
fn a_component_that_returns_with_a_transaction_open_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = sqlite(dir.path());
    let mut engine = common::fault_plugin(SMALL)
        .instantiate(store, common::clock(), 1)
        .unwrap();

    let error = engine.execute_json("begin-and-return").unwrap_err();
    assert_eq!(error.code(), "plugin_protocol", "{error}");
    assert!(error.to_string().contains("transaction open"), "{error}");
    assert!(engine.store_mut().connection().is_autocommit());
    assert_eq!(threads_on_disk(&path), Vec::<String>::new());
}

#[test]
fn a_runaway_loop_runs_out_of_fuel_and_the_next_call_works() {
    let mut engine = common::fault_plugin(SMALL)
        .instantiate(MemoryStore::new(), common::clock(), 1)
        .unwrap();
    let error = engine.execute_json("loop").unwrap_err();
    assert!(
        matches!(error, PluginError::OutOfFuel { fuel: 50_000_000 }),
        "{error}"
    );
    assert_eq!(error.code(), "plugin_out_of_fuel");
    assert_eq!(engine.fuel_used(), 50_000_000);
    assert_eq!(engine.execute_json("version").unwrap().exit_code, 0);
}

#[test]
fn an_allocation_storm_hits_the_memory_cap_and_the_next_call_works() {
    let mut engine = common::fault_plugin(SMALL)
        .instantiate(MemoryStore::new(), common::clock(), 1)
        .unwrap();
    for _ in 0..3 {
        // Again and again: each trapped instance is freed, so the cap of
        // the next one is not eaten by the last one's memory.
        let error = engine.execute_json("grow").unwrap_err();
        assert!(
            matches!(error, PluginError::OutOfMemory { memory_bytes } if memory_bytes == 16 << 20),
            "{error}"
        );
        assert_eq!(error.code(), "plugin_out_of_memory");
    }
    assert_eq!(engine.execute_json("version").unwrap().exit_code, 0);
}

#[test]
fn the_real_engine_out_of_fuel_mid_command_writes_nothing_and_reports_exit_50() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = sqlite(dir.path());
    // Enough fuel to start, not enough to finish a send.
    let mut engine = common::engine_plugin_with(Limits {
        fuel: 20_000,
        memory_bytes: Limits::DEFAULT.memory_bytes,
    })
    .instantiate(store, common::clock(), 1)
    .unwrap();
    let send = Request::from_json(
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login"}"#,
    )
    .unwrap();
    let response = Executor::execute(&mut engine, send);
    assert_eq!(response.exit_code(), 50, "{}", response.to_json());
    assert_eq!(
        response.error_code().map(|c| c.as_str()),
        Some("internal_error")
    );
    assert!(
        response.to_json().contains("ran out of fuel"),
        "{}",
        response.to_json()
    );
    assert!(engine.store_mut().connection().is_autocommit());
    assert_eq!(threads_on_disk(&path), Vec::<String>::new());
}

/// A host store adapter that fails every write, as a broken adapter (a
/// full disk, a lost connection) would.
struct BrokenWrites(MemoryStore);

impl Store for BrokenWrites {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        self.0.initialize()
    }
    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        self.0.begin(mode)
    }
    fn commit(&mut self) -> Result<(), StoreError> {
        self.0.commit()
    }
    fn rollback(&mut self) -> Result<(), StoreError> {
        self.0.rollback()
    }
    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        self.0.thread(thread_id)
    }
    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        self.0.threads(query)
    }
    fn insert_thread(&mut self, _: &Thread) -> Result<(), StoreError> {
        Err(StoreError::other("disk full while writing the thread"))
    }
    fn update_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        self.0.update_thread(thread)
    }
    fn put_lease(&mut self, lease: &inbox_engine::Lease) -> Result<(), StoreError> {
        self.0.put_lease(lease)
    }
    fn lapsed_leases(
        &mut self,
        now: inbox_engine::Timestamp,
        limit: usize,
    ) -> Result<Vec<inbox_engine::Lease>, StoreError> {
        self.0.lapsed_leases(now, limit)
    }
    fn next_lease_expiry(&mut self) -> Result<Option<inbox_engine::Timestamp>, StoreError> {
        self.0.next_lease_expiry()
    }
    fn insert_message(&mut self, message: &Message) -> Result<(), StoreError> {
        self.0.insert_message(message)
    }
    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        self.0.message(message_id)
    }
    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        self.0.messages(query)
    }
    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        self.0.latest_event_id()
    }
    fn insert_event(&mut self, event: &inbox_engine::Event) -> Result<(), StoreError> {
        self.0.insert_event(event)
    }
    fn events(&mut self, query: &EventQuery) -> Result<Vec<inbox_engine::Event>, StoreError> {
        self.0.events(query)
    }
    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<inbox_engine::ReadCursor>, StoreError> {
        self.0.read_cursor(thread_id, agent)
    }
    fn put_read_cursor(&mut self, cursor: &inbox_engine::ReadCursor) -> Result<(), StoreError> {
        self.0.put_read_cursor(cursor)
    }
    fn agents(
        &mut self,
        query: &inbox_engine::store::AgentQuery,
    ) -> Result<Vec<inbox_engine::Agent>, StoreError> {
        self.0.agents(query)
    }
    fn put_agent(&mut self, agent: &inbox_engine::Agent) -> Result<(), StoreError> {
        self.0.put_agent(agent)
    }
    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError> {
        self.0.delete_agent(name)
    }
    fn live_leases(
        &mut self,
        now: inbox_engine::Timestamp,
        limit: usize,
    ) -> Result<Vec<inbox_engine::Lease>, StoreError> {
        self.0.live_leases(now, limit)
    }
    fn last_event_by(&mut self, source: &str) -> Result<Option<inbox_engine::Event>, StoreError> {
        self.0.last_event_by(source)
    }
    fn mailbox(
        &mut self,
        query: &inbox_engine::store::MailboxQuery,
    ) -> Result<Vec<Message>, StoreError> {
        self.0.mailbox(query)
    }
    fn idempotency(
        &mut self,
        key: &str,
    ) -> Result<Option<inbox_engine::IdempotencyRecord>, StoreError> {
        self.0.idempotency(key)
    }
    fn put_idempotency(
        &mut self,
        record: &inbox_engine::IdempotencyRecord,
    ) -> Result<(), StoreError> {
        self.0.put_idempotency(record)
    }
    fn delete_idempotency(
        &mut self,
        before: inbox_engine::Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        self.0.delete_idempotency(before, limit)
    }
    fn settings(&mut self) -> Result<Option<inbox_engine::Settings>, StoreError> {
        self.0.settings()
    }
    fn put_settings(&mut self, settings: &inbox_engine::Settings) -> Result<(), StoreError> {
        self.0.put_settings(settings)
    }
    fn thread_page(
        &mut self,
        query: &inbox_engine::store::ThreadPage,
    ) -> Result<Vec<ThreadState>, StoreError> {
        self.0.thread_page(query)
    }
    fn message_count(&mut self) -> Result<u64, StoreError> {
        self.0.message_count()
    }
    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        self.0.delete_thread(thread_id)
    }
    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.0.run(run_id)
    }
    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.0.runs(query)
    }
    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.0.insert_run(run)
    }
    fn update_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.0.update_run(run)
    }
    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError> {
        self.0.task(run_id, task_id)
    }
    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        self.0.tasks(query)
    }
    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.0.insert_task(task)
    }
    fn update_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.0.update_task(task)
    }
    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.0.attempts(run_id, task_id)
    }
    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        self.0.put_attempt(attempt)
    }
    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        self.0.insert_orch_event(event)
    }
    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        self.0.orch_events(query)
    }
}

#[test]
fn a_host_store_error_surfaces_as_storage_error_exit_50() {
    let mut engine = common::engine_plugin()
        .instantiate(BrokenWrites(MemoryStore::new()), common::clock(), 1)
        .unwrap();
    let response = engine
        .execute_json(r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#)
        .unwrap();
    assert_eq!(response.exit_code, 50);
    let json: serde_json::Value = serde_json::from_str(&response.json).unwrap();
    assert_eq!(json["error"]["code"], "storage_error");
    assert_eq!(
        json["error"]["message"],
        "disk full while writing the thread"
    );
    // The engine rolled back through the host: nothing was kept.
    let listed = engine.execute_json(r#"{"command":"list"}"#).unwrap();
    assert!(listed.json.contains(r#""threads":[]"#), "{}", listed.json);
}

#[test]
fn bytes_that_are_not_a_component_are_refused_with_a_clear_error() {
    for bytes in [&b"not wasm at all"[..], &b"\0asm\x01\0\0\0"[..]] {
        let error = inbox_plugin_host::Plugin::from_bytes(bytes, Limits::default()).unwrap_err();
        assert_eq!(error.code(), "plugin_invalid", "{error}");
        assert!(
            error.to_string().contains("scripts/build-plugin"),
            "{error}"
        );
    }
    let missing =
        inbox_plugin_host::Plugin::from_file(Path::new("/no/such/engine.wasm"), Limits::default())
            .unwrap_err();
    assert_eq!(missing.code(), "plugin_unreadable");
}

#[test]
fn an_instance_whose_first_memory_is_over_the_cap_is_refused() {
    let plugin = common::engine_plugin_with(Limits {
        fuel: Limits::DEFAULT.fuel,
        memory_bytes: 64 << 10,
    });
    let error = plugin
        .instantiate(MemoryStore::new(), common::clock(), 1)
        .err()
        .unwrap();
    assert_eq!(error.code(), "plugin_out_of_memory", "{error}");
}

#[test]
fn a_component_of_another_world_is_refused_when_loaded() {
    // The smallest valid component: the preamble alone (magic, version 0x0d,
    // layer 1). It exports nothing, so it cannot be our engine; the host
    // says so before anyone opens a database for it.
    let empty = b"\0asm\x0d\0\x01\0";
    let error = inbox_plugin_host::Plugin::from_bytes(empty, Limits::default()).unwrap_err();
    assert_eq!(error.code(), "plugin_incompatible", "{error}");
    assert!(
        error.to_string().contains("inbox:engine/engine@0.5.0"),
        "{error}"
    );
}
