//! Worktrees at work: making an attempt's git worktree when it is
//! dispatched in a run with a repository, and the `orch worktree list` and
//! `orch worktree gc` handlers. The naming, the refusals and the rules about
//! what is safe to remove are in [`crate::orch::workspace`]; git itself is
//! the host's, reached through the [`Workspace`] the transaction carries.
//!
//! `orch dispatch`, `orch wait`, `orch retry`, `orch reject` and `orch
//! reassign` have git make their worktrees before their transaction (see
//! [`Premades`]), so git never runs while they hold the database's write
//! lock; only a retry that comes due during another orch write makes its
//! worktree inside that write. A task whose worktree git refuses is not dispatched (with
//! `--all-ready` it waits with the reason and the others go on); a
//! worktree made for a transaction that then rolls back, or that it did
//! not take, is discarded by the engine. A task refused before any git
//! (its assignee, its id: `Tx::check_start`) never makes git work, and a
//! refusal repeated with the same reason records nothing new, so tasks
//! that stay refused cost each dispatch little.
//! When an attempt ends, its worktree is tidied after the transaction
//! commits (see `Engine::run_in`). A preview (an orch read, `orch worktree
//! list` among them) makes and tidies none: it shows what is.

use std::collections::BTreeMap;

use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::JsonObject;
use crate::orch::model::{AttemptStatus, OrchEventType, RepoSpec, Run, Task, TaskStatus, Worktree};
use crate::orch::query::{RunQuery, TaskOrder, TaskQuery};
use crate::orch::rules::{self, TaskAction};
use crate::orch::wire::*;
use crate::orch::workspace::{
    self, LEFT_OUT_MAX, Place, RepoLook, Tidied, Workspace, WorkspaceError, WorkspaceErrorKind,
    WorktreeLook, WorktreeState,
};
use crate::store::Store;

use super::input::*;
use super::orch_steps::{RunChange, StartChecks, start_refusal};
use super::tx::Tx;

/// Most runs `orch worktree list` and `gc` look through without `--run`.
const RUNS_MAX: usize = 100;

/// Most tasks of one run they look through: every task a run may hold.
const TASKS_MAX: usize = rules::MAX_RUN_TASKS;

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The worktree attempt `number` of `task` works in, when its run names
    /// a repository; `None` otherwise, and in a preview (an orch read makes
    /// nothing). One made before the transaction began (see
    /// [`Premades`]) is taken as it is; else it is made now, with git.
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
            // What git is to make first, if this is the preview of a write
            // (see `Engine::premake_for`); an orch read ignores it.
            if let Ok(plan) = self.worktree_plan(spec, task, number) {
                self.planned.push(plan);
            }
            return Ok(None);
        }
        let (worktree, place) = match self.premade.take(&task.run_id, &task.task_id, number) {
            Some(made) => made?,
            None => {
                let plan = self.worktree_plan(spec, task, number)?;
                make_worktree(self.workspace()?, &plan, &mut Looks::new())?
            }
        };
        self.created.push((worktree.clone(), place));
        Ok(Some(worktree))
    }

    /// The [`Place`] of a worktree of run `run_id`: the folders orch checks
    /// on the way to it every time it looks, saves or removes there.
    pub(super) fn place_of(
        &mut self,
        run_id: &str,
        worktree: &Worktree,
    ) -> Result<Place, EngineError> {
        match self.store.run(run_id)?.and_then(|run| run.repo) {
            Some(spec) => Ok(workspace::place(&spec, worktree)),
            None => Err(EngineError::internal(format!(
                "run {run_id} has a worktree ({}) but no repository",
                worktree.path
            ))),
        }
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
    /// open. Council seats and runs without a repository need none; a task
    /// the start will refuse without git ([`Tx::check_start`], a base the
    /// store cannot resolve) gets none either, so git never works for it.
    pub(super) fn attempt_plans(
        &mut self,
        run_id: Option<&str>,
        dispatch: Option<&DispatchInput>,
    ) -> Result<AttemptPlans, EngineError> {
        let mut plans = AttemptPlans::default();
        let run = self.find_run(run_id)?;
        let Some(spec) = run.repo.clone() else {
            return Ok(plans);
        };
        let mut change = RunChange {
            run,
            events: Vec::new(),
            affected: Vec::new(),
        };
        // What the threads did, without starting the retries that came due:
        // those are planned below.
        self.reconcile(&mut change, false)?;
        let run = change.run;
        let mut checks = StartChecks::default();
        let due = self.tasks_in(&run, &[TaskStatus::RetryWait], TaskOrder::Added, usize::MAX)?;
        let now = self.now;
        for task in due.iter().filter(|t| t.retry_at.is_none_or(|at| at <= now)) {
            let start = self.plan_start(&run, &spec, task, TaskAction::Redispatch, &mut checks)?;
            if let Some(Start::Make(plan)) = start {
                plans.retries.push(plan);
            }
        }
        let ready = match dispatch {
            None => Vec::new(),
            Some(DispatchInput {
                task_id: Some(id), ..
            }) => self.store.task(&run.run_id, id)?.into_iter().collect(),
            // The whole queue, as the dispatch goes through it.
            Some(_) => self.tasks_in(&run, &[TaskStatus::Ready], TaskOrder::Queue, usize::MAX)?,
        };
        plans.wanted = dispatch.map_or(0, |d| d.limit);
        for task in ready.iter().filter(|t| t.status == TaskStatus::Ready) {
            let start = self.plan_start(&run, &spec, task, TaskAction::Dispatch, &mut checks)?;
            plans.ready.extend(start);
        }
        Ok(plans)
    }

    /// How `task`'s next attempt would start: with a worktree to make, or
    /// with none (a council seat); `None` when the start will be refused
    /// without git.
    fn plan_start(
        &mut self,
        run: &Run,
        spec: &RepoSpec,
        task: &Task,
        action: TaskAction,
        checks: &mut StartChecks,
    ) -> Result<Option<Start>, EngineError> {
        match self.check_start(run, task, action, checks) {
            Ok(()) => {}
            Err(error) if start_refusal(&error, false) => return Ok(None),
            Err(error) => return Err(error),
        }
        if task.council.is_some() {
            return Ok(Some(Start::NoGit));
        }
        // A base that cannot be resolved from the store is refused by the
        // start itself, without git.
        Ok(self
            .worktree_plan(spec, task, task.attempts + 1)
            .ok()
            .map(Start::Make))
    }

    /// Records that `task`'s next attempt could not start for a reason that
    /// concerns it alone (`error`, see [`start_refusal`]): the task keeps
    /// its status with the reason, and a `task_refused` event wakes the
    /// leader. A ready task refused again for the same reason records
    /// nothing new (the leader knows; a dispatch that finds it so again
    /// writes nothing and wakes nobody). A task waiting out a backoff is
    /// tried again after the next one (at least [`REFUSED_RETRY_MILLIS`]),
    /// so a refusal that lasts costs one git call per wait, not one per
    /// orch command.
    pub(super) fn refuse_start(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        source: &str,
        error: &EngineError,
    ) -> Result<Refused, EngineError> {
        let number = task.attempts + 1;
        let mut reason = format!("attempt {number} could not start: {error}");
        let refused = Refused {
            task_id: task.task_id.clone(),
            code: error.code(),
            message: error.to_string(),
        };
        if task.status != TaskStatus::RetryWait && task.reason.as_deref() == Some(reason.as_str()) {
            return Ok(refused);
        }
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
        Ok(refused)
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
        for (view, place) in self.worktrees_of(&input)? {
            let look = self.look_at(&view.worktree, &place);
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
        for (view, place) in views {
            let look = self.look_at(&view.worktree, &place);
            let view = view.with(&look);
            let done = match (view.state, input.dry_run) {
                (state, true) if state.removable() => Some(Tidied::Removed),
                (WorktreeState::Uncommitted, true) => Some(Tidied::Saved),
                (_, true) => Some(Tidied::Left),
                (_, false) => self.workspace().ok().map(|workspace| {
                    workspace::tidy(workspace, &view.worktree, &place, view.attempt_status)
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
    fn look_at(&mut self, worktree: &Worktree, place: &Place) -> Option<WorktreeLook> {
        let wip = workspace::wip_ref(worktree);
        self.workspace
            .as_deref_mut()?
            .inspect(worktree, place, &wip)
            .ok()
    }

    /// Every attempt with a worktree in the runs asked about, oldest first,
    /// each run reconciled first (attempts whose threads ended have ended),
    /// with its [`Place`].
    fn worktrees_of(
        &mut self,
        input: &WorktreeInput,
    ) -> Result<Vec<(WorktreeView, Place)>, EngineError> {
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
            let Some(spec) = run.repo.clone() else {
                continue;
            };
            let query = TaskQuery {
                run_id: run.run_id.clone(),
                statuses: Vec::new(),
                needing: None,
                order: TaskOrder::Added,
                limit: TASKS_MAX,
            };
            for task in self.store.tasks(&query)? {
                let attempts = self.store.attempts(&run.run_id, &task.task_id)?;
                found.extend(
                    attempts
                        .into_iter()
                        .filter_map(WorktreeView::of)
                        .map(|view| {
                            let place = workspace::place(&spec, &view.worktree);
                            (view, place)
                        }),
                );
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

/// How a ready task's attempt would start (see [`Tx::attempt_plans`]).
pub(super) enum Start {
    /// With no worktree: a council seat.
    NoGit,
    /// With the worktree this plan makes.
    Make(WorktreePlan),
}

/// The worktrees an orch write is about to need, in the order it starts
/// their attempts: every retry that came due, then the ready tasks to
/// dispatch, of which the dispatch starts `wanted` at most.
#[derive(Default)]
pub(super) struct AttemptPlans {
    retries: Vec<WorktreePlan>,
    ready: Vec<Start>,
    wanted: usize,
}

impl AttemptPlans {
    /// Plans of attempts that all start (a preview's `planned`).
    pub(super) fn of(plans: Vec<WorktreePlan>) -> AttemptPlans {
        AttemptPlans {
            retries: plans,
            ..AttemptPlans::default()
        }
    }

    /// Whether git has nothing to make.
    pub(crate) fn is_empty(&self) -> bool {
        self.retries.is_empty() && !self.ready.iter().any(|s| matches!(s, Start::Make(_)))
    }
}

/// A worktree made with its place, or git's refusal, which the write
/// reports as if it had run git itself.
type Made = Result<(Worktree, Place), EngineError>;

/// The worktrees made (or refused by git) before the transaction that
/// starts their attempts began, so that git never runs while that
/// transaction holds the database's write lock, by run, task and attempt.
/// The transaction takes each for its attempt; one it does not take (the
/// task changed meanwhile) is discarded once it ends.
#[derive(Default)]
pub(crate) struct Premades(BTreeMap<(String, String, u32), Made>);

impl Premades {
    /// The one made for attempt `attempt` of a task, if any.
    fn take(&mut self, run_id: &str, task_id: &str, attempt: u32) -> Option<Made> {
        self.0
            .remove(&(run_id.to_owned(), task_id.to_owned(), attempt))
    }

    /// The worktrees git made, with their places (for discarding those
    /// nobody took).
    pub(crate) fn into_made(self) -> Vec<(Worktree, Place)> {
        self.0.into_values().filter_map(Result::ok).collect()
    }
}

/// Makes, with the host's git and outside any transaction, the worktrees
/// `plans` ask for: every due retry's, and the ready tasks' in queue order
/// until as many attempts as the dispatch starts at most would start (a
/// council seat starts with none; a task git refuses counts not), so git
/// makes no worktree the dispatch will not take. The repository is looked
/// at once per base revision.
pub(crate) fn make_worktrees(workspace: &mut dyn Workspace, plans: AttemptPlans) -> Premades {
    let mut looks = Looks::new();
    let mut premade = Premades::default();
    let mut made = |plan: WorktreePlan, premade: &mut Premades| {
        let result = make_worktree(workspace, &plan, &mut looks);
        let ok = result.is_ok();
        let key = (plan.run_id, plan.task_id, plan.attempt);
        premade.0.insert(key, result);
        ok
    };
    for plan in plans.retries {
        made(plan, &mut premade);
    }
    let mut starting = 0;
    for start in plans.ready {
        if starting >= plans.wanted {
            break;
        }
        let starts = match start {
            Start::NoGit => true,
            Start::Make(plan) => made(plan, &mut premade),
        };
        starting += usize::from(starts);
    }
    premade
}

/// What git said of each repository and base revision, asked once per
/// batch of worktrees: the same at the same moment for every task.
struct Looks(BTreeMap<(String, String), Result<RepoLook, EngineError>>);

impl Looks {
    fn new() -> Looks {
        Looks(BTreeMap::new())
    }

    fn of(
        &mut self,
        workspace: &mut dyn Workspace,
        repo: &str,
        base: &str,
    ) -> Result<RepoLook, EngineError> {
        self.0
            .entry((repo.to_owned(), base.to_owned()))
            .or_insert_with(|| workspace.look(repo, base).map_err(|e| repo_error(e, repo)))
            .clone()
    }
}

/// Makes the worktree `plan` asks for with git: resolves its base to a
/// commit, refuses a dirty checkout in strict mode, then creates its branch
/// and folder at their place (see [`workspace::place`]), which it returns
/// with it.
fn make_worktree(workspace: &mut dyn Workspace, plan: &WorktreePlan, looks: &mut Looks) -> Made {
    let spec = &plan.spec;
    let look = looks.of(workspace, &spec.repo, &plan.base)?;
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
    Ok((worktree, place))
}

/// How long a task waiting out a backoff waits at least before orch tries
/// again to start an attempt git refused: even with no backoff, a refusal
/// that lasts (a branch someone made) must not run git on every look.
pub(super) const REFUSED_RETRY_MILLIS: i64 = 60_000;

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
