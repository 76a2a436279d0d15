//! Worktrees at work: making an attempt's git worktree when it is
//! dispatched in a run with a repository, and the `orch worktree list` and
//! `orch worktree gc` handlers. The naming, the refusals and the rules about
//! what is safe to remove are in [`crate::orch::workspace`]; git itself is
//! the host's, reached through the [`Workspace`] the transaction carries.
//!
//! `orch dispatch` has git make its worktrees before its transaction (see
//! [`Premade`]), so git never runs while it holds the database's write
//! lock; the single attempts other commands start make theirs inside their
//! transaction. A task whose worktree git refuses is not dispatched (with
//! `--all-ready` it waits with the reason and the others go on); a
//! worktree made for a transaction that then rolls back, or that it did
//! not take, is discarded by the engine.
//! When an attempt ends, its worktree is tidied after the transaction
//! commits (see `Engine::run_in`). A preview (an orch read, `orch worktree
//! list` among them) makes and tidies none: it shows what is.

use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::JsonObject;
use crate::orch::model::{AttemptStatus, OrchEventType, RepoSpec, Run, Task, TaskStatus, Worktree};
use crate::orch::query::{RunQuery, TaskOrder, TaskQuery};
use crate::orch::rules;
use crate::orch::wire::*;
use crate::orch::workspace::{
    self, LEFT_OUT_MAX, Tidied, Workspace, WorkspaceError, WorkspaceErrorKind, WorktreeLook,
    WorktreeState,
};
use crate::store::Store;

use super::input::*;
use super::orch_steps::RunChange;
use super::tx::Tx;

/// Most runs `orch worktree list` and `gc` look through without `--run`.
const RUNS_MAX: usize = 100;

/// Most tasks of one run they look through.
const TASKS_MAX: usize = 10_000;

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The worktree attempt `number` of `task` works in, when its run names
    /// a repository; `None` otherwise, and in a preview (an orch read makes
    /// nothing). One made before the transaction began (see
    /// [`Premade`]) is taken as it is; else it is made now, with git.
    pub(super) fn attempt_worktree(
        &mut self,
        run: &Run,
        task: &Task,
        number: u32,
    ) -> Result<Option<Worktree>, EngineError> {
        let Some(spec) = &run.repo else {
            return Ok(None);
        };
        if self.preview {
            return Ok(None);
        }
        let premade = self.premade.iter().position(|p| {
            p.run_id == task.run_id && p.task_id == task.task_id && p.attempt == number
        });
        let worktree = match premade {
            Some(at) => self.premade.swap_remove(at).made?,
            None => {
                let plan = self.worktree_plan(spec, task, number)?;
                make_worktree(self.workspace()?, &plan)?
            }
        };
        self.created.push(worktree.clone());
        Ok(Some(worktree))
    }

    /// What making attempt `number` of `task` takes, from the store alone.
    fn worktree_plan(
        &mut self,
        spec: &RepoSpec,
        task: &Task,
        number: u32,
    ) -> Result<WorktreePlan, EngineError> {
        Ok(WorktreePlan {
            spec: spec.clone(),
            run_id: task.run_id.clone(),
            task_id: task.task_id.clone(),
            attempt: number,
            base: self.base_of(spec, task)?,
        })
    }

    /// The worktrees an orch write on run `run_id` is about to need: the
    /// retries that have come due (every orch write starts them) and, for
    /// `orch dispatch` (`dispatch`), the tasks it would dispatch (ready ones
    /// in queue order, or the one named), each with what making its
    /// worktree takes. Run in a preview, before the write's own
    /// transaction, so that git can make them while no transaction is
    /// open. Council seats and runs without a repository need none.
    pub(super) fn attempt_plans(
        &mut self,
        run_id: Option<&str>,
        dispatch: Option<&DispatchInput>,
    ) -> Result<Vec<WorktreePlan>, EngineError> {
        let run = self.find_run(run_id)?;
        let Some(spec) = run.repo.clone() else {
            return Ok(Vec::new());
        };
        let mut change = RunChange {
            run,
            events: Vec::new(),
            affected: Vec::new(),
        };
        // What the threads did, without starting the retries that came due:
        // those are planned below.
        self.reconcile(&mut change, false)?;
        let run_id = change.run.run_id.clone();
        let mut tasks = match dispatch {
            None => Vec::new(),
            Some(DispatchInput {
                task_id: Some(id), ..
            }) => self.store.task(&run_id, id)?.into_iter().collect(),
            // As many as the dispatch may look at: `limit` dispatched, and
            // the refusals it lets pass on the way.
            Some(input) => self.tasks_in(
                &change.run,
                &[TaskStatus::Ready],
                TaskOrder::Queue,
                input.limit.saturating_add(workspace::REFUSED_MAX),
            )?,
        };
        tasks.retain(|t| t.status == TaskStatus::Ready);
        let due = self.tasks_in(
            &change.run,
            &[TaskStatus::RetryWait],
            TaskOrder::Added,
            usize::MAX,
        )?;
        tasks.extend(
            due.into_iter()
                .filter(|t| t.retry_at.is_none_or(|at| at <= self.now)),
        );
        let mut plans = Vec::new();
        for task in tasks.iter().filter(|t| t.council.is_none()) {
            // A base that cannot be resolved from the store is refused by the
            // dispatch itself, in its transaction.
            if let Ok(plan) = self.worktree_plan(&spec, task, task.attempts + 1) {
                plans.push(plan);
            }
        }
        Ok(plans)
    }

    /// Records that `task`'s next attempt could not start because git
    /// refused (`error`, see [`worktree_refusal`]): the task keeps its
    /// status with the reason, and a `task_refused` event wakes the leader.
    /// A task waiting out a backoff is tried again after the next one (at
    /// least [`REFUSED_RETRY_MILLIS`]), so a refusal that lasts costs one
    /// git call per wait, not one per orch command.
    pub(super) fn refuse_start(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        source: &str,
        error: &EngineError,
    ) -> Result<Refused, EngineError> {
        let number = task.attempts + 1;
        let mut reason = format!("attempt {number} could not start: {error}");
        if task.status == TaskStatus::RetryWait {
            let wait = rules::backoff_millis(&task.retry, task.attempts).max(REFUSED_RETRY_MILLIS);
            let at = self.now.plus_millis(wait);
            task.retry_at = Some(at);
            reason.push_str(&format!("; tried again in {} s", wait / 1000));
        }
        task.reason = Some(reason.clone());
        task.updated_at = self.now;
        let summary = format!("{}: {reason}", task.task_id);
        task.last_event_id = self.emit(
            change,
            Some(task),
            OrchEventType::TaskRefused,
            source,
            summary,
            JsonObject::new(),
        )?;
        self.store.update_task(task)?;
        Ok(Refused {
            task_id: task.task_id.clone(),
            code: error.code(),
            message: error.to_string(),
        })
    }

    /// The revision a task's attempts start from: its own, else the run's;
    /// `task:ID` is the branch of that task's accepted attempt.
    fn base_of(&mut self, spec: &RepoSpec, task: &Task) -> Result<String, EngineError> {
        let base = task.base.clone().unwrap_or_else(|| spec.base.clone());
        let Some(dependency) = base.strip_prefix("task:") else {
            return Ok(base);
        };
        let invalid = |why: String| EngineError::InvalidBase {
            base: base.clone(),
            repo: spec.repo.clone(),
            why,
        };
        let need = self
            .store
            .task(&task.run_id, dependency)?
            .ok_or_else(|| invalid(format!("the run has no task {dependency}")))?;
        if need.status != TaskStatus::Done {
            return Err(invalid(format!(
                "task {dependency} is {}, not accepted yet",
                need.status
            )));
        }
        let accepted = self
            .store
            .attempts(&task.run_id, dependency)?
            .into_iter()
            .rev()
            .find(|a| a.status == AttemptStatus::Succeeded);
        match accepted.and_then(|a| a.worktree) {
            Some(worktree) => Ok(worktree.branch),
            None => Err(invalid(format!(
                "task {dependency} was done without a worktree, so it has no branch"
            ))),
        }
    }

    /// The host's git, or `git_unavailable` when this host runs none.
    fn workspace(&mut self) -> Result<&mut (dyn Workspace + 'static), EngineError> {
        self.workspace
            .as_deref_mut()
            .ok_or_else(|| EngineError::GitUnavailable {
                message: "this host runs no git (the npm package and the engine component do not); dispatch runs with a repository from the orch command line".into(),
            })
    }

    pub(super) fn orch_worktree_list(
        &mut self,
        input: WorktreeInput,
    ) -> Result<WorktreesOutput, EngineError> {
        let mut worktrees = Vec::new();
        for view in self.worktrees_of(&input)? {
            let look = self.look_at(&view.worktree);
            worktrees.push(view.with(&look));
        }
        Ok(WorktreesOutput { worktrees })
    }

    pub(super) fn orch_worktree_gc(
        &mut self,
        input: WorktreeInput,
    ) -> Result<WorktreeGcOutput, EngineError> {
        let mut out = WorktreeGcOutput {
            dry_run: input.dry_run,
            removed: Vec::new(),
            saved: Vec::new(),
            kept: Vec::new(),
        };
        let views = self.worktrees_of(&input)?;
        // Everything the reconcile just ended is tidied below, once.
        self.ended.clear();
        self.discard = input.dry_run;
        for view in views {
            let look = self.look_at(&view.worktree);
            let view = view.with(&look);
            let done = match (view.state, input.dry_run) {
                (state, true) if state.removable() => Some(Tidied::Removed),
                (WorktreeState::Uncommitted, true) => Some(Tidied::Saved),
                (_, true) => Some(Tidied::Left),
                (_, false) => self.workspace().ok().map(|workspace| {
                    workspace::tidy(workspace, &view.worktree, view.attempt_status)
                        .unwrap_or(Tidied::Left)
                }),
            };
            match done {
                Some(Tidied::Removed) => out.removed.push(view),
                Some(Tidied::Saved) => out.saved.push(view),
                _ => out.kept.push(view),
            }
        }
        Ok(out)
    }

    /// What the host sees of a worktree; `None` when it runs no git or
    /// cannot look.
    fn look_at(&mut self, worktree: &Worktree) -> Option<WorktreeLook> {
        let wip = workspace::wip_ref(worktree);
        self.workspace.as_deref_mut()?.inspect(worktree, &wip).ok()
    }

    /// Every attempt with a worktree in the runs asked about, oldest first,
    /// each run reconciled first (attempts whose threads ended have ended).
    fn worktrees_of(&mut self, input: &WorktreeInput) -> Result<Vec<WorktreeView>, EngineError> {
        let runs = match &input.run_id {
            Some(run_id) => vec![self.find_run(Some(run_id))?],
            None => self.store.runs(&RunQuery {
                created_by: None,
                statuses: Vec::new(),
                limit: RUNS_MAX,
            })?,
        };
        let mut found = Vec::new();
        for run in runs.into_iter().filter(|r| r.repo.is_some()).rev() {
            let run = self.reconciled(run)?;
            let query = TaskQuery {
                run_id: run.run_id.clone(),
                statuses: Vec::new(),
                needing: None,
                order: TaskOrder::Added,
                limit: TASKS_MAX,
            };
            for task in self.store.tasks(&query)? {
                let attempts = self.store.attempts(&run.run_id, &task.task_id)?;
                found.extend(attempts.into_iter().filter_map(WorktreeView::of));
            }
        }
        Ok(found)
    }
}

impl WorktreeView {
    /// The view of an attempt's worktree, if it has one; its state is not
    /// known until [`WorktreeView::with`] a look.
    fn of(attempt: crate::orch::model::Attempt) -> Option<WorktreeView> {
        let worktree = attempt.worktree?;
        Some(WorktreeView {
            wip_ref: workspace::wip_ref(&worktree),
            run_id: attempt.run_id,
            task_id: attempt.task_id,
            attempt: attempt.attempt,
            attempt_status: attempt.status,
            state: WorktreeState::Unknown,
            uncommitted: 0,
            commits: 0,
            saved: None,
            worktree,
        })
    }

    /// With what a look found (`None`: this host cannot look).
    fn with(mut self, look: &Option<WorktreeLook>) -> WorktreeView {
        if let Some(look) = look {
            self.state = WorktreeState::of(self.attempt_status, look);
            self.uncommitted = u32::try_from(look.uncommitted.len()).unwrap_or(u32::MAX);
            self.commits = look.commits;
            self.saved = look.saved.clone();
        }
        self
    }
}

/// What making one attempt's worktree takes, decided from the store alone
/// (no git): the run's repository settings, the attempt, and the base
/// revision it starts from.
pub(super) struct WorktreePlan {
    spec: RepoSpec,
    run_id: String,
    task_id: String,
    attempt: u32,
    base: String,
}

/// A worktree made (or refused by git) before the transaction that
/// dispatches its attempt began, so that git never runs while that
/// transaction holds the database's write lock. The transaction takes it
/// for its attempt; one it does not take (the task changed meanwhile) is
/// discarded once it ends.
pub(crate) struct Premade {
    run_id: String,
    task_id: String,
    attempt: u32,
    /// The worktree, or git's refusal, which the dispatch reports as if it
    /// had run git itself.
    made: Result<Worktree, EngineError>,
}

impl Premade {
    /// The worktree, if git made it (for discarding an unused one).
    pub(crate) fn into_worktree(self) -> Option<Worktree> {
        self.made.ok()
    }
}

/// Makes, with the host's git and outside any transaction, the worktrees
/// `plans` ask for, stopping after [`workspace::REFUSED_MAX`] refusals
/// (where the dispatch would stop too).
pub(crate) fn make_worktrees(
    workspace: &mut dyn Workspace,
    plans: Vec<WorktreePlan>,
) -> Vec<Premade> {
    let mut premade = Vec::with_capacity(plans.len());
    let mut refused = 0;
    for plan in plans {
        if refused >= workspace::REFUSED_MAX {
            break;
        }
        let result = make_worktree(workspace, &plan);
        refused += usize::from(result.is_err());
        premade.push(Premade {
            run_id: plan.run_id,
            task_id: plan.task_id,
            attempt: plan.attempt,
            made: result,
        });
    }
    premade
}

/// Makes the worktree `plan` asks for with git: resolves its base to a
/// commit, refuses a dirty checkout in strict mode, then creates its branch
/// and folder at their place (see [`workspace::place`]).
fn make_worktree(
    workspace: &mut dyn Workspace,
    plan: &WorktreePlan,
) -> Result<Worktree, EngineError> {
    let spec = &plan.spec;
    let look = workspace
        .look(&spec.repo, &plan.base)
        .map_err(|e| repo_error(e, &spec.repo))?;
    let Some(base_commit) = look.commit else {
        return Err(EngineError::InvalidBase {
            base: plan.base.clone(),
            repo: spec.repo.clone(),
            why: "names no commit (unknown, or the repository has no commit yet); give a branch, tag or commit id".into(),
        });
    };
    if spec.strict && !look.uncommitted.is_empty() {
        return Err(EngineError::CheckoutDirty {
            repo: spec.repo.clone(),
            shown: look.uncommitted.iter().take(5).cloned().collect(),
            count: look.uncommitted.len(),
        });
    }
    let worktree = Worktree {
        repo: spec.repo.clone(),
        path: workspace::worktree_path(&spec.worktrees, &plan.run_id, &plan.task_id, plan.attempt),
        branch: workspace::branch_name(&plan.run_id, &plan.task_id, plan.attempt),
        base: plan.base.clone(),
        base_commit,
        left_out_count: u32::try_from(look.uncommitted.len()).unwrap_or(u32::MAX),
        left_out: look.uncommitted.into_iter().take(LEFT_OUT_MAX).collect(),
    };
    let place = workspace::place(spec, &worktree);
    workspace
        .create(&worktree, &place)
        .map_err(|e| create_error(e, &worktree))?;
    Ok(worktree)
}

/// How long a task waiting out a backoff waits at least before orch tries
/// again to start an attempt git refused: even with no backoff, a refusal
/// that lasts (a branch someone made) must not run git on every look.
pub(super) const REFUSED_RETRY_MILLIS: i64 = 60_000;

/// Whether `error`, from starting an attempt, is git refusing that one
/// task's worktree (its branch or folder exists, a link on the way, a base
/// that names no commit): the task waits with the reason and the other
/// tasks go on. With `whole_repo`, the repository's own troubles count too
/// (it is gone, no git, a dirty checkout in strict mode): a retry that
/// comes due as a side effect of another command must never make that
/// command, and so every orch command on the run, fail.
pub(super) fn worktree_refusal(error: &EngineError, whole_repo: bool) -> bool {
    match error {
        EngineError::WorktreeFailed { .. } | EngineError::InvalidBase { .. } => true,
        EngineError::RepositoryNotFound { .. }
        | EngineError::GitUnavailable { .. }
        | EngineError::CheckoutDirty { .. } => whole_repo,
        _ => false,
    }
}

/// A failure to look at the repository before a dispatch.
fn repo_error(error: WorkspaceError, repo: &str) -> EngineError {
    match error.kind {
        WorkspaceErrorKind::Unavailable => EngineError::GitUnavailable {
            message: error.message,
        },
        WorkspaceErrorKind::NotARepository | WorkspaceErrorKind::Failed => {
            EngineError::RepositoryNotFound {
                repo: repo.to_owned(),
                message: error.message,
            }
        }
    }
}

/// A failure to make the worktree.
fn create_error(error: WorkspaceError, worktree: &Worktree) -> EngineError {
    match error.kind {
        WorkspaceErrorKind::Unavailable => EngineError::GitUnavailable {
            message: error.message,
        },
        WorkspaceErrorKind::NotARepository => EngineError::RepositoryNotFound {
            repo: worktree.repo.clone(),
            message: error.message,
        },
        WorkspaceErrorKind::Failed => EngineError::WorktreeFailed {
            path: worktree.path.clone(),
            message: error.message,
        },
    }
}
