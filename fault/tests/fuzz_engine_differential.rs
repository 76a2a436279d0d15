//! Differential fuzzing of the engine: long random command sequences run on
//! the in-memory store and on the SQLite store side by side, and in a second
//! test on the in-memory store and the PostgreSQL store (a fresh schema of
//! one throwaway cluster per case), with the same deterministic clock and
//! ids; after every step the two responses must be the same JSON, byte for
//! byte, and at the end so must everything either store can show (every
//! thread, message, artifact, cursor and event).
//!
//! The commands mix well-formed work (sends, claims, updates, answers,
//! finishes, cancels, reads, waits, sweeps, retention's `gc` and automatic
//! steps, clock jumps past lease expiry)
//! with every kind of bad field (wrong agents, unknown threads, limits ± 1,
//! absurd numbers, control characters, oversized bodies and payloads, too
//! many artifacts), so that both the rules and the storage of odd values are
//! compared. The in-memory store is the reference the conformance corpus
//! pins; SQLite and PostgreSQL must agree with it on every input.
//! `PROPTEST_CASES` (or `INBOX_FAULT_LONG=1`) runs longer. The PostgreSQL
//! test is skipped, saying so, when PostgreSQL is not installed, unless
//! `INBOX_REQUIRE_POSTGRES` is set.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use inbox_engine::wire::*;
use inbox_engine::{
    Engine, ErrorCode, Kind, ManualClock, MemoryStore, Priority, Request, Response, SequentialIds,
    Status, Store,
};
use std::path::PathBuf;
use std::sync::OnceLock;

use inbox_pg_cluster::PgCluster;
use inbox_postgres::PgStore;
use inbox_sqlite::{open_existing, open_or_create};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::{Value, json};
use std::cell::RefCell;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Step {
    /// Move both clocks forward.
    Advance { millis: i64 },
    /// Run one command on both stores.
    Run(Box<Request>),
}

fn agent() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        12 => prop::sample::select(vec!["lead", "w1", "w2"]).prop_map(|a| Some(a.to_owned())),
        1 => Just(None),
        1 => prop::sample::select(vec!["", " ", "inbox", "bad name", "ü", "tab\tname", "nul\0"]).prop_map(|a| Some(a.to_owned())),
        1 => prop::sample::select(vec![128usize, 129]).prop_map(|n| Some("a".repeat(n))),
    ]
}

/// A recipient: mostly agents, and every form of address (a role's pool, a
/// broadcast) with a few refused ones.
fn address() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        8 => agent(),
        3 => prop::sample::select(vec!["role:crew", "role:docs", "broadcast", "broadcast:role:crew", "agent:w1"]).prop_map(|a| Some(a.to_owned())),
        1 => prop::sample::select(vec!["team:x", "role:", "broadcast:crew"]).prop_map(|a| Some(a.to_owned())),
    ]
}

fn roles() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(vec!["crew", "docs", "role:crew", "bad role"]).prop_map(str::to_owned),
        0..3,
    )
}

fn thread() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        12 => (1u32..=6).prop_map(|n| Some(format!("thr_{n:06}"))),
        1 => prop::sample::select(vec!["thr_999999", "", "thr_000001 ", "THR_000001"]).prop_map(|t| Some(t.to_owned())),
        1 => Just(None),
    ]
}

fn line() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        10 => prop::sample::select(vec!["step", "Need a decision", "ünïcødé ✓", "x"]).prop_map(|s| Some(s.to_owned())),
        1 => Just(None),
        1 => prop::sample::select(vec!["", "  ", "two\nlines", "nul\0inside", "\u{7f}", "trailing\r"]).prop_map(|s| Some(s.to_owned())),
        1 => prop::sample::select(vec![500usize, 501, 1000, 1001]).prop_map(|n| Some("é".repeat(n))),
        1 => "\\PC{1,30}".prop_map(Some),
    ]
}

fn body() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        60 => Just(None),
        30 => prop::sample::select(vec!["", "a body\nwith lines", "nul\0byte", "ünï\u{202e}", "\r\n\t"]).prop_map(|s| Some(s.to_owned())),
        12 => "\\PC{0,200}".prop_map(Some),
        // Rare: around the 1 MiB limit.
        1 => prop::sample::select(vec![(1usize << 20), (1 << 20) + 1]).prop_map(|n| Some("b".repeat(n))),
    ]
}

fn payload() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        40 => Just(None),
        20 => prop::sample::select(vec![
            json!({}),
            json!({"n": 1, "f": 0.25, "s": "ü", "a": [1, null, true], "o": {"k": "v"}}),
            json!({"big": u64::MAX, "neg": i64::MIN, "tiny": 5e-324}),
            json!({"nul": "a\u{0}b", "key with space": 1}),
        ]).prop_map(Some),
        4 => prop::sample::select(vec![json!([1, 2]), json!("text"), json!(3), json!(null), json!(true)]).prop_map(Some),
        1 => prop::sample::select(vec![(256usize << 10) - 20, (256 << 10) + 1]).prop_map(|n| Some(json!({"x": "p".repeat(n)}))),
    ]
}

fn artifact() -> impl Strategy<Value = ArtifactInput> {
    (
        prop_oneof![
            8 => prop::sample::select(vec!["src/a.rs", "../up/b.txt", "/abs/c.log", "https://example.com/d", "ü/ñ.txt"]).prop_map(|p| Some(p.to_owned())),
            1 => prop::sample::select(vec!["", "bad\npath", "nul\0path"]).prop_map(|p| Some(p.to_owned())),
            1 => Just(None),
            1 => prop::sample::select(vec![4096usize, 4097]).prop_map(|n| Some("p".repeat(n))),
        ],
        prop_oneof![
            4 => Just(None),
            4 => prop::sample::select(vec!["file", "log", "patch", "a.b-c_9"]).prop_map(|k| Some(k.to_owned())),
            1 => prop::sample::select(vec!["", "Bad Kind", "UPPER", "ü"]).prop_map(|k| Some(k.to_owned())),
            1 => Just(Some("k".repeat(65))),
        ],
        prop_oneof![
            4 => Just(None),
            2 => Just(Some(json!({"lines": 12}))),
            1 => Just(Some(json!(["not", "object"]))),
            1 => Just(Some(json!({"m": "x".repeat(16 << 10)}))),
        ],
        prop::option::of(prop::sample::select(vec!["/work/src/a.rs", "/"]).prop_map(str::to_owned)),
        prop::option::of(prop::sample::select(vec![0u64, 12, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX])),
        prop::option::of(prop::sample::select(vec!["e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "not-a-digest"]).prop_map(str::to_owned)),
    )
        .prop_map(|(path, kind, metadata, absolute_path, size_bytes, sha256)| ArtifactInput {
            path,
            kind,
            metadata,
            absolute_path,
            size_bytes,
            sha256,
        })
}

fn artifacts() -> impl Strategy<Value = Vec<ArtifactInput>> {
    prop_oneof![
        10 => Just(Vec::new()),
        5 => prop::collection::vec(artifact(), 1..4),
        1 => Just(vec![ArtifactInput { path: Some("many".into()), ..Default::default() }; 33]),
    ]
}

fn kind() -> impl Strategy<Value = Option<Kind>> {
    prop::option::of(prop::sample::select(Kind::ALL.to_vec()))
}

fn statuses() -> impl Strategy<Value = Vec<Status>> {
    prop::collection::vec(prop::sample::select(Status::ALL.to_vec()), 0..3)
}

fn token() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![4 => (1u64..4).prop_map(Some), 2 => Just(None), 1 => prop::sample::select(vec![0u64, 9, u64::MAX]).prop_map(Some)]
}

fn seconds() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![4 => prop::sample::select(vec![1u64, 5, 60, 600]).prop_map(Some), 2 => Just(None), 1 => prop::sample::select(vec![0u64, 86_400, 86_401, u64::MAX]).prop_map(Some)]
}

fn limit() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![4 => Just(None), 2 => (1u32..6).prop_map(Some), 1 => prop::sample::select(vec![0u32, 1000, 1001, u32::MAX]).prop_map(Some)]
}

fn event() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![2 => Just(None), 4 => (0u64..40).prop_map(Some), 1 => prop::sample::select(vec![i64::MAX as u64, (i64::MAX as u64) + 1, u64::MAX]).prop_map(Some)]
}

fn timeout() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![6 => Just(Some(0)), 1 => Just(None), 1 => prop::sample::select(vec![86_400u64, 86_401, u64::MAX]).prop_map(Some)]
}

fn send() -> impl Strategy<Value = Request> {
    (
        (agent(), address(), prop_oneof![3 => Just(None), 1 => thread()], line(), kind(), line()),
        (body(), payload(), prop::option::of(prop::sample::select(Priority::ALL.to_vec())), any::<bool>()),
        (prop_oneof![4 => (1u32..4).prop_map(Some), 1 => Just(None), 1 => prop::sample::select(vec![0u32, 100, 101, u32::MAX]).prop_map(Some)], artifacts()),
        (prop::option::of(prop::sample::select(vec!["R1", "R2", "bad run"]).prop_map(str::to_owned)), prop::option::of(prop::sample::select(vec!["T1", "T2"]).prop_map(str::to_owned))),
    )
        .prop_map(|((from_agent, to_agent, thread_id, subject, kind, summary), (body, payload, priority, pick), (max_attempts, artifacts), (run_id, task_id))| {
            Request::Send(SendRequest { from_agent, to_agent, thread_id, run_id, task_id, subject, kind, summary, body, payload, priority, max_attempts, pick, artifacts })
        })
}

fn finish() -> impl Strategy<Value = FinishRequest> {
    (
        agent(),
        thread(),
        token(),
        line(),
        body(),
        payload(),
        artifacts(),
    )
        .prop_map(
            |(agent, thread_id, lease_token, summary, body, payload, artifacts)| FinishRequest {
                agent,
                thread_id,
                lease_token,
                summary,
                body,
                payload,
                artifacts,
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        6 => send(),
        2 => (agent(), statuses(), limit(), any::<bool>()).prop_map(|(agent, status, limit, unread)| Request::Fetch(FetchRequest { agent, status, limit, unread })),
        6 => (agent(), thread(), seconds()).prop_map(|(agent, thread_id, lease_seconds)| Request::Claim(ClaimRequest { agent, thread_id, next: false, lease_seconds })),
        3 => (agent(), prop::option::of(thread()), seconds()).prop_map(|(agent, thread, lease_seconds)| Request::Claim(ClaimRequest { agent, thread_id: thread.flatten(), next: true, lease_seconds })),
        1 => (agent(), thread(), token(), seconds()).prop_map(|(agent, thread_id, lease_token, lease_seconds)| Request::Renew(RenewRequest { agent, thread_id, lease_token, lease_seconds })),
        4 => (agent(), thread(), token(), prop::option::of(prop::sample::select(Status::ALL.to_vec())), line(), body(), payload(), artifacts())
            .prop_map(|(agent, thread_id, lease_token, status, summary, body, payload, artifacts)| Request::Update(UpdateRequest { agent, thread_id, lease_token, status, summary, body, payload, artifacts })),
        4 => (agent(), agent(), thread(), token(), kind(), line(), body(), payload(), artifacts())
            .prop_map(|(from_agent, to_agent, thread_id, lease_token, kind, summary, body, payload, artifacts)| Request::Reply(ReplyRequest { from_agent, to_agent, thread_id, lease_token, kind, summary, body, payload, artifacts })),
        3 => finish().prop_map(Request::Done),
        2 => finish().prop_map(Request::Fail),
        1 => (agent(), thread(), line(), artifacts()).prop_map(|(agent, thread_id, reason, artifacts)| Request::Cancel(CancelRequest { agent, thread_id, reason, artifacts })),
        2 => (agent(), statuses(), prop::option::of(agent().prop_filter_map("name", |a| a)), prop::option::of(address().prop_filter_map("address", |a| a)), prop::option::of(Just("R1".to_owned())), limit())
            .prop_map(|(agent, status, created_by, assigned_to, run_id, limit)| Request::List(ListRequest { agent, status, created_by, assigned_to, run_id, limit, ..Default::default() })),
        3 => (thread(), agent(), any::<bool>(), prop::option::of((1u32..30).prop_map(|n| format!("msg_{n:06}"))), prop::option::of(1u32..4))
            .prop_map(|(thread_id, agent, mark_read, after_message, limit)| Request::Show(ShowRequest { thread_id, agent, mark_read, after_message, limit })),
        2 => (agent(), statuses(), prop::collection::vec(prop::sample::select(Kind::ALL.to_vec()), 0..3), event(), timeout(), limit())
            .prop_map(|(agent, status, kinds, after_event, timeout_seconds, limit)| Request::Watch(WatchRequest { agent, status, kinds, after_event, timeout_seconds, limit })),
        2 => (thread(), agent(), token(), event(), prop::option::of((1u32..30).prop_map(|n| format!("msg_{n:06}"))), prop::collection::vec(prop::sample::select(Kind::ALL.to_vec()), 0..3), timeout())
            .prop_map(|(thread_id, agent, lease_token, after_event, after_message, kinds, timeout_seconds)| Request::WaitReply(WaitReplyRequest { thread_id, agent, lease_token, after_event, after_message, kinds, timeout_seconds })),
        2 => (agent(), roles(), prop::option::of(Just("does things".to_owned()))).prop_map(|(agent, roles, description)| Request::AgentRegister(AgentRegisterRequest { agent, roles, description })),
        1 => agent().prop_map(|agent| Request::AgentUnregister(AgentUnregisterRequest { agent })),
        1 => (prop::option::of(Just("crew".to_owned())), limit()).prop_map(|(role, limit)| Request::AgentList(AgentListRequest { role, limit })),
        2 => (agent(), any::<bool>(), event(), limit()).prop_map(|(agent, include_read, after_event, limit)| Request::Read(ReadRequest { agent, include_read, since: None, after_event, limit })),
        1 => (agent(), prop::collection::vec((1u32..=10).prop_map(|n| format!("msg_{n:06}")), 0..3), prop::option::of(0u64..40)).prop_map(|(agent, message_ids, through_event)| Request::MarkRead(MarkReadRequest { agent, message_ids, through_event })),
        1 => Just(Request::Sweep(SweepRequest {})),
        1 => Just(Request::Version(VersionRequest {})),
        1 => (any::<bool>(), prop::option::of(keep())).prop_map(|(auto_gc, keep_messages)| Request::Settings(SettingsRequest { auto_gc: Some(auto_gc), keep_messages, keep_days: Some(0), ..Default::default() })),
        1 => (prop::option::of(keep()), prop::option::of(keep()), prop::option::of(keep()), any::<bool>(), prop::option::of(prop::sample::select(vec![0u32, 1, 2, 10_001])))
            .prop_map(|(keep_days, keep_messages, keep_read_hours, dry_run, limit)| Request::Gc(GcRequest { keep_days, keep_messages, keep_read_hours, dry_run, limit })),
    ]
}

/// A retention limit: mostly small, so that threads go; sometimes past its
/// bound.
fn keep() -> impl Strategy<Value = u32> {
    prop_oneof![6 => 0u32..4, 1 => prop::sample::select(vec![24u32, 36_500, 36_501, 876_001, u32::MAX])]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => request().prop_map(|r| Step::Run(Box::new(r))),
        // Mostly small moves; sometimes far enough for every lease to lapse.
        2 => prop_oneof![4 => 1i64..5_000, 2 => 5_000i64..120_000, 1 => Just(86_400_000i64)].prop_map(|millis| Step::Advance { millis }),
    ]
}

/// The engine over `S` on the scripts' manual clock and sequential ids.
type TestEngine<S> = Engine<S, ManualClock, SequentialIds>;

fn engine<S: Store>(store: S) -> TestEngine<S> {
    Engine::new(
        store,
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    )
}

/// A freshly initialized database file, made once and copied for each case
/// (creating the schema costs more than most sequences).
fn template() -> &'static std::path::Path {
    static TEMPLATE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &TEMPLATE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("template.db");
            let mut store = open_or_create(&path).unwrap();
            store.initialize().unwrap();
            drop(store);
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
                .unwrap();
            (dir, path)
        })
        .1
}

fn memory_engine() -> TestEngine<MemoryStore> {
    let mut memory = MemoryStore::new();
    memory.initialize().unwrap();
    engine(memory)
}

fn contract(response: &Response) -> Result<(), TestCaseError> {
    if let Response::Failure { error, .. } = response {
        prop_assert!(
            !matches!(
                error.code(),
                ErrorCode::InternalError | ErrorCode::StorageError | ErrorCode::StorageBusy
            ),
            "{}",
            response.to_json()
        );
    }
    Ok(())
}

/// Everything a reader can see, through the engine's own read commands.
fn dump() -> Vec<Request> {
    let mut reads = vec![
        Request::List(ListRequest {
            limit: Some(1000),
            ..Default::default()
        }),
        Request::Watch(WatchRequest {
            after_event: Some(0),
            limit: Some(1000),
            timeout_seconds: Some(0),
            ..Default::default()
        }),
    ];
    for n in 1..=8 {
        for agent in ["lead", "w1", "w2"] {
            reads.push(Request::Show(ShowRequest {
                thread_id: Some(format!("thr_{n:06}")),
                agent: Some(agent.into()),
                ..ShowRequest::default()
            }));
        }
    }
    reads.push(Request::AgentList(AgentListRequest {
        role: None,
        limit: Some(1000),
    }));
    for agent in ["lead", "w1", "w2"] {
        reads.push(Request::Read(ReadRequest {
            agent: Some(agent.into()),
            include_read: true,
            limit: Some(1000),
            ..ReadRequest::default()
        }));
        reads.push(Request::Read(ReadRequest {
            agent: Some(agent.into()),
            limit: Some(1000),
            ..ReadRequest::default()
        }));
    }
    for agent in ["w1", "w2"] {
        reads.push(Request::Fetch(FetchRequest {
            agent: Some(agent.into()),
            status: Status::ALL.to_vec(),
            limit: Some(1000),
            unread: false,
        }));
        reads.push(Request::Fetch(FetchRequest {
            agent: Some(agent.into()),
            status: Vec::new(),
            limit: Some(1000),
            unread: true,
        }));
    }
    reads
}

/// Runs `steps` on a fresh memory store and on `other` (named `name` in
/// a divergence) and compares every answer, then everything readable.
fn compare<S: Store>(
    steps: &[Step],
    mut other: TestEngine<S>,
    name: &str,
) -> Result<(), TestCaseError> {
    let mut memory = memory_engine();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Advance { millis } => {
                memory.clock_mut().advance_millis(*millis);
                other.clock_mut().advance_millis(*millis);
            }
            Step::Run(request) => {
                let expected = memory.execute((**request).clone());
                contract(&expected)?;
                let got = other.execute((**request).clone());
                prop_assert_eq!(
                    got.to_json(),
                    expected.to_json(),
                    "step {}: {:?}\n(left: {}, right: memory)",
                    i,
                    request,
                    name
                );
            }
        }
    }
    for request in dump() {
        let expected = memory.execute(request.clone()).to_json();
        let got = other.execute(request.clone()).to_json();
        prop_assert_eq!(got, expected, "final state on {}, {:?}", name, request);
    }
    Ok(())
}

/// `steps` on SQLite (a copy of the template file) against memory.
fn run(steps: &[Step]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("differential.db");
    std::fs::copy(template(), &path).unwrap();
    let (sqlite, _) = open_existing(&path, None).unwrap();
    compare(steps, engine(sqlite), "SQLite")
}

/// The PostgreSQL side: one throwaway cluster for the test, and the one
/// schema every case starts afresh in.
struct Postgres {
    cluster: PgCluster,
    admin: RefCell<postgres::Client>,
}

/// The schema each case runs in: dropped and made again per case, so that
/// thousands of cases (the long mode) do not pile up catalog entries.
const SCHEMA: &str = "differential";

impl Postgres {
    /// A store in an empty, initialized schema, on the engine's clock (the
    /// manual one) rather than the server's.
    fn fresh_store(&self) -> PgStore {
        self.admin
            .borrow_mut()
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}"
            ))
            .unwrap();
        let mut config = self.cluster.config("postgres");
        config.options(&format!("-c search_path={SCHEMA}"));
        let mut store = PgStore::with_config(config).unwrap();
        store.use_server_clock(false);
        store.initialize().unwrap();
        store
    }

    /// `steps` on PostgreSQL against memory. The store (its connection)
    /// is gone when this returns, so the next case may drop the schema.
    fn run(&self, steps: &[Step]) -> Result<(), TestCaseError> {
        compare(steps, engine(self.fresh_store()), "PostgreSQL")
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases: common::cases(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/fuzz_engine_differential.proptest-regressions",
        ))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(800))]

    #[test]
    fn sqlite_answers_every_command_sequence_exactly_like_the_memory_store(
        steps in prop::collection::vec(step(), 1..120)
    ) {
        run(&steps)?;
    }
}

/// Fewer cases than SQLite's: each opens a connection and builds the schema
/// (tens of milliseconds) and every statement is a round trip to the server.
/// The generator is the same, so SQLite's many cases still vet it.
const POSTGRES_CASES: u32 = 60;

/// The same sequences against PostgreSQL (`PgStore`). Written out rather
/// than in `proptest!` so that the cluster lives in the test and is stopped
/// when it ends (a static would leave the server running).
#[test]
fn postgres_answers_every_command_sequence_exactly_like_the_memory_store() {
    let Some(cluster) = PgCluster::start_or_skip(
        "postgres_answers_every_command_sequence_exactly_like_the_memory_store",
    ) else {
        return;
    };
    let admin = RefCell::new(cluster.admin());
    let postgres = Postgres { cluster, admin };
    let mut runner = TestRunner::new(config(POSTGRES_CASES));
    let steps = prop::collection::vec(step(), 1..120);
    if let Err(e) = runner.run(&steps, |steps| postgres.run(&steps)) {
        panic!("{e}");
    }
}

/// Runs a kept sequence; panics with the divergence if there is one.
fn regression(steps: Vec<Step>) {
    if let Err(e) = run(&steps) {
        panic!("{e}");
    }
}

fn send_with_artifact(artifact: ArtifactInput) -> Step {
    Step::Run(Box::new(Request::Send(SendRequest {
        from_agent: Some("lead".into()),
        to_agent: Some("w1".into()),
        subject: Some("step".into()),
        artifacts: vec![artifact],
        ..Default::default()
    })))
}

/// Found by this fuzzer (kept in `fuzz_engine_differential.proptest-regressions`):
/// an artifact whose `size_bytes` was past `i64::MAX` (possible through the
/// JSON entry point, which takes any u64) was kept as given by the memory
/// store but clamped to 9223372036854775807 by the SQLite store, so `show`
/// answered differently on the two. The engine now refuses such a size
/// (`invalid_value`: no file is that large), alike on every store.
#[test]
fn an_artifact_size_past_i64_max_is_refused_alike_on_both_stores() {
    regression(vec![send_with_artifact(ArtifactInput {
        path: Some("src/a.rs".into()),
        size_bytes: Some(u64::MAX),
        ..Default::default()
    })]);
}

#[test]
fn an_artifact_size_of_i64_max_reads_back_as_given_on_both_stores() {
    regression(vec![send_with_artifact(ArtifactInput {
        path: Some("src/a.rs".into()),
        size_bytes: Some(i64::MAX as u64),
        ..Default::default()
    })]);
}
