//! The transaction context [`Tx`] and the command handlers that run in it.
//!
//! A handler loads what it needs, applies the rules (the transition table in
//! [`crate::rules`], fencing, revival), and records the change: the thread,
//! at most one message, exactly one event. It must never commit, roll back or
//! look at the clock: [`super::Engine`] owns the transaction and passes `now`.

use serde_json::json;

use crate::error::EngineError;
use crate::ids::{IdKind, IdSource};
use crate::model::{
    Event, EventId, EventType, JsonObject, Kind, Lease, LeaseToken, Message, Status, Thread,
};
use crate::rules::{self, Action};
use crate::store::{EventQuery, Store, ThreadOrder, ThreadQuery, ThreadState};
use crate::time::Timestamp;
use crate::validate::{ArtifactDraft, SYSTEM_AGENT};
use crate::wire::*;

use super::input::*;

pub(super) struct Tx<'a, S, I> {
    pub(super) store: &'a mut S,
    pub(super) ids: &'a mut I,
    pub(super) now: Timestamp,
    /// The id the next event of this (write) transaction gets.
    pub(super) next_event_id: EventId,
}

/// What a command changes besides the thread record: one event, and maybe
/// one message.
struct Change<'a> {
    event_type: EventType,
    source: &'a str,
    summary: String,
    payload: JsonObject,
    message: Option<(&'a str, &'a str, MessageDraft)>,
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn load(&mut self, thread_id: &str) -> Result<ThreadState, EngineError> {
        self.store
            .thread(thread_id)?
            .ok_or_else(|| EngineError::ThreadNotFound {
                thread_id: thread_id.to_owned(),
            })
    }

    pub(super) fn view(&self, state: &ThreadState) -> ThreadView {
        self.view_owned(state.clone())
    }

    /// [`Tx::view`] of a state the caller no longer needs (no copy).
    pub(super) fn view_owned(&self, state: ThreadState) -> ThreadView {
        let ThreadState { mut thread, lease } = state;
        thread.status = rules::effective_status(&thread, lease.as_ref(), self.now);
        ThreadView {
            thread,
            lease: lease.filter(|l| l.is_live(self.now)),
        }
    }

    pub(super) fn effective(&self, state: &ThreadState) -> Status {
        rules::effective_status(&state.thread, state.lease.as_ref(), self.now)
    }

    /// Writes `thread` (inserting it when `new`), the change's message and
    /// its event. The thread's status must already be the new one.
    fn record(
        &mut self,
        thread: &mut Thread,
        new: bool,
        change: Change<'_>,
    ) -> Result<(EventId, Option<Message>), EngineError> {
        self.record_event(thread, new, change)
            .map(|(event, message)| (event.event_id, message))
    }

    /// [`Tx::record`], returning the whole event.
    fn record_event(
        &mut self,
        thread: &mut Thread,
        new: bool,
        change: Change<'_>,
    ) -> Result<(Event, Option<Message>), EngineError> {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        let now = self.now;
        let message = match change.message {
            None => None,
            Some((from, to, draft)) => {
                let message_id = self.ids.next_id(IdKind::Message, now);
                let artifacts = draft
                    .artifacts
                    .into_iter()
                    .map(|a| {
                        a.into_artifact(self.ids.next_id(IdKind::Artifact, now), &message_id, now)
                    })
                    .collect();
                Some(Message {
                    message_id,
                    thread_id: thread.thread_id.clone(),
                    event_id,
                    from_agent: from.to_owned(),
                    to_agent: to.to_owned(),
                    kind: draft.kind,
                    summary: draft.summary,
                    body: draft.body,
                    payload: draft.payload,
                    created_at: now,
                    artifacts,
                })
            }
        };
        thread.last_event_id = event_id;
        thread.updated_at = now;
        if let Some(message) = &message {
            thread.latest_message_id = Some(message.message_id.clone());
        }
        if new {
            self.store.insert_thread(thread)?;
        } else {
            self.store.update_thread(thread)?;
        }
        if let Some(message) = &message {
            self.store.insert_message(message)?;
        }
        let event = Event {
            event_id,
            thread_id: thread.thread_id.clone(),
            run_id: thread.run_id.clone(),
            task_id: thread.task_id.clone(),
            event_type: change.event_type,
            source: change.source.to_owned(),
            message_id: message.as_ref().map(|m| m.message_id.clone()),
            message_kind: message.as_ref().map(|m| m.kind),
            status: thread.status,
            summary: change.summary,
            payload: change.payload,
            created_at: now,
        };
        self.store.insert_event(&event)?;
        Ok((event, message))
    }

    /// Refuses anything on a thread that is finished (or, by a lapsed last
    /// lease, effectively finished).
    fn open_status(&self, state: &ThreadState, what: &str) -> Result<Status, EngineError> {
        let status = self.effective(state);
        if status.is_terminal() {
            return Err(EngineError::ThreadFinished {
                thread_id: state.thread.thread_id.clone(),
                status,
                message: format!(
                    "finished threads never change, so it {what}; move on (the leader opens a new thread if more work is needed)"
                ),
            });
        }
        Ok(status)
    }

    fn was_holder(&mut self, thread_id: &str, agent: &str) -> Result<bool, EngineError> {
        let mut query = EventQuery::after(0, 1);
        query.thread_id = Some(thread_id.to_owned());
        query.event_types = vec![EventType::ThreadClaimed];
        query.source = Some(agent.to_owned());
        Ok(!self.store.events(&query)?.is_empty())
    }

    /// Checks that `agent` (with `token`, if given) holds the thread's most
    /// recent lease, live or lapsed: the fencing rule of every worker
    /// command. Returns that lease.
    fn fence(
        &mut self,
        state: &ThreadState,
        agent: &str,
        token: Option<LeaseToken>,
    ) -> Result<Lease, EngineError> {
        let thread_id = &state.thread.thread_id;
        let Some(lease) = &state.lease else {
            return Err(EngineError::state(
                thread_id,
                self.effective(state),
                "nobody has claimed it; claim it first",
            ));
        };
        let lost = || EngineError::LeaseLost {
            thread_id: thread_id.clone(),
            holder: lease.agent.clone(),
            lease_token: lease.lease_token,
        };
        match token {
            Some(0) => Err(EngineError::invalid(
                "lease_token",
                "is 0, but lease tokens start at 1; pass the token claim returned",
            )),
            Some(t) if t > lease.lease_token => Err(EngineError::invalid(
                "lease_token",
                format!(
                    "is {t}, but the newest lease token of thread {thread_id} is {}; pass the token claim returned",
                    lease.lease_token
                ),
            )),
            Some(t) if t < lease.lease_token => Err(lost()),
            _ if agent == lease.agent => Ok(lease.clone()),
            // The token matched, but the name did not: someone else's token.
            Some(_) => Err(EngineError::NotLeaseHolder {
                thread_id: thread_id.clone(),
                agent: agent.to_owned(),
                holder: lease.agent.clone(),
            }),
            None if self.was_holder(thread_id, agent)? => Err(lost()),
            None => Err(EngineError::NotLeaseHolder {
                thread_id: thread_id.clone(),
                agent: agent.to_owned(),
                holder: lease.agent.clone(),
            }),
        }
    }

    /// After [`Tx::fence`]: revives a lapsed lease (the holder is back and
    /// nobody replaced it), resuming a thread the lapse put back in the
    /// queue. Returns whether it revived.
    fn revive(&self, state: &mut ThreadState, lease: &mut Lease) -> bool {
        if lease.is_live(self.now) {
            return false;
        }
        lease.released_at = None;
        lease.expires_at = self.now.plus_seconds(lease.lease_seconds);
        if let Some(t) = rules::transition(Action::Revive, state.thread.status) {
            state.thread.status = t.target(state.thread.status, true);
        }
        true
    }

    /// A holder command: the lease runs `lease_seconds` from now.
    fn heartbeat(&self, lease: &mut Lease) {
        lease.released_at = None;
        lease.expires_at = self.now.plus_seconds(lease.lease_seconds);
    }

    fn apply(
        &self,
        state: &mut ThreadState,
        action: Action,
        verb: &str,
    ) -> Result<(Status, EventType), EngineError> {
        let from = state.thread.status;
        let live = state.lease.as_ref().is_some_and(|l| l.is_live(self.now));
        let row = rules::transition(action, from).ok_or_else(|| {
            EngineError::state(
                &state.thread.thread_id,
                from,
                format!("it cannot be {verb}"),
            )
        })?;
        let event = row
            .event
            .ok_or_else(|| EngineError::internal(format!("{action:?} has no event")))?;
        let to = row.target(from, live);
        state.thread.status = to;
        Ok((from, event))
    }

    // --- commands -----------------------------------------------------------

    pub(super) fn send(&mut self, input: &SendInput<'_>) -> Result<MessageOutput, EngineError> {
        let (new, draft) = match &input.target {
            SendTarget::Existing(append) => return self.append(append),
            SendTarget::New(new, draft) => (new, draft.clone()),
        };
        let mut thread = Thread {
            thread_id: self.ids.next_id(IdKind::Thread, self.now),
            run_id: new.run_id.map(str::to_owned),
            task_id: new.task_id.map(str::to_owned),
            subject: new.subject.to_owned(),
            created_by: input.from.to_owned(),
            assigned_to: new.to.to_owned(),
            status: Status::Pending,
            priority: new.priority,
            attempts: 0,
            max_attempts: new.max_attempts,
            latest_message_id: None,
            last_event_id: 0,
            created_at: self.now,
            updated_at: self.now,
        };
        let (event_id, message) = self.record(
            &mut thread,
            true,
            Change {
                event_type: EventType::ThreadCreated,
                source: input.from,
                summary: draft.summary.clone(),
                payload: JsonObject::new(),
                message: Some((input.from, new.to, draft)),
            },
        )?;
        let state = ThreadState {
            thread,
            lease: None,
        };
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("send wrote no message"))?,
            event_id,
        })
    }

    pub(super) fn append(&mut self, input: &AppendInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "accepts no more messages")?;
        let from = input.from;
        let holder_message = input.lease_token.is_some()
            || state.lease.as_ref().is_some_and(|l| l.agent == from)
            || (state.lease.is_some() && self.was_holder(input.thread_id, from)?);
        let mut payload = JsonObject::new();
        if holder_message {
            let mut lease = self.fence(&state, from, input.lease_token)?;
            if self.revive(&mut state, &mut lease) {
                payload.insert("lease_revived".into(), true.into());
            }
            self.heartbeat(&mut lease);
            self.store.put_lease(&lease)?;
            state.lease = Some(lease);
        }
        let action = if input.draft.kind == Kind::Answer
            && state.thread.status == Status::Blocked
            && !holder_message
        {
            Action::Answer
        } else {
            Action::Append
        };
        let (previous, event_type) = self.apply(&mut state, action, "written to")?;
        if previous != state.thread.status {
            payload.insert("previous_status".into(), previous.as_str().into());
        }
        let to = input.to.unwrap_or(if from == state.thread.assigned_to {
            &state.thread.created_by
        } else {
            &state.thread.assigned_to
        });
        let to = to.to_owned();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: from,
                summary: draft.summary.clone(),
                payload,
                message: Some((from, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("append wrote no message"))?,
            event_id,
        })
    }

    pub(super) fn claim(
        &mut self,
        agent: &str,
        thread_id: &str,
        seconds: u64,
    ) -> Result<LeaseOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        let status = self.open_status(&state, "cannot be claimed")?;
        if state.thread.assigned_to != agent {
            return Err(EngineError::NotAssigned {
                thread_id: thread_id.to_owned(),
                agent: agent.to_owned(),
                assigned_to: state.thread.assigned_to.clone(),
            });
        }
        if let Some(lease) = state.lease.as_ref().filter(|l| l.is_live(self.now)) {
            return Err(EngineError::LeaseConflict {
                thread_id: thread_id.to_owned(),
                holder: lease.agent.clone(),
                lease_token: lease.lease_token,
                expires_at: lease.expires_at,
            });
        }
        if state.thread.attempts >= state.thread.max_attempts {
            return Err(EngineError::state(
                thread_id,
                status,
                format!(
                    "all {} attempts are used; the leader may open a new thread",
                    state.thread.max_attempts
                ),
            ));
        }
        // Claim from the effective status: a lapsed lease already counts as gone.
        state.thread.status = status;
        let (_, event_type) = self.apply(&mut state, Action::Claim, "claimed")?;
        let previous = state.lease.take();
        let lease = Lease {
            thread_id: thread_id.to_owned(),
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
        let (event_id, _) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary,
                payload,
                message: None,
            },
        )?;
        state.lease = Some(lease.clone());
        Ok(LeaseOutput {
            thread: self.view(&state),
            lease,
            event_id,
        })
    }

    /// Claims the first thread `fetch` would offer `agent` (pending or
    /// abandoned, queue order), in the same transaction, so no other worker
    /// can take it in between. Nothing to claim is not an error.
    pub(super) fn claim_next(
        &mut self,
        agent: &str,
        seconds: u64,
    ) -> Result<ClaimOutput, EngineError> {
        let query = ThreadQuery {
            statuses: vec![Status::Pending],
            assigned_to: Some(agent.to_owned()),
            ..ThreadQuery::all(ThreadOrder::Queue, 1)
        };
        let Some(next) = self.effective_threads(&query, true)?.pop() else {
            return Ok(ClaimOutput {
                thread: None,
                lease: None,
                event_id: None,
            });
        };
        self.claim(agent, &next.thread.thread_id, seconds)
            .map(ClaimOutput::from)
    }

    pub(super) fn renew(
        &mut self,
        agent: &str,
        thread_id: &str,
        token: Option<LeaseToken>,
        seconds: Option<u64>,
    ) -> Result<LeaseOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        self.open_status(&state, "has no lease to renew")?;
        let mut lease = self.fence(&state, agent, token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        if let Some(seconds) = seconds {
            lease.lease_seconds = seconds;
        }
        self.heartbeat(&mut lease);
        state.lease = Some(lease.clone());
        let (_, event_type) = self.apply(&mut state, Action::Renew, "renewed")?;
        self.store.put_lease(&lease)?;
        payload.extend(lease_payload(&lease));
        payload.insert("expires_at".into(), lease.expires_at.to_string().into());
        let summary = format!("{agent} renewed the lease until {}", lease.expires_at);
        let (event_id, _) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary,
                payload,
                message: None,
            },
        )?;
        Ok(LeaseOutput {
            thread: self.view(&state),
            lease,
            event_id,
        })
    }

    pub(super) fn update(&mut self, input: &UpdateInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "takes no more updates")?;
        let mut lease = self.fence(&state, input.agent, input.lease_token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        self.heartbeat(&mut lease);
        state.lease = Some(lease.clone());
        let verb = match input.action {
            Action::Block => "blocked",
            Action::Start => "set in_progress",
            _ => "updated",
        };
        let (previous, event_type) = self.apply(&mut state, input.action, verb)?;
        if previous != state.thread.status {
            payload.insert("previous_status".into(), previous.as_str().into());
        }
        self.store.put_lease(&lease)?;
        let to = state.thread.created_by.clone();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: input.agent,
                summary: draft.summary.clone(),
                payload,
                message: Some((input.agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("update wrote no message"))?,
            event_id,
        })
    }

    pub(super) fn finish(&mut self, input: &FinishInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "cannot be finished again")?;
        let mut lease = self.fence(&state, input.agent, input.lease_token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        state.lease = Some(lease.clone());
        let verb = if input.action == Action::Complete {
            "done"
        } else {
            "failed"
        };
        let (previous, event_type) = self.apply(&mut state, input.action, verb)?;
        payload.insert("previous_status".into(), previous.as_str().into());
        lease.released_at = Some(self.now);
        self.store.put_lease(&lease)?;
        state.lease = Some(lease);
        let to = state.thread.created_by.clone();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: input.agent,
                summary: draft.summary.clone(),
                payload,
                message: Some((input.agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("finish wrote no message"))?,
            event_id,
        })
    }

    pub(super) fn cancel(
        &mut self,
        agent: &str,
        thread_id: &str,
        reason: &str,
        artifacts: &[ArtifactDraft],
    ) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        let status = self.open_status(&state, "cannot be cancelled")?;
        state.thread.status = status;
        let (previous, event_type) = self.apply(&mut state, Action::Cancel, "cancelled")?;
        if let Some(lease) = state.lease.as_mut().filter(|l| l.released_at.is_none()) {
            lease.released_at = Some(self.now);
            let lease = lease.clone();
            self.store.put_lease(&lease)?;
        }
        let mut payload = JsonObject::new();
        payload.insert("previous_status".into(), previous.as_str().into());
        let to = if agent == state.thread.assigned_to {
            state.thread.created_by.clone()
        } else {
            state.thread.assigned_to.clone()
        };
        let draft = MessageDraft {
            kind: Kind::Control,
            summary: reason.to_owned(),
            body: String::new(),
            payload: json_object(json!({"action": "cancel"})),
            artifacts: artifacts.to_vec(),
        };
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary: reason.to_owned(),
                payload,
                message: Some((agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("cancel wrote no message"))?,
            event_id,
        })
    }

    /// Records every lapsed lease: released, the thread back to the queue
    /// (or failed on its last attempt), one event each.
    pub(super) fn sweep(&mut self) -> Result<Vec<Event>, EngineError> {
        let lapsed = self.store.lapsed_leases(self.now, usize::MAX)?;
        let mut events = Vec::new();
        for mut lease in lapsed {
            let Some(mut state) = self.store.thread(&lease.thread_id)? else {
                continue;
            };
            lease.released_at = Some(self.now);
            self.store.put_lease(&lease)?;
            let thread = &state.thread;
            let action = if thread.attempts >= thread.max_attempts {
                Action::LapseFinal
            } else {
                Action::Lapse
            };
            let Some(row) = rules::transition(action, thread.status) else {
                // A pending or finished thread with an unreleased lease: the
                // release above is all there is to record.
                continue;
            };
            let Some(event_type) = row.event else {
                continue;
            };
            let previous = thread.status;
            state.thread.status = row.target(previous, false);
            let mut payload = lease_payload(&lease);
            payload.insert("expired_at".into(), lease.expires_at.to_string().into());
            payload.insert("previous_status".into(), previous.as_str().into());
            let (summary, message) = if action == Action::LapseFinal {
                payload.insert("reason".into(), "lease_expired".into());
                let summary = format!(
                    "lease of {} expired at {} on attempt {} of {}; the thread failed",
                    lease.agent, lease.expires_at, lease.attempt, state.thread.max_attempts
                );
                let draft = MessageDraft {
                    kind: Kind::Result,
                    summary: summary.clone(),
                    body: String::new(),
                    payload: json_object(json!({"reason": "lease_expired"})),
                    artifacts: Vec::new(),
                };
                (summary, Some(draft))
            } else {
                let summary = format!(
                    "lease of {} (token {}) expired at {}; the thread can be claimed again",
                    lease.agent, lease.lease_token, lease.expires_at
                );
                (summary, None)
            };
            let to = state.thread.created_by.clone();
            let (event, _) = self.record_event(
                &mut state.thread,
                false,
                Change {
                    event_type,
                    source: SYSTEM_AGENT,
                    summary,
                    payload,
                    message: message.map(|d| (SYSTEM_AGENT, to.as_str(), d)),
                },
            )?;
            events.push(event);
        }
        Ok(events)
    }
}

fn lease_payload(lease: &Lease) -> JsonObject {
    json_object(json!({
        "agent": lease.agent,
        "lease_token": lease.lease_token,
        "attempt": lease.attempt,
    }))
}

fn json_object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
