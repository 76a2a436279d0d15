//! orch's rules as data and pure functions: the task state machine
//! ([`TASK_TRANSITIONS`], looked up by [`transition`] for every status
//! change), how a task follows its attempt's thread ([`follow_thread`]),
//! retry backoff ([`backoff_millis`]), dependency cycles ([`find_cycle`]) and
//! when a run is over ([`run_outcome`]).
//!
//! `docs/orch.md`'s task table is generated from [`TASK_TRANSITIONS`], so the
//! document and the behaviour cannot drift apart. Nothing here reads a
//! store or a clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Status;

use super::model::{RetryPolicy, RunStatus, TaskCounts, TaskStatus};

/// Retries when the leader gives no policy: three attempts in all (a crashed
/// or stuck worker is worth two more tries; a task that fails three times
/// is usually wrong itself and needs the leader), 30 s before the second,
/// doubling, never more than 10 minutes.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff_seconds: 30,
    backoff_factor: 2.0,
    max_backoff_seconds: 600,
};

/// Longest backoff a policy may ask for (a day).
pub const MAX_BACKOFF_SECONDS: u64 = 86_400;
/// Largest backoff factor.
pub const MAX_BACKOFF_FACTOR: f64 = 10.0;
/// Needs of one task, at most.
pub const MAX_NEEDS: usize = 1000;
/// Acceptance criteria of one task, at most.
pub const MAX_ACCEPTANCE: usize = 100;
/// Tasks in one `orch plan`, at most.
pub const MAX_PLAN_TASKS: usize = 10_000;
/// Tasks in one run, at most (council seats included): what bounds the
/// work of an `orch dispatch --all-ready`, which goes through every ready
/// task, and of `orch worktree list`.
pub const MAX_RUN_TASKS: usize = 10_000;

/// Something that may change a task's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskAction {
    /// `orch task add` / `orch plan`.
    Add,
    /// The last of its needs is done.
    NeedsMet,
    /// One of its needs failed, was cancelled or was skipped.
    Skip,
    /// The task that caused the skip is being retried.
    Unskip,
    /// `orch dispatch`.
    Dispatch,
    /// The backoff after a failed attempt ended.
    Redispatch,
    /// `orch reject`.
    Reject,
    /// `orch retry`.
    Retry,
    /// `orch reassign` of a task with a live attempt.
    Reassign,
    /// The attempt's thread is waiting for a claim again.
    ThreadQueued,
    /// A worker holds the attempt's thread (claimed, working, or answered).
    ThreadHeld,
    /// The worker asked a question.
    ThreadBlocked,
    /// The worker finished the thread with a result.
    ThreadDone,
    /// The thread failed (by its worker, or its lease ran out).
    ThreadFailed,
    /// The thread was cancelled by someone other than orch.
    ThreadCancelled,
    /// `orch accept`.
    Accept,
    /// `orch cancel` / `orch run cancel`.
    Cancel,
}

/// Where a transition leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// This status.
    To(TaskStatus),
    /// By its needs: `skipped` if one failed, was cancelled or skipped;
    /// `ready` if every one is done; else `pending`.
    FromNeeds,
    /// `review` if the task requires review, else `done`.
    ReviewOrDone,
    /// `retry_wait` while attempts remain under the retry policy, else `failed`.
    RetryOrFail,
}

/// One row of the task state machine.
#[derive(Clone, Copy, Debug)]
pub struct TaskTransition {
    /// The action.
    pub action: TaskAction,
    /// How it happens.
    pub trigger: &'static str,
    /// Statuses it applies to; empty for [`TaskAction::Add`].
    pub from: &'static [TaskStatus],
    /// The resulting status.
    pub to: Target,
    /// What else happens.
    pub effect: &'static str,
}

use TaskStatus::{
    Blocked, Cancelled, Dispatched, Done, Failed, Pending, Ready, RetryWait, Review, Running,
    Skipped,
};

const LIVE: &[TaskStatus] = &[Dispatched, Running, Blocked];
const NOT_ENDED: &[TaskStatus] = &[
    Pending, Ready, Dispatched, Running, Blocked, Review, RetryWait,
];

/// Every allowed task status change. `done` and `cancelled` appear in no
/// `from` list; `failed` only in `orch retry`'s and `skipped` only in the
/// un-skipping that retry causes.
pub const TASK_TRANSITIONS: &[TaskTransition] = &[
    TaskTransition {
        action: TaskAction::Add,
        trigger: "orch task add / orch plan",
        from: &[],
        to: Target::FromNeeds,
        effect: "`task_added`, then `task_ready` or `task_skipped` when it starts out so",
    },
    TaskTransition {
        action: TaskAction::NeedsMet,
        trigger: "the last need becomes done",
        from: &[Pending],
        to: Target::To(Ready),
        effect: "",
    },
    TaskTransition {
        action: TaskAction::Skip,
        trigger: "a need fails, is cancelled or skipped",
        from: &[Pending],
        to: Target::To(Skipped),
        effect: "`skipped_by` names the failed or cancelled task at the root, however deep, and `reason` the need it came through too; its own dependents are skipped too",
    },
    TaskTransition {
        action: TaskAction::Unskip,
        trigger: "orch retry of the task that caused the skip",
        from: &[Skipped],
        to: Target::To(Pending),
        effect: "only when none of its other needs failed, was cancelled or skipped (else it names the task that still keeps it skipped); its dependents come back too",
    },
    TaskTransition {
        action: TaskAction::Dispatch,
        trigger: "orch dispatch",
        from: &[Ready],
        to: Target::To(Dispatched),
        effect: "starts an attempt: opens an inbox thread for the assignee with the task's text, acceptance criteria, attempt number, run and task ids",
    },
    TaskTransition {
        action: TaskAction::Redispatch,
        trigger: "the backoff ends (the next orch write or orch wait)",
        from: &[RetryWait],
        to: Target::To(Dispatched),
        effect: "starts the next attempt; its thread carries the failed attempt's result",
    },
    TaskTransition {
        action: TaskAction::Reject,
        trigger: "orch reject",
        from: &[Review],
        to: Target::To(Dispatched),
        effect: "starts a new attempt whose thread carries the reason and the rejected result",
    },
    TaskTransition {
        action: TaskAction::Retry,
        trigger: "orch retry",
        from: &[Failed],
        to: Target::To(Dispatched),
        effect: "starts a new attempt (to another assignee with --to); the tasks it caused to be skipped come back; a failed run is active again",
    },
    TaskTransition {
        action: TaskAction::Reassign,
        trigger: "orch reassign, with a live attempt",
        from: LIVE,
        to: Target::To(Dispatched),
        effect: "cancels the live attempt's thread first (its worker is fenced off), then starts a new attempt for the new assignee",
    },
    TaskTransition {
        action: TaskAction::ThreadQueued,
        trigger: "the attempt's thread is pending again",
        from: &[Running, Blocked],
        to: Target::To(Dispatched),
        effect: "",
    },
    TaskTransition {
        action: TaskAction::ThreadHeld,
        trigger: "a worker claims the thread, or an answer unblocks it",
        from: &[Dispatched, Blocked],
        to: Target::To(Running),
        effect: "",
    },
    TaskTransition {
        action: TaskAction::ThreadBlocked,
        trigger: "the worker runs inbox update --status blocked",
        from: &[Dispatched, Running],
        to: Target::To(Blocked),
        effect: "waits for orch answer",
    },
    TaskTransition {
        action: TaskAction::ThreadDone,
        trigger: "the worker runs inbox done",
        from: LIVE,
        to: Target::ReviewOrDone,
        effect: "the attempt succeeded; a task done unlocks the tasks that need it",
    },
    TaskTransition {
        action: TaskAction::ThreadFailed,
        trigger: "the worker runs inbox fail, or its lease runs out",
        from: LIVE,
        to: Target::RetryOrFail,
        effect: "the attempt failed; `retry_at` = now + backoff; a task failed skips its dependents",
    },
    TaskTransition {
        action: TaskAction::ThreadCancelled,
        trigger: "someone cancels the attempt's thread with inbox cancel",
        from: LIVE,
        to: Target::To(Cancelled),
        effect: "skips its dependents",
    },
    TaskTransition {
        action: TaskAction::Accept,
        trigger: "orch accept",
        from: &[Review],
        to: Target::To(Done),
        effect: "unlocks the tasks that need it",
    },
    TaskTransition {
        action: TaskAction::Cancel,
        trigger: "orch cancel / orch run cancel",
        from: NOT_ENDED,
        to: Target::To(Cancelled),
        effect: "cancels a live attempt's thread; dependents are skipped (orch cancel asks for --cascade when there are any)",
    },
];

/// Whether `target` may resolve to `to`.
pub fn reaches(target: Target, to: TaskStatus) -> bool {
    match target {
        Target::To(status) => status == to,
        Target::FromNeeds => matches!(to, Pending | Ready | Skipped),
        Target::ReviewOrDone => matches!(to, Review | Done),
        Target::RetryOrFail => matches!(to, RetryWait | Failed),
    }
}

/// What a new task (or one coming back) starts as, given the statuses of
/// its needs: `skipped` if one failed, was cancelled or skipped, `ready` if
/// all are done, else `pending`.
pub fn from_needs(needs: impl IntoIterator<Item = TaskStatus>) -> TaskStatus {
    let mut all_done = true;
    for need in needs {
        if matches!(need, Failed | Cancelled | Skipped) {
            return Skipped;
        }
        all_done &= need == Done;
    }
    if all_done { Ready } else { Pending }
}

/// Where `action` takes a task in `from`, or `None` if the table has no such
/// row.
pub fn transition(from: TaskStatus, action: TaskAction) -> Option<Target> {
    TASK_TRANSITIONS
        .iter()
        .find(|t| t.action == action && t.from.contains(&from))
        .map(|t| t.to)
}

/// The action a task with a live attempt takes when its thread is in
/// `thread` status, or `None` when the thread says nothing new. A pending
/// thread with no claim left (its worker's lease ran out while it was
/// blocked, then it was answered) can never be picked up again: the attempt
/// has failed.
pub fn follow_thread(task: TaskStatus, thread: Status, claims_left: bool) -> Option<TaskAction> {
    let action = match thread {
        Status::Pending if !claims_left => TaskAction::ThreadFailed,
        Status::Pending => TaskAction::ThreadQueued,
        Status::Claimed | Status::InProgress => TaskAction::ThreadHeld,
        Status::Blocked => TaskAction::ThreadBlocked,
        Status::Done => TaskAction::ThreadDone,
        Status::Failed => TaskAction::ThreadFailed,
        Status::Cancelled => TaskAction::ThreadCancelled,
    };
    transition(task, action).map(|_| action)
}

/// The wait before the attempt after `failed` failed attempts (1 for the
/// first failure): `backoff_seconds × backoff_factor^(failed − 1)`, capped
/// at `max_backoff_seconds`, in milliseconds. Multiplied step by step in
/// `f64` (exact IEEE arithmetic, the same on every host) and rounded to a
/// millisecond each step.
pub fn backoff_millis(policy: &RetryPolicy, failed: u32) -> i64 {
    let cap = policy.max_backoff_seconds.min(MAX_BACKOFF_SECONDS) as f64 * 1000.0;
    let mut wait = (policy.backoff_seconds.min(MAX_BACKOFF_SECONDS) as f64 * 1000.0).min(cap);
    for _ in 1..failed {
        wait = (wait * policy.backoff_factor).round().min(cap);
    }
    wait as i64
}

/// Whether another automatic attempt follows `attempts` started ones.
pub fn retries_left(policy: &RetryPolicy, attempts: u32) -> bool {
    attempts < policy.max_attempts
}

/// A cycle in `needs` (task → the tasks it needs), as the path that closes
/// it (`a → b → a` as `[a, b, a]`), or `None`. Tasks named in `needs` but
/// not keys of it have no needs of their own here.
pub fn find_cycle(needs: &BTreeMap<&str, Vec<&str>>) -> Option<Vec<String>> {
    // Iterative depth-first search with three colours, so a plan of ten
    // thousand tasks in one chain cannot overflow the stack.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for &start in needs.keys() {
        if done.contains(start) {
            continue;
        }
        let mut path: Vec<(&str, usize)> = vec![(start, 0)];
        let mut on_path: BTreeSet<&str> = BTreeSet::from([start]);
        while let Some((node, next)) = path.last_mut() {
            let edges = needs.get(*node).map_or(&[][..], Vec::as_slice);
            if let Some(&need) = edges.get(*next) {
                *next += 1;
                if on_path.contains(need) {
                    let from = path.iter().position(|(n, _)| *n == need).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|(n, _)| (*n).to_owned()).collect();
                    cycle.push(need.to_owned());
                    return Some(cycle);
                }
                if !done.contains(need) {
                    on_path.insert(need);
                    path.push((need, 0));
                }
            } else {
                on_path.remove(*node);
                done.insert(*node);
                path.pop();
            }
        }
    }
    None
}

/// How a run with these counts ends, or `None` while it is not over: it
/// is over when it has tasks and every one has ended; it succeeded unless
/// one failed. (Cancelled tasks, and those skipped because of them, were
/// the leader's decision, not a failure.)
pub fn run_outcome(counts: &TaskCounts) -> Option<RunStatus> {
    if counts.total() == 0 || counts.open() > 0 {
        return None;
    }
    Some(if counts.failed > 0 {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let waits: Vec<i64> = (1..=7).map(|n| backoff_millis(&DEFAULT_RETRY, n)).collect();
        assert_eq!(
            waits,
            [30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000]
        );
    }

    #[test]
    fn a_cycle_is_named_as_the_path_that_closes_it() {
        let needs = BTreeMap::from([("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"])]);
        assert_eq!(
            find_cycle(&needs),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        let diamond = BTreeMap::from([
            ("d", vec!["b", "c"]),
            ("b", vec!["a"]),
            ("c", vec!["a"]),
            ("a", vec![]),
        ]);
        assert_eq!(find_cycle(&diamond), None);
        let itself = BTreeMap::from([("a", vec!["a"])]);
        assert_eq!(find_cycle(&itself), Some(vec!["a".into(), "a".into()]));
    }

    #[test]
    fn every_thread_status_has_a_meaning_for_a_live_task() {
        for &task in LIVE {
            for &thread in Status::ALL {
                let action = follow_thread(task, thread, true);
                let same = matches!(
                    (task, thread),
                    (Dispatched, Status::Pending)
                        | (Running, Status::Claimed | Status::InProgress)
                        | (Blocked, Status::Blocked)
                );
                assert_eq!(action.is_none(), same, "{task} with a {thread} thread");
            }
        }
    }
}
