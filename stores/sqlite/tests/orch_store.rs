//! orch's records in SQLite, checked against the in-memory reference: the
//! same writes go to a [`MemoryStore`] and to an [`SqliteStore`] on a real
//! file, and every query shape (each filter alone and together, both task
//! orders, limits from 0 to none) must answer exactly alike, records and
//! order. Also: floats come back bit for bit, a version-1 database upgrades
//! in place and keeps its threads, and `inbox import` carries orch's
//! records and refuses to drop a destination's runs unasked.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use inbox_engine::orch::council::CouncilSeat;
use inbox_engine::orch::model::{
    Attempt, AttemptStatus, OrchEvent, OrchEventType, RepoSpec, Reservation, RetryPolicy, Run,
    RunStatus, Task, TaskCounts, TaskStatus, Worktree,
};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use inbox_engine::{
    Event, EventId, EventType, JsonObject, MemoryStore, Priority, Status, Store, Thread, Timestamp,
    TxMode,
};
use inbox_sqlite::transfer::{self, TransferError};
use inbox_sqlite::{SqliteStore, open, open_or_create, schema};

/// A small deterministic generator (xorshift64*): the scenario is the same
/// on every run, and no dependency is needed for it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap()
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn at(minute: i64) -> Timestamp {
    Timestamp::parse("2026-01-01T00:00:00.000Z")
        .unwrap()
        .plus_millis(minute * 60_000)
}

fn sqlite(path: &Path) -> SqliteStore {
    let mut store = open_or_create(path).unwrap();
    store.initialize().unwrap();
    store
}

/// Runs `write` in one write transaction on every store.
fn write_all(stores: &mut [&mut dyn Store], mut write: impl FnMut(&mut dyn Store)) {
    for store in stores.iter_mut() {
        store.begin(TxMode::Write).unwrap();
        write(&mut **store);
        store.commit().unwrap();
    }
}

/// Reads with `read` in a read transaction from the reference and from
/// SQLite, and requires the same answer.
fn same<T: PartialEq + std::fmt::Debug>(
    memory: &mut MemoryStore,
    sqlite: &mut SqliteStore,
    what: &str,
    read: impl Fn(&mut dyn Store) -> T,
) -> T {
    let answer = |store: &mut dyn Store| {
        store.begin(TxMode::Read).unwrap();
        let answer = read(&mut *store);
        store.commit().unwrap();
        answer
    };
    let expected = answer(memory);
    let got = answer(sqlite);
    assert_eq!(got, expected, "{what}");
    expected
}

fn run(rng: &mut Rng, id: &str, created_at: Timestamp) -> Run {
    Run {
        run_id: id.to_owned(),
        goal: format!("goal of {id}"),
        created_by: rng.pick(&["lead", "other"]).to_owned(),
        status: rng.pick(RunStatus::ALL),
        counts: TaskCounts {
            ready: u32::try_from(rng.below(5)).unwrap(),
            done: 3,
            ..TaskCounts::default()
        },
        tasks_added: 0,
        last_event_id: 0,
        reconciled_through: 0,
        created_at,
        updated_at: created_at.plus_millis(1),
        finished_at: rng.chance(30).then(|| created_at.plus_millis(5)),
        // A repository's settings round-trip in the record too.
        repo: rng.chance(30).then(|| RepoSpec {
            repo: "/src/app".to_owned(),
            worktrees: "/src/app/.agents/worktrees".to_owned(),
            base: "main".to_owned(),
            strict: rng.chance(50),
            worktrees_named: rng.chance(50),
        }),
        // So do the attempts a dispatch reserved.
        reservations: match rng.chance(30) {
            true => vec![Reservation {
                task_id: "t1".to_owned(),
                attempt: 2,
                worktree: Worktree {
                    repo: "/src/app".to_owned(),
                    path: "/src/app/.agents/worktrees/r/t1/2".to_owned(),
                    branch: "orch/r/t1/2".to_owned(),
                    base: "main".to_owned(),
                    base_commit: "0123abcd".to_owned(),
                    left_out: vec!["notes.txt".to_owned()],
                    left_out_count: 1,
                },
                reserved_at: created_at,
                reserved_by: rng.chance(50).then(|| "host/boot/42/1234".to_owned()),
            }],
            false => Vec::new(),
        },
    }
}

/// Backoff factors that a lossy float parser gets wrong (shortest forms of
/// 17 digits, tiny and huge magnitudes), and random ones in the range the
/// engine allows.
fn awkward_floats(rng: &mut Rng) -> Vec<f64> {
    let mut floats = vec![
        1.0,
        1.5,
        0.1 + 0.2,
        1.0 / 3.0,
        10.0 / 3.0,
        1.000_000_000_000_000_2,
        9.999_999_999_999_998,
        std::f64::consts::E,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
        -0.0,
        123_456_789.012_345_67,
    ];
    for _ in 0..200 {
        let unit = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        floats.push(1.0 + 9.0 * unit);
        // Any finite bit pattern.
        let bits = f64::from_bits(rng.next());
        if bits.is_finite() {
            floats.push(bits);
        }
    }
    floats
}

fn task(rng: &mut Rng, run_id: &str, seq: u64, earlier: &[String], backoff_factor: f64) -> Task {
    let mut needs = Vec::new();
    if !earlier.is_empty() && rng.chance(70) {
        // The first task is a hub many others need.
        needs.push(earlier[0].clone());
    }
    for _ in 0..rng.below(3) {
        if earlier.is_empty() {
            break;
        }
        let need = earlier[rng.below(earlier.len())].clone();
        if !needs.contains(&need) {
            needs.push(need);
        }
    }
    let status = rng.pick(TaskStatus::ALL);
    Task {
        run_id: run_id.to_owned(),
        task_id: format!("t{seq:02}"),
        title: format!("task {seq} of {run_id}"),
        body: "line one\nline two, with \"quotes\" and é".to_owned(),
        acceptance: (0..rng.below(3))
            .map(|i| format!("criterion {i}"))
            .collect(),
        assignee: rng.pick(&["w1", "w2"]).to_owned(),
        priority: rng.pick(Priority::ALL),
        needs,
        retry: RetryPolicy {
            max_attempts: 3,
            backoff_seconds: rng.next() % 100,
            backoff_factor,
            max_backoff_seconds: u64::MAX,
        },
        review: rng.chance(50),
        status,
        reason: rng.chance(50).then(|| "because".to_owned()),
        skipped_by: (status == TaskStatus::Skipped).then(|| "t00".to_owned()),
        attempts: u32::try_from(rng.below(4)).unwrap(),
        thread_id: rng.chance(50).then(|| format!("thr_{seq}")),
        retry_at: (status == TaskStatus::RetryWait).then(|| at(60 + i64::try_from(seq).unwrap())),
        seq,
        last_event_id: rng.next() % 1000,
        created_at: at(1),
        updated_at: at(2),
        // Council seats' markers round-trip in the record like any field.
        council: rng.chance(30).then(|| CouncilSeat {
            council_id: format!("c{seq}"),
            seat: "B".to_owned(),
            round: 2,
            seats: 3,
            ballot: true,
            revision: rng.chance(50).then(|| "3f2c1e0".to_owned()),
        }),
        base: rng.chance(20).then(|| "task:a".to_owned()),
    }
}

fn attempt(run_id: &str, task_id: &str, number: u32, status: AttemptStatus) -> Attempt {
    Attempt {
        run_id: run_id.to_owned(),
        task_id: task_id.to_owned(),
        attempt: number,
        thread_id: format!("thr_{task_id}_{number}"),
        assignee: "w1".to_owned(),
        status,
        reason: (status != AttemptStatus::Succeeded).then(|| "why".to_owned()),
        started_at: at(3),
        ended_at: (status != AttemptStatus::Live).then(|| at(4)),
        worktree: number.is_multiple_of(2).then(|| Worktree {
            repo: "/src/app".to_owned(),
            path: format!("/src/app/.agents/worktrees/{run_id}/{task_id}/{number}"),
            branch: format!("orch/{run_id}/{task_id}/{number}"),
            base: "HEAD".to_owned(),
            base_commit: "0123456789abcdef0123456789abcdef01234567".to_owned(),
            left_out: vec!["notes.txt".to_owned()],
            left_out_count: 1,
        }),
    }
}

fn thread(id: &str, event_id: EventId) -> Thread {
    Thread {
        thread_id: id.to_owned(),
        run_id: Some("run_a".to_owned()),
        task_id: Some("t01".to_owned()),
        subject: format!("subject of {id}"),
        created_by: "lead".to_owned(),
        assigned_to: "w1".to_owned(),
        status: Status::Pending,
        priority: Priority::High,
        attempts: 0,
        max_attempts: 3,
        latest_message_id: None,
        last_event_id: event_id,
        created_at: at(0),
        updated_at: at(0),
    }
}

fn inbox_event(event_id: EventId, thread_id: &str) -> Event {
    Event {
        event_id,
        thread_id: thread_id.to_owned(),
        run_id: Some("run_a".to_owned()),
        task_id: Some("t01".to_owned()),
        event_type: EventType::ThreadCreated,
        source: "lead".to_owned(),
        message_id: None,
        message_kind: None,
        status: Status::Pending,
        summary: "opened".to_owned(),
        payload: JsonObject::new(),
        created_at: at(0),
    }
}

fn orch_event(rng: &mut Rng, event_id: EventId, run_ids: &[&str]) -> OrchEvent {
    let mut payload = JsonObject::new();
    payload.insert("n".to_owned(), serde_json::json!(event_id));
    payload.insert(
        "nested".to_owned(),
        serde_json::json!({"a": [1, 2.5, null]}),
    );
    OrchEvent {
        event_id,
        run_id: rng.pick(run_ids).to_owned(),
        task_id: rng.chance(70).then(|| format!("t{:02}", rng.below(10) + 1)),
        event_type: rng.pick(OrchEventType::ALL),
        source: "orch".to_owned(),
        task_status: rng.chance(70).then(|| rng.pick(TaskStatus::ALL)),
        run_status: rng.pick(RunStatus::ALL),
        attempt: rng.chance(50).then_some(2),
        thread_id: rng.chance(50).then(|| "thr_x".to_owned()),
        summary: format!("event {event_id}"),
        payload,
        created_at: at(i64::try_from(event_id).unwrap()),
    }
}

/// Every subset of `all` (as many as 2^n: keep `all` small), plus one with
/// a status repeated.
fn subsets<T: Copy>(all: &[T]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = (0..1u32 << all.len())
        .map(|mask| {
            (0..all.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| all[i])
                .collect()
        })
        .collect();
    out.push(vec![all[0], all[0]]);
    out
}

const LIMITS: [usize; 5] = [0, 1, 2, 5, usize::MAX];
const RUN_IDS: [&str; 6] = ["run_a", "run_b", "run_c", "run_d", "run_e", "run_f"];

/// Writes a scenario to both stores: six runs (two created at the same
/// time), tasks with needs in two runs that reuse the same task ids,
/// attempts written out of order and replaced, and inbox and orch events
/// interleaved in one id sequence with gaps.
fn scenario(rng: &mut Rng, memory: &mut MemoryStore, sqlite: &mut SqliteStore) {
    let runs: Vec<Run> = RUN_IDS
        .iter()
        .enumerate()
        .map(|(i, id)| run(rng, id, at(10 + i64::try_from(i.min(4)).unwrap())))
        .collect();
    let floats = awkward_floats(rng);
    let mut tasks = Vec::new();
    for (run_id, count) in [("run_a", 40), ("run_b", 12)] {
        let mut ids = Vec::new();
        for seq in 1..=count {
            let backoff_factor = floats[rng.below(floats.len())];
            let t = task(rng, run_id, seq, &ids, backoff_factor);
            ids.push(t.task_id.clone());
            tasks.push(t);
        }
    }
    write_all(&mut [memory, sqlite], |s| {
        for r in &runs {
            s.insert_run(r).unwrap();
        }
        for t in &tasks {
            s.insert_task(t).unwrap();
        }
        for (task_id, numbers) in [
            ("t01", vec![3, 1, 2]),
            ("t02", vec![1]),
            ("t07", vec![2, 1]),
        ] {
            for n in numbers {
                s.put_attempt(&attempt("run_a", task_id, n, AttemptStatus::Live))
                    .unwrap();
            }
        }
        s.put_attempt(&attempt("run_b", "t01", 1, AttemptStatus::Failed))
            .unwrap();
    });
    // Later transactions change what the queries filter and order by.
    let mut updated: Vec<Task> = tasks.iter().filter(|_| rng.chance(40)).cloned().collect();
    for t in &mut updated {
        t.status = rng.pick(TaskStatus::ALL);
        t.priority = rng.pick(Priority::ALL);
        t.reason = Some("moved".to_owned());
    }
    let mut run_a = runs[0].clone();
    run_a.status = RunStatus::Failed;
    run_a.counts.failed = 2;
    write_all(&mut [memory, sqlite], |s| {
        for t in &updated {
            s.update_task(t).unwrap();
        }
        s.update_run(&run_a).unwrap();
        s.put_attempt(&attempt("run_a", "t01", 2, AttemptStatus::Rejected))
            .unwrap();
    });
}

/// Events, inbox's and orch's, in one sequence with gaps; checks
/// `latest_event_id` after each transaction.
fn events(rng: &mut Rng, memory: &mut MemoryStore, sqlite: &mut SqliteStore) {
    same(memory, sqlite, "latest event id, none yet", |s| {
        s.latest_event_id().unwrap()
    });
    let mut id = 0;
    for round in 0..12 {
        id += 1 + rng.next() % 3;
        let orch = round % 3 != 0;
        let event = orch_event(rng, id, &RUN_IDS[..3]);
        let thread_id = format!("thr_{round}");
        write_all(&mut [memory, sqlite], |s| {
            if orch {
                s.insert_orch_event(&event).unwrap();
            } else {
                s.insert_thread(&thread(&thread_id, id)).unwrap();
                s.insert_event(&inbox_event(id, &thread_id)).unwrap();
            }
        });
        let latest = same(memory, sqlite, "latest event id", |s| {
            s.latest_event_id().unwrap()
        });
        assert_eq!(latest, id);
    }
    // Many orch events in one transaction: the queries' limits matter.
    let batch: Vec<OrchEvent> = (1..=40)
        .map(|n| orch_event(rng, id + n, &RUN_IDS[..3]))
        .collect();
    write_all(&mut [memory, sqlite], |s| {
        for e in &batch {
            s.insert_orch_event(e).unwrap();
        }
    });
    same(memory, sqlite, "latest event id", |s| {
        s.latest_event_id().unwrap()
    });
}

fn compare_runs(memory: &mut MemoryStore, sqlite: &mut SqliteStore) {
    for id in RUN_IDS.iter().chain(&["run_missing"]) {
        same(memory, sqlite, &format!("run {id}"), |s| s.run(id).unwrap());
    }
    let by = [None, Some("lead"), Some("other"), Some("nobody")];
    for created_by in by {
        for statuses in subsets(RunStatus::ALL) {
            for limit in LIMITS {
                let query = RunQuery {
                    created_by: created_by.map(str::to_owned),
                    statuses: statuses.clone(),
                    limit,
                };
                same(memory, sqlite, &format!("{query:?}"), |s| {
                    s.runs(&query).unwrap()
                });
            }
        }
    }
}

fn compare_tasks(memory: &mut MemoryStore, sqlite: &mut SqliteStore) {
    let mut status_sets: Vec<Vec<TaskStatus>> = TaskStatus::ALL.iter().map(|&s| vec![s]).collect();
    status_sets.extend([
        Vec::new(),
        TaskStatus::ACTIONABLE.to_vec(),
        TaskStatus::ALL.to_vec(),
        vec![TaskStatus::Done, TaskStatus::Pending],
        vec![TaskStatus::Ready, TaskStatus::Ready],
    ]);
    let needing = [None, Some("t01"), Some("t02"), Some("t05"), Some("t99")];
    for run_id in ["run_a", "run_b", "run_c", "run_missing"] {
        for id in ["t01", "t12", "t40", "t41"] {
            same(memory, sqlite, &format!("task {run_id}/{id}"), |s| {
                s.task(run_id, id).unwrap()
            });
            same(memory, sqlite, &format!("attempts {run_id}/{id}"), |s| {
                s.attempts(run_id, id).unwrap()
            });
        }
        for statuses in &status_sets {
            for needed in needing {
                for order in [TaskOrder::Added, TaskOrder::Queue] {
                    for limit in LIMITS {
                        let query = TaskQuery {
                            run_id: run_id.to_owned(),
                            statuses: statuses.clone(),
                            needing: needed.map(str::to_owned),
                            order,
                            limit,
                        };
                        same(memory, sqlite, &format!("{query:?}"), |s| {
                            s.tasks(&query).unwrap()
                        });
                    }
                }
            }
        }
    }
}

fn compare_orch_events(memory: &mut MemoryStore, sqlite: &mut SqliteStore) {
    let latest = same(memory, sqlite, "latest", |s| s.latest_event_id().unwrap());
    let types = [
        Vec::new(),
        vec![OrchEventType::TaskReady],
        OrchEventType::ACTIONABLE.to_vec(),
        vec![OrchEventType::RunCreated, OrchEventType::RunCreated],
    ];
    for after_event in [0, 1, 5, 17, latest - 3, latest, latest + 1] {
        for run_id in [None, Some("run_a"), Some("run_b"), Some("run_missing")] {
            for event_types in &types {
                for limit in LIMITS {
                    let query = OrchEventQuery {
                        after_event,
                        run_id: run_id.map(str::to_owned),
                        event_types: event_types.clone(),
                        limit,
                    };
                    same(memory, sqlite, &format!("{query:?}"), |s| {
                        s.orch_events(&query).unwrap()
                    });
                }
            }
        }
    }
}

#[test]
fn every_orch_method_answers_what_the_memory_store_answers() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut memory = MemoryStore::new();
    let mut sqlite = sqlite(&dir.path().join("orch.db"));
    events(&mut rng, &mut memory, &mut sqlite);
    scenario(&mut rng, &mut memory, &mut sqlite);
    compare_runs(&mut memory, &mut sqlite);
    compare_tasks(&mut memory, &mut sqlite);
    compare_orch_events(&mut memory, &mut sqlite);
    // The same answers from another connection to the file: nothing lived
    // only in the first connection.
    drop(sqlite);
    let (mut reopened, _) = open::open_existing(&dir.path().join("orch.db"), None).unwrap();
    compare_runs(&mut memory, &mut reopened);
    compare_tasks(&mut memory, &mut reopened);
}

#[test]
fn a_failed_write_changes_nothing_and_duplicates_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let mut store = sqlite(&dir.path().join("orch.db"));
    let r = run(&mut rng, "run_a", at(0));
    let t = task(&mut rng, "run_a", 1, &[], 2.0);
    store.begin(TxMode::Write).unwrap();
    store.insert_run(&r).unwrap();
    store.insert_task(&t).unwrap();
    store.commit().unwrap();
    store.begin(TxMode::Write).unwrap();
    assert!(
        store.insert_run(&r).is_err(),
        "a second run with the same id"
    );
    assert!(
        store.insert_task(&t).is_err(),
        "a second task with the same id"
    );
    let ghost = run(&mut rng, "run_ghost", at(0));
    assert!(store.update_run(&ghost).is_err(), "an update of no run");
    let mut missing = t.clone();
    missing.task_id = "t_missing".to_owned();
    assert!(store.update_task(&missing).is_err(), "an update of no task");
    store.rollback().unwrap();
    store.begin(TxMode::Read).unwrap();
    assert_eq!(store.run("run_a").unwrap(), Some(r));
    assert_eq!(store.task("run_a", "t01").unwrap(), Some(t));
    store.commit().unwrap();
}

#[test]
fn backoff_factors_come_back_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(42);
    let floats = awkward_floats(&mut rng);
    let mut store = sqlite(&dir.path().join("floats.db"));
    let tasks: Vec<Task> = floats
        .iter()
        .enumerate()
        .map(|(i, &f)| task(&mut rng, "run_f", u64::try_from(i).unwrap() + 1, &[], f))
        .collect();
    store.begin(TxMode::Write).unwrap();
    for t in &tasks {
        store.insert_task(t).unwrap();
    }
    store.commit().unwrap();
    drop(store);
    let (mut store, _) = open::open_existing(&dir.path().join("floats.db"), None).unwrap();
    store.begin(TxMode::Read).unwrap();
    let back = store
        .tasks(&TaskQuery::in_statuses("run_f", &[], TaskOrder::Added))
        .unwrap();
    store.commit().unwrap();
    assert_eq!(back.len(), tasks.len());
    for (t, b) in tasks.iter().zip(&back) {
        assert_eq!(
            b.retry.backoff_factor.to_bits(),
            t.retry.backoff_factor.to_bits(),
            "{:e} came back as {:e}",
            t.retry.backoff_factor,
            b.retry.backoff_factor
        );
        assert_eq!(b.retry.max_backoff_seconds, u64::MAX);
    }
}

/// Version 1's SQL, exactly as released: migrations only ever append, so
/// the text in `schema.rs` is what version-1 databases were made with.
fn version_1_sql() -> &'static str {
    let source = include_str!("../src/schema.rs");
    let start = source.find("const V1: &str = r#\"").unwrap() + "const V1: &str = r#\"".len();
    let end = start + source[start..].find("\"#;").unwrap();
    &source[start..end]
}

/// A version-1 database at `path` holding one thread and its event, as an
/// inbox before orch wrote it.
fn version_1_database(path: &Path) -> (Thread, Event) {
    let mut store = open_or_create(path).unwrap();
    store
        .connection()
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL; {} PRAGMA application_id = {}; PRAGMA user_version = 1;",
            version_1_sql(),
            schema::APPLICATION_ID
        ))
        .unwrap();
    let thread = thread("thr_old", 7);
    let event = inbox_event(7, "thr_old");
    store.begin(TxMode::Write).unwrap();
    store.insert_thread(&thread).unwrap();
    store.insert_event(&event).unwrap();
    store.commit().unwrap();
    let tables: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name IN ('runs', 'orch_events')",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "a version-1 database has no orch tables");
    (thread, event)
}

fn user_version(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn a_version_1_database_upgrades_in_place_and_keeps_its_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let (thread, event) = version_1_database(&path);
    assert_eq!(user_version(&path), 1);

    let (mut store, _) = open::open_existing(&path, None).unwrap();
    assert_eq!(
        user_version(&path),
        i64::from(schema::SCHEMA_VERSION),
        "opened for a command, the file was migrated"
    );
    store.begin(TxMode::Read).unwrap();
    let kept = store.thread("thr_old").unwrap().unwrap();
    assert_eq!(kept.thread, thread);
    let events = store
        .events(&inbox_engine::store::EventQuery::after_event(0, 10))
        .unwrap();
    assert_eq!(events, vec![event]);
    assert_eq!(store.latest_event_id().unwrap(), 7);
    store.commit().unwrap();

    // orch works on the upgraded file, continuing the one event sequence.
    let mut rng = Rng(3);
    let r = run(&mut rng, "run_new", at(0));
    store.begin(TxMode::Write).unwrap();
    store.insert_run(&r).unwrap();
    store
        .insert_orch_event(&orch_event(&mut rng, 8, &["run_new"]))
        .unwrap();
    store.commit().unwrap();
    store.begin(TxMode::Read).unwrap();
    assert_eq!(store.latest_event_id().unwrap(), 8);
    assert_eq!(store.run("run_new").unwrap(), Some(r));
    store.commit().unwrap();
    drop(store);
    // Opening again migrates nothing.
    let (_again, _) = open::open_existing(&path, None).unwrap();
    assert_eq!(user_version(&path), i64::from(schema::SCHEMA_VERSION));
}

#[test]
fn a_database_of_a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("newer.db");
    drop(sqlite(&path));
    let newer = i64::from(schema::SCHEMA_VERSION) + 1;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {newer}"))
        .unwrap();
    let refused = open::open_existing(&path, None).err().unwrap();
    assert_eq!(refused.kind, inbox_engine::StoreErrorKind::SchemaTooNew);
    assert_eq!(user_version(&path), newer);
}

/// Every row of orch's tables, as text, in key order: what an import must
/// reproduce exactly.
fn orch_rows(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut rows = Vec::new();
    for table in ["runs", "tasks", "task_needs", "attempts", "orch_events"] {
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2, 3"))
            .unwrap();
        let columns = stmt.column_count();
        let found = stmt
            .query_map([], |row| {
                let values: Vec<String> = (0..columns)
                    .map(|i| format!("{:?}", row.get::<_, rusqlite::types::Value>(i).unwrap()))
                    .collect();
                Ok(format!("{table}: {}", values.join(" | ")))
            })
            .unwrap();
        rows.extend(found.map(Result::unwrap));
    }
    rows
}

/// A database with orch's records (and no thread), closed.
fn orch_database(path: &Path, seed: u64) {
    let mut rng = Rng(seed);
    let mut store = sqlite(path);
    let mut memory = MemoryStore::new();
    events(&mut rng, &mut memory, &mut store);
    scenario(&mut rng, &mut memory, &mut store);
}

#[test]
fn an_import_carries_orch_records_and_never_drops_runs_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.db");
    orch_database(&source, 11);
    let expected = orch_rows(&source);
    assert!(expected.len() > 100, "{}", expected.len());

    // Into a new database: every orch row, as it was.
    let fresh = dir.path().join("fresh.db");
    let (mut store, _) = open::init(&fresh, None).unwrap();
    transfer::import(&mut store, &source, false, "t1")
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    drop(store);
    assert_eq!(orch_rows(&fresh), expected);

    // Into a database that holds only an orch run: refused without
    // --replace, and nothing changes.
    let busy = dir.path().join("busy.db");
    orch_database(&busy, 12);
    let before = orch_rows(&busy);
    let (mut store, _) = open::init(&busy, None).unwrap();
    match transfer::import(&mut store, &source, false, "t2") {
        Err(TransferError::NotEmpty(message)) => {
            assert!(message.contains("orch run(s)"), "{message}");
        }
        other => panic!("an import over runs must be refused: {other:?}"),
    }
    drop(store);
    assert_eq!(orch_rows(&busy), before, "nothing changed");

    // With --replace: the runs are saved beside it first.
    let (mut store, _) = open::init(&busy, None).unwrap();
    let imported = transfer::import(&mut store, &source, true, "t3")
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    drop(store);
    assert_eq!(orch_rows(&busy), expected);
    let backup = imported.backup.expect("the replaced content was saved");
    assert_eq!(orch_rows(&backup), before);
}

#[test]
fn a_version_1_file_imports_into_a_database_with_orch_tables() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("v1.db");
    let (thread, _) = version_1_database(&old);
    let fresh = dir.path().join("fresh.db");
    let (mut store, _) = open::init(&fresh, None).unwrap();
    let imported = transfer::import(&mut store, &old, false, "t1")
        .map_err(|e| format!("{e:?}"))
        .unwrap();
    assert_eq!((imported.threads, imported.events), (1, 1));
    assert_eq!(user_version(&old), 1, "the file given is only read");
    store.begin(TxMode::Read).unwrap();
    assert_eq!(store.thread("thr_old").unwrap().unwrap().thread, thread);
    assert_eq!(store.latest_event_id().unwrap(), 7);
    let runs = RunQuery {
        created_by: None,
        statuses: Vec::new(),
        limit: usize::MAX,
    };
    assert_eq!(store.runs(&runs).unwrap(), Vec::new());
    store.commit().unwrap();
}
