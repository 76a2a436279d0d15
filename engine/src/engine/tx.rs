//! The transaction context [`Tx`] every handler runs in, and the steps the
//! handlers share: loading a thread, presenting it by its effective status,
//! recording a change (thread, message, event), and the skeleton of every
//! command only the lease holder may run (refuse a finished thread, fence,
//! revive, move the lease, apply the transition).
//!
//! Nothing here may commit, roll back or look at the clock:
//! [`super::Engine`] owns the transaction and passes `now`.

use crate::error::EngineError;
use crate::ids::{IdKind, IdSource};
use crate::model::{
    Event, EventId, EventType, JsonObject, Lease, LeaseToken, Message, Status, Thread,
};
use crate::orch::model::{AttemptStatus, Worktree};
use crate::orch::workspace::{Place, Workspace};
use crate::rules::{self, Action};
use crate::store::{EventQuery, Store, ThreadState};
use crate::time::Timestamp;
use crate::wire::{MessageOutput, ThreadView};

use super::input::{Holder, MessageDraft};

pub(super) struct Tx<'a, S, I> {
    pub(super) store: &'a mut S,
    pub(super) ids: &'a mut I,
    pub(super) now: Timestamp,
    /// The id the next event of this (write) transaction gets.
    pub(super) next_event_id: EventId,
    /// Roll the transaction back even though the command succeeded: a
    /// dry run, which does everything and keeps nothing.
    pub(super) discard: bool,
    /// The host's git, if it runs one (worktrees of code-writing attempts).
    pub(super) workspace: Option<&'a mut (dyn Workspace + 'static)>,
    /// The transaction answers a read (an orch read, or `orch wait`'s
    /// look): it makes no worktree and records only what the read must
    /// (lapses, what the run's threads did), never a bookmark alone.
    pub(super) preview: bool,
    /// The worktrees made before this transaction that it took for the
    /// attempts it started: back to the engine if it rolls back.
    pub(super) taken: Vec<(super::premade::Key, super::premade::Premade)>,
    /// Worktrees of attempts ended in this transaction: tidied once it
    /// commits.
    pub(super) ended: Vec<(Worktree, Place, AttemptStatus)>,
    /// Worktrees made before this transaction began, for the attempts it
    /// starts: git never runs while it holds the lock (see
    /// `super::starting`).
    pub(super) premade: super::premade::Premades,
    /// This write was prepared for the attempts it starts (their worktrees
    /// made first); any other write leaves a retry that came due and needs
    /// a worktree for the next that is.
    pub(super) starting: bool,
    /// An attempt this write would start needs a worktree that was not made
    /// first: the engine makes it and runs the write again.
    pub(super) unmade: bool,
    /// The agent token the call carries, in its write: what vouches for a
    /// registration or a settings change (see `identity`).
    pub(super) agent_token: Option<String>,
    /// In a preview: the worktrees the attempts it would start need, for
    /// git to make before the write that starts them, and the reservations
    /// on its runs whose command has gone, to undo first (see
    /// `super::starting`).
    pub(super) planned: Vec<super::premade::WorktreePlan>,
    pub(super) stale: Vec<(super::premade::Key, Worktree, Place)>,
}

/// What a command changes besides the thread record: one event, and maybe
/// one message.
pub(super) struct Change<'a> {
    pub(super) event_type: EventType,
    pub(super) source: &'a str,
    pub(super) summary: String,
    pub(super) payload: JsonObject,
    /// The message written, from `source` to the named agent.
    pub(super) message: Option<(&'a str, MessageDraft)>,
}

/// What happens to the holder's lease in a holder command.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseMove {
    /// Runs `lease_seconds` from now (a new length, if given): the holder
    /// is evidently alive.
    Heartbeat(Option<u64>),
    /// Given up: the thread is finished.
    Release,
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn load(&mut self, thread_id: &str) -> Result<ThreadState, EngineError> {
        self.store
            .thread(thread_id)?
            .ok_or_else(|| EngineError::ThreadNotFound {
                thread_id: thread_id.to_owned(),
            })
    }

    /// The thread as readers see it now (effective status, live lease only).
    // Inlined into the reads' `collect`, each view is built in its row's
    // place rather than copied out and back (a twentieth of `list`).
    #[inline]
    pub(super) fn view(&self, state: ThreadState) -> ThreadView {
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
    pub(super) fn record(
        &mut self,
        thread: &mut Thread,
        new: bool,
        change: Change<'_>,
    ) -> Result<(Event, Option<Message>), EngineError> {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        let message = change
            .message
            .map(|(to, draft)| self.message(thread, event_id, change.source, to, draft));
        thread.last_event_id = event_id;
        thread.updated_at = self.now;
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
            created_at: self.now,
        };
        self.store.insert_event(&event)?;
        Ok((event, message))
    }

    /// Records a change to an existing thread that writes `draft` from
    /// `from` to `to` (the event's summary is the message's), and answers
    /// as every message command does.
    pub(super) fn write_message(
        &mut self,
        mut state: ThreadState,
        event_type: EventType,
        (from, to): (&str, &str),
        payload: JsonObject,
        draft: MessageDraft,
    ) -> Result<MessageOutput, EngineError> {
        let change = Change {
            event_type,
            source: from,
            summary: draft.summary.clone(),
            payload,
            message: Some((to, draft)),
        };
        let (event, message) = self.record(&mut state.thread, false, change)?;
        let message =
            message.ok_or_else(|| EngineError::internal("a message change wrote no message"))?;
        Ok(MessageOutput {
            thread: self.view(state),
            message,
            event_id: event.event_id,
            route: None,
        })
    }

    /// The stored form of a drafted message, with fresh ids.
    fn message(
        &mut self,
        thread: &Thread,
        event_id: EventId,
        from: &str,
        to: &str,
        draft: MessageDraft,
    ) -> Message {
        let now = self.now;
        let message_id = self.ids.next_id(IdKind::Message, now);
        let artifacts = draft
            .artifacts
            .into_iter()
            .map(|a| a.into_artifact(self.ids.next_id(IdKind::Artifact, now), &message_id, now))
            .collect();
        Message {
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
        }
    }

    /// Refuses anything on a thread that is finished (or, by a lapsed last
    /// lease, effectively finished); `what` says what the caller tried.
    pub(super) fn open_status(
        &self,
        state: &ThreadState,
        what: &str,
    ) -> Result<Status, EngineError> {
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

    /// Whether `agent` ever claimed the thread whose newest lease is
    /// `lease`.
    ///
    /// Only a claim makes a lease, and each claim records one
    /// `thread_claimed` event and takes the next lease token, so the token
    /// counts the thread's claims: at token 1 the only claim was
    /// `lease.agent`'s, and no event need be read. That is the common case
    /// (a leader answering in a thread its worker claimed once), and
    /// reading the events is not cheap: the walk goes through every event
    /// of the thread, so each such answer in a long conversation was
    /// slower than the last (on SQLite, 108 µs at the median over a
    /// thread's first thousand replies, 609 µs over its fifth thousand).
    pub(super) fn was_holder(&mut self, lease: &Lease, agent: &str) -> Result<bool, EngineError> {
        if agent == lease.agent {
            return Ok(true);
        }
        if lease.lease_token <= 1 {
            return Ok(false);
        }
        let mut query = EventQuery::after_event(0, 1);
        query.thread_id = Some(lease.thread_id.clone());
        query.event_types = vec![EventType::ThreadClaimed];
        query.source = Some(agent.to_owned());
        Ok(!self.store.events(&query)?.is_empty())
    }

    /// The first steps of every holder command: load the thread, refuse a
    /// finished one (`what` says what the caller tried), fence the caller
    /// in, revive its lapsed lease. Returns the thread (with the caller's
    /// lease) and the event payload so far.
    pub(super) fn hold(
        &mut self,
        holder: &Holder,
        what: &str,
    ) -> Result<(ThreadState, JsonObject), EngineError> {
        let mut state = self.load(&holder.thread_id)?;
        self.open_status(&state, what)?;
        let payload = self.fence_in(&mut state, &holder.agent, holder.lease_token)?;
        Ok((state, payload))
    }

    /// Fences `agent` in as the holder of `state`'s lease and revives the
    /// lease if it lapsed; on return `state.lease` is the caller's. Returns
    /// the event payload so far (`lease_revived`).
    pub(super) fn fence_in(
        &mut self,
        state: &mut ThreadState,
        agent: &str,
        token: Option<LeaseToken>,
    ) -> Result<JsonObject, EngineError> {
        let mut lease = self.fence(state, agent, token)?;
        let mut payload = JsonObject::new();
        if self.revive(state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        state.lease = Some(lease);
        Ok(payload)
    }

    /// The last steps of every holder command: move the holder's lease,
    /// apply `action`, store the lease, and note a status change in
    /// `payload`. Returns the event to record.
    pub(super) fn holder_step(
        &mut self,
        state: &mut ThreadState,
        payload: &mut JsonObject,
        action: Action,
        verb: &str,
        lease_move: LeaseMove,
    ) -> Result<EventType, EngineError> {
        let lease = state
            .lease
            .as_mut()
            .ok_or_else(|| EngineError::internal("a holder step without a lease"))?;
        match lease_move {
            LeaseMove::Heartbeat(seconds) => {
                if let Some(seconds) = seconds {
                    lease.lease_seconds = seconds;
                }
                lease.released_at = None;
                lease.expires_at = self.now.plus_seconds(lease.lease_seconds);
            }
            LeaseMove::Release => lease.released_at = Some(self.now),
        }
        let (previous, event_type) = self.apply(state, action, verb)?;
        note_change(payload, previous, state.thread.status);
        if let Some(lease) = &state.lease {
            self.store.put_lease(lease)?;
        }
        Ok(event_type)
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
        let not_holder = || EngineError::NotLeaseHolder {
            thread_id: thread_id.clone(),
            agent: agent.to_owned(),
            holder: lease.agent.clone(),
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
            Some(_) => Err(not_holder()),
            None if self.was_holder(lease, agent)? => Err(lost()),
            None => Err(not_holder()),
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

    /// Moves the thread's status by `action` (refused where the transition
    /// table has no row: "it cannot be {verb}"). Returns the status it had
    /// and the event to record.
    pub(super) fn apply(
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
        state.thread.status = row.target(from, live);
        Ok((from, event))
    }
}

/// Notes a status change in an event's payload as `previous_status`.
pub(super) fn note_change(payload: &mut JsonObject, previous: Status, now: Status) {
    if previous != now {
        payload.insert("previous_status".into(), previous.as_str().into());
    }
}

/// The fields every lease event carries.
pub(super) fn lease_payload(lease: &Lease) -> JsonObject {
    let mut payload = JsonObject::new();
    payload.insert("agent".into(), lease.agent.clone().into());
    payload.insert("lease_token".into(), lease.lease_token.into());
    payload.insert("attempt".into(), lease.attempt.into());
    payload
}
