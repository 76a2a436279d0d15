//! Worktrees at work: the worktree an attempt takes when it starts in a run
//! with a repository, the reservations that let git make it with no lock
//! held (see [`super::starting`] for the steps), and the `orch worktree
//! list` and `orch worktree gc` handlers. The naming, the refusals and the
//! rules about what is safe to remove are in [`crate::orch::workspace`];
//! git itself is the host's, reached through the [`Workspace`] the
//! transaction carries.
//!
//! Nothing here runs git inside a write: a write takes the worktrees made
//! before it ([`Premades`]), a preview plans them, and the listing, the
//! tidying and the undoing run git once the transaction has ended. A task
//! whose worktree git refuses is not dispatched (with `--all-ready` it
//! waits with the reason and the others go on). A task refused before any
//! git (its assignee, its id: `Tx::check_start`) never makes git work, and
//! a refusal repeated with the same reason records nothing new, so tasks
//! that stay refused cost each dispatch little. When an attempt ends, its
//! worktree is tidied after the transaction commits (see `Engine::run_in`).

use std::collections::BTreeMap;

use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::JsonObject;
use crate::orch::model::{
    AttemptStatus, OrchEventType, RepoSpec, Reservation, Run, Task, TaskStatus, Worktree,
};
use crate::orch::query::{RunQuery, TaskOrder, TaskQuery};
use crate::orch::rules;
use crate::orch::wire::*;
use crate::orch::workspace::{
    self, LEFT_OUT_MAX, Place, RepoLook, Tidied, Workspace, WorkspaceError, WorkspaceErrorKind,
    WorktreeLook, WorktreeState,
};
use crate::store::Store;
use crate::time::Clock;
use crate::wire::{OrchWorktreeGcRequest, OrchWorktreeListRequest};

use super::Engine;
use super::input::{self, *};
use super::orch_steps::RunChange;
use super::premade::{
    Key, Premade, REFUSED_RETRY_MILLIS, RESERVATION_MILLIS, Reserved, WorktreePlan,
};
use super::tx::Tx;

/// Most runs `orch worktree list` and `gc` look through without `--run`.
const RUNS_MAX: usize = 100;

/// Most tasks of one run they look through: every task a run may hold.
const TASKS_MAX: usize = rules::MAX_RUN_TASKS;

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The worktree attempt `number` of `task` works in, when its run names
    /// a repository; `None` otherwise. The write takes the one git made
    /// before it (see [`Premades`]), with the attempt's reservation, which
    /// leaves `run`. It never runs git: with none made, it is refused when
    /// another command has reserved the attempt, and otherwise says so
    /// (`unmade`) for the engine to make it and write again. A preview
    /// plans it instead, or says what the write will.
    pub(super) fn attempt_worktree(
        &mut self,
        run: &mut Run,
        task: &Task,
        number: u32,
    ) -> Result<Option<Worktree>, EngineError> {
        let Some(spec) = run.repo.clone() else {
            return Ok(None);
        };
        let key = (task.run_id.clone(), task.task_id.clone(), number);
        let reserved = run.reservations.iter().position(|r| {
            r.task_id == task.task_id
                && r.attempt == number
                && self
                    .premade
                    .reserved(&key)
                    .is_none_or(|w| w.branch == r.worktree.branch)
        });
        // Another command's reservation, unless that command has gone: then
        // it is undone first (see `super::starting`), and this one starts.
        let held = reserved.is_some_and(|at| !self.is_stale(&run.reservations[at]));
        if self.preview {
            return match (self.premade.peek(&key), held) {
                (Some(made), _) => made.map(|()| None),
                (None, true) => Err(being_dispatched(run, task, number)),
                (None, false) => {
                    if let Ok(plan) = self.worktree_plan(&spec, task, number) {
                        self.planned.push(plan);
                    }
                    Ok(None)
                }
            };
        }
        if self.workspace.is_none() {
            self.workspace()?;
        }
        let Some(premade) = self.premade.take(&key) else {
            if held {
                return Err(being_dispatched(run, task, number));
            }
            self.unmade = true;
            return Err(EngineError::internal(format!(
                "attempt {number} of task {} needs its worktree made first",
                task.task_id
            )));
        };
        match (&premade.worktree, reserved) {
            (Some(_), Some(at)) => {
                run.reservations.remove(at);
            }
            // Undone meanwhile by a command that took this one for gone:
            // its worktree may be too; make another.
            (Some(_), None) => {
                self.premade.put(key, premade);
                self.unmade = true;
                return Err(EngineError::internal(format!(
                    "the reservation of attempt {number} of task {} was undone",
                    task.task_id
                )));
            }
            (None, _) => {}
        }
        self.taken.push((key, premade.clone()));
        premade.into_worktree().map(Some)
    }

    /// Notes the reservations of `run` whose command has gone (its process
    /// has ended, or the reservation is older than [`RESERVATION_MILLIS`])
    /// and that this command did not make, for the engine to undo before
    /// the write (see `Engine::undo`). Only previews note them.
    pub(super) fn note_stale(&mut self, run: &Run) {
        if !self.preview || run.reservations.is_empty() {
            return;
        }
        let Some(spec) = &run.repo else {
            return;
        };
        for reservation in &run.reservations {
            let key = (
                run.run_id.clone(),
                reservation.task_id.clone(),
                reservation.attempt,
            );
            let noted = self.stale.iter().any(|(k, _, _)| *k == key);
            if !noted && self.premade.reserved(&key).is_none() && self.is_stale(reservation) {
                let worktree = reservation.worktree.clone();
                let place = workspace::place(spec, &worktree);
                self.stale.push((key, worktree, place));
            }
        }
    }

    /// Whether the command that made `reservation` has gone: its process
    /// has ended (as this host can tell), or it is older than
    /// [`RESERVATION_MILLIS`].
    fn is_stale(&mut self, reservation: &Reservation) -> bool {
        let old = reservation.reserved_at.plus_millis(RESERVATION_MILLIS) <= self.now;
        old || reservation.reserved_by.as_deref().is_some_and(|by| {
            self.workspace
                .as_deref_mut()
                .is_some_and(|w| w.has_ended(by))
        })
    }

    /// Reserves each attempt `worktrees` are for, with its worktree, on its
    /// run, unless its task has started it meanwhile or another command
    /// reserved it first. Returns those reserved, for git to make.
    pub(super) fn reserve(
        &mut self,
        worktrees: Vec<(Key, Worktree, Place)>,
        reserved_by: Option<String>,
    ) -> Result<Vec<(Key, Worktree, Place)>, EngineError> {
        let mut runs: BTreeMap<String, Run> = BTreeMap::new();
        let mut reserved = Vec::new();
        for (key, worktree, place) in worktrees {
            let (run_id, task_id, attempt) = &key;
            let Some(run) = self.cached_run(&mut runs, run_id)? else {
                continue;
            };
            let Some(task) = self.store.task(run_id, task_id)? else {
                continue;
            };
            let taken = run
                .reservations
                .iter()
                .any(|r| r.task_id == *task_id && r.attempt == *attempt);
            if taken || task.attempts + 1 != *attempt {
                continue;
            }
            run.reservations.push(Reservation {
                task_id: task_id.clone(),
                attempt: *attempt,
                worktree: worktree.clone(),
                reserved_at: self.now,
                reserved_by: reserved_by.clone(),
            });
            reserved.push((key, worktree, place));
        }
        for run in runs.values() {
            self.store.update_run(run)?;
        }
        Ok(reserved)
    }

    /// Drops the reservations of the attempts `gone` names whose worktree
    /// git has discarded, those still there (the same branch).
    pub(super) fn unreserve(&mut self, gone: &[(Key, String)]) -> Result<(), EngineError> {
        let mut runs: BTreeMap<String, Run> = BTreeMap::new();
        for ((run_id, task_id, attempt), branch) in gone {
            let Some(run) = self.cached_run(&mut runs, run_id)? else {
                continue;
            };
            run.reservations.retain(|r| {
                !(r.task_id == *task_id && r.attempt == *attempt && r.worktree.branch == *branch)
            });
        }
        for run in runs.values() {
            self.store.update_run(run)?;
        }
        Ok(())
    }

    /// Run `run_id`, read once into `runs`; `None` when it is gone.
    fn cached_run<'r>(
        &mut self,
        runs: &'r mut BTreeMap<String, Run>,
        run_id: &str,
    ) -> Result<Option<&'r mut Run>, EngineError> {
        if !runs.contains_key(run_id) {
            match self.store.run(run_id)? {
                Some(run) => {
                    runs.insert(run_id.to_owned(), run);
                }
                None => return Ok(None),
            }
        }
        Ok(runs.get_mut(run_id))
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

    /// Every worktree of the runs `input` asks about, oldest first (see
    /// [`Tx::worktrees_of`]), and the reservations among them whose command
    /// has gone. Git does not look at them here: `orch worktree list` and
    /// `gc` do, once the transaction has ended.
    pub(super) fn worktree_views(&mut self, input: &WorktreeInput) -> Result<Found, EngineError> {
        let views = self.worktrees_of(input)?;
        Ok((views, std::mem::take(&mut self.stale)))
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
            for reservation in &run.reservations {
                let view = WorktreeView::reserved(&run.run_id, reservation);
                let place = workspace::place(&spec, &view.worktree);
                found.push((view, place));
            }
        }
        Ok(found)
    }
}

impl<S: Store, C: Clock, I: IdSource> Engine<S, C, I> {
    /// `orch worktree list`: what orch knows of every worktree, read as orch
    /// reads are (see `Engine::look`), then what git sees of each, with no
    /// transaction open.
    pub(super) fn orch_worktree_list(
        &mut self,
        request: OrchWorktreeListRequest,
    ) -> Result<WorktreesOutput, EngineError> {
        let input = input::orch_worktree_list(request)?;
        let (views, _) = self.worktree_views(&input)?;
        let worktrees = views
            .into_iter()
            .map(|(view, place)| {
                let look = self.look_at(&view, &place);
                view.with(&look)
            })
            .collect();
        Ok(WorktreesOutput { worktrees })
    }

    /// `orch worktree gc`: undoes the reservations whose command has gone
    /// (see `starting`), then tidies every ended attempt's worktree with
    /// git, with no transaction open: never lose work, keep nothing clean.
    pub(super) fn orch_worktree_gc(
        &mut self,
        request: OrchWorktreeGcRequest,
    ) -> Result<WorktreeGcOutput, EngineError> {
        let input = input::orch_worktree_gc(request)?;
        let (views, stale) = self.worktree_views(&input)?;
        let mut out = WorktreeGcOutput {
            dry_run: input.dry_run,
            removed: Vec::new(),
            saved: Vec::new(),
            kept: Vec::new(),
        };
        let gone = match input.dry_run {
            true => stale
                .into_iter()
                .map(|(key, w, _)| (key, w.branch))
                .collect(),
            false => self.undo(stale, Vec::new()),
        };
        for (view, place) in views {
            let key = (view.run_id.clone(), view.task_id.clone(), view.attempt);
            let reserved = view.attempt_status == AttemptStatus::Reserved;
            if reserved && gone.contains(&(key, view.worktree.branch.clone())) {
                out.removed.push(view);
                continue;
            }
            let look = self.look_at(&view, &place);
            let view = view.with(&look);
            let done = match (view.state, input.dry_run) {
                (state, true) if state.removable() => Some(Tidied::Removed),
                (WorktreeState::Uncommitted, true) => Some(Tidied::Saved),
                (_, true) => Some(Tidied::Left),
                (_, false) => self.workspace.as_deref_mut().map(|workspace| {
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

    /// The worktrees `input` asks about, and the stale reservations among
    /// them, read as orch reads are: a look, or a short write when it must
    /// record what the runs' threads did first.
    fn worktree_views(&mut self, input: &WorktreeInput) -> Result<Found, EngineError> {
        match self.look(|tx| tx.worktree_views(input)) {
            Some(found) => found,
            None => self.record_then_read(|tx| tx.worktree_views(input)),
        }
    }

    /// What the host sees of a worktree; `None` when it runs no git, cannot
    /// look, or git is still making it (reserved).
    fn look_at(&mut self, view: &WorktreeView, place: &Place) -> Option<WorktreeLook> {
        if view.attempt_status == AttemptStatus::Reserved {
            return None;
        }
        let wip = workspace::wip_ref(&view.worktree);
        self.workspace
            .as_deref_mut()?
            .inspect(&view.worktree, place, &wip)
            .ok()
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

    /// The view of a reserved attempt's worktree, which git is making.
    fn reserved(run_id: &str, reservation: &Reservation) -> WorktreeView {
        WorktreeView {
            wip_ref: workspace::wip_ref(&reservation.worktree),
            run_id: run_id.to_owned(),
            task_id: reservation.task_id.clone(),
            attempt: reservation.attempt,
            attempt_status: AttemptStatus::Reserved,
            state: WorktreeState::Reserved,
            uncommitted: 0,
            commits: 0,
            saved: None,
            worktree: reservation.worktree.clone(),
        }
    }

    /// With what a look found (`None`: this host cannot look).
    pub(super) fn with(mut self, look: &Option<WorktreeLook>) -> WorktreeView {
        if let Some(look) = look {
            self.state = WorktreeState::of(self.attempt_status, look);
            self.uncommitted = u32::try_from(look.uncommitted.len()).unwrap_or(u32::MAX);
            self.commits = look.commits;
            self.saved = look.saved.clone();
        }
        self
    }
}

/// The worktrees `orch worktree list` and `gc` look at, each with its
/// place, and the reservations among them whose command has gone.
pub(super) type Found = (Vec<(WorktreeView, Place)>, Vec<Reserved>);

/// What git said of each repository and base revision, asked once per
/// batch of worktrees: the same at the same moment for every task.
pub(super) struct Looks(BTreeMap<(String, String), Result<RepoLook, EngineError>>);

impl Looks {
    pub(super) fn new() -> Looks {
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

/// The worktree `plan` asks for, as git will make it, with its place: its
/// base resolved to a commit (looked at once per batch), and refused for a
/// dirty checkout in strict mode. Git makes nothing here.
pub(super) fn plan_worktree(
    workspace: &mut dyn Workspace,
    plan: &WorktreePlan,
    looks: &mut Looks,
) -> Result<(Worktree, Place), EngineError> {
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
    Ok((worktree, place))
}

/// Has git make a reserved worktree: what the write that starts its
/// attempt will take.
pub(super) fn make_worktree(
    workspace: &mut dyn Workspace,
    worktree: Worktree,
    place: Place,
) -> Premade {
    let made = workspace
        .create(&worktree, &place)
        .map_err(|e| create_error(e, &worktree));
    Premade {
        worktree: Some((worktree, place)),
        made,
    }
}

/// Git's refusal before anything was reserved.
pub(super) fn refused(error: EngineError) -> Premade {
    Premade {
        worktree: None,
        made: Err(error),
    }
}

/// The refusal of a start whose attempt another command has reserved.
fn being_dispatched(run: &Run, task: &Task, number: u32) -> EngineError {
    EngineError::TaskState {
        code: crate::error::ErrorCode::TaskBeingDispatched,
        run_id: run.run_id.clone(),
        task_id: task.task_id.clone(),
        status: task.status,
        message: format!(
            "another command reserved its attempt {number} and git is making its worktree; look again in a moment (`orch status`)"
        ),
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
