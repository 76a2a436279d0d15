//! A store that fails at a chosen call: every command must then answer with
//! a storage error (exit 50), roll back, and leave the records exactly as they
//! were. This is what protects a database from half-applied commands when
//! the disk fills up or a host adapter breaks. The same store logs its calls,
//! so the statements a command costs are pinned too, and can keep a clock of
//! its own, as a database server does, which then overrules the host's.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use inbox_engine::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, Store, ThreadQuery, ThreadState, TxMode,
};
use inbox_engine::{
    Agent, Engine, Event, EventId, Lease, ManualClock, MemoryStore, Message, ReadCursor, Request,
    SequentialIds, StoreError, StoreErrorKind, Thread, Timestamp,
};

/// Wraps the memory store; the `fail_at`-th data call (counting from 1)
/// returns an error, as does every commit while `fail_commit` is set.
struct Flaky {
    inner: MemoryStore,
    calls: usize,
    /// Every call, by method name, commit included.
    log: Vec<&'static str>,
    /// The store's own clock (a server's `now()`), if it keeps one.
    clock: Option<Timestamp>,
    fail_at: Option<usize>,
    fail_commit: bool,
}

impl Flaky {
    fn tick(&mut self, call: &'static str) -> Result<(), StoreError> {
        self.log.push(call);
        self.calls += 1;
        if Some(self.calls) == self.fail_at {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                "disk I/O error (injected)",
            ));
        }
        Ok(())
    }
}

impl Store for Flaky {
    fn initialize(&mut self) -> Result<inbox_engine::StoreInfo, StoreError> {
        self.inner.initialize()
    }
    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        self.tick("begin")?;
        self.inner.begin(mode)
    }
    fn clock(&mut self) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.clock)
    }
    fn commit(&mut self) -> Result<(), StoreError> {
        self.log.push("commit");
        if self.fail_commit {
            return Err(StoreError::new(
                StoreErrorKind::Busy,
                "database is locked (injected)",
            ));
        }
        self.inner.commit()
    }
    fn rollback(&mut self) -> Result<(), StoreError> {
        self.inner.rollback()
    }
    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        self.tick("thread")?;
        self.inner.thread(thread_id)
    }
    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        self.tick("threads")?;
        self.inner.threads(query)
    }
    fn insert_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        self.tick("insert_thread")?;
        self.inner.insert_thread(thread)
    }
    fn update_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        self.tick("update_thread")?;
        self.inner.update_thread(thread)
    }
    fn put_lease(&mut self, lease: &Lease) -> Result<(), StoreError> {
        self.tick("put_lease")?;
        self.inner.put_lease(lease)
    }
    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.tick("lapsed_leases")?;
        self.inner.lapsed_leases(now, limit)
    }
    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError> {
        self.tick("next_lease_expiry")?;
        self.inner.next_lease_expiry()
    }
    fn insert_message(&mut self, message: &Message) -> Result<(), StoreError> {
        self.tick("insert_message")?;
        self.inner.insert_message(message)
    }
    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        self.tick("message")?;
        self.inner.message(message_id)
    }
    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        self.tick("messages")?;
        self.inner.messages(query)
    }
    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        self.tick("latest_event_id")?;
        self.inner.latest_event_id()
    }
    fn insert_event(&mut self, event: &Event) -> Result<(), StoreError> {
        self.tick("insert_event")?;
        self.inner.insert_event(event)
    }
    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        self.tick("events")?;
        self.inner.events(query)
    }
    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError> {
        self.tick("read_cursor")?;
        self.inner.read_cursor(thread_id, agent)
    }
    fn put_read_cursor(&mut self, cursor: &ReadCursor) -> Result<(), StoreError> {
        self.tick("put_read_cursor")?;
        self.inner.put_read_cursor(cursor)
    }
    fn agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        self.tick("agents")?;
        self.inner.agents(query)
    }
    fn put_agent(&mut self, agent: &Agent) -> Result<(), StoreError> {
        self.tick("put_agent")?;
        self.inner.put_agent(agent)
    }
    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError> {
        self.tick("delete_agent")?;
        self.inner.delete_agent(name)
    }
    fn live_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.tick("live_leases")?;
        self.inner.live_leases(now, limit)
    }
    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        self.tick("last_event_by")?;
        self.inner.last_event_by(source)
    }
    fn mailbox(&mut self, query: &MailboxQuery) -> Result<Vec<Message>, StoreError> {
        self.tick("mailbox")?;
        self.inner.mailbox(query)
    }
    fn idempotency(
        &mut self,
        key: &str,
    ) -> Result<Option<inbox_engine::IdempotencyRecord>, StoreError> {
        self.tick("idempotency")?;
        self.inner.idempotency(key)
    }
    fn put_idempotency(
        &mut self,
        record: &inbox_engine::IdempotencyRecord,
    ) -> Result<(), StoreError> {
        self.tick("put_idempotency")?;
        self.inner.put_idempotency(record)
    }
    fn delete_idempotency(&mut self, before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        self.tick("delete_idempotency")?;
        self.inner.delete_idempotency(before, limit)
    }
    fn settings(&mut self) -> Result<Option<inbox_engine::Settings>, StoreError> {
        self.tick("settings")?;
        self.inner.settings()
    }
    fn put_settings(&mut self, settings: &inbox_engine::Settings) -> Result<(), StoreError> {
        self.tick("put_settings")?;
        self.inner.put_settings(settings)
    }
    fn thread_page(
        &mut self,
        query: &inbox_engine::store::ThreadPage,
    ) -> Result<Vec<ThreadState>, StoreError> {
        self.tick("thread_page")?;
        self.inner.thread_page(query)
    }
    fn message_count(&mut self) -> Result<u64, StoreError> {
        self.tick("message_count")?;
        self.inner.message_count()
    }
    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        self.tick("delete_thread")?;
        self.inner.delete_thread(thread_id)
    }
    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.tick("run")?;
        self.inner.run(run_id)
    }
    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.tick("runs")?;
        self.inner.runs(query)
    }
    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.tick("insert_run")?;
        self.inner.insert_run(run)
    }
    fn update_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.tick("update_run")?;
        self.inner.update_run(run)
    }
    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError> {
        self.tick("task")?;
        self.inner.task(run_id, task_id)
    }
    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        self.tick("tasks")?;
        self.inner.tasks(query)
    }
    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.tick("insert_task")?;
        self.inner.insert_task(task)
    }
    fn update_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.tick("update_task")?;
        self.inner.update_task(task)
    }
    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.tick("attempts")?;
        self.inner.attempts(run_id, task_id)
    }
    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        self.tick("put_attempt")?;
        self.inner.put_attempt(attempt)
    }
    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        self.tick("insert_orch_event")?;
        self.inner.insert_orch_event(event)
    }
    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        self.tick("orch_events")?;
        self.inner.orch_events(query)
    }
}

type TestEngine = Engine<Flaky, ManualClock, SequentialIds>;

/// Runs `json`, which must succeed, and returns its response as JSON.
fn ok(engine: &mut TestEngine, json: &str) -> serde_json::Value {
    let response = engine.execute_json(json);
    assert!(response.is_ok(), "{json}: {}", response.to_json());
    serde_json::from_str(&response.to_json()).unwrap()
}

/// Two threads for `w` (the first claimed), and an orch run with a task in
/// each state a leader's command needs: `rev` in review, `blk` blocked on a
/// question, `bad` failed, `rdy` ready, `later` pending on `rdy`.
fn setup() -> TestEngine {
    let mut engine = Engine::new(
        Flaky {
            inner: MemoryStore::new(),
            calls: 0,
            log: Vec::new(),
            clock: None,
            fail_at: None,
            fail_commit: false,
        },
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    for json in [
        r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"one"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"two"}"#,
        r#"{"command":"claim","agent":"w","thread_id":"thr_000001","lease_seconds":60}"#,
        r#"{"command":"orch-run-create","agent":"lead","run_id":"r","goal":"g"}"#,
        r#"{"command":"orch-plan","agent":"lead","run_id":"r","tasks":[
            {"task_id":"rev","title":"t","assignee":"w","review":true},
            {"task_id":"blk","title":"t","assignee":"w"},
            {"task_id":"bad","title":"t","assignee":"w","max_attempts":1},
            {"task_id":"rdy","title":"t","assignee":"w"},
            {"task_id":"later","title":"t","assignee":"w","needs":["rdy"]}]}"#,
    ] {
        ok(&mut engine, json);
    }
    for (task, finish) in [
        ("rev", r#""command":"done","summary":"did it""#),
        (
            "blk",
            r#""command":"update","status":"blocked","summary":"which?""#,
        ),
        ("bad", r#""command":"fail","summary":"broke""#),
    ] {
        let dispatched = ok(
            &mut engine,
            &format!(
                r#"{{"command":"orch-dispatch","agent":"lead","run_id":"r","task_id":"{task}"}}"#
            ),
        );
        let thread = dispatched["dispatched"][0]["attempt"]["thread_id"].clone();
        ok(
            &mut engine,
            &format!(r#"{{"command":"claim","agent":"w","thread_id":{thread}}}"#),
        );
        ok(
            &mut engine,
            &format!(r#"{{{finish},"agent":"w","thread_id":{thread}}}"#),
        );
    }
    for json in [
        r#"{"command":"agent-register","agent":"w","roles":["builders"]}"#,
        r#"{"command":"agent-register","agent":"w2","roles":["builders"]}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"role:builders","subject":"pooled"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"broadcast","subject":"notice"}"#,
        r#"{"command":"orch-council","agent":"lead","run_id":"r","council_id":"c0","title":"t","body":"b","reviewers":["w","w2"]}"#,
    ] {
        ok(&mut engine, json);
    }
    engine
}

/// One request per command that writes (and a few reads), each valid in
/// the state [`setup`] leaves. Every write command of the table must have
/// one: see `every_write_command_is_tried`.
const COMMANDS: &[&str] = &[
    r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"three","artifacts":[{"path":"a"}]}"#,
    r#"{"command":"send","from_agent":"lead","thread_id":"thr_000001","summary":"note"}"#,
    r#"{"command":"claim","agent":"w","thread_id":"thr_000002"}"#,
    r#"{"command":"claim","agent":"w","next":true}"#,
    r#"{"command":"update","agent":"w","thread_id":"thr_000001","status":"blocked","summary":"q?"}"#,
    r#"{"command":"renew","agent":"w","thread_id":"thr_000001"}"#,
    r#"{"command":"reply","from_agent":"lead","thread_id":"thr_000001","summary":"fyi"}"#,
    r#"{"command":"done","agent":"w","thread_id":"thr_000001","summary":"ok"}"#,
    r#"{"command":"fail","agent":"w","thread_id":"thr_000001","summary":"no"}"#,
    r#"{"command":"cancel","agent":"lead","thread_id":"thr_000002","reason":"no"}"#,
    r#"{"command":"sweep"}"#,
    r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"once","idempotency_key":"k1"}"#,
    r#"{"command":"send","from_agent":"lead","to_agent":"role:builders","subject":"one of you","pick":true}"#,
    r#"{"command":"send","from_agent":"lead","to_agent":"broadcast:role:builders","subject":"fyi"}"#,
    r#"{"command":"claim","agent":"w2","next":true}"#,
    r#"{"command":"agent-register","agent":"w3","roles":["builders","review"],"description":"d"}"#,
    r#"{"command":"agent-unregister","agent":"w2"}"#,
    r#"{"command":"settings","agent_tokens":"required","auto_gc":true,"keep_days":1}"#,
    r#"{"command":"gc","keep_days":0,"keep_messages":0,"keep_read_hours":0}"#,
    r#"{"command":"orch-worktree-gc","run_id":"r"}"#,
    r#"{"command":"mark-read","agent":"w","through_event":1000}"#,
    r#"{"command":"mark-read","agent":"w2","message_ids":["msg_000001"]}"#,
    r#"{"command":"read","agent":"w2","include_read":true}"#,
    r#"{"command":"agent-list"}"#,
    r#"{"command":"show","thread_id":"thr_000001","agent":"w","mark_read":true}"#,
    r#"{"command":"fetch","agent":"w"}"#,
    r#"{"command":"wait-reply","thread_id":"thr_000001","agent":"w","timeout_seconds":0}"#,
    r#"{"command":"orch-run-create","agent":"lead","goal":"another"}"#,
    r#"{"command":"orch-run-cancel","agent":"lead","run_id":"r","reason":"stop"}"#,
    r#"{"command":"orch-task-add","agent":"lead","run_id":"r","task":{"task_id":"new","title":"t","assignee":"w","needs":["later"]}}"#,
    r#"{"command":"orch-plan","agent":"lead","run_id":"r","tasks":[{"task_id":"p1","title":"t","assignee":"w"},{"task_id":"p2","title":"t","assignee":"w","needs":["p1"]}]}"#,
    r#"{"command":"orch-dispatch","agent":"lead","run_id":"r","all_ready":true}"#,
    r#"{"command":"orch-accept","agent":"lead","run_id":"r","task_id":"rev","summary":"good"}"#,
    r#"{"command":"orch-reject","agent":"lead","run_id":"r","task_id":"rev","summary":"again"}"#,
    r#"{"command":"orch-answer","agent":"lead","run_id":"r","task_id":"blk","summary":"this one"}"#,
    r#"{"command":"orch-retry","agent":"lead","run_id":"r","task_id":"bad","to":"w2"}"#,
    r#"{"command":"orch-reassign","agent":"lead","run_id":"r","task_id":"blk","to":"w2"}"#,
    r#"{"command":"orch-cancel","agent":"lead","run_id":"r","task_id":"rdy","cascade":true}"#,
    r#"{"command":"orch-reconcile","run_id":"r"}"#,
    r#"{"command":"orch-council","agent":"lead","run_id":"r","council_id":"c","title":"t","diff":"+x","reviewers":["w","role:builders"],"seats":3,"ballot":true}"#,
];

/// The rollback tests below must cover every command that writes: a new
/// one without a sample here fails this test.
#[test]
fn every_write_command_is_tried() {
    use inbox_engine::{Command, Effect};
    let tried: Vec<String> = COMMANDS
        .iter()
        .map(|json| {
            let value: serde_json::Value = serde_json::from_str(json).unwrap();
            value["command"].as_str().unwrap().to_owned()
        })
        .collect();
    for &command in Command::ALL {
        // `init` prepares the store outside any transaction.
        if command.effect() == Effect::Write && command != Command::Init {
            assert!(
                tried.iter().any(|name| name == command.as_str()),
                "no sample request for `{command}` in COMMANDS"
            );
        }
    }
}

#[test]
fn a_store_failure_at_any_call_rolls_the_whole_command_back() {
    for command in COMMANDS {
        // Count the calls a clean run makes, then fail at each one in turn.
        let mut clean = setup();
        clean.store_mut().calls = 0;
        assert!(clean.execute_json(command).is_ok(), "{command}");
        let calls = clean.store().calls;
        assert!(calls > 1, "{command} made {calls} store calls");
        for fail_at in 1..=calls {
            let mut engine = setup();
            let before = engine.store().inner.clone();
            engine.store_mut().calls = 0;
            engine.store_mut().fail_at = Some(fail_at);
            let response = engine.execute_json(command);
            assert_eq!(
                response.exit_code(),
                50,
                "{command} failing at call {fail_at}: {}",
                response.to_json()
            );
            assert_eq!(
                response.error_code().map(|c| c.as_str()),
                Some("storage_error")
            );
            assert!(
                engine.store().inner.same_records(&before),
                "{command} failing at call {fail_at} left a partial write"
            );
            // The store is still usable afterwards.
            engine.store_mut().fail_at = None;
            assert!(
                engine.execute_json(command).is_ok(),
                "{command} after a failure"
            );
        }
    }
}

#[test]
fn a_failed_commit_reports_busy_and_keeps_nothing() {
    for command in COMMANDS {
        let mut engine = setup();
        let before = engine.store().inner.clone();
        engine.store_mut().fail_commit = true;
        let response = engine.execute_json(command);
        // `orch worktree gc` reads, and writes only what it must record or
        // undo: here nothing, so it commits nothing.
        if command.contains(r#""orch-worktree-gc""#) && response.is_ok() {
            assert!(engine.store().inner.same_records(&before));
            continue;
        }
        assert_eq!(
            response.error_code().map(|c| c.as_str()),
            Some("storage_busy"),
            "{command}"
        );
        assert_eq!(response.exit_code(), 50);
        assert!(
            engine.store().inner.same_records(&before),
            "{command} kept writes after a failed commit"
        );
    }
}

#[test]
fn init_reports_the_schema_version() {
    let mut engine = setup();
    let response = engine.execute(Request::Init(Default::default()));
    assert_eq!(
        response.to_json(),
        r#"{"ok":true,"command":"init","database":null,"schema_version":1}"#
    );
}

/// A claim is one transaction of nine statements, whichever way it names
/// its thread: the settings and the lapse scan every write starts with, one
/// look at the thread (by id, or the head of the queue), the lease, the
/// thread, the event. `next` first looks up the agent's roles (one key
/// lookup), since its queue includes its roles' pools.
#[test]
fn a_claim_scans_for_lapses_once_and_loads_its_thread_once() {
    for (claim, lookup) in [
        (
            r#"{"command":"claim","agent":"v","next":true}"#,
            &["agents", "threads"][..],
        ),
        (
            r#"{"command":"claim","agent":"w","thread_id":"thr_000002"}"#,
            &["thread"][..],
        ),
    ] {
        let mut engine = setup();
        ok(
            &mut engine,
            r#"{"command":"send","from_agent":"lead","to_agent":"v","subject":"for v"}"#,
        );
        engine.store_mut().log.clear();
        let response = engine.execute_json(claim);
        assert_eq!(response.exit_code(), 0, "{}", response.to_json());
        let expected: Vec<&str> = ["begin", "latest_event_id", "settings", "lapsed_leases"]
            .into_iter()
            .chain(lookup.iter().copied())
            .chain(["put_lease", "update_thread", "insert_event", "commit"])
            .collect();
        assert_eq!(engine.store().log, expected, "{claim}");
    }
}

/// A message without a lease token is the holder's if its sender holds or
/// ever held the lease. While the thread was claimed once, the lease says
/// who that is, so a leader's answer reads no events and costs the same
/// after a thousand messages as after one; once the thread was claimed
/// again, the earlier holders are looked up among its claim events.
#[test]
fn a_reply_beside_a_lease_reads_events_only_after_a_second_claim() {
    /// Claims `thr_000002` for `w`, then has the lead reply in it; returns
    /// the store calls of the reply.
    fn claim_and_reply(engine: &mut TestEngine) -> Vec<&'static str> {
        ok(
            engine,
            r#"{"command":"claim","agent":"w","thread_id":"thr_000002","lease_seconds":60}"#,
        );
        engine.store_mut().log.clear();
        ok(
            engine,
            r#"{"command":"reply","from_agent":"lead","thread_id":"thr_000002","summary":"fyi"}"#,
        );
        std::mem::take(&mut engine.store_mut().log)
    }
    let mut engine = setup();
    let calls = claim_and_reply(&mut engine);
    assert!(
        !calls.contains(&"events"),
        "a reply beside a lease claimed once read events: {calls:?}"
    );
    // The lease lapses and is claimed again: now the log of claims decides.
    engine.clock_mut().advance_millis(120_000);
    let calls = claim_and_reply(&mut engine);
    assert!(
        calls.contains(&"events"),
        "a reply after a second claim read no events: {calls:?}"
    );
}

/// A waiter looks again on every commit it is woken for. The look that
/// finds the reply answers with the reply's own event id, so it does not
/// read the newest event id of the store; only a look that finds nothing
/// needs it (its cursor), read in the same snapshot as the search.
#[test]
fn a_wait_reply_reads_the_newest_event_id_only_when_it_finds_nothing() {
    /// One look of `w` waiting in `thr_000002`, and the store calls it made.
    fn look(engine: &mut TestEngine, after_event: u64) -> (serde_json::Value, Vec<&'static str>) {
        engine.store_mut().log.clear();
        let answer = ok(
            engine,
            &format!(
                r#"{{"command":"wait-reply","agent":"w","thread_id":"thr_000002","after_event":{after_event}}}"#
            ),
        );
        (answer, std::mem::take(&mut engine.store_mut().log))
    }
    let mut engine = setup();
    ok(
        &mut engine,
        r#"{"command":"reply","from_agent":"lead","thread_id":"thr_000002","kind":"answer","summary":"yes"}"#,
    );
    let (found, calls) = look(&mut engine, 0);
    assert_eq!(found["woke"], true, "{found}");
    assert!(
        !calls.contains(&"latest_event_id"),
        "a look that found the reply read the newest event id: {calls:?}"
    );
    // Something happens elsewhere: the next look finds nothing and moves
    // its cursor to the store's newest event.
    let elsewhere = ok(
        &mut engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"three"}"#,
    );
    let (nothing, calls) = look(&mut engine, found["next_event_id"].as_u64().unwrap());
    assert_eq!(nothing["woke"], false, "{nothing}");
    assert!(
        calls.contains(&"latest_event_id"),
        "a look that found nothing did not read the newest event id: {calls:?}"
    );
    assert_eq!(nothing["next_event_id"], elsewhere["event_id"], "{nothing}");
}

/// A store that keeps one clock for every writer judges time: a host whose
/// own clock is a day ahead neither expires a live lease on its say nor
/// stamps records with its time.
#[test]
fn a_store_clock_overrules_a_host_clock_that_is_wrong() {
    let mut engine = setup();
    let server_time = ManualClock::SCRIPT_EPOCH.plus_millis(10_000);
    engine.store_mut().clock = Some(server_time);
    engine.clock_mut().advance_millis(86_400_000);
    let response = engine.execute_json(r#"{"command":"sweep"}"#);
    assert!(response.is_ok());
    let shown = engine.execute_json(r#"{"command":"show","thread_id":"thr_000001"}"#);
    let json: serde_json::Value = serde_json::from_str(&shown.to_json()).unwrap();
    assert_eq!(
        json["thread"]["status"], "claimed",
        "the lease is live by the store's clock"
    );
    let sent = engine
        .execute_json(r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"later"}"#);
    let json: serde_json::Value = serde_json::from_str(&sent.to_json()).unwrap();
    assert_eq!(json["thread"]["created_at"], server_time.to_string());
}

/// `orch wait` records what the threads did before it looks; when that
/// recording fails (a read-only or broken store), the wait ends with the
/// error instead of going on showing the run as it was.
#[test]
fn an_orch_wait_whose_reconcile_fails_ends_with_the_error() {
    use inbox_engine::{WaitStep, Waiter};
    let mut engine = setup();
    let cursor = ok(&mut engine, r#"{"command":"watch","timeout_seconds":0}"#)["next_event_id"]
        .as_u64()
        .unwrap();
    let request = Request::from_json(&format!(
        r#"{{"command":"orch-wait","run_id":"r","after_event":{cursor},"timeout_seconds":60}}"#
    ))
    .unwrap();
    let mut waiter = Waiter::new(request).unwrap();
    // The reconcile is the wait's first store call; the look after it would
    // succeed.
    engine.store_mut().calls = 0;
    engine.store_mut().fail_at = Some(1);
    match waiter.poll(&mut engine) {
        WaitStep::Finished(response) => {
            assert_eq!(
                response.error_code().map(|c| c.as_str()),
                Some("storage_error"),
                "{}",
                response.to_json()
            );
            assert_eq!(response.exit_code(), 50);
        }
        pending => panic!("the wait went on after its reconcile failed: {pending:?}"),
    }
}
