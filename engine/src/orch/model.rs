//! orch's records and vocabularies: [`Run`], [`Task`] (with its
//! [`RetryPolicy`]), [`Attempt`], [`OrchEvent`]; [`RunStatus`],
//! [`TaskStatus`], [`AttemptStatus`], [`OrchEventType`].
//!
//! Plain data, like [`crate::model`]: field names are the JSON contract's
//! and the storage columns' names. Which status may follow which is decided
//! in [`super::rules`], never here.

use serde::{Deserialize, Serialize};

use crate::model::{EventId, JsonObject, Priority};
use crate::time::Timestamp;
use crate::vocabulary::vocabulary;

use super::council::CouncilSeat;

vocabulary! {
    /// Where a run is. A run finishes by itself when every task has ended.
    pub enum RunStatus ("run status") {
        Active = "active" : "Tasks are still to be done (or the run has none yet).",
        Succeeded = "succeeded" : "Every task ended and none failed. Final.",
        Failed = "failed" : "Every task ended and at least one failed; `orch retry` of a failed task reopens the run.",
        Cancelled = "cancelled" : "The leader cancelled the run. Final.",
    }
}

impl RunStatus {
    /// Succeeded and cancelled runs never change again.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Cancelled)
    }
}

vocabulary! {
    /// Where a task is. `pending` waits on its needs; `ready` waits on the
    /// leader's dispatch; `dispatched`, `running` and `blocked` follow the
    /// current attempt's inbox thread; `review` and `blocked` wait on the
    /// leader; `retry_wait` waits out a backoff. The last four have ended.
    pub enum TaskStatus ("task status") {
        Pending = "pending" : "Some of its needs are not done yet.",
        Ready = "ready" : "Every need is done; waiting to be dispatched.",
        Dispatched = "dispatched" : "An attempt's thread is open; no worker has claimed it yet.",
        Running = "running" : "A worker holds the attempt's thread.",
        Blocked = "blocked" : "The worker asked a question; `orch answer` unblocks it.",
        Review = "review" : "The worker finished; `orch accept` or `orch reject` decides.",
        RetryWait = "retry_wait" : "An attempt failed; the next one is dispatched when the backoff ends.",
        Done = "done" : "Finished and accepted.",
        Failed = "failed" : "Every allowed attempt failed; `orch retry` tries again.",
        Cancelled = "cancelled" : "The leader (or someone cancelling its thread) stopped it.",
        Skipped = "skipped" : "A task it needs failed or was cancelled; retrying that task brings it back.",
    }
}

impl TaskStatus {
    /// `done`, `failed`, `cancelled` and `skipped`: nothing changes them
    /// by itself (the leader's `orch retry` may).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled | TaskStatus::Skipped
        )
    }

    /// An attempt's thread is open: `dispatched`, `running` or `blocked`.
    pub fn has_live_attempt(self) -> bool {
        matches!(
            self,
            TaskStatus::Dispatched | TaskStatus::Running | TaskStatus::Blocked
        )
    }

    /// The statuses that wait on the leader: what `orch wait` lists as
    /// actionable and `orch status` shows first.
    pub const ACTIONABLE: &'static [TaskStatus] = &[
        TaskStatus::Ready,
        TaskStatus::Blocked,
        TaskStatus::Review,
        TaskStatus::Failed,
    ];
}

vocabulary! {
    /// How one attempt at a task ended, if it has.
    pub enum AttemptStatus ("attempt status") {
        Reserved = "reserved" : "Not started yet: a dispatch reserved it and git is making its worktree, with no lock held; it starts when that dispatch commits (only `orch worktree list` shows it).",
        Live = "live" : "Its thread is open.",
        Succeeded = "succeeded" : "Its worker finished the thread with a result.",
        Failed = "failed" : "Its thread failed (by the worker, or its lease ran out).",
        Rejected = "rejected" : "The leader rejected its result in review.",
        Cancelled = "cancelled" : "Its thread was cancelled (reassign, cancel, or by hand).",
    }
}

vocabulary! {
    /// What happened in a run, in the past tense. Every task status change
    /// writes exactly one event, named after the new status.
    pub enum OrchEventType ("orch event type") {
        RunCreated = "run_created" : "`orch run create` started a run.",
        RunSucceeded = "run_succeeded" : "Every task ended and none failed.",
        RunFailed = "run_failed" : "Every task ended and at least one failed.",
        RunCancelled = "run_cancelled" : "The leader cancelled the run.",
        RunReopened = "run_reopened" : "`orch retry` brought a failed run back to active.",
        TaskAdded = "task_added" : "A task was added (`orch task add` or `orch plan`).",
        TaskReassigned = "task_reassigned" : "The task's assignee changed (its status did not).",
        TaskReady = "task_ready" : "Every need of the task is done.",
        TaskPending = "task_pending" : "A task skipped because of another came back: that task is being retried.",
        TaskDispatched = "task_dispatched" : "An attempt started: its inbox thread is open for the assignee.",
        TaskRunning = "task_running" : "A worker claimed the attempt's thread, or an answer unblocked it.",
        TaskBlocked = "task_blocked" : "The worker asked a question.",
        TaskReview = "task_review" : "The worker finished; the task waits for review.",
        TaskRetryWait = "task_retry_wait" : "An attempt failed; another follows after the backoff.",
        TaskDone = "task_done" : "The task is done (finished without review, or accepted).",
        TaskFailed = "task_failed" : "The last allowed attempt failed.",
        TaskCancelled = "task_cancelled" : "The task was cancelled.",
        TaskSkipped = "task_skipped" : "A task it needs failed or was cancelled.",
        TaskRefused = "task_refused" : "The task's next attempt could not start: git refused its worktree. The task waits (`ready`, or `retry_wait` until it is tried again) with the reason.",
        CouncilCompleted = "council_completed" : "Every seat of a council, in every round, has ended: `orch council show` has its final report.",
    }
}

impl OrchEventType {
    /// The event a task's move into `status` writes.
    pub fn entering(status: TaskStatus) -> OrchEventType {
        match status {
            TaskStatus::Pending => OrchEventType::TaskPending,
            TaskStatus::Ready => OrchEventType::TaskReady,
            TaskStatus::Dispatched => OrchEventType::TaskDispatched,
            TaskStatus::Running => OrchEventType::TaskRunning,
            TaskStatus::Blocked => OrchEventType::TaskBlocked,
            TaskStatus::Review => OrchEventType::TaskReview,
            TaskStatus::RetryWait => OrchEventType::TaskRetryWait,
            TaskStatus::Done => OrchEventType::TaskDone,
            TaskStatus::Failed => OrchEventType::TaskFailed,
            TaskStatus::Cancelled => OrchEventType::TaskCancelled,
            TaskStatus::Skipped => OrchEventType::TaskSkipped,
        }
    }

    /// The events that need the leader: `orch wait` wakes on these.
    pub const ACTIONABLE: &'static [OrchEventType] = &[
        OrchEventType::TaskReady,
        OrchEventType::TaskBlocked,
        OrchEventType::TaskReview,
        OrchEventType::TaskRetryWait,
        OrchEventType::TaskFailed,
        OrchEventType::TaskSkipped,
        OrchEventType::TaskRefused,
        OrchEventType::CouncilCompleted,
        OrchEventType::RunSucceeded,
        OrchEventType::RunFailed,
        OrchEventType::RunCancelled,
    ];
}

/// How many tasks of a run are in each status. Kept on the run and moved
/// with every task status change, so an overview never counts rows.
// One field per [`TaskStatus`], named by its spelling; the status documents it.
#[allow(missing_docs)]
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskCounts {
    pub pending: u32,
    pub ready: u32,
    pub dispatched: u32,
    pub running: u32,
    pub blocked: u32,
    pub review: u32,
    pub retry_wait: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub skipped: u32,
}

impl TaskCounts {
    /// The count of `status`, mutably.
    pub fn of_mut(&mut self, status: TaskStatus) -> &mut u32 {
        match status {
            TaskStatus::Pending => &mut self.pending,
            TaskStatus::Ready => &mut self.ready,
            TaskStatus::Dispatched => &mut self.dispatched,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Blocked => &mut self.blocked,
            TaskStatus::Review => &mut self.review,
            TaskStatus::RetryWait => &mut self.retry_wait,
            TaskStatus::Done => &mut self.done,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Cancelled => &mut self.cancelled,
            TaskStatus::Skipped => &mut self.skipped,
        }
    }

    /// The count of `status`.
    pub fn of(&self, status: TaskStatus) -> u32 {
        match status {
            TaskStatus::Pending => self.pending,
            TaskStatus::Ready => self.ready,
            TaskStatus::Dispatched => self.dispatched,
            TaskStatus::Running => self.running,
            TaskStatus::Blocked => self.blocked,
            TaskStatus::Review => self.review,
            TaskStatus::RetryWait => self.retry_wait,
            TaskStatus::Done => self.done,
            TaskStatus::Failed => self.failed,
            TaskStatus::Cancelled => self.cancelled,
            TaskStatus::Skipped => self.skipped,
        }
    }

    /// Every task of the run.
    pub fn total(&self) -> u32 {
        TaskStatus::ALL.iter().map(|&s| self.of(s)).sum()
    }

    /// Tasks that have not ended.
    pub fn open(&self) -> u32 {
        TaskStatus::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|&s| self.of(s))
            .sum()
    }
}

/// One piece of work the leader is seeing through: a goal and a task graph.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// `run_...`, or the id the leader chose.
    pub run_id: String,
    /// What the run is for, in one line.
    pub goal: String,
    /// The leader that created it.
    pub created_by: String,
    /// Where it is.
    pub status: RunStatus,
    /// Tasks by status.
    pub counts: TaskCounts,
    /// Tasks ever added: the next task's `seq` is one more.
    pub tasks_added: u64,
    /// The newest event about the run or its tasks.
    pub last_event_id: EventId,
    /// Every inbox event up to this one has been reconciled into the
    /// run's tasks: the next reconcile only looks at its threads' events
    /// after it.
    pub reconciled_through: EventId,
    /// When it was created.
    pub created_at: Timestamp,
    /// When anything about it last changed.
    pub updated_at: Timestamp,
    /// When it last finished (succeeded, failed or cancelled).
    pub finished_at: Option<Timestamp>,
    /// The git repository its attempts work in, each in a worktree of its
    /// own; `None`: attempts are plain threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<RepoSpec>,
    /// Attempts reserved by a dispatch whose git is making their worktrees
    /// (see `Reservation`); usually none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,
}

/// An attempt a command has reserved before git makes its worktree with no
/// lock held: the record that lets whoever comes next finish or undo what
/// a command that stopped half-way left. The command's own write takes it
/// (its attempt starts), or it undoes it (git discards the worktree, then
/// the reservation goes); one whose command has gone (its process ended,
/// or it is older than a bound) is undone by the next command that makes
/// worktrees on the run, or by `orch worktree gc`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The task.
    pub task_id: String,
    /// The attempt it will be.
    pub attempt: u32,
    /// The worktree git is making for it.
    pub worktree: Worktree,
    /// When it was reserved.
    pub reserved_at: Timestamp,
    /// The process that reserved it, as its host names processes (see
    /// `Workspace::holder`), when the host can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_by: Option<String>,
}

/// Where a run's code-writing attempts work: a git repository, the folder
/// their worktrees are made in, the revision they start from, and whether
/// a dispatch may leave the leader's uncommitted changes out.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoSpec {
    /// The repository (the leader's checkout), an absolute path.
    pub repo: String,
    /// The folder orch makes the worktrees in, an absolute path (default
    /// `REPO/.agents/worktrees`, inbox's own folder, which git is told to
    /// ignore).
    pub worktrees: String,
    /// The revision an attempt starts from unless its task names one,
    /// resolved to a commit at each dispatch (default `HEAD`).
    pub base: String,
    /// Refuse to dispatch while the leader's checkout has uncommitted
    /// changes the worktree would leave out (else dispatch, and say so).
    pub strict: bool,
    /// The leader named the worktrees folder (`--worktrees`): its path is
    /// used as given, symbolic links and all. The default one is reached
    /// from the repository through folders only, never a link a
    /// repository may hold (see [`super::workspace::place`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub worktrees_named: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// When and how often orch tries a task again after an attempt fails.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts allowed in all, the first included (1 to 100).
    pub max_attempts: u32,
    /// The wait before the second attempt, in seconds.
    pub backoff_seconds: u64,
    /// Each later wait is the one before times this (1 to 10).
    pub backoff_factor: f64,
    /// No wait is longer than this, in seconds.
    pub max_backoff_seconds: u64,
}

impl Eq for RetryPolicy {}

/// One node of a run's task graph.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// The run it belongs to.
    pub run_id: String,
    /// Unique within the run; chosen by the leader.
    pub task_id: String,
    /// One line that says what the work is; the attempt thread's subject.
    pub title: String,
    /// The long form, sent to the worker.
    pub body: String,
    /// What the result must satisfy, one criterion each.
    pub acceptance: Vec<String>,
    /// Who does it: the agent its attempts' threads are assigned to.
    pub assignee: String,
    /// Queue order in `orch ready` and of its threads in the worker's inbox.
    pub priority: Priority,
    /// Tasks of the same run that must be done before it starts.
    pub needs: Vec<String>,
    /// Automatic retries.
    pub retry: RetryPolicy,
    /// Whether a finished attempt waits for `orch accept`.
    pub review: bool,
    /// Where it is.
    pub status: TaskStatus,
    /// Why it is where it is, when that needs saying: the question
    /// (`blocked`), the result to review (`review`), the failure
    /// (`retry_wait`, `failed`), the cause (`skipped`, `cancelled`).
    pub reason: Option<String>,
    /// For a `skipped` task: the failed or cancelled task that caused it,
    /// however many tasks lie between (one, chosen the same way every
    /// time, when several did). `orch retry` of that task (if it failed)
    /// brings this one back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_by: Option<String>,
    /// Attempts started.
    pub attempts: u32,
    /// The current (or last) attempt's inbox thread.
    pub thread_id: Option<String>,
    /// When the next attempt is dispatched (`retry_wait` only).
    pub retry_at: Option<Timestamp>,
    /// Its place in the order tasks were added to the run, from 1.
    pub seq: u64,
    /// The newest event about it.
    pub last_event_id: EventId,
    /// When it was added.
    pub created_at: Timestamp,
    /// When anything about it last changed.
    pub updated_at: Timestamp,
    /// The revision its attempts start from in the run's repository,
    /// instead of the run's: a revision, or `task:ID` for the branch of a
    /// task it needs, as that task was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The council seat it is, if `orch council` made it (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub council: Option<CouncilSeat>,
}

/// One try at a task: the inbox thread it was dispatched as.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The run.
    pub run_id: String,
    /// The task.
    pub task_id: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The thread the attempt was dispatched as.
    pub thread_id: String,
    /// Who it was assigned to.
    pub assignee: String,
    /// Whether and how it ended.
    pub status: AttemptStatus,
    /// Why it ended, when it did not succeed.
    pub reason: Option<String>,
    /// When it was dispatched.
    pub started_at: Timestamp,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
    /// The git worktree it works in, when its run names a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Worktree>,
}

/// An attempt's git worktree: a new branch from a commit, checked out in a
/// folder of its own, made when the attempt was dispatched.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The repository, an absolute path.
    pub repo: String,
    /// The worktree's folder, an absolute path.
    pub path: String,
    /// Its branch (`orch/RUN/TASK/N`), never used by another attempt.
    pub branch: String,
    /// The revision asked for.
    pub base: String,
    /// The commit it resolved to when the attempt was dispatched.
    pub base_commit: String,
    /// Uncommitted paths of the leader's checkout the worktree left out
    /// (dispatched outside strict mode), at most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// How many there were in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub left_out_count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One change in a run, in the same id sequence as inbox's events: one
/// cursor orders both.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchEvent {
    /// Position in the shared event stream.
    pub event_id: EventId,
    /// The run it is about.
    pub run_id: String,
    /// The task it is about, if any.
    pub task_id: Option<String>,
    /// What happened.
    pub event_type: OrchEventType,
    /// The agent that caused it (`orch` when a thread's change or the
    /// clock did).
    pub source: String,
    /// The task's status right after it (task events).
    pub task_status: Option<TaskStatus>,
    /// The run's status right after it.
    pub run_status: RunStatus,
    /// The attempt it concerns, if any.
    pub attempt: Option<u32>,
    /// That attempt's thread.
    pub thread_id: Option<String>,
    /// One line about what happened.
    pub summary: String,
    /// Details that depend on the event type.
    pub payload: JsonObject,
    /// When it happened.
    pub created_at: Timestamp,
}
