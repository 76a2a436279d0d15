//! Property tests of orch: random task graphs driven by random leader and
//! worker commands on the in-memory store, with orch's invariants checked
//! on the stored state after every step:
//!
//! - a task is dispatched only when its needs are met (every task that has
//!   had an attempt has all its needs done);
//! - at most one live attempt per task, and a task whose status says an
//!   attempt is live has exactly one, on its current thread;
//! - a succeeded or cancelled run never changes again (nor do its tasks);
//! - skipping is exactly the transitive closure: a pending task has no need
//!   that failed, was cancelled or skipped, and a skipped task has one;
//! - a ready task has every need done, a pending one does not;
//! - the run's counts are the tasks' statuses.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::orch::model::{AttemptStatus, Run, Task, TaskStatus};
use inbox_engine::orch::query::{TaskOrder, TaskQuery};
use inbox_engine::store::{Store, TxMode};
use inbox_engine::{Engine, ManualClock, MemoryStore, Request, SequentialIds};
use proptest::prelude::*;
use serde_json::json;

const WORKERS: &[&str] = &["w1", "w2"];

#[derive(Clone, Debug)]
struct Spec {
    needs: Vec<usize>,
    review: bool,
    max_attempts: u32,
    backoff: u64,
}

#[derive(Clone, Debug)]
enum Op {
    DispatchAll,
    Dispatch(usize),
    Claim(usize),
    Done(usize),
    Fail(usize),
    Block(usize),
    Answer(usize),
    Accept(usize),
    Reject(usize),
    Retry(usize),
    Reassign(usize, usize),
    Cancel(usize, bool),
    CancelThread(usize),
    Advance(u64),
    Reconcile,
    Read,
    RunCancel,
}

fn spec(index: usize) -> impl Strategy<Value = Spec> {
    (
        proptest::collection::vec(0..index.max(1), 0..=index.min(3)),
        any::<bool>(),
        1u32..=3,
        0u64..=60,
    )
        .prop_map(move |(needs, review, max_attempts, backoff)| Spec {
            needs: if index == 0 { Vec::new() } else { needs },
            review,
            max_attempts,
            backoff,
        })
}

fn graph() -> impl Strategy<Value = Vec<Spec>> {
    (2usize..=7).prop_flat_map(|n| (0..n).map(spec).collect::<Vec<_>>())
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    let t = 0..n;
    prop_oneof![
        4 => Just(Op::DispatchAll),
        1 => t.clone().prop_map(Op::Dispatch),
        4 => (0..WORKERS.len()).prop_map(Op::Claim),
        4 => t.clone().prop_map(Op::Done),
        2 => t.clone().prop_map(Op::Fail),
        1 => t.clone().prop_map(Op::Block),
        1 => t.clone().prop_map(Op::Answer),
        2 => t.clone().prop_map(Op::Accept),
        1 => t.clone().prop_map(Op::Reject),
        2 => t.clone().prop_map(Op::Retry),
        1 => (t.clone(), 0..WORKERS.len()).prop_map(|(i, w)| Op::Reassign(i, w)),
        1 => (t.clone(), any::<bool>()).prop_map(|(i, c)| Op::Cancel(i, c)),
        1 => t.prop_map(Op::CancelThread),
        2 => (1u64..=120).prop_map(Op::Advance),
        1 => Just(Op::Reconcile),
        1 => Just(Op::Read),
        1 => Just(Op::RunCancel),
    ]
}

type TestEngine = Engine<MemoryStore, ManualClock, SequentialIds>;

struct World {
    engine: TestEngine,
}

impl World {
    fn new(specs: &[Spec]) -> World {
        let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
        let mut world = World {
            engine: Engine::new(MemoryStore::new(), clock, SequentialIds::new()),
        };
        world.exec(
            json!({"command": "orch-run-create", "agent": "lead", "run_id": "r", "goal": "g"}),
        );
        let tasks: Vec<_> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({
                    "task_id": format!("t{i}"),
                    "title": format!("Task {i}"),
                    "assignee": WORKERS[i % WORKERS.len()],
                    "needs": s.needs.iter().map(|n| format!("t{n}")).collect::<Vec<_>>(),
                    "review": s.review,
                    "max_attempts": s.max_attempts,
                    "backoff_seconds": s.backoff,
                })
            })
            .collect();
        let out = world
            .exec(json!({"command": "orch-plan", "agent": "lead", "run_id": "r", "tasks": tasks}));
        assert_eq!(out["ok"], true, "{out}");
        world
    }

    fn exec(&mut self, request: serde_json::Value) -> serde_json::Value {
        let request = Request::from_json(&request.to_string()).unwrap();
        let response = self.engine.execute(request);
        let text = response.to_json();
        serde_json::from_str(&text).unwrap()
    }

    /// The stored run and tasks.
    fn state(&mut self) -> (Run, Vec<Task>, Vec<Vec<inbox_engine::orch::model::Attempt>>) {
        let store = self.engine.store_mut();
        store.begin(TxMode::Read).unwrap();
        let run = store.run("r").unwrap().unwrap();
        let tasks = store
            .tasks(&TaskQuery::in_statuses("r", &[], TaskOrder::Added))
            .unwrap();
        let attempts = tasks
            .iter()
            .map(|t| store.attempts("r", &t.task_id).unwrap())
            .collect();
        store.commit().unwrap();
        (run, tasks, attempts)
    }

    fn thread_of(&mut self, task: usize) -> Option<String> {
        let (_, tasks, _) = self.state();
        tasks
            .into_iter()
            .find(|t| t.task_id == format!("t{task}"))
            .and_then(|t| t.thread_id)
    }

    fn apply(&mut self, op: &Op) {
        let task = |i: &usize| format!("t{i}");
        match op {
            Op::DispatchAll => drop(self.exec(json!({"command": "orch-dispatch", "agent": "lead", "all_ready": true}))),
            Op::Dispatch(i) => drop(self.exec(json!({"command": "orch-dispatch", "agent": "lead", "task_id": task(i)}))),
            Op::Claim(w) => drop(self.exec(json!({"command": "claim", "agent": WORKERS[*w], "next": true, "lease_seconds": 60}))),
            Op::Done(i) | Op::Fail(i) | Op::Block(i) => {
                let Some(thread) = self.thread_of(*i) else { return };
                let holder = self.holder(&thread);
                let Some(agent) = holder else { return };
                let request = match op {
                    Op::Done(_) => json!({"command": "done", "agent": agent, "thread_id": thread, "summary": "ok"}),
                    Op::Fail(_) => json!({"command": "fail", "agent": agent, "thread_id": thread, "summary": "no"}),
                    _ => json!({"command": "update", "agent": agent, "thread_id": thread, "status": "blocked", "summary": "?"}),
                };
                drop(self.exec(request));
            }
            Op::Answer(i) => drop(self.exec(json!({"command": "orch-answer", "agent": "lead", "task_id": task(i), "summary": "yes"}))),
            Op::Accept(i) => drop(self.exec(json!({"command": "orch-accept", "agent": "lead", "task_id": task(i)}))),
            Op::Reject(i) => drop(self.exec(json!({"command": "orch-reject", "agent": "lead", "task_id": task(i), "summary": "again"}))),
            Op::Retry(i) => drop(self.exec(json!({"command": "orch-retry", "agent": "lead", "task_id": task(i)}))),
            Op::Reassign(i, w) => drop(self.exec(json!({"command": "orch-reassign", "agent": "lead", "task_id": task(i), "to": WORKERS[*w]}))),
            Op::Cancel(i, cascade) => drop(self.exec(json!({"command": "orch-cancel", "agent": "lead", "task_id": task(i), "cascade": cascade}))),
            Op::CancelThread(i) => {
                if let Some(thread) = self.thread_of(*i) {
                    drop(self.exec(json!({"command": "cancel", "agent": "lead", "thread_id": thread, "reason": "by hand"})));
                }
            }
            Op::Advance(s) => self.engine.clock_mut().advance_millis(i64::try_from(*s).unwrap() * 1000),
            Op::Reconcile => drop(self.exec(json!({"command": "orch-reconcile", "run_id": "r"}))),
            Op::Read => self.read(),
            Op::RunCancel => drop(self.exec(json!({"command": "orch-run-cancel", "agent": "lead", "run_id": "r"}))),
        }
    }

    /// An orch read records at most what the next write would record
    /// first (lapsed leases, what the run's threads did), and nothing
    /// else: reading again changes nothing, and a reconcile after the read
    /// leaves exactly the records a reconcile without it leaves.
    fn read(&mut self) {
        let mut twin = self.twin();
        let reads = [
            json!({"command": "orch-status", "run_id": "r"}),
            json!({"command": "orch-ready", "run_id": "r"}),
        ];
        for read in &reads {
            drop(self.exec(read.clone()));
        }
        let after = self.engine.store().clone();
        for read in &reads {
            drop(self.exec(read.clone()));
        }
        assert!(
            self.engine.store().same_records(&after),
            "a second orch read changed the store"
        );
        let reconcile = json!({"command": "orch-reconcile", "run_id": "r"});
        drop(self.exec(reconcile.clone()));
        let without_read = twin.execute(Request::from_json(&reconcile.to_string()).unwrap());
        drop(without_read);
        assert!(
            self.engine.store().same_records(twin.store()),
            "an orch read recorded something a reconcile would not have"
        );
    }

    /// An engine in the same state as this one (store, clock, ids).
    fn twin(&mut self) -> TestEngine {
        let placeholder = Engine::new(
            MemoryStore::new(),
            *self.engine.clock(),
            SequentialIds::new(),
        );
        let (store, clock, ids) = std::mem::replace(&mut self.engine, placeholder).into_parts();
        self.engine = Engine::new(store.clone(), clock, ids.clone());
        Engine::new(store, clock, ids)
    }

    fn holder(&mut self, thread: &str) -> Option<String> {
        let out = self.exec(json!({"command": "show", "thread_id": thread, "limit": 1}));
        out["thread"]["lease"]["agent"].as_str().map(str::to_owned)
    }
}

fn check(run: &Run, tasks: &[Task], attempts: &[Vec<inbox_engine::orch::model::Attempt>]) {
    let status_of = |id: &str| {
        tasks
            .iter()
            .find(|t| t.task_id == id)
            .map(|t| t.status)
            .unwrap()
    };
    let mut counts = inbox_engine::orch::model::TaskCounts::default();
    for (task, attempts) in tasks.iter().zip(attempts) {
        *counts.of_mut(task.status) += 1;
        let needs: Vec<TaskStatus> = task.needs.iter().map(|n| status_of(n)).collect();
        if task.attempts > 0 {
            assert!(
                needs.iter().all(|s| *s == TaskStatus::Done),
                "{} started before its needs were done",
                task.task_id
            );
        }
        let live: Vec<_> = attempts
            .iter()
            .filter(|a| a.status == AttemptStatus::Live)
            .collect();
        assert!(
            live.len() <= 1,
            "{} has {} live attempts",
            task.task_id,
            live.len()
        );
        if task.status.has_live_attempt() {
            assert_eq!(
                live.len(),
                1,
                "{} is {} without a live attempt",
                task.task_id,
                task.status
            );
            assert_eq!(Some(&live[0].thread_id), task.thread_id.as_ref());
        }
        let blocked_by = needs.iter().any(|s| {
            matches!(
                s,
                TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Skipped
            )
        });
        match task.status {
            TaskStatus::Pending => {
                assert!(
                    !blocked_by,
                    "{} is pending though a need ended badly",
                    task.task_id
                );
                assert!(
                    !needs.iter().all(|s| *s == TaskStatus::Done),
                    "{} is pending with every need done",
                    task.task_id
                );
            }
            TaskStatus::Skipped => assert!(
                blocked_by,
                "{} is skipped though no need ended badly",
                task.task_id
            ),
            TaskStatus::Ready => assert!(needs.iter().all(|s| *s == TaskStatus::Done)),
            _ => {}
        }
    }
    assert_eq!(
        counts, run.counts,
        "the run's counts are not its tasks' statuses"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn orch_keeps_its_invariants(specs in graph(), ops in proptest::collection::vec(op(7), 1..60)) {
        let n = specs.len();
        let mut world = World::new(&specs);
        let mut frozen: Option<(Run, Vec<Task>)> = None;
        for op in &ops {
            let op = match op {
                Op::Dispatch(i) | Op::Done(i) | Op::Fail(i) | Op::Block(i) | Op::Answer(i) | Op::Accept(i)
                | Op::Reject(i) | Op::Retry(i) | Op::CancelThread(i) if *i >= n => continue,
                Op::Reassign(i, _) | Op::Cancel(i, _) if *i >= n => continue,
                op => op,
            };
            world.apply(op);
            let (run, tasks, attempts) = world.state();
            check(&run, &tasks, &attempts);
            if let Some((old_run, old_tasks)) = &frozen {
                prop_assert_eq!(old_run, &run, "a {} run changed", old_run.status);
                prop_assert_eq!(old_tasks, &tasks);
            } else if run.status.is_final() {
                frozen = Some((run, tasks));
            }
        }
    }
}
