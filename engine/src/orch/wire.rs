//! orch's part of the wire format: the request and output record of every
//! orch command (the rows themselves are in [`crate::command`]). Re-exported
//! by [`crate::wire`], so every host speaks them with no extra work.
//!
//! As in [`crate::wire`], required text fields are `Option`s so that a
//! missing one comes back as `missing_field` with a hint. `run_id` may be
//! left out: the only active run is meant (the newest run when none is
//! active; several active runs must be named). Shapes only:
//! the rules are in [`super::rules`] and the engine.

use serde::{Deserialize, Serialize};

use crate::error::ErrorCode;
use crate::model::{EventId, Message, Priority};
use crate::time::Timestamp;
use crate::wire::view::{Found, ThreadView};

use super::council_report::CouncilReport;
use super::model::{Attempt, AttemptStatus, OrchEvent, Run, RunStatus, Task, TaskStatus, Worktree};
use super::workspace::WorktreeState;

/// `orch-run-create`: start a run.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchRunCreateRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// An id of your choosing; `run_...` if absent.
    pub run_id: Option<String>,
    /// What the run is for, one line (required).
    pub goal: Option<String>,
    /// A git repository its attempts work in, each in a worktree of its
    /// own (an absolute path; the command line makes a relative one
    /// absolute).
    pub repo: Option<String>,
    /// The folder the worktrees are made in, absolute (default
    /// `REPO/.agents/worktrees`).
    pub worktrees: Option<String>,
    /// The revision attempts start from (default `HEAD`), resolved to a
    /// commit at each dispatch.
    pub base: Option<String>,
    /// Refuse to dispatch while the repository's checkout has uncommitted
    /// changes a worktree would leave out.
    pub strict: bool,
}

/// `orch-run-list`: runs, newest first.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchRunListRequest {
    /// Only runs this leader created.
    pub agent: Option<String>,
    /// Only runs in these statuses (empty: any).
    pub status: Vec<RunStatus>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// `orch-run-cancel`: stop a run and every task that has not ended.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchRunCancelRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// Why, one line; written to every cancelled thread.
    pub reason: Option<String>,
}

/// `orch-status`: a run at a glance.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchStatusRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// At most this many tasks in each list (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// A task as the leader describes it: one entry of `orch-plan`'s `tasks`,
/// or `orch-task-add`'s `task`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique in the run (required).
    pub task_id: Option<String>,
    /// One line (required).
    pub title: Option<String>,
    /// The long form.
    pub body: Option<String>,
    /// What the result must satisfy, one criterion each.
    pub acceptance: Vec<String>,
    /// Who does it (required).
    pub assignee: Option<String>,
    /// Defaults to `normal`.
    pub priority: Option<Priority>,
    /// Tasks of the run that must be done first.
    pub needs: Vec<String>,
    /// Attempts in all (default 3, 1 to 100).
    pub max_attempts: Option<u32>,
    /// Wait before the second attempt (default 30).
    pub backoff_seconds: Option<u64>,
    /// Each later wait is the one before times this (default 2, 1 to 10).
    pub backoff_factor: Option<f64>,
    /// Longest wait (default 600, at most 86400).
    pub max_backoff_seconds: Option<u64>,
    /// Whether a finished attempt waits for `orch accept` (default false).
    pub review: Option<bool>,
    /// In a run with a repository: the revision its attempts start from
    /// instead of the run's, or `task:ID` for the accepted branch of a task
    /// it needs.
    pub base: Option<String>,
}

/// `orch-task-add`: add one task.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchTaskAddRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The task (required).
    pub task: Option<TaskSpec>,
}

/// `orch-plan`: add a whole graph in one transaction.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchPlanRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The tasks, in any order; `needs` may name tasks of the plan or of
    /// the run (at least one task).
    pub tasks: Vec<TaskSpec>,
}

/// `orch-ready`: what can start now.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchReadyRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// `orch-dispatch`: start attempts.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchDispatchRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The task to dispatch; give this or `all_ready`.
    pub task_id: Option<String>,
    /// Dispatch every ready task instead, in `orch-ready` order.
    pub all_ready: bool,
    /// With `all_ready`: at most this many (default and most 1000).
    pub limit: Option<u32>,
}

/// `orch-task-show`: one task, its attempts and the run it is in.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchTaskShowRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The task (required).
    pub task_id: Option<String>,
}

/// The leader's decisions about one task: `orch-accept`, `orch-reject`,
/// `orch-answer`, `orch-retry`, `orch-reassign`, `orch-cancel`. Each command
/// says which fields it takes.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchTaskRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The task (required).
    pub task_id: Option<String>,
    /// One line: the answer (`orch-answer`, required), the reason
    /// (`orch-reject`, required; `orch-cancel`), a note (`orch-accept`).
    pub summary: Option<String>,
    /// The long form (`orch-answer`, `orch-reject`).
    pub body: Option<String>,
    /// The new assignee (`orch-reassign`, required; `orch-retry`).
    pub to: Option<String>,
    /// `orch-cancel`: also skip the tasks that need it (required when any do).
    pub cascade: bool,
}

/// `orch-wait`: block until the run needs the leader.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchWaitRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// Wake on actionable events after this one (from the last wait's
    /// `next_event_id`). Without it, the wait returns at once if a task
    /// already needs the leader, and otherwise waits for the next event.
    pub after_event: Option<EventId>,
    /// Give up after this long (default 300, at most 86400): exit 10.
    pub timeout_seconds: Option<u64>,
    /// At most this many events (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// `orch-reconcile`: record what the attempts' threads and the clock have
/// made true (every orch write does this first; `orch wait` does it while
/// it waits). Changes nothing when there is nothing to record.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchReconcileRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
}

/// `orch-council`: start a council review of one subject.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchCouncilRequest {
    /// The leader (required).
    pub agent: Option<String>,
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// An id of your choosing, unique in the run; `council_...` if absent.
    /// Its seats' tasks are `<council_id>-A`, `-B`, ... (and
    /// `<council_id>-A-ballot`, ... for the ballot round).
    pub council_id: Option<String>,
    /// What is reviewed, one line (required).
    pub title: Option<String>,
    /// What the reviewers should know: the request, the context.
    pub body: Option<String>,
    /// The files under review, by path (their content is not sent).
    pub files: Vec<String>,
    /// The change under review, as a diff.
    pub diff: Option<String>,
    /// The commit id or ref the review is about.
    pub revision: Option<String>,
    /// Who reviews: agents (one seat each) or `role:NAME` addresses (which
    /// fill the seats the agents leave), in seat order (required).
    pub reviewers: Vec<String>,
    /// How many seats, 2 to 26 (default: one per reviewer named, and at
    /// least 3 when a role is among them).
    pub seats: Option<u32>,
    /// Whether a second round follows in which every seat votes on the
    /// grouped findings (default false).
    pub ballot: bool,
}

/// `orch-council-show`: a council's report.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchCouncilShowRequest {
    /// The run (the only active one if absent).
    pub run_id: Option<String>,
    /// The council (the run's newest if absent).
    pub council_id: Option<String>,
}

/// A run and its tasks' counts.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOutput {
    /// The run after the command.
    pub run: Run,
    /// The newest event the command recorded (0 if none).
    pub event_id: EventId,
}

/// `orch-run-list`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunsOutput {
    /// The runs, newest first.
    pub runs: Vec<Run>,
}

/// One task whole: the task, and what keeps a pending one waiting.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task as it is now.
    #[serde(flatten)]
    pub task: Task,
    /// The needs not done yet (for `pending`; empty otherwise).
    pub waiting_on: Vec<String>,
}

/// A task in a list (`orch ready`, `orch status`, `orch wait`): what a
/// leader scans to decide what to do next. The body, the acceptance
/// criteria and the retry policy are left out: a leader reads these lists
/// on every wake, and a task's body may be long; `orch task show` has them.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskLine {
    /// The run it belongs to.
    pub run_id: String,
    /// The task.
    pub task_id: String,
    /// What the work is, one line.
    pub title: String,
    /// Who does it.
    pub assignee: String,
    /// Its place in the queue.
    pub priority: Priority,
    /// Where it is.
    pub status: TaskStatus,
    /// Why it is there, when that needs saying: the question (`blocked`),
    /// the result to review (`review`), the failure (`retry_wait`,
    /// `failed`), the cause (`skipped`, `cancelled`).
    pub reason: Option<String>,
    /// For a `skipped` task: the failed or cancelled task that caused it,
    /// however deep (`orch retry` of that one, if it failed, brings this
    /// one back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_by: Option<String>,
    /// Attempts started.
    pub attempts: u32,
    /// Attempts allowed in all (its retry policy's `max_attempts`).
    pub max_attempts: u32,
    /// The current (or last) attempt's inbox thread.
    pub thread_id: Option<String>,
    /// When the next attempt is dispatched (`retry_wait` only).
    pub retry_at: Option<Timestamp>,
    /// The needs not done yet (for `pending`; empty otherwise).
    pub waiting_on: Vec<String>,
    /// When anything about it last changed.
    pub updated_at: Timestamp,
}

impl From<TaskView> for TaskLine {
    fn from(view: TaskView) -> TaskLine {
        let TaskView { task, waiting_on } = view;
        TaskLine {
            max_attempts: task.retry.max_attempts,
            run_id: task.run_id,
            task_id: task.task_id,
            title: task.title,
            assignee: task.assignee,
            priority: task.priority,
            status: task.status,
            reason: task.reason,
            skipped_by: task.skipped_by,
            attempts: task.attempts,
            thread_id: task.thread_id,
            retry_at: task.retry_at,
            waiting_on,
            updated_at: task.updated_at,
        }
    }
}

/// `orch-status`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusOutput {
    /// The run, with its counts by task status.
    pub run: Run,
    /// Tasks that wait on the leader: ready, blocked, in review, failed.
    pub actionable: Vec<TaskLine>,
    /// Tasks being worked on: dispatched, running, waiting to retry.
    pub in_flight: Vec<TaskLine>,
    /// Tasks waiting on others, with what they wait on.
    pub waiting: Vec<TaskLine>,
}

/// `orch-ready`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TasksOutput {
    /// The tasks, highest priority first, then in the order added.
    pub tasks: Vec<TaskLine>,
}

impl Found for TasksOutput {
    fn found(&self) -> bool {
        !self.tasks.is_empty()
    }
}

/// One task after a command, with the attempt it started, if any.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskOutput {
    /// The run after the command.
    pub run: Run,
    /// The task after the command.
    pub task: Task,
    /// The attempt the command started, or `null`.
    pub attempt: Option<Attempt>,
    /// The message the command wrote into an attempt's thread, or `null`.
    pub message: Option<Message>,
    /// Other tasks the command changed (skipped, back to pending, ready).
    pub affected: Vec<Task>,
    /// The newest event the command recorded.
    pub event_id: EventId,
}

/// `orch-plan`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanOutput {
    /// The run after the plan.
    pub run: Run,
    /// The tasks added, in the plan's order.
    pub tasks: Vec<Task>,
    /// The newest event recorded.
    pub event_id: EventId,
}

/// `orch-dispatch`: the attempts started.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DispatchOutput {
    /// The run after the dispatch.
    pub run: Run,
    /// One per task dispatched, in dispatch order.
    pub dispatched: Vec<Dispatched>,
    /// The ready tasks `--all-ready` could not dispatch for a reason that
    /// concerns each alone (its assignee, its id, its worktree, its base),
    /// the first 100 in queue order (absent when none): each stays `ready`
    /// with the reason, and the others were dispatched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refused>,
    /// How many more were refused past those listed (absent when none):
    /// the dispatch went through the whole ready queue all the same.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub refused_more: u64,
    /// The newest event recorded (0 if nothing was ready).
    pub event_id: EventId,
}

/// A task whose attempt could not start for a reason that concerns it
/// alone (its assignee nobody registered, an id that could never be a
/// worktree, git refusing its worktree, a base that names no commit): it
/// waits with the reason, and the other tasks go on.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    /// The task.
    pub task_id: String,
    /// The error code, as a dispatch of that task alone would fail with.
    pub code: ErrorCode,
    /// What git said, and what to do.
    pub message: String,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Found for DispatchOutput {
    fn found(&self) -> bool {
        !self.dispatched.is_empty()
    }
}

/// One attempt started by `orch-dispatch`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dispatched {
    /// The task, now `dispatched`.
    pub task: Task,
    /// The attempt and its thread.
    pub attempt: Attempt,
}

/// `orch-task-show`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskShowOutput {
    /// The run.
    pub run: Run,
    /// The task, with what it waits on.
    pub task: TaskView,
    /// Every attempt, first first.
    pub attempts: Vec<Attempt>,
    /// The current attempt's thread, or `null` before the first dispatch.
    pub thread: Option<ThreadView>,
    /// Tasks that need this one.
    pub needed_by: Vec<String>,
}

/// `orch-wait`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrchWaitOutput {
    /// Whether something needs the leader.
    pub woke: bool,
    /// Resume from here: pass it as `after_event` to the next wait.
    pub next_event_id: EventId,
    /// When orch next acts by itself (a retry's backoff ends, a lease runs
    /// out), or `null`: a waiting host looks again then.
    pub next_due: Option<Timestamp>,
    /// The actionable events after the cursor, oldest first.
    pub events: Vec<OrchEvent>,
    /// The run now, with its counts.
    pub run: Run,
    /// Tasks that wait on the leader now, whatever the cursor: a leader
    /// that missed a wake-up finds its work here.
    pub actionable: Vec<TaskLine>,
}

impl Found for OrchWaitOutput {
    fn found(&self) -> bool {
        self.woke
    }
}

/// `orch-reconcile`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReconcileOutput {
    /// The run now.
    pub run: Run,
    /// The events recorded (none when everything was already recorded).
    pub events: Vec<OrchEvent>,
    /// When something is next due by the clock (a retry's backoff ends, a
    /// lease runs out), or `null`: a waiting host reconciles again then.
    pub next_due: Option<Timestamp>,
}

/// `orch-worktree-list`: the attempts' git worktrees and where each is.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchWorktreeListRequest {
    /// Only this run's (default: every run with a repository).
    pub run_id: Option<String>,
}

/// `orch-worktree-gc`: tidy the ended attempts' worktrees.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrchWorktreeGcRequest {
    /// Only this run's (default: every run with a repository).
    pub run_id: Option<String>,
    /// Say what would be saved and removed, and do nothing.
    pub dry_run: bool,
}

/// One attempt's worktree and where it is.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeView {
    /// The run.
    pub run_id: String,
    /// The task.
    pub task_id: String,
    /// The attempt.
    pub attempt: u32,
    /// Whether and how the attempt ended.
    pub attempt_status: AttemptStatus,
    /// Where the worktree is (`unknown` on a host without git).
    pub state: WorktreeState,
    /// Its uncommitted paths, untracked files included.
    pub uncommitted: u32,
    /// Commits on its branch since its base.
    pub commits: u32,
    /// The commit its uncommitted work was saved as, if it was.
    pub saved: Option<String>,
    /// The ref that work is (or would be) saved on.
    pub wip_ref: String,
    /// The worktree: folder, branch, base.
    pub worktree: Worktree,
}

/// `orch-worktree-list`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreesOutput {
    /// Every attempt's worktree, by run, task and attempt.
    pub worktrees: Vec<WorktreeView>,
}

/// `orch-worktree-gc`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorktreeGcOutput {
    /// Nothing was done: this is what would have been.
    pub dry_run: bool,
    /// Clean worktrees of ended attempts, removed (their branches stay).
    pub removed: Vec<WorktreeView>,
    /// Worktrees whose uncommitted work was saved on their ref (they stay).
    pub saved: Vec<WorktreeView>,
    /// Everything else, untouched: live attempts, saved work not yet
    /// committed or discarded, missing or removed folders.
    pub kept: Vec<WorktreeView>,
}

/// `orch-council`: the council started.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CouncilOutput {
    /// The run after the command.
    pub run: Run,
    /// The council.
    pub council_id: String,
    /// Its seats' tasks: the first round's, dispatched, then the ballot
    /// round's, pending on them.
    pub tasks: Vec<Task>,
    /// The newest event recorded.
    pub event_id: EventId,
}

/// `orch-council-show`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CouncilShowOutput {
    /// The run.
    pub run: Run,
    /// The report.
    pub council: CouncilReport,
}
