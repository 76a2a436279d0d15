//! The orch commands' handlers. Writes first reconcile the run (so they act
//! on the current truth) and end by settling its outcome and saving it;
//! reads run as a preview (see `Engine::preview`): the same reconcile in a
//! transaction that is rolled back, so a read shows what the attempts'
//! threads have made true without changing anything. The steps they share
//! are in `orch_steps`.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::Address;
use crate::error::{EngineError, ErrorCode};
use crate::ids::{IdKind, IdSource};
use crate::model::JsonObject;
use crate::orch::model::{
    AttemptStatus, OrchEventType, RepoSpec, Run, RunStatus, Task, TaskCounts, TaskStatus,
};
use crate::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use crate::orch::rules::{self, TaskAction};
use crate::orch::workspace;
use crate::store::Store;
use crate::wire::*;

use super::input::*;
use super::orch_steps::{
    Previous, RunChange, SkipCause, StartChecks, start_refusal, task_not_found,
};
use super::tx::Tx;

use TaskStatus::{Blocked, Dispatched, Failed, Pending, Ready, RetryWait, Review, Running};

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn orch_run_create(
        &mut self,
        input: RunCreateInput,
    ) -> Result<RunOutput, EngineError> {
        let run_id = match input.run_id {
            Some(id) if self.store.run(&id)?.is_some() => {
                return Err(EngineError::RunExists { run_id: id });
            }
            Some(id) => id,
            None => self.ids.next_id(IdKind::Run, self.now),
        };
        if let Some(spec) = &input.repo {
            self.check_run_folders(spec, &run_id)?;
        }
        let mut change = RunChange {
            run: Run {
                run_id,
                goal: input.goal,
                created_by: input.agent.clone(),
                status: RunStatus::Active,
                counts: TaskCounts::default(),
                tasks_added: 0,
                last_event_id: 0,
                reconciled_through: 0,
                created_at: self.now,
                updated_at: self.now,
                finished_at: None,
                repo: input.repo,
                reservations: Vec::new(),
            },
            events: Vec::new(),
            affected: Vec::new(),
        };
        let summary = format!("run {} created: {}", change.run.run_id, change.run.goal);
        self.emit(
            &mut change,
            None,
            OrchEventType::RunCreated,
            &input.agent,
            summary,
            JsonObject::new(),
        )?;
        self.store.insert_run(&change.run)?;
        Ok(RunOutput {
            event_id: change.last_event_id(),
            run: change.run,
        })
    }

    pub(super) fn orch_run_list(&mut self, input: RunListInput) -> Result<RunsOutput, EngineError> {
        let query = RunQuery {
            created_by: input.agent,
            statuses: input.statuses,
            limit: input.limit,
        };
        let mut runs = Vec::new();
        for run in self.store.runs(&query)? {
            let mut change = RunChange {
                run,
                events: Vec::new(),
                affected: Vec::new(),
            };
            self.reconcile(&mut change, false)?;
            runs.push(change.run);
        }
        // A preview may have ended a run the filter was for: keep the
        // answer true to the filter.
        runs.retain(|r| query.matches(r));
        Ok(RunsOutput { runs })
    }

    pub(super) fn orch_run_cancel(
        &mut self,
        input: RunCancelInput,
    ) -> Result<RunOutput, EngineError> {
        let RunCancelInput { leader, reason } = input;
        let mut change = self.open_run(leader.run_id.as_deref(), true)?;
        let open = [
            Pending, Ready, Dispatched, Running, Blocked, Review, RetryWait,
        ];
        let query = TaskQuery::in_statuses(&change.run.run_id, &open, TaskOrder::Added);
        for mut task in self.store.tasks(&query)? {
            if task.status.has_live_attempt() {
                self.cancel_attempt(&task, &leader.agent, reason.clone())?;
            }
            task.reason = Some(reason.clone());
            let summary = format!("{}: cancelled with the run", task.task_id);
            self.move_task(
                &mut change,
                &mut task,
                TaskAction::Cancel,
                TaskStatus::Cancelled,
                (&leader.agent, summary),
            )?;
        }
        change.run.status = RunStatus::Cancelled;
        change.run.finished_at = Some(self.now);
        let summary = format!("run {} cancelled: {reason}", change.run.run_id);
        self.emit(
            &mut change,
            None,
            OrchEventType::RunCancelled,
            &leader.agent,
            summary,
            JsonObject::new(),
        )?;
        self.save_run(&change)?;
        Ok(RunOutput {
            event_id: change.last_event_id(),
            run: change.run,
        })
    }

    pub(super) fn orch_status(&mut self, input: RunRead) -> Result<StatusOutput, EngineError> {
        let run = self.current_run(input.run_id.as_deref())?;
        let limit = input.limit;
        Ok(StatusOutput {
            actionable: self.lines_in(&run, TaskStatus::ACTIONABLE, TaskOrder::Queue, limit)?,
            in_flight: self.lines_in(
                &run,
                &[Dispatched, Running, RetryWait],
                TaskOrder::Added,
                limit,
            )?,
            waiting: self.lines_in(&run, &[Pending], TaskOrder::Added, limit)?,
            run,
        })
    }

    pub(super) fn orch_ready(&mut self, input: RunRead) -> Result<TasksOutput, EngineError> {
        let run = self.current_run(input.run_id.as_deref())?;
        Ok(TasksOutput {
            tasks: self.lines_in(&run, &[Ready], TaskOrder::Queue, input.limit)?,
        })
    }

    pub(super) fn orch_task_show(
        &mut self,
        input: TaskRead,
    ) -> Result<TaskShowOutput, EngineError> {
        let run = self.current_run(input.run_id.as_deref())?;
        let task = self.task_of(&run, &input.task_id)?;
        let attempts = self.store.attempts(&run.run_id, &task.task_id)?;
        let thread = match &task.thread_id {
            Some(id) => {
                let state = self.load(id)?;
                Some(self.view(state))
            }
            None => None,
        };
        let needed_by = self
            .store
            .tasks(&TaskQuery::dependents(&run.run_id, &task.task_id))?
            .into_iter()
            .map(|t| t.task_id)
            .collect();
        let task = self.task_view(task)?;
        Ok(TaskShowOutput {
            run,
            task,
            attempts,
            thread,
            needed_by,
        })
    }

    pub(super) fn orch_task_add(&mut self, input: PlanInput) -> Result<TaskOutput, EngineError> {
        let (change, mut tasks) = self.add_tasks(input)?;
        let task = tasks
            .pop()
            .ok_or_else(|| EngineError::internal("task add added nothing"))?;
        Ok(TaskOutput {
            event_id: change.last_event_id(),
            run: change.run,
            task,
            attempt: None,
            message: None,
            affected: change.affected,
        })
    }

    pub(super) fn orch_plan(&mut self, input: PlanInput) -> Result<PlanOutput, EngineError> {
        let (change, tasks) = self.add_tasks(input)?;
        Ok(PlanOutput {
            event_id: change.last_event_id(),
            run: change.run,
            tasks,
        })
    }

    pub(super) fn orch_dispatch(
        &mut self,
        input: DispatchInput,
    ) -> Result<DispatchOutput, EngineError> {
        let DispatchInput {
            leader,
            task_id,
            limit,
        } = input;
        let mut change = self.open_run(leader.run_id.as_deref(), false)?;
        // `--all-ready` dispatches every task it can: one refused for what
        // concerns it alone (see `start_refusal`) waits with the reason;
        // one task named alone fails.
        let all_ready = task_id.is_none();
        let tasks = match task_id {
            Some(id) => {
                let task = self.task_of(&change.run, &id)?;
                self.expect_ready(&task)?;
                vec![task]
            }
            // The whole ready queue (a run holds at most
            // `rules::MAX_RUN_TASKS`), not `limit`: the limit counts tasks
            // dispatched, so refused tasks never use it up nor hide the
            // tasks behind them.
            None => self.store.tasks(&TaskQuery::in_statuses(
                &change.run.run_id,
                &[Ready],
                TaskOrder::Queue,
            ))?,
        };
        let mut out = DispatchOutput {
            event_id: 0,
            run: change.run.clone(),
            dispatched: Vec::with_capacity(tasks.len().min(limit)),
            refused: Vec::new(),
            refused_more: 0,
        };
        let mut checks = StartChecks::default();
        for mut task in tasks {
            if out.dispatched.len() >= limit {
                break;
            }
            let run = &change.run;
            let started = match self.check_start(run, &task, TaskAction::Dispatch, &mut checks) {
                Ok(()) => self.start_checked(
                    &mut change,
                    &mut task,
                    TaskAction::Dispatch,
                    &leader.agent,
                    None,
                ),
                Err(error) => Err(error),
            };
            match started {
                Ok(attempt) => out
                    .dispatched
                    .push(crate::wire::Dispatched { task, attempt }),
                // Another command is dispatching it: that one reports it.
                Err(error) if all_ready && error.code() == ErrorCode::TaskBeingDispatched => {}
                Err(error) if all_ready && start_refusal(&error, false) => {
                    let refused =
                        self.refuse_start(&mut change, &mut task, &leader.agent, &error)?;
                    match out.refused.len() < workspace::REFUSED_MAX {
                        true => out.refused.push(refused),
                        false => out.refused_more += 1,
                    }
                }
                Err(error) => return Err(error),
            }
        }
        self.save_run(&change)?;
        out.event_id = change.last_event_id();
        out.run = change.run;
        Ok(out)
    }

    pub(super) fn orch_accept(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, false)?;
        Self::expect_status(&task, &[Review], ErrorCode::TaskNotInReview, |t| {
            format!("only a task in review can be accepted; {}", what_now(t))
        })?;
        task.reason = None;
        let note = input.summary.clone().unwrap_or_else(|| "accepted".into());
        let summary = format!("{} accepted: {note}", task.task_id);
        self.move_task(
            &mut change,
            &mut task,
            TaskAction::Accept,
            TaskStatus::Done,
            (&input.leader.agent, summary),
        )?;
        self.unlock_dependents(&mut change, &task)?;
        self.finish_decision(change, task, None, None)
    }

    pub(super) fn orch_reject(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, false)?;
        Self::expect_status(&task, &[Review], ErrorCode::TaskNotInReview, |t| {
            format!("only a task in review can be rejected; {}", what_now(t))
        })?;
        let reason = input.summary.clone().unwrap_or_default();
        self.end_attempt(&task, AttemptStatus::Rejected, Some(reason.clone()))?;
        let previous = Previous {
            outcome: "was rejected",
            reason,
            details: input.body.clone(),
            attempt: task.attempts,
            result: self.attempt_result(&task)?,
        };
        let attempt = self.start_attempt(
            &mut change,
            &mut task,
            TaskAction::Reject,
            &input.leader.agent,
            Some(previous),
        )?;
        self.finish_decision(change, task, Some(attempt), None)
    }

    pub(super) fn orch_answer(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, false)?;
        Self::expect_status(&task, &[Blocked], ErrorCode::TaskNotBlocked, |t| {
            format!("only a blocked task can be answered; {}", what_now(t))
        })?;
        let summary = input.summary.clone().unwrap_or_default();
        let message =
            self.answer_attempt(&task, &input.leader.agent, summary, input.body.clone())?;
        // The answer unblocked the thread: the task follows it now.
        self.reconcile_task(&mut change, &mut task)?;
        self.finish_decision(change, task, None, Some(message))
    }

    pub(super) fn orch_retry(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, true)?;
        if task.status == TaskStatus::Skipped {
            return Err(self.retry_skipped(&task)?);
        }
        Self::expect_status(&task, &[Failed], ErrorCode::TaskNotFailed, |t| {
            format!("only a failed task can be retried; {}", what_now(t))
        })?;
        if change.run.status == RunStatus::Failed {
            change.run.status = RunStatus::Active;
            change.run.finished_at = None;
            let summary = format!(
                "run {} reopened to retry {}",
                change.run.run_id, task.task_id
            );
            self.emit(
                &mut change,
                None,
                OrchEventType::RunReopened,
                &input.leader.agent,
                summary,
                JsonObject::new(),
            )?;
        }
        if let Some(to) = &input.to {
            task.assignee = to.clone();
        }
        let previous = self.previous_failure(&task)?;
        let attempt = self.start_attempt(
            &mut change,
            &mut task,
            TaskAction::Retry,
            &input.leader.agent,
            previous,
        )?;
        self.unskip_dependents(&mut change, &task)?;
        self.finish_decision(change, task, Some(attempt), None)
    }

    pub(super) fn orch_reassign(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, false)?;
        let to = input.to.clone().unwrap_or_default();
        Self::expect_status(
            &task,
            &[Pending, Ready, Dispatched, Running, Blocked, RetryWait],
            ErrorCode::TaskInvalidState,
            |t| match t.status {
                Review => {
                    "its work is finished: accept it, or reject it and reassign the new attempt"
                        .into()
                }
                Failed => format!(
                    "retry it with a new assignee instead: orch retry {} --to {to}",
                    t.task_id
                ),
                _ => ended_note("only a task that has not ended can be reassigned", t),
            },
        )?;
        let from = std::mem::replace(&mut task.assignee, to.clone());
        if !task.status.has_live_attempt() {
            self.store.update_task(&task)?;
            let summary = format!("{} reassigned from {from} to {to}", task.task_id);
            task.last_event_id = self.emit(
                &mut change,
                Some(&task),
                OrchEventType::TaskReassigned,
                &input.leader.agent,
                summary,
                JsonObject::new(),
            )?;
            self.store.update_task(&task)?;
            return self.finish_decision(change, task, None, None);
        }
        self.cancel_attempt(&task, &input.leader.agent, format!("reassigned to {to}"))?;
        let previous = Previous {
            outcome: "was reassigned",
            reason: format!("it was {from}'s; now it is yours"),
            details: String::new(),
            attempt: task.attempts,
            result: self.attempt_result(&task)?,
        };
        let attempt = self.start_attempt(
            &mut change,
            &mut task,
            TaskAction::Reassign,
            &input.leader.agent,
            Some(previous),
        )?;
        self.finish_decision(change, task, Some(attempt), None)
    }

    pub(super) fn orch_cancel(&mut self, input: Decision) -> Result<TaskOutput, EngineError> {
        let (mut change, mut task) = self.decide(&input, false)?;
        Self::expect_status(
            &task,
            &[
                Pending, Ready, Dispatched, Running, Blocked, Review, RetryWait,
            ],
            ErrorCode::TaskFinished,
            |t| ended_note("only a task that has not ended can be cancelled", t),
        )?;
        let dependents = self.waiting_dependents(&task)?;
        if !dependents.is_empty() && !input.cascade {
            return Err(EngineError::TaskHasDependents {
                run_id: task.run_id.clone(),
                task_id: task.task_id.clone(),
                dependents,
            });
        }
        let reason = input
            .summary
            .clone()
            .unwrap_or_else(|| "cancelled by the leader".into());
        if task.status.has_live_attempt() {
            self.cancel_attempt(&task, &input.leader.agent, reason.clone())?;
        }
        task.reason = Some(reason.clone());
        let summary = format!("{} cancelled: {reason}", task.task_id);
        self.move_task(
            &mut change,
            &mut task,
            TaskAction::Cancel,
            TaskStatus::Cancelled,
            (&input.leader.agent, summary),
        )?;
        self.skip_dependents(&mut change, &task)?;
        self.finish_decision(change, task, None, None)
    }

    pub(super) fn orch_wait(
        &mut self,
        input: OrchWaitInput,
    ) -> Result<OrchWaitOutput, EngineError> {
        // Record first, in this same transaction: a worker's `done` becomes
        // the event the leader wakes on, and the look below sees it.
        let recorded = self.orch_reconcile(input.run_id.clone())?;
        let run = recorded.run;
        let latest = self.next_event_id.saturating_sub(1);
        let events = match input.after_event {
            Some(after_event) => self.store.orch_events(&OrchEventQuery {
                after_event,
                run_id: Some(run.run_id.clone()),
                event_types: OrchEventType::ACTIONABLE.to_vec(),
                limit: input.limit,
            })?,
            None => Vec::new(),
        };
        let next_event_id = match events.last() {
            Some(last) if events.len() == input.limit => last.event_id,
            _ => latest.max(input.after_event.unwrap_or(0)),
        };
        let actionable =
            self.lines_in(&run, TaskStatus::ACTIONABLE, TaskOrder::Queue, v_limit())?;
        let woke = !events.is_empty()
            || run.status != RunStatus::Active
            || (input.after_event.is_none() && !actionable.is_empty());
        Ok(OrchWaitOutput {
            woke,
            next_event_id,
            next_due: recorded.next_due,
            events,
            run,
            actionable,
        })
    }

    pub(super) fn orch_reconcile(
        &mut self,
        run_id: Option<String>,
    ) -> Result<ReconcileOutput, EngineError> {
        let run = self.find_run(run_id.as_deref())?;
        let mut change = RunChange {
            run,
            events: Vec::new(),
            affected: Vec::new(),
        };
        let through = change.run.reconciled_through;
        let retry_due = self.reconcile(&mut change, true)?;
        // How far the run is followed is only a bookmark: a read (`orch
        // wait`'s look) keeps no write for it alone, or every event of
        // another run would make each look a write.
        let moved = change.run.reconciled_through != through && !self.preview;
        if !change.events.is_empty() || moved {
            self.save_run(&change)?;
        }
        let lease_due = self.store.next_lease_expiry()?;
        let next_due = match (retry_due, lease_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(ReconcileOutput {
            run: change.run,
            events: change.events,
            next_due,
        })
    }
}

/// How many actionable tasks `orch wait` lists.
fn v_limit() -> usize {
    crate::validate::DEFAULT_LIST_LIMIT as usize
}

/// A refusal for a task that has ended: `rule`, and for a skipped task
/// what caused it and what brings it back.
fn ended_note(rule: &str, task: &Task) -> String {
    match task.status {
        TaskStatus::Skipped => format!("{rule}; {}", what_now(task)),
        _ => rule.to_owned(),
    }
}

/// What a task's status allows, for refusals.
fn what_now(task: &Task) -> String {
    let id = &task.task_id;
    match task.status {
        Pending => format!("it waits on its needs (`orch task show {id}`)"),
        Ready => format!("it is ready: `orch dispatch --task {id}`"),
        Dispatched | Running => "its attempt is under way; `orch wait` says when it changes".into(),
        Blocked => format!("its worker asked a question: `orch answer {id} --summary ...`"),
        Review => {
            format!("it waits for review: `orch accept {id}` or `orch reject {id} --reason ...`")
        }
        RetryWait => "it will be retried when its backoff ends".into(),
        TaskStatus::Done => "it is done".into(),
        Failed => format!("it failed: `orch retry {id}`"),
        TaskStatus::Cancelled => "it was cancelled".into(),
        TaskStatus::Skipped => format!(
            "it was skipped: {}",
            task.reason.as_deref().unwrap_or("a need did not finish")
        ),
    }
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// The run as it is now, for a read: reconciled (the caller's
    /// transaction is a preview, rolled back after).
    pub(super) fn current_run(&mut self, run_id: Option<&str>) -> Result<Run, EngineError> {
        let run = self.find_run(run_id)?;
        self.reconciled(run)
    }

    /// `run` after recording what its attempts' threads did (no retry is
    /// dispatched).
    pub(super) fn reconciled(&mut self, run: Run) -> Result<Run, EngineError> {
        let mut change = RunChange {
            run,
            events: Vec::new(),
            affected: Vec::new(),
        };
        self.reconcile(&mut change, false)?;
        if !change.events.is_empty() {
            self.save_run(&change)?;
        }
        Ok(change.run)
    }

    /// The refusal of `orch retry` of a skipped task: it names the failed
    /// task to retry instead (or the cancelled one that keeps it skipped
    /// for good).
    fn retry_skipped(&mut self, task: &Task) -> Result<EngineError, EngineError> {
        let id = &task.task_id;
        let message = match self.skip_cause(&task.run_id, &task.needs)? {
            Some(cause) if cause.status == Failed => format!(
                "only a failed task can be retried, and the one that caused this skip is {}, which failed: `orch retry {}` brings {id} back",
                cause.root, cause.root
            ),
            Some(cause) => format!(
                "only a failed task can be retried, and the one that caused this skip is {}, which was cancelled for good: {id} will not run in this run (add a task in its place)",
                cause.root
            ),
            None => format!("only a failed task can be retried; {}", what_now(task)),
        };
        Ok(EngineError::TaskState {
            code: ErrorCode::TaskNotFailed,
            run_id: task.run_id.clone(),
            task_id: id.clone(),
            status: task.status,
            message,
        })
    }

    /// The run and task a decision is about, after reconciling the run.
    fn decide(
        &mut self,
        input: &Decision,
        reopens: bool,
    ) -> Result<(RunChange, Task), EngineError> {
        let change = self.open_run(input.leader.run_id.as_deref(), reopens)?;
        let task = self.task_of(&change.run, &input.task_id)?;
        if let Some(to) = &input.to {
            self.check_recipient("`to`", &Address::stored(to))?;
        }
        Ok((change, task))
    }

    fn finish_decision(
        &mut self,
        mut change: RunChange,
        task: Task,
        attempt: Option<crate::orch::model::Attempt>,
        message: Option<crate::model::Message>,
    ) -> Result<TaskOutput, EngineError> {
        let source = change.events.last().map_or_else(
            || crate::validate::ORCH_AGENT.to_owned(),
            |e| e.source.clone(),
        );
        self.settle_run(&mut change, &source)?;
        self.save_run(&change)?;
        Ok(TaskOutput {
            event_id: change.last_event_id(),
            run: change.run,
            task,
            attempt,
            message,
            affected: change.affected,
        })
    }

    /// Follows one task's thread right away (after `orch answer`).
    fn reconcile_task(
        &mut self,
        change: &mut RunChange,
        task: &mut Task,
    ) -> Result<(), EngineError> {
        self.reconcile(change, false)?;
        *task = self.task_of(&change.run, &task.task_id)?;
        Ok(())
    }

    fn expect_ready(&mut self, task: &Task) -> Result<(), EngineError> {
        if task.status == Ready {
            return Ok(());
        }
        let message = if task.status == Pending {
            let waiting: Vec<String> = self
                .need_statuses(task)?
                .into_iter()
                .filter(|(_, s)| *s != TaskStatus::Done)
                .map(|(id, s)| format!("{id} ({s})"))
                .collect();
            format!(
                "it waits on {}; `orch ready` lists what can start now",
                waiting.join(", ")
            )
        } else {
            format!("only a ready task can be dispatched; {}", what_now(task))
        };
        Err(EngineError::TaskState {
            code: ErrorCode::TaskNotReady,
            run_id: task.run_id.clone(),
            task_id: task.task_id.clone(),
            status: task.status,
            message,
        })
    }

    /// The pending tasks that need `task`, directly or through others: what
    /// cancelling it would skip.
    fn waiting_dependents(&mut self, task: &Task) -> Result<Vec<String>, EngineError> {
        let mut found: Vec<String> = Vec::new();
        let mut work = vec![task.task_id.clone()];
        while let Some(id) = work.pop() {
            for dependent in self
                .store
                .tasks(&TaskQuery::dependents(&task.run_id, &id))?
            {
                if dependent.status == Pending && !found.contains(&dependent.task_id) {
                    found.push(dependent.task_id.clone());
                    work.push(dependent.task_id);
                }
            }
        }
        Ok(found)
    }

    fn task_view(&mut self, task: Task) -> Result<TaskView, EngineError> {
        let waiting_on = if task.status == Pending {
            self.need_statuses(&task)?
                .into_iter()
                .filter(|(_, s)| *s != TaskStatus::Done)
                .map(|(id, _)| id)
                .collect()
        } else {
            Vec::new()
        };
        Ok(TaskView { task, waiting_on })
    }

    /// The tasks of `run` in `statuses`, `limit` at most, as list lines.
    fn lines_in(
        &mut self,
        run: &Run,
        statuses: &[TaskStatus],
        order: TaskOrder,
        limit: usize,
    ) -> Result<Vec<TaskLine>, EngineError> {
        let tasks = self.tasks_in(run, statuses, order, limit)?;
        tasks
            .into_iter()
            .map(|t| self.task_view(t).map(TaskLine::from))
            .collect()
    }

    /// `orch task add` and `orch plan`: checks the ids, the needs and their
    /// cycles, then adds every task in dependency order, each starting as
    /// its needs say.
    fn add_tasks(&mut self, input: PlanInput) -> Result<(RunChange, Vec<Task>), EngineError> {
        let PlanInput {
            leader,
            tasks,
            single,
        } = input;
        let mut change = self.open_run(leader.run_id.as_deref(), false)?;
        let run_id = change.run.run_id.clone();
        for (i, task) in tasks.iter().enumerate() {
            let place = match single {
                true => "`task.assignee`".to_owned(),
                false => format!("`tasks[{i}].assignee`"),
            };
            self.check_recipient(&place, &Address::stored(&task.assignee))?;
        }
        let order = self.plan_order(&run_id, &tasks, single)?;
        if let Some(spec) = change.run.repo.clone() {
            self.check_task_folders(&spec, &run_id, &tasks, single)?;
        }
        let mut added: Vec<Option<Task>> = vec![None; tasks.len()];
        let mut statuses: BTreeMap<String, TaskStatus> = BTreeMap::new();
        let mut specs: Vec<Option<NewTask>> = tasks.into_iter().map(Some).collect();
        for index in order {
            let Some(spec) = specs[index].take() else {
                continue;
            };
            let task = self.add_task(&mut change, spec, &mut statuses, &leader.agent)?;
            added[index] = Some(task);
        }
        self.settle_run(&mut change, &leader.agent)?;
        self.save_run(&change)?;
        Ok((change, added.into_iter().flatten().collect()))
    }

    /// The order to add a plan's tasks in (needs first), after checking that
    /// ids are new and unique, needs exist, and no needs make a cycle.
    fn plan_order(
        &mut self,
        run_id: &str,
        tasks: &[NewTask],
        single: bool,
    ) -> Result<Vec<usize>, EngineError> {
        let path = |i: usize| {
            if single {
                "task".to_owned()
            } else {
                format!("tasks[{i}]")
            }
        };
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, task) in tasks.iter().enumerate() {
            if let Some(first) = index.insert(&task.task_id, i) {
                return Err(EngineError::TaskExists {
                    run_id: run_id.to_owned(),
                    task_id: task.task_id.clone(),
                    message: format!(
                        "{}.task_id: task {} is also {}; task ids are unique in a run",
                        path(i),
                        task.task_id,
                        path(first)
                    ),
                });
            }
            if self.store.task(run_id, &task.task_id)?.is_some() {
                return Err(EngineError::TaskExists {
                    run_id: run_id.to_owned(),
                    task_id: task.task_id.clone(),
                    message: format!(
                        "{}.task_id: run {run_id} already has a task {}; pick another id",
                        path(i),
                        task.task_id
                    ),
                });
            }
        }
        let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (i, task) in tasks.iter().enumerate() {
            for (n, need) in task.needs.iter().enumerate() {
                if !index.contains_key(need.as_str()) && self.store.task(run_id, need)?.is_none() {
                    return Err(task_not_found(
                        run_id,
                        need,
                        Some(&format!("{}.needs[{n}]", path(i))),
                    ));
                }
            }
            let in_plan = task
                .needs
                .iter()
                .map(String::as_str)
                .filter(|n| index.contains_key(n))
                .collect();
            graph.insert(&task.task_id, in_plan);
        }
        if let Some(cycle) = rules::find_cycle(&graph) {
            return Err(EngineError::DependencyCycle {
                run_id: run_id.to_owned(),
                cycle,
            });
        }
        // Needs first: a depth-first post-order over the (acyclic) graph.
        let mut order = Vec::with_capacity(tasks.len());
        let mut placed: BTreeSet<&str> = BTreeSet::new();
        for task in tasks {
            let mut stack: Vec<(&str, usize)> = vec![(&task.task_id, 0)];
            while let Some((node, next)) = stack.last_mut() {
                if placed.contains(*node) {
                    stack.pop();
                    continue;
                }
                match graph[*node].get(*next) {
                    Some(&need) => {
                        *next += 1;
                        if !placed.contains(need) {
                            stack.push((need, 0));
                        }
                    }
                    None => {
                        placed.insert(node);
                        order.push(index[*node]);
                        stack.pop();
                    }
                }
            }
        }
        Ok(order)
    }

    /// Refuses a run with a repository whose attempts could never get a
    /// worktree (see [`workspace::unworkable`]), or whose id names the same
    /// folders and branches as another run's over the same repository or
    /// worktrees folder on a file system that ignores case.
    fn check_run_folders(&mut self, spec: &RepoSpec, run_id: &str) -> Result<(), EngineError> {
        if let Err((field, problem)) = workspace::unworkable(spec, run_id, None) {
            return Err(EngineError::invalid(field, problem));
        }
        let every = RunQuery {
            created_by: None,
            statuses: Vec::new(),
            limit: usize::MAX,
        };
        for other in self.store.runs(&every)? {
            let shares = other
                .repo
                .as_ref()
                .is_some_and(|o| o.repo == spec.repo || o.worktrees == spec.worktrees);
            if shares && other.run_id != run_id && workspace::same_folder(&other.run_id, run_id) {
                return Err(EngineError::invalid(
                    "run_id",
                    format!(
                        "`{run_id}` differs from run {} only in case, and both use the same repository or worktrees folder: their worktree folders and branches would be one on a file system that ignores case; pick an id that differs in more than case",
                        other.run_id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses, in a run with a repository, a task whose attempts could
    /// never get a worktree: an id too long once encoded, a path too long,
    /// or an id that differs from another task's only in case (the same
    /// folder and branch where case is ignored). Council seats get no
    /// worktree, so they are not checked.
    fn check_task_folders(
        &mut self,
        spec: &RepoSpec,
        run_id: &str,
        tasks: &[NewTask],
        single: bool,
    ) -> Result<(), EngineError> {
        let path = |i: usize| match single {
            true => "task".to_owned(),
            false => format!("tasks[{i}]"),
        };
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        if tasks.iter().any(|t| t.council.is_none()) {
            let every = TaskQuery::in_statuses(run_id, &[], TaskOrder::Added);
            for task in self.store.tasks(&every)? {
                if task.council.is_none() {
                    seen.insert(workspace::folder_key(&task.task_id), task.task_id);
                }
            }
        }
        for (i, task) in tasks.iter().enumerate() {
            if task.council.is_some() {
                continue;
            }
            if let Err((_, problem)) = workspace::unworkable(spec, run_id, Some(&task.task_id)) {
                return Err(EngineError::invalid(
                    format!("{}.task_id", path(i)),
                    problem,
                ));
            }
            let key = workspace::folder_key(&task.task_id);
            match seen.get(&key) {
                Some(other) => {
                    return Err(EngineError::TaskExists {
                        run_id: run_id.to_owned(),
                        task_id: task.task_id.clone(),
                        message: format!(
                            "{}.task_id: task {} differs from task {other} only in case, and their worktree folders and branches would be one on a file system that ignores case; pick an id that differs in more than case",
                            path(i),
                            task.task_id
                        ),
                    });
                }
                None => {
                    seen.insert(key, task.task_id.clone());
                }
            }
        }
        Ok(())
    }

    /// Adds one task to the run, as its needs say it starts; refused once
    /// the run holds [`rules::MAX_RUN_TASKS`] (every orch command that adds
    /// tasks comes here).
    pub(super) fn add_task(
        &mut self,
        change: &mut RunChange,
        spec: NewTask,
        statuses: &mut BTreeMap<String, TaskStatus>,
        agent: &str,
    ) -> Result<Task, EngineError> {
        let most = rules::MAX_RUN_TASKS;
        if change.run.tasks_added >= u64::try_from(most).unwrap_or(u64::MAX) {
            return Err(EngineError::invalid(
                "tasks",
                format!(
                    "run {} already holds {most} tasks, the most one run holds (a dispatch goes through every ready task); nothing was added: add these to another run",
                    change.run.run_id
                ),
            ));
        }
        let mut needs = Vec::with_capacity(spec.needs.len());
        for need in &spec.needs {
            let status = match statuses.get(need) {
                Some(s) => *s,
                None => self
                    .store
                    .task(&change.run.run_id, need)?
                    .map_or(Pending, |t| t.status),
            };
            needs.push((need.clone(), status));
        }
        let status = rules::from_needs(needs.iter().map(|(_, s)| *s));
        let cause = match status {
            TaskStatus::Skipped => self.skip_cause(&change.run.run_id, &spec.needs)?,
            _ => None,
        };
        let reason = cause.as_ref().map(SkipCause::reason);
        let skipped_by = cause.map(|c| c.root);
        change.run.tasks_added += 1;
        let mut task = Task {
            run_id: change.run.run_id.clone(),
            task_id: spec.task_id,
            title: spec.title,
            body: spec.body,
            acceptance: spec.acceptance,
            assignee: spec.assignee,
            priority: spec.priority,
            needs: spec.needs,
            retry: spec.retry,
            review: spec.review,
            status,
            reason,
            skipped_by,
            attempts: 0,
            thread_id: None,
            retry_at: None,
            seq: change.run.tasks_added,
            last_event_id: 0,
            created_at: self.now,
            updated_at: self.now,
            base: spec.base,
            council: spec.council,
        };
        *change.run.counts.of_mut(status) += 1;
        statuses.insert(task.task_id.clone(), status);
        let summary = format!("{} added: {}", task.task_id, task.title);
        task.last_event_id = self.emit(
            change,
            Some(&task),
            OrchEventType::TaskAdded,
            agent,
            summary,
            JsonObject::new(),
        )?;
        if status != Pending {
            let summary = match &task.reason {
                Some(reason) => format!("{}: skipped, {reason}", task.task_id),
                None => format!("{} is ready", task.task_id),
            };
            task.last_event_id = self.emit(
                change,
                Some(&task),
                OrchEventType::entering(status),
                agent,
                summary,
                JsonObject::new(),
            )?;
        }
        self.store.insert_task(&task)?;
        Ok(task)
    }
}
