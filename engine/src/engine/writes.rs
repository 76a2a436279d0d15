//! The write commands' handlers: `send`, `claim`, `renew`, `update`,
//! `reply`, `done`, `fail`, `cancel`, and the recording of lapsed leases
//! every write transaction starts with.
//!
//! A handler takes its checked input (see `input`), loads what it needs,
//! applies the rules (the transition table in [`crate::rules`], fencing,
//! revival) and records the change: the thread, at most one message,
//! exactly one event. Each runs inside the write transaction
//! [`super::Engine`] opened, after that transaction recorded every lease
//! that had lapsed, so stored statuses are exact here.

use crate::error::EngineError;
use crate::ids::{IdKind, IdSource};
use crate::model::{Event, EventType, JsonObject, Kind, Status, Thread};
use crate::rules::{self, Action};
use crate::store::{Store, ThreadState};
use crate::validate::SYSTEM_AGENT;
use crate::wire::*;

use super::input::*;
use super::tx::{Change, LeaseMove, Tx, lease_payload, note_change};

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn send(&mut self, input: SendInput) -> Result<MessageOutput, EngineError> {
        match input {
            SendInput::Append(append) => self.append(append),
            SendInput::New {
                from,
                thread,
                draft,
            } => {
                self.check_recipient("`to_agent`", &thread.to)?;
                self.open_thread(from, thread, draft)
            }
        }
    }

    /// A new thread from `from` with its first message: `send`'s, once its
    /// address is checked, and an orch attempt's.
    pub(super) fn open_thread(
        &mut self,
        from: String,
        new: NewThread,
        draft: MessageDraft,
    ) -> Result<MessageOutput, EngineError> {
        let (assigned_to, route) = self.route(&new.to, new.pick)?;
        let mut thread = Thread {
            thread_id: self.ids.next_id(IdKind::Thread, self.now),
            run_id: new.run_id,
            task_id: new.task_id,
            subject: new.subject,
            created_by: from.clone(),
            assigned_to: assigned_to.clone(),
            status: Status::Pending,
            priority: new.priority,
            attempts: 0,
            max_attempts: new.max_attempts,
            latest_message_id: None,
            last_event_id: 0,
            created_at: self.now,
            updated_at: self.now,
        };
        let mut payload = JsonObject::new();
        if let Some(route) = &route {
            payload.insert("address".into(), route.address.clone().into());
            payload.insert("members".into(), route.members.into());
            if let Some(picked) = &route.picked {
                payload.insert("picked".into(), picked.clone().into());
            }
        }
        let change = Change {
            event_type: EventType::ThreadCreated,
            source: &from,
            summary: draft.summary.clone(),
            payload,
            message: Some((&assigned_to, draft)),
        };
        let (event, message) = self.record(&mut thread, true, change)?;
        let message = message.ok_or_else(|| EngineError::internal("send wrote no message"))?;
        Ok(MessageOutput {
            thread: self.view(ThreadState {
                thread,
                lease: None,
            }),
            message,
            event_id: event.event_id,
            route,
        })
    }

    pub(super) fn reply(&mut self, input: AppendInput) -> Result<MessageOutput, EngineError> {
        self.append(input)
    }

    /// A message into an existing thread. From the lease holder it is a
    /// holder command (fenced, renews the lease); from anyone else an
    /// `answer` unblocks a blocked thread.
    fn append(&mut self, input: AppendInput) -> Result<MessageOutput, EngineError> {
        let AppendInput {
            from,
            to,
            thread_id,
            lease_token,
            draft,
        } = input;
        if let Some(to) = &to {
            self.check_recipient("`to_agent`", to)?;
        }
        let mut state = self.load(&thread_id)?;
        self.open_status(&state, "accepts no more messages")?;
        let from_holder = lease_token.is_some()
            || match &state.lease {
                Some(lease) => self.was_holder(lease, &from)?,
                None => false,
            };
        let (event_type, payload) = if from_holder {
            let mut payload = self.fence_in(&mut state, &from, lease_token)?;
            let heartbeat = LeaseMove::Heartbeat(None);
            let event = self.holder_step(
                &mut state,
                &mut payload,
                Action::Append,
                "written to",
                heartbeat,
            )?;
            (event, payload)
        } else {
            let answers = draft.kind == Kind::Answer && state.thread.status == Status::Blocked;
            let action = if answers {
                Action::Answer
            } else {
                Action::Append
            };
            let (previous, event) = self.apply(&mut state, action, "written to")?;
            let mut payload = JsonObject::new();
            note_change(&mut payload, previous, state.thread.status);
            (event, payload)
        };
        let to = match to {
            Some(to) => to.to_string(),
            None => {
                let holder = state.lease.as_ref().map(|l| l.agent.as_str());
                rules::default_recipient(&state.thread, holder, &from).to_owned()
            }
        };
        self.write_message(state, event_type, (&from, &to), payload, draft)
    }

    pub(super) fn claim(&mut self, input: ClaimInput) -> Result<ClaimOutput, EngineError> {
        let state = match input.target {
            ClaimTarget::Thread(thread_id) => self.load(&thread_id)?,
            ClaimTarget::Next => match self.next_queued(&input.agent)? {
                Some(state) => state,
                None => return Ok(ClaimOutput { claimed: None }),
            },
        };
        let claimed = self.claim_thread(state, &input.agent, input.lease_seconds)?;
        Ok(ClaimOutput {
            claimed: Some(claimed),
        })
    }

    /// The first thread of `agent`'s queue: what `fetch` would list first,
    /// from its own threads and its roles' pools. Lapsed leases are already
    /// recorded in this transaction, so stored statuses are exact and one
    /// indexed query per address finds it.
    fn next_queued(&mut self, agent: &str) -> Result<Option<ThreadState>, EngineError> {
        let mut best: Option<ThreadState> = None;
        for address in self.addresses_of(agent, false)? {
            let query = super::ahead::queue_head(address);
            if let Some(found) = self.store.threads(&query)?.pop() {
                let earlier = best
                    .as_ref()
                    .is_none_or(|b| query.compare(&found.thread, &b.thread).is_lt());
                if earlier {
                    best = Some(found);
                }
            }
        }
        Ok(best)
    }

    /// Grants `agent` a lease of `seconds` on the loaded thread, if nobody
    /// holds it and attempts remain.
    fn claim_thread(
        &mut self,
        mut state: ThreadState,
        agent: &str,
        seconds: u64,
    ) -> Result<LeaseOutput, EngineError> {
        let status = self.open_status(&state, "cannot be claimed")?;
        self.check_claimable(&state, agent, status)?;
        // Claim from the effective status: a lapsed lease already counts as gone.
        state.thread.status = status;
        let (_, event_type) = self.apply(&mut state, Action::Claim, "claimed")?;
        let previous = state.lease.take();
        let lease = crate::model::Lease {
            thread_id: state.thread.thread_id.clone(),
            agent: agent.to_owned(),
            lease_token: previous.as_ref().map_or(1, |l| l.lease_token + 1),
            attempt: state.thread.attempts + 1,
            lease_seconds: seconds,
            claimed_at: self.now,
            expires_at: self.now.plus_seconds(seconds),
            released_at: None,
        };
        state.thread.attempts = lease.attempt;
        self.store.put_lease(&lease)?;
        let mut payload = lease_payload(&lease);
        payload.insert("expires_at".into(), lease.expires_at.to_string().into());
        if let Some(previous) = &previous {
            payload.insert("previous_agent".into(), previous.agent.clone().into());
        }
        let summary = format!(
            "{agent} claimed it (attempt {} of {}, lease token {})",
            lease.attempt, state.thread.max_attempts, lease.lease_token
        );
        let change = Change {
            event_type,
            source: agent,
            summary,
            payload,
            message: None,
        };
        let (event, _) = self.record(&mut state.thread, false, change)?;
        self.note_role_claim(&state.thread, agent, event.event_id)?;
        state.lease = Some(lease.clone());
        Ok(LeaseOutput {
            thread: self.view(state),
            lease,
            event_id: event.event_id,
        })
    }

    /// The claim rules: only the assignee or a member of its role, never
    /// over a live lease, never past the last attempt.
    fn check_claimable(
        &mut self,
        state: &ThreadState,
        agent: &str,
        status: Status,
    ) -> Result<(), EngineError> {
        let thread = &state.thread;
        self.check_may_claim(thread, agent)?;
        if let Some(lease) = state.lease.as_ref().filter(|l| l.is_live(self.now)) {
            return Err(EngineError::LeaseConflict {
                thread_id: thread.thread_id.clone(),
                holder: lease.agent.clone(),
                lease_token: lease.lease_token,
                expires_at: lease.expires_at,
            });
        }
        if thread.attempts >= thread.max_attempts {
            return Err(EngineError::state(
                &thread.thread_id,
                status,
                format!(
                    "all {} attempts are used; the leader may open a new thread",
                    thread.max_attempts
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn renew(&mut self, input: RenewInput) -> Result<LeaseOutput, EngineError> {
        let agent = &input.holder.agent;
        let (mut state, mut payload) = self.hold(&input.holder, "has no lease to renew")?;
        let heartbeat = LeaseMove::Heartbeat(input.lease_seconds);
        let event_type = self.holder_step(
            &mut state,
            &mut payload,
            Action::Renew,
            "renewed",
            heartbeat,
        )?;
        let lease = state
            .lease
            .clone()
            .ok_or_else(|| EngineError::internal("renew lost the lease"))?;
        payload.extend(lease_payload(&lease));
        payload.insert("expires_at".into(), lease.expires_at.to_string().into());
        let change = Change {
            event_type,
            source: agent,
            summary: format!("{agent} renewed the lease until {}", lease.expires_at),
            payload,
            message: None,
        };
        let (event, _) = self.record(&mut state.thread, false, change)?;
        Ok(LeaseOutput {
            thread: self.view(state),
            lease,
            event_id: event.event_id,
        })
    }

    pub(super) fn update(&mut self, input: HolderMessage) -> Result<MessageOutput, EngineError> {
        self.holder_message(input)
    }

    pub(super) fn done(&mut self, input: HolderMessage) -> Result<MessageOutput, EngineError> {
        self.holder_message(input)
    }

    pub(super) fn fail(&mut self, input: HolderMessage) -> Result<MessageOutput, EngineError> {
        self.holder_message(input)
    }

    /// A holder command that writes a message to the thread's creator:
    /// `update` (renews the lease), `done` and `fail` (release it).
    fn holder_message(&mut self, input: HolderMessage) -> Result<MessageOutput, EngineError> {
        let HolderMessage {
            holder,
            action,
            draft,
        } = input;
        let (what, verb, lease_move) = match action {
            Action::Complete => ("cannot be finished again", "done", LeaseMove::Release),
            Action::Fail => ("cannot be finished again", "failed", LeaseMove::Release),
            Action::Block => (
                "takes no more updates",
                "blocked",
                LeaseMove::Heartbeat(None),
            ),
            Action::Start => (
                "takes no more updates",
                "set in_progress",
                LeaseMove::Heartbeat(None),
            ),
            _ => (
                "takes no more updates",
                "updated",
                LeaseMove::Heartbeat(None),
            ),
        };
        let (mut state, mut payload) = self.hold(&holder, what)?;
        if action == Action::Complete {
            let thread = &state.thread;
            let (run_id, task_id) = (thread.run_id.clone(), thread.task_id.clone());
            self.check_council_answer(&holder, &draft, run_id.as_deref(), task_id.as_deref())?;
        }
        let event_type = self.holder_step(&mut state, &mut payload, action, verb, lease_move)?;
        let to = state.thread.created_by.clone();
        self.write_message(state, event_type, (&holder.agent, &to), payload, draft)
    }

    pub(super) fn cancel(&mut self, input: CancelInput) -> Result<MessageOutput, EngineError> {
        let CancelInput {
            agent,
            thread_id,
            reason,
            artifacts,
        } = input;
        let mut state = self.load(&thread_id)?;
        state.thread.status = self.open_status(&state, "cannot be cancelled")?;
        let (previous, event_type) = self.apply(&mut state, Action::Cancel, "cancelled")?;
        if let Some(lease) = state.lease.as_mut().filter(|l| l.released_at.is_none()) {
            lease.released_at = Some(self.now);
            self.store.put_lease(lease)?;
        }
        let mut payload = JsonObject::new();
        note_change(&mut payload, previous, state.thread.status);
        let holder = state.lease.as_ref().map(|l| l.agent.as_str());
        let to = rules::default_recipient(&state.thread, holder, &agent).to_owned();
        let mut control = JsonObject::new();
        control.insert("action".into(), "cancel".into());
        let draft = MessageDraft {
            kind: Kind::Control,
            summary: reason,
            body: String::new(),
            payload: control,
            artifacts,
        };
        self.write_message(state, event_type, (&agent, &to), payload, draft)
    }

    /// Records every lapsed lease: released, the thread back to the queue
    /// (or failed on its last attempt), one event each.
    pub(super) fn record_lapses(&mut self) -> Result<Vec<Event>, EngineError> {
        let lapsed = self.store.lapsed_leases(self.now, usize::MAX)?;
        let mut events = Vec::new();
        for mut lease in lapsed {
            let Some(mut state) = self.store.thread(&lease.thread_id)? else {
                continue;
            };
            lease.released_at = Some(self.now);
            self.store.put_lease(&lease)?;
            let final_attempt = state.thread.attempts >= state.thread.max_attempts;
            let action = if final_attempt {
                Action::LapseFinal
            } else {
                Action::Lapse
            };
            // A pending or finished thread with an unreleased lease: the
            // release above is all there is to record.
            let Some(row) = rules::transition(action, state.thread.status) else {
                continue;
            };
            let Some(event_type) = row.event else {
                continue;
            };
            let previous = state.thread.status;
            state.thread.status = row.target(previous, false);
            let mut payload = lease_payload(&lease);
            payload.insert("expired_at".into(), lease.expires_at.to_string().into());
            payload.insert("previous_status".into(), previous.as_str().into());
            let (summary, draft) = if final_attempt {
                payload.insert("reason".into(), "lease_expired".into());
                lapse_failure(&lease, state.thread.max_attempts)
            } else {
                let summary = format!(
                    "lease of {} (token {}) expired at {}; the thread can be claimed again",
                    lease.agent, lease.lease_token, lease.expires_at
                );
                (summary, None)
            };
            let to = state.thread.created_by.clone();
            let change = Change {
                event_type,
                source: SYSTEM_AGENT,
                summary,
                payload,
                message: draft.map(|d| (to.as_str(), d)),
            };
            let (event, _) = self.record(&mut state.thread, false, change)?;
            events.push(event);
        }
        Ok(events)
    }
}

/// The summary and result message of a thread failed by a lease that ran
/// out on its last attempt.
fn lapse_failure(lease: &crate::model::Lease, max_attempts: u32) -> (String, Option<MessageDraft>) {
    let summary = format!(
        "lease of {} expired at {} on attempt {} of {}; the thread failed",
        lease.agent, lease.expires_at, lease.attempt, max_attempts
    );
    let mut reason = JsonObject::new();
    reason.insert("reason".into(), "lease_expired".into());
    let draft = MessageDraft {
        kind: Kind::Result,
        summary: summary.clone(),
        body: String::new(),
        payload: reason,
        artifacts: Vec::new(),
    };
    (summary, Some(draft))
}
