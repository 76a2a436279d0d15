//! The steps every orch handler is made of, over the transaction context
//! [`Tx`]: finding the run, moving a task through the state machine (the
//! one place a task's status changes, its counts move and its event is
//! written), starting and ending attempts as inbox threads, unlocking,
//! skipping and un-skipping dependents, settling the run's outcome, and
//! reconciling the run with its attempts' threads.
//!
//! Threads are only ever touched through the engine's own inbox handlers
//! (`send`, `reply`, `cancel`), so every inbox rule and event applies to
//! them unchanged. Nothing here commits, rolls back or reads a clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::Address;
use crate::error::{EngineError, ErrorCode};
use crate::ids::IdSource;
use crate::model::{JsonObject, Kind, Message, Status};
use crate::orch::model::{
    Attempt, AttemptStatus, OrchEvent, OrchEventType, Run, RunStatus, Task, TaskStatus, Worktree,
};
use crate::orch::query::{RunQuery, TaskOrder, TaskQuery};
use crate::orch::rules::{self, TaskAction};
use crate::orch::workspace;
use crate::store::{EventQuery, Store, ThreadState};
use crate::time::Timestamp;
use crate::validate::{self as v, ORCH_AGENT};

use super::input::{AppendInput, CancelInput, MessageDraft, NewThread};
use super::tx::Tx;

/// One orch write (or preview) in progress on one run: the run record,
/// loaded once and written once at the end, and what the command changed.
pub(super) struct RunChange {
    pub(super) run: Run,
    /// The events recorded, in order.
    pub(super) events: Vec<OrchEvent>,
    /// Tasks changed as a consequence (dependents unlocked or skipped).
    pub(super) affected: Vec<Task>,
}

impl RunChange {
    /// The newest event recorded, or 0.
    pub(super) fn last_event_id(&self) -> u64 {
        self.events.last().map_or(0, |e| e.event_id)
    }
}

/// What a new attempt's thread says about the attempt before it.
pub(super) struct Previous {
    /// "was rejected", "failed", ...
    pub(super) outcome: &'static str,
    /// Why, in one line.
    pub(super) reason: String,
    /// More words from the leader (a rejection's body).
    pub(super) details: String,
    /// The attempt before.
    pub(super) attempt: u32,
    /// Its last message (the result, or the failure).
    pub(super) result: Option<Message>,
}

/// What the starts of one command found out about their assignees (see
/// [`Tx::check_start`]).
#[derive(Default)]
pub(super) struct StartChecks {
    /// The refusal of each address found unknown, by address.
    unknown: BTreeMap<String, EngineError>,
}

/// `error` (an `unknown_recipient`) as said of the address at `place`.
fn placed(mut error: EngineError, place: String) -> EngineError {
    if let EngineError::UnknownRecipient { place: at, .. } = &mut error {
        *at = place;
    }
    error
}

/// Whether `error`, from starting one task's attempt, concerns that task
/// alone, so that the task waits with the reason and the other tasks go
/// on: its assignee (nobody registered it), its id (it could never be a
/// worktree), its worktree (git refused it: its branch or folder exists, a
/// link on the way, a permission) or its base (it names no commit, or a
/// task with no accepted branch). The one rule of `orch dispatch
/// --all-ready` and of the retries a reconcile starts. With `whole_repo`,
/// the repository's own troubles count too (it is gone, no git, a dirty
/// checkout in strict mode): a retry that comes due as a side effect of
/// another command must never make that command, and so every orch
/// command on the run, fail. Anything else (the store) fails the command.
pub(super) fn start_refusal(error: &EngineError, whole_repo: bool) -> bool {
    match error {
        EngineError::UnknownRecipient { .. }
        | EngineError::WorktreeFailed { .. }
        | EngineError::InvalidBase { .. } => true,
        EngineError::RepositoryNotFound { .. }
        | EngineError::GitUnavailable { .. }
        | EngineError::CheckoutDirty { .. } => whole_repo,
        _ => false,
    }
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The run named; else the only active one; else, when none is active,
    /// the newest.
    pub(super) fn find_run(&mut self, run_id: Option<&str>) -> Result<Run, EngineError> {
        if let Some(run_id) = run_id {
            return self
                .store
                .run(run_id)?
                .ok_or_else(|| EngineError::RunNotFound {
                    run_id: Some(run_id.to_owned()),
                    message: format!("run {run_id} not found; `orch run list` shows the runs"),
                });
        }
        let query = RunQuery {
            created_by: None,
            statuses: vec![RunStatus::Active],
            limit: 2,
        };
        let mut active = self.store.runs(&query)?;
        match active.len() {
            1 => Ok(active.remove(0)),
            0 => {
                // None active: the run the leader worked on last, so that
                // `orch status` or `orch retry` after a run ended needs no id.
                let newest = RunQuery {
                    created_by: None,
                    statuses: Vec::new(),
                    limit: 1,
                };
                self.store
                    .runs(&newest)?
                    .pop()
                    .ok_or_else(|| EngineError::RunNotFound {
                        run_id: None,
                        message:
                            "there is no run yet; create one with `orch run create --goal ...`"
                                .into(),
                    })
            }
            _ => {
                let listed: Vec<String> = active.iter().map(|r| r.run_id.clone()).collect();
                Err(EngineError::missing(
                    "run_id",
                    format!(
                        "several runs are active ({}, ...); name one with --run (`orch run list` shows them)",
                        listed.join(", ")
                    ),
                ))
            }
        }
    }

    /// The run, reconciled, for a command that changes it: refused once it
    /// has ended (a failed run too, unless `reopens`: only `orch retry` and
    /// `orch run cancel` take one).
    pub(super) fn open_run(
        &mut self,
        run_id: Option<&str>,
        reopens: bool,
    ) -> Result<RunChange, EngineError> {
        let run = self.find_run(run_id)?;
        let mut change = RunChange {
            run,
            events: Vec::new(),
            affected: Vec::new(),
        };
        self.reconcile(&mut change, true)?;
        // What reconciling changed is recorded in its events; a command's
        // `affected` lists only what the command itself caused.
        change.affected.clear();
        let run = &change.run;
        let allowed =
            run.status == RunStatus::Active || (reopens && run.status == RunStatus::Failed);
        if !allowed {
            let run = change.run;
            let message = match run.status {
                RunStatus::Failed => {
                    "retry a failed task (`orch retry`) to reopen it, or start another run"
                }
                _ => "it changes no more; start another run with `orch run create`",
            };
            return Err(EngineError::RunFinished {
                run_id: run.run_id,
                status: run.status,
                message: message.into(),
            });
        }
        Ok(change)
    }

    /// A task of the run.
    pub(super) fn task_of(&mut self, run: &Run, task_id: &str) -> Result<Task, EngineError> {
        self.store
            .task(&run.run_id, task_id)?
            .ok_or_else(|| task_not_found(&run.run_id, task_id, None))
    }

    /// Writes the run record as the command left it.
    pub(super) fn save_run(&mut self, change: &RunChange) -> Result<(), EngineError> {
        Ok(self.store.update_run(&change.run)?)
    }

    /// Records one orch event about the run (and `task`).
    pub(super) fn emit(
        &mut self,
        change: &mut RunChange,
        task: Option<&Task>,
        event_type: OrchEventType,
        source: &str,
        summary: String,
        payload: JsonObject,
    ) -> Result<u64, EngineError> {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        change.run.last_event_id = event_id;
        change.run.updated_at = self.now;
        let event = OrchEvent {
            event_id,
            run_id: change.run.run_id.clone(),
            task_id: task.map(|t| t.task_id.clone()),
            event_type,
            source: source.to_owned(),
            task_status: task.map(|t| t.status),
            run_status: change.run.status,
            attempt: task.filter(|t| t.attempts > 0).map(|t| t.attempts),
            thread_id: task.and_then(|t| t.thread_id.clone()),
            summary,
            payload,
            created_at: self.now,
        };
        self.store.insert_orch_event(&event)?;
        change.events.push(event);
        Ok(event_id)
    }

    /// The one way a task's status changes: checked against the state
    /// machine, counted on the run, written with its event.
    pub(super) fn move_task(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        action: TaskAction,
        to: TaskStatus,
        (source, summary): (&str, String),
    ) -> Result<(), EngineError> {
        let allowed = rules::transition(task.status, action).is_some_and(|t| rules::reaches(t, to));
        if !allowed {
            return Err(EngineError::internal(format!(
                "task {} cannot go from {} to {to} by {action:?}",
                task.task_id, task.status
            )));
        }
        let counts = &mut change.run.counts;
        *counts.of_mut(task.status) = counts.of(task.status).saturating_sub(1);
        *counts.of_mut(to) += 1;
        task.status = to;
        if to != TaskStatus::RetryWait {
            task.retry_at = None;
        }
        task.updated_at = self.now;
        task.last_event_id = self.emit(
            change,
            Some(task),
            OrchEventType::entering(to),
            source,
            summary,
            JsonObject::new(),
        )?;
        self.store.update_task(task)?;
        if let Some(seat) = task.council.as_ref().filter(|_| to.is_terminal()) {
            self.council_settled(change, &seat.clone())?;
        }
        Ok(())
    }

    /// Opens the next attempt's thread for the task's assignee, records the
    /// attempt and moves the task to `dispatched` by `action`, after the
    /// refusals that need no git ([`Self::check_start`]).
    pub(super) fn start_attempt(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        action: TaskAction,
        source: &str,
        previous: Option<Previous>,
    ) -> Result<Attempt, EngineError> {
        let run = change.run.clone();
        self.check_start(&run, task, action, &mut StartChecks::default())?;
        self.start_checked(change, task, action, source, previous)
    }

    /// The refusals of a start that concern this task alone and need no
    /// git, so that a task refused for what cannot change until someone
    /// acts never makes git work: an assignee nobody registered, where the
    /// leader may still choose another (a ready task can be reassigned, a
    /// failed one retried `--to` another), and, in a run with a
    /// repository, an id that could never be a worktree (a task added
    /// before such ids were refused at `orch task add`). A rejected task
    /// cannot be reassigned until its new attempt is out, and the clock's
    /// retries must never stop a run's reconcile: those go where the leader
    /// sent the work, and wait there. `checked` remembers the addresses
    /// found unknown, so a dispatch asks once per assignee.
    pub(super) fn check_start(
        &mut self,
        run: &Run,
        task: &Task,
        action: TaskAction,
        checked: &mut StartChecks,
    ) -> Result<(), EngineError> {
        let other = match action {
            TaskAction::Dispatch => Some("orch reassign"),
            TaskAction::Retry => Some("orch retry --to"),
            _ => None,
        };
        if let Some(other) = other {
            let place = format!(
                "task {}'s assignee (`{other}` gives it to another)",
                task.task_id
            );
            if let Some(known) = checked.unknown.get(&task.assignee) {
                return Err(placed(known.clone(), place));
            }
            if let Err(error) = self.check_recipient(&place, &Address::stored(&task.assignee)) {
                if error.code() == ErrorCode::UnknownRecipient {
                    checked.unknown.insert(task.assignee.clone(), error.clone());
                }
                return Err(error);
            }
        }
        // A council seat reviews; it writes no code, so it gets no worktree.
        if let Some(spec) = run.repo.as_ref().filter(|_| task.council.is_none())
            && let Err((_, problem)) = workspace::unworkable(spec, &run.run_id, Some(&task.task_id))
        {
            let number = task.attempts + 1;
            return Err(EngineError::WorktreeFailed {
                path: workspace::worktree_path(&spec.worktrees, &run.run_id, &task.task_id, number),
                message: format!(
                    "task {}'s id {problem}; an id cannot change: cancel the task and add its work as a task with a shorter id",
                    task.task_id
                ),
            });
        }
        Ok(())
    }

    /// [`Self::start_attempt`] once [`Self::check_start`] has passed.
    pub(super) fn start_checked(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        action: TaskAction,
        source: &str,
        previous: Option<Previous>,
    ) -> Result<Attempt, EngineError> {
        let number = task.attempts + 1;
        // A council seat reviews; it writes no code, so it gets no worktree.
        if let Some(seat) = task.council.clone() {
            let draft = self.council_draft(task, &seat, number)?;
            return self.start_attempt_with(change, task, action, source, draft, None);
        }
        let earlier = self.attempt_worktree_of(task, task.attempts)?;
        let worktree = self.attempt_worktree(&mut change.run, task, number)?;
        let draft = attempt_message(task, number, previous, worktree.as_ref(), earlier.as_ref());
        self.start_attempt_with(change, task, action, source, draft, worktree)
    }

    /// [`Self::start_attempt`] with the thread's first message given, and
    /// the worktree already made, if the attempt has one.
    pub(super) fn start_attempt_with(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        action: TaskAction,
        source: &str,
        draft: MessageDraft,
        worktree: Option<Worktree>,
    ) -> Result<Attempt, EngineError> {
        let number = task.attempts + 1;
        let sent = self.open_thread(
            change.run.created_by.clone(),
            NewThread {
                to: Address::stored(&task.assignee),
                pick: false,
                subject: task.title.clone(),
                run_id: Some(task.run_id.clone()),
                task_id: Some(task.task_id.clone()),
                priority: task.priority,
                // One claim per attempt: a lapsed lease fails the attempt,
                // and orch's retry policy (with its backoff) decides what
                // follows, not inbox's.
                max_attempts: 1,
            },
            draft,
        )?;
        let attempt = Attempt {
            run_id: task.run_id.clone(),
            task_id: task.task_id.clone(),
            attempt: number,
            thread_id: sent.thread.thread.thread_id.clone(),
            assignee: task.assignee.clone(),
            status: AttemptStatus::Live,
            reason: None,
            started_at: self.now,
            ended_at: None,
            worktree,
        };
        self.store.put_attempt(&attempt)?;
        task.attempts = number;
        task.thread_id = Some(attempt.thread_id.clone());
        task.reason = None;
        let summary = format!(
            "{}: attempt {number} dispatched to {} as {}",
            task.task_id, task.assignee, attempt.thread_id
        );
        self.move_task(
            change,
            task,
            action,
            TaskStatus::Dispatched,
            (source, summary),
        )?;
        Ok(attempt)
    }

    /// Marks the task's current attempt as ended.
    pub(super) fn end_attempt(
        &mut self,
        task: &Task,
        status: AttemptStatus,
        reason: Option<String>,
    ) -> Result<(), EngineError> {
        let attempts = self.store.attempts(&task.run_id, &task.task_id)?;
        let Some(mut attempt) = attempts.into_iter().find(|a| a.attempt == task.attempts) else {
            return Err(EngineError::internal(format!(
                "task {} has no record of attempt {}",
                task.task_id, task.attempts
            )));
        };
        attempt.status = status;
        attempt.reason = reason;
        attempt.ended_at.get_or_insert(self.now);
        if let Some(worktree) = &attempt.worktree {
            let place = self.place_of(&task.run_id, worktree)?;
            self.ended.push((worktree.clone(), place, status));
        }
        Ok(self.store.put_attempt(&attempt)?)
    }

    /// The worktree attempt `number` of `task` worked in, if any.
    fn attempt_worktree_of(
        &mut self,
        task: &Task,
        number: u32,
    ) -> Result<Option<Worktree>, EngineError> {
        if number == 0 {
            return Ok(None);
        }
        let attempts = self.store.attempts(&task.run_id, &task.task_id)?;
        Ok(attempts
            .into_iter()
            .find(|a| a.attempt == number)
            .and_then(|a| a.worktree))
    }

    /// The last message of the task's current attempt's thread.
    pub(super) fn attempt_result(&mut self, task: &Task) -> Result<Option<Message>, EngineError> {
        let Some(thread_id) = &task.thread_id else {
            return Ok(None);
        };
        let state = self.load(thread_id)?;
        self.latest_message(&state)
    }

    /// The last message of a thread already loaded.
    fn latest_message(&mut self, state: &ThreadState) -> Result<Option<Message>, EngineError> {
        match &state.thread.latest_message_id {
            Some(id) => Ok(self.store.message(id)?),
            None => Ok(None),
        }
    }

    /// Cancels the task's live attempt's thread as `agent`, so its worker
    /// is fenced off (its next command is refused), and ends the attempt.
    pub(super) fn cancel_attempt(
        &mut self,
        task: &Task,
        agent: &str,
        reason: String,
    ) -> Result<(), EngineError> {
        let Some(thread_id) = task.thread_id.clone() else {
            return Ok(());
        };
        let state = self.load(&thread_id)?;
        if !self.effective(&state).is_terminal() {
            self.cancel(CancelInput {
                agent: agent.to_owned(),
                thread_id,
                reason: reason.clone(),
                artifacts: Vec::new(),
            })?;
        }
        self.end_attempt(task, AttemptStatus::Cancelled, Some(reason))
    }

    /// Writes an answer into the blocked attempt's thread.
    pub(super) fn answer_attempt(
        &mut self,
        task: &Task,
        agent: &str,
        summary: String,
        body: String,
    ) -> Result<Message, EngineError> {
        let thread_id = task.thread_id.clone().ok_or_else(|| {
            EngineError::internal(format!("blocked task {} has no thread", task.task_id))
        })?;
        let out = self.reply(AppendInput {
            from: agent.to_owned(),
            to: None,
            thread_id,
            lease_token: None,
            draft: MessageDraft {
                kind: Kind::Answer,
                summary,
                body,
                payload: JsonObject::new(),
                artifacts: Vec::new(),
            },
        })?;
        Ok(out.message)
    }

    /// The statuses of `task`'s needs, as stored now.
    pub(super) fn need_statuses(
        &mut self,
        task: &Task,
    ) -> Result<Vec<(String, TaskStatus)>, EngineError> {
        let mut statuses = Vec::with_capacity(task.needs.len());
        for need in &task.needs {
            let status = self
                .store
                .task(&task.run_id, need)?
                .map_or(TaskStatus::Pending, |t| t.status);
            statuses.push((need.clone(), status));
        }
        Ok(statuses)
    }

    /// After `done` became done: each pending dependent whose needs are now
    /// all done becomes ready.
    pub(super) fn unlock_dependents(
        &mut self,
        change: &mut RunChange,
        done: &Task,
    ) -> Result<(), EngineError> {
        let query = TaskQuery::dependents(&done.run_id, &done.task_id);
        for mut dependent in self.store.tasks(&query)? {
            if dependent.status != TaskStatus::Pending {
                continue;
            }
            let needs = self.need_statuses(&dependent)?;
            if needs.iter().all(|(_, s)| *s == TaskStatus::Done) {
                let summary = format!("{}: every need is done", dependent.task_id);
                self.move_task(
                    change,
                    &mut dependent,
                    TaskAction::NeedsMet,
                    TaskStatus::Ready,
                    (ORCH_AGENT, summary),
                )?;
                change.affected.push(dependent);
            }
        }
        Ok(())
    }

    /// After `root` failed or was cancelled: every task that needs it,
    /// directly or through others, and has not started is skipped, naming
    /// `root` as the cause (and the need it came through). A pending task
    /// had no need failed, cancelled or skipped, so `root` is its only
    /// cause.
    pub(super) fn skip_dependents(
        &mut self,
        change: &mut RunChange,
        root: &Task,
    ) -> Result<(), EngineError> {
        let mut work = vec![root.task_id.clone()];
        while let Some(via) = work.pop() {
            let query = TaskQuery::dependents(&root.run_id, &via);
            for mut dependent in self.store.tasks(&query)? {
                if dependent.status != TaskStatus::Pending {
                    continue;
                }
                dependent.reason = Some(skip_reason(&via, &root.task_id, root.status));
                dependent.skipped_by = Some(root.task_id.clone());
                let summary = format!(
                    "{}: skipped, {}",
                    dependent.task_id,
                    dependent.reason.as_deref().unwrap_or("")
                );
                self.move_task(
                    change,
                    &mut dependent,
                    TaskAction::Skip,
                    TaskStatus::Skipped,
                    (ORCH_AGENT, summary),
                )?;
                work.push(dependent.task_id.clone());
                change.affected.push(dependent);
            }
        }
        Ok(())
    }

    /// After `root` was retried: the tasks skipped because of it come back
    /// to `pending`, unless another of their needs still keeps them
    /// skipped; those then name the task that still does (and so do the
    /// tasks below them).
    pub(super) fn unskip_dependents(
        &mut self,
        change: &mut RunChange,
        root: &Task,
    ) -> Result<(), EngineError> {
        let mut work = vec![root.task_id.clone()];
        while let Some(back) = work.pop() {
            let query = TaskQuery::dependents(&root.run_id, &back);
            for mut dependent in self.store.tasks(&query)? {
                if dependent.status != TaskStatus::Skipped {
                    continue;
                }
                let needs = self.need_statuses(&dependent)?;
                if rules::from_needs(needs.iter().map(|(_, s)| *s)) == TaskStatus::Skipped {
                    // Still skipped, perhaps by another task now.
                    let Some(cause) = self.skip_cause(&dependent.run_id, &dependent.needs)? else {
                        continue;
                    };
                    if dependent.skipped_by.as_deref() != Some(cause.root.as_str()) {
                        dependent.reason = Some(cause.reason());
                        dependent.skipped_by = Some(cause.root);
                        dependent.updated_at = self.now;
                        self.store.update_task(&dependent)?;
                        work.push(dependent.task_id);
                    }
                    continue;
                }
                dependent.reason = None;
                dependent.skipped_by = None;
                let summary = format!(
                    "{}: back to pending, {back} is being retried",
                    dependent.task_id
                );
                self.move_task(
                    change,
                    &mut dependent,
                    TaskAction::Unskip,
                    TaskStatus::Pending,
                    (ORCH_AGENT, summary),
                )?;
                work.push(dependent.task_id.clone());
                change.affected.push(dependent);
            }
        }
        Ok(())
    }

    /// What keeps a task of `run_id` with `needs` skipped: its first need
    /// (in the order of `needs`) that failed or was cancelled, or that is
    /// skipped itself, with the failed or cancelled task behind that one.
    /// `None` when no need keeps it skipped. The same answer every time,
    /// however deep the graph and however many tasks failed.
    pub(super) fn skip_cause(
        &mut self,
        run_id: &str,
        needs: &[String],
    ) -> Result<Option<SkipCause>, EngineError> {
        for need in needs {
            let Some(found) = self.store.task(run_id, need)? else {
                continue;
            };
            match found.status {
                TaskStatus::Failed | TaskStatus::Cancelled => {
                    return Ok(Some(SkipCause {
                        via: need.clone(),
                        root: need.clone(),
                        status: found.status,
                    }));
                }
                TaskStatus::Skipped => {
                    if let Some((root, status)) = self.skip_root(&found)? {
                        return Ok(Some(SkipCause {
                            via: need.clone(),
                            root,
                            status,
                        }));
                    }
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// The failed or cancelled task that keeps the skipped `task` skipped:
    /// the one it records when that is still failed or cancelled, else
    /// found through its needs (each task looked at once).
    fn skip_root(&mut self, task: &Task) -> Result<Option<(String, TaskStatus)>, EngineError> {
        if let Some(root) = &task.skipped_by
            && let Some(found) = self.store.task(&task.run_id, root)?
            && matches!(found.status, TaskStatus::Failed | TaskStatus::Cancelled)
        {
            return Ok(Some((found.task_id, found.status)));
        }
        let mut seen: BTreeSet<String> = BTreeSet::from([task.task_id.clone()]);
        let mut stack: Vec<String> = task.needs.iter().rev().cloned().collect();
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(found) = self.store.task(&task.run_id, &id)? else {
                continue;
            };
            match found.status {
                TaskStatus::Failed | TaskStatus::Cancelled => {
                    return Ok(Some((found.task_id, found.status)));
                }
                TaskStatus::Skipped => stack.extend(found.needs.iter().rev().cloned()),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Ends the run when every task has ended.
    pub(super) fn settle_run(
        &mut self,
        change: &mut RunChange,
        source: &str,
    ) -> Result<(), EngineError> {
        if change.run.status != RunStatus::Active {
            return Ok(());
        }
        let Some(outcome) = rules::run_outcome(&change.run.counts) else {
            return Ok(());
        };
        change.run.status = outcome;
        change.run.finished_at = Some(self.now);
        let counts = &change.run.counts;
        let (event, summary) = match outcome {
            RunStatus::Succeeded => (
                OrchEventType::RunSucceeded,
                format!(
                    "run {} succeeded: {} tasks done",
                    change.run.run_id, counts.done
                ),
            ),
            _ => (
                OrchEventType::RunFailed,
                format!(
                    "run {} failed: {} failed, {} skipped, {} done",
                    change.run.run_id, counts.failed, counts.skipped, counts.done
                ),
            ),
        };
        self.emit(change, None, event, source, summary, JsonObject::new())?;
        Ok(())
    }

    /// Records what the run's attempts' threads and the clock have made
    /// true: each live task follows its thread; with `dispatch_due`, each
    /// retry whose backoff has ended is dispatched. Idempotent. Returns when
    /// the next retry is due.
    pub(super) fn reconcile(
        &mut self,
        change: &mut RunChange,
        dispatch_due: bool,
    ) -> Result<Option<Timestamp>, EngineError> {
        self.note_stale(&change.run);
        if change.run.status != RunStatus::Active {
            return Ok(None);
        }
        for mut task in self.moved_tasks(&change.run)? {
            self.follow_thread(change, &mut task)?;
        }
        // Everything written before this reconcile is now accounted for
        // (lapses included: every write and preview records them first).
        change.run.reconciled_through = self.next_event_id.saturating_sub(1);
        let mut next_due: Option<Timestamp> = None;
        let waiting = [TaskStatus::RetryWait];
        for mut task in self.tasks_in(&change.run, &waiting, TaskOrder::Added, usize::MAX)? {
            let due = task.retry_at.unwrap_or(self.now);
            // Only a write prepared for it starts an attempt that needs a
            // worktree (see `super::starting`); a preview plans it.
            let needs_git = change.run.repo.is_some() && task.council.is_none();
            if due <= self.now && dispatch_due && (!needs_git || self.starting || self.preview) {
                let previous = self.previous_failure(&task)?;
                let started = self.start_attempt(
                    change,
                    &mut task,
                    TaskAction::Redispatch,
                    ORCH_AGENT,
                    previous,
                );
                match started {
                    Ok(_) => {}
                    // Another command is starting it; should that command
                    // have gone, its reservation is undone once it is old.
                    Err(error) if error.code() == ErrorCode::TaskBeingDispatched => {
                        let reserved = change.run.reservations.iter();
                        let mine = reserved.filter(|r| r.task_id == task.task_id);
                        if let Some(r) = mine.min_by_key(|r| r.reserved_at) {
                            let at = r
                                .reserved_at
                                .plus_millis(super::premade::RESERVATION_MILLIS);
                            next_due = Some(next_due.map_or(at, |d| d.min(at)));
                        }
                    }
                    // This retry came due during another command: git
                    // refusing its worktree must not fail that command.
                    Err(error) if start_refusal(&error, true) => {
                        self.refuse_start(change, &mut task, ORCH_AGENT, &error)?;
                        let due = task.retry_at.unwrap_or(self.now);
                        next_due = Some(next_due.map_or(due, |d| d.min(due)));
                    }
                    Err(error) => return Err(error),
                }
            } else {
                next_due = Some(next_due.map_or(due, |d| d.min(due)));
            }
        }
        self.settle_run(change, ORCH_AGENT)?;
        Ok(next_due)
    }

    /// The tasks of `run` in `statuses`, in `order`, `limit` at most. Only
    /// the statuses the run's counts say hold tasks are looked up: lists
    /// and the retry queue are read on every orch wake, and most statuses
    /// are usually empty.
    pub(super) fn tasks_in(
        &mut self,
        run: &Run,
        statuses: &[TaskStatus],
        order: TaskOrder,
        limit: usize,
    ) -> Result<Vec<Task>, EngineError> {
        let held: Vec<TaskStatus> = statuses
            .iter()
            .copied()
            .filter(|&s| run.counts.of(s) > 0)
            .collect();
        if held.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        Ok(self.store.tasks(&TaskQuery {
            limit,
            ..TaskQuery::in_statuses(&run.run_id, &held, order)
        })?)
    }

    /// The tasks with a live attempt whose thread has had events since the
    /// run was last reconciled: the only ones that may have moved. One
    /// indexed query, usually empty, instead of a look at every live task.
    fn moved_tasks(&mut self, run: &Run) -> Result<Vec<Task>, EngineError> {
        let query = EventQuery {
            run_id: Some(run.run_id.clone()),
            ..EventQuery::after_event(run.reconciled_through, usize::MAX)
        };
        let mut threads: Vec<(String, String)> = Vec::new();
        for event in self.store.events(&query)? {
            if let Some(task_id) = event.task_id
                && !threads.iter().any(|(t, _)| *t == event.thread_id)
            {
                threads.push((event.thread_id, task_id));
            }
        }
        let mut tasks = Vec::new();
        for (thread_id, task_id) in threads {
            let Some(task) = self.store.task(&run.run_id, &task_id)? else {
                continue;
            };
            if task.status.has_live_attempt() && task.thread_id.as_deref() == Some(&thread_id) {
                tasks.push(task);
            }
        }
        tasks.sort_by_key(|t| t.seq);
        Ok(tasks)
    }

    /// Moves one task with a live attempt to where its thread says it is.
    fn follow_thread(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
    ) -> Result<(), EngineError> {
        let thread_id = task.thread_id.clone().ok_or_else(|| {
            EngineError::internal(format!(
                "task {} is {} without a thread",
                task.task_id, task.status
            ))
        })?;
        let state = self.load(&thread_id)?;
        let status = self.effective(&state);
        let claims_left = state.thread.attempts < state.thread.max_attempts;
        let Some(action) = rules::follow_thread(task.status, status, claims_left) else {
            return Ok(());
        };
        let last = self.latest_message(&state)?;
        let mut said = last.as_ref().map_or(String::new(), |m| m.summary.clone());
        if status == Status::Pending {
            // Unclaimable: take it out of the worker's queue before the
            // next attempt opens a thread of its own.
            said = "its worker's lease ran out and no claim is left".into();
            self.cancel(CancelInput {
                agent: ORCH_AGENT.to_owned(),
                thread_id: thread_id.clone(),
                reason: format!("attempt {} failed: {said}", task.attempts),
                artifacts: Vec::new(),
            })?;
        }
        let id = task.task_id.clone();
        match action {
            TaskAction::ThreadQueued => {
                task.reason = None;
                let summary = format!("{id}: waiting for a worker again");
                self.move_task(
                    change,
                    task,
                    action,
                    TaskStatus::Dispatched,
                    (ORCH_AGENT, summary),
                )
            }
            TaskAction::ThreadHeld => {
                task.reason = None;
                let holder = state
                    .lease
                    .map_or(state.thread.assigned_to.clone(), |l| l.agent);
                let summary = format!("{id}: {holder} is working on attempt {}", task.attempts);
                self.move_task(
                    change,
                    task,
                    action,
                    TaskStatus::Running,
                    (ORCH_AGENT, summary),
                )
            }
            TaskAction::ThreadBlocked => {
                task.reason = Some(said.clone());
                let summary = format!("{id} asks: {said}");
                self.move_task(
                    change,
                    task,
                    action,
                    TaskStatus::Blocked,
                    (ORCH_AGENT, summary),
                )
            }
            TaskAction::ThreadDone => self.attempt_succeeded(change, task, said),
            TaskAction::ThreadFailed => self.attempt_failed(change, task, said),
            _ => {
                self.end_attempt(
                    task,
                    AttemptStatus::Cancelled,
                    Some("its thread was cancelled".into()),
                )?;
                task.reason = Some(format!("thread {thread_id} was cancelled: {said}"));
                let summary = format!("{id}: cancelled with its thread: {said}");
                self.move_task(
                    change,
                    task,
                    TaskAction::ThreadCancelled,
                    TaskStatus::Cancelled,
                    (ORCH_AGENT, summary),
                )?;
                self.skip_dependents(change, task)
            }
        }
    }

    fn attempt_succeeded(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        said: String,
    ) -> Result<(), EngineError> {
        self.end_attempt(task, AttemptStatus::Succeeded, None)?;
        let (to, summary) = if task.review {
            task.reason = Some(said.clone());
            (
                TaskStatus::Review,
                format!("{} is ready for review: {said}", task.task_id),
            )
        } else {
            (
                TaskStatus::Done,
                format!("{} is done: {said}", task.task_id),
            )
        };
        self.move_task(
            change,
            task,
            TaskAction::ThreadDone,
            to,
            (ORCH_AGENT, summary),
        )?;
        if to == TaskStatus::Done {
            self.unlock_dependents(change, task)?;
        }
        Ok(())
    }

    fn attempt_failed(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
        said: String,
    ) -> Result<(), EngineError> {
        self.end_attempt(task, AttemptStatus::Failed, Some(said.clone()))?;
        task.reason = Some(said.clone());
        if rules::retries_left(&task.retry, task.attempts) {
            let wait = rules::backoff_millis(&task.retry, task.attempts);
            task.retry_at = Some(self.now.plus_millis(wait));
            let summary = format!(
                "{}: attempt {} of {} failed ({said}); the next starts in {} s",
                task.task_id,
                task.attempts,
                task.retry.max_attempts,
                wait / 1000
            );
            self.move_task(
                change,
                task,
                TaskAction::ThreadFailed,
                TaskStatus::RetryWait,
                (ORCH_AGENT, summary),
            )
        } else {
            let summary = format!(
                "{} failed after {} attempts: {said}",
                task.task_id, task.attempts
            );
            self.move_task(
                change,
                task,
                TaskAction::ThreadFailed,
                TaskStatus::Failed,
                (ORCH_AGENT, summary),
            )?;
            self.skip_dependents(change, task)
        }
    }

    /// What the next attempt's thread says about the failed one.
    pub(super) fn previous_failure(
        &mut self,
        task: &Task,
    ) -> Result<Option<Previous>, EngineError> {
        if task.attempts == 0 {
            return Ok(None);
        }
        let result = self.attempt_result(task)?;
        // The attempt's own record: the task's reason may since say why the
        // next attempt could not start.
        let recorded = self
            .store
            .attempts(&task.run_id, &task.task_id)?
            .into_iter()
            .find(|a| a.attempt == task.attempts)
            .and_then(|a| a.reason);
        Ok(Some(Previous {
            outcome: "failed",
            reason: recorded.or_else(|| task.reason.clone()).unwrap_or_default(),
            details: String::new(),
            attempt: task.attempts,
            result,
        }))
    }

    /// Refuses a command on a task in the wrong status.
    pub(super) fn expect_status(
        task: &Task,
        allowed: &[TaskStatus],
        code: ErrorCode,
        message: impl FnOnce(&Task) -> String,
    ) -> Result<(), EngineError> {
        if allowed.contains(&task.status) {
            return Ok(());
        }
        let code = if task.status.is_terminal() && code == ErrorCode::TaskInvalidState {
            ErrorCode::TaskFinished
        } else {
            code
        };
        Err(EngineError::TaskState {
            code,
            run_id: task.run_id.clone(),
            task_id: task.task_id.clone(),
            status: task.status,
            message: message(task),
        })
    }
}

/// Why a task is skipped: the need it came through and the failed or
/// cancelled task behind it (the same task for a direct need).
pub(super) struct SkipCause {
    /// The need of the task that is failed, cancelled or skipped.
    pub(super) via: String,
    /// The failed or cancelled task at the root.
    pub(super) root: String,
    /// Whether that one failed or was cancelled.
    pub(super) status: TaskStatus,
}

impl SkipCause {
    /// The skipped task's `reason`.
    pub(super) fn reason(&self) -> String {
        skip_reason(&self.via, &self.root, self.status)
    }
}

/// A skipped task's `reason`: the need it came through and, when that is
/// not the cause itself, the failed or cancelled task behind it, with what
/// brings the task back.
pub(super) fn skip_reason(via: &str, root: &str, status: TaskStatus) -> String {
    let what = match status {
        TaskStatus::Cancelled => "was cancelled",
        _ => "failed",
    };
    let mut reason = match via == root {
        true => format!("needs {root}, which {what}"),
        false => format!("needs {via}, which is skipped because {root} {what}"),
    };
    if status == TaskStatus::Failed {
        reason.push_str(&format!("; `orch retry {root}` brings it back"));
    }
    reason
}

/// The error for a task id the run does not have; `named_in` says where the
/// id was given when it was not the task asked for (a need in a plan).
pub(super) fn task_not_found(run_id: &str, task_id: &str, named_in: Option<&str>) -> EngineError {
    let message = match named_in {
        Some(path) => format!(
            "{path} names task {task_id}, which is neither in run {run_id} nor in this plan; add it first or fix the id"
        ),
        None => format!(
            "run {run_id} has no task {task_id}; `orch status --run {run_id}` lists its tasks"
        ),
    };
    EngineError::TaskNotFound {
        run_id: run_id.to_owned(),
        task_id: task_id.to_owned(),
        message,
    }
}

/// The first message of an attempt's thread: the task's text, its
/// acceptance criteria, and what happened to the attempt before, in the
/// body for people and in the payload for programs.
fn attempt_message(
    task: &Task,
    number: u32,
    previous: Option<Previous>,
    worktree: Option<&Worktree>,
    earlier: Option<&Worktree>,
) -> MessageDraft {
    let mut body = task.body.clone();
    if !task.acceptance.is_empty() {
        body.push_str(if body.is_empty() { "" } else { "\n\n" });
        body.push_str("Acceptance criteria:\n");
        for criterion in &task.acceptance {
            body.push_str(&format!("- {criterion}\n"));
        }
    }
    let mut payload = JsonObject::new();
    payload.insert("run_id".into(), task.run_id.clone().into());
    payload.insert("task_id".into(), task.task_id.clone().into());
    payload.insert("attempt".into(), number.into());
    payload.insert("acceptance".into(), task.acceptance.clone().into());
    if let Some(worktree) = worktree {
        body.push_str(&worktree_note(worktree));
        payload.insert("worktree".into(), worktree_payload(worktree));
    }
    if let Some(earlier) = earlier {
        body.push_str(&format!(
            "\n\nThe attempt before worked on branch {}; what it left uncommitted is saved on {}.\n",
            earlier.branch,
            workspace::wip_ref(earlier)
        ));
    }
    if let Some(previous) = previous {
        body.push_str(&format!(
            "\n\nAttempt {number}. Attempt {} {}: {}\n",
            previous.attempt, previous.outcome, previous.reason
        ));
        if !previous.details.is_empty() {
            body.push_str(&previous.details);
            body.push('\n');
        }
        let mut note = JsonObject::new();
        note.insert("attempt".into(), previous.attempt.into());
        note.insert("outcome".into(), previous.outcome.into());
        note.insert("reason".into(), previous.reason.into());
        if let Some(result) = previous.result {
            body.push_str(&format!(
                "Its last message ({}): {}\n",
                result.kind, result.summary
            ));
            let mut said = JsonObject::new();
            said.insert("message_id".into(), result.message_id.into());
            said.insert("kind".into(), result.kind.as_str().into());
            said.insert("summary".into(), result.summary.into());
            said.insert("payload".into(), result.payload.into());
            note.insert("result".into(), said.into());
        }
        payload.insert("previous".into(), note.into());
    }
    truncate_body(&mut body);
    MessageDraft {
        kind: Kind::Task,
        summary: task.title.clone(),
        body,
        payload,
        artifacts: Vec::new(),
    }
}

/// What the worker is told about its worktree.
fn worktree_note(worktree: &Worktree) -> String {
    let mut note = format!(
        "\n\nWork in the git worktree {} (branch {}, from {} at {}), never in the leader's checkout, and commit your work there: when the attempt ends, what is left uncommitted is saved on {}, and the folder is removed once clean.\n",
        worktree.path,
        worktree.branch,
        worktree.base,
        worktree.base_commit,
        workspace::wip_ref(worktree)
    );
    if worktree.left_out_count > 0 {
        note.push_str(&format!(
            "The leader's checkout had {} uncommitted paths that this worktree does not have.\n",
            worktree.left_out_count
        ));
    }
    note
}

/// A worktree as a task message's payload carries it.
fn worktree_payload(worktree: &Worktree) -> serde_json::Value {
    let mut out = JsonObject::new();
    out.insert("path".into(), worktree.path.clone().into());
    out.insert("branch".into(), worktree.branch.clone().into());
    out.insert("base".into(), worktree.base.clone().into());
    out.insert("base_commit".into(), worktree.base_commit.clone().into());
    out.insert("repo".into(), worktree.repo.clone().into());
    out.insert("wip_ref".into(), workspace::wip_ref(worktree).into());
    out.into()
}

/// Keeps a composed body within the documented limit (the task's own body
/// may already be at it), cutting at a character boundary.
pub(super) fn truncate_body(body: &mut String) {
    const MARK: &str = "\n[truncated]";
    if body.len() <= v::BODY_MAX_BYTES {
        return;
    }
    let mut end = v::BODY_MAX_BYTES - MARK.len();
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    body.truncate(end);
    body.push_str(MARK);
}
