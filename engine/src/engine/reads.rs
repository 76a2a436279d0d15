//! The read commands: `fetch`, `list`, `show` (which may also move a read
//! cursor), `watch` and `wait-reply`.
//!
//! Reads present every thread by its *effective* status (see
//! [`rules::effective_status`]) and must never write, with one exception:
//! `show` with `mark_read`, which the engine runs in a write transaction.

use std::collections::BTreeSet;

use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::{EventId, Message, ReadCursor, Status};
use crate::rules;
use crate::store::{EventQuery, MessageQuery, Store, ThreadOrder, ThreadQuery, ThreadState};
use crate::wire::*;

use super::input::*;
use super::tx::Tx;

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    /// Threads matching `query` by *effective* status. Stored statuses are
    /// exact except for threads whose lease lapsed since the last write; those
    /// few are looked up one by one and judged by [`rules::effective_status`].
    /// A query that filters on no status is answered the same either way, so
    /// it does not look for them.
    pub(super) fn effective_threads(
        &mut self,
        query: &ThreadQuery,
        claimable_only: bool,
    ) -> Result<Vec<ThreadState>, EngineError> {
        let by_status = claimable_only || !query.statuses.is_empty();
        let lapsed = if by_status {
            self.store.lapsed_leases(self.now, usize::MAX)?
        } else {
            Vec::new()
        };
        let lapsed_ids: BTreeSet<&str> = lapsed.iter().map(|l| l.thread_id.as_str()).collect();
        let mut stored = query.clone();
        stored.limit = query.limit.saturating_add(lapsed.len());
        // What is judged and shown here treats a released lease as none.
        stored.released_leases = false;
        if claimable_only {
            // Without a lapse, only a pending thread has no live lease.
            stored.statuses.retain(|s| *s == Status::Pending);
        }
        let mut rows = if claimable_only && stored.statuses.is_empty() {
            Vec::new()
        } else {
            self.store.threads(&stored)?
        };
        rows.retain(|r| !lapsed_ids.contains(r.thread.thread_id.as_str()));
        for lease in &lapsed {
            let mut one = query.clone();
            one.thread_id = Some(lease.thread_id.clone());
            one.statuses = Vec::new();
            one.limit = 1;
            for row in self.store.threads(&one)? {
                let status = self.effective(&row);
                if query.statuses.is_empty() || query.statuses.contains(&status) {
                    rows.push(row);
                }
            }
        }
        if claimable_only {
            let now = self.now;
            rows.retain(|r| rules::is_claimable(&r.thread, r.lease.as_ref(), now));
        }
        rows.sort_by(|a, b| query.compare(&a.thread, &b.thread));
        rows.truncate(query.limit);
        Ok(rows)
    }

    pub(super) fn fetch(&mut self, input: FetchInput) -> Result<ThreadsOutput, EngineError> {
        let query = ThreadQuery {
            statuses: input.statuses,
            unread: input.unread.then(|| input.agent.clone()),
            assigned_to: Some(input.agent.clone()),
            ..ThreadQuery::all(ThreadOrder::Queue, input.limit)
        };
        let assignee = |q: &mut ThreadQuery, address| q.assigned_to = Some(address);
        let rows = self.threads_reaching(&input.agent, &query, assignee, true)?;
        Ok(ThreadsOutput {
            threads: rows.into_iter().map(|r| self.view(r)).collect(),
        })
    }

    pub(super) fn list(&mut self, query: ThreadQuery) -> Result<ThreadsOutput, EngineError> {
        let rows = match query.agent.clone() {
            // An agent's threads include its roles' pools.
            Some(agent) => {
                let party = |q: &mut ThreadQuery, address| q.agent = Some(address);
                self.threads_reaching(&agent, &query, party, false)?
            }
            None => self.effective_threads(&query, false)?,
        };
        Ok(ThreadsOutput {
            threads: rows.into_iter().map(|r| self.view(r)).collect(),
        })
    }

    /// `show`; with `mark_read` (in a write transaction) it also moves the
    /// reader's cursor to the newest message.
    pub(super) fn show(&mut self, input: ShowInput) -> Result<ShowOutput, EngineError> {
        let ShowInput {
            thread_id,
            agent,
            mark_read,
            after_message,
            limit,
        } = input;
        let (thread_id, agent) = (thread_id.as_str(), agent.as_deref());
        let state = self.load(thread_id)?;
        let after_event = match after_message.as_deref() {
            None => 0,
            Some(id) => self.message_in(thread_id, id)?.event_id,
        };
        let mut messages = self.store.messages(&MessageQuery {
            thread_id: thread_id.to_owned(),
            from_agent: None,
            after_event,
            newest_first: false,
            limit: limit.saturating_add(1),
        })?;
        let more = messages.len() > limit;
        messages.truncate(limit);
        let mut read_cursor = match agent {
            Some(agent) => self.store.read_cursor(thread_id, agent)?,
            None => None,
        };
        if let (true, Some(agent), Some(newest)) = (mark_read, agent, messages.last()) {
            let behind = read_cursor
                .as_ref()
                .is_none_or(|c| c.last_read_event_id < newest.event_id);
            if behind {
                let cursor = ReadCursor {
                    thread_id: thread_id.to_owned(),
                    agent: agent.to_owned(),
                    last_read_message_id: newest.message_id.clone(),
                    last_read_event_id: newest.event_id,
                    last_read_at: self.now,
                };
                self.store.put_read_cursor(&cursor)?;
                read_cursor = Some(cursor);
            }
        }
        Ok(ShowOutput {
            thread: self.view(state),
            messages,
            read_cursor,
            more,
        })
    }

    pub(super) fn watch(&mut self, input: WatchInput) -> Result<WatchOutput, EngineError> {
        let latest = self.store.latest_event_id()?;
        let after = input.after_event.unwrap_or(latest);
        let mut query = EventQuery::after_event(after, input.limit);
        query.exclude_source = input.agent.clone();
        query.statuses = input.statuses;
        query.message_kinds = input.kinds;
        let events = match &input.agent {
            // An agent's threads include its roles' pools.
            Some(agent) => self.events_reaching(agent, &query)?,
            None => self.store.events(&query)?,
        };
        Ok(match events.last() {
            Some(last) => WatchOutput {
                woke: true,
                next_event_id: last.event_id,
                events,
            },
            None => WatchOutput {
                woke: false,
                next_event_id: after.max(latest),
                events,
            },
        })
    }

    /// A message of `thread_id` named by the caller (a cursor), or
    /// `message_not_found`.
    fn message_in(&mut self, thread_id: &str, message_id: &str) -> Result<Message, EngineError> {
        match self.store.message(message_id)? {
            Some(m) if m.thread_id == thread_id => Ok(m),
            _ => Err(EngineError::MessageNotFound {
                thread_id: thread_id.to_owned(),
                message_id: message_id.to_owned(),
            }),
        }
    }

    /// Where `wait-reply` starts when the request gives no cursor: after the
    /// waiting agent's own last message in the thread and after its read
    /// cursor, whichever is later, so a reply that arrived between the
    /// agent's question and its wait is not missed. Without an agent, or if
    /// the agent never wrote or read there: the latest event.
    fn default_reply_cursor(
        &mut self,
        thread_id: &str,
        agent: Option<&str>,
        latest: EventId,
    ) -> Result<EventId, EngineError> {
        let Some(agent) = agent else {
            return Ok(latest);
        };
        let own = self
            .store
            .messages(&MessageQuery {
                thread_id: thread_id.to_owned(),
                from_agent: Some(agent.to_owned()),
                after_event: 0,
                newest_first: true,
                limit: 1,
            })?
            .first()
            .map(|m| m.event_id);
        let read = self
            .store
            .read_cursor(thread_id, agent)?
            .map(|c| c.last_read_event_id);
        Ok(match own.max(read) {
            Some(cursor) => cursor,
            None => latest,
        })
    }

    pub(super) fn wait_reply(
        &mut self,
        input: WaitReplyInput,
    ) -> Result<WaitReplyOutput, EngineError> {
        let state = self.load(&input.thread_id)?;
        // The newest event id, read only when needed: a look that finds the
        // reply (the one that wakes a waiter) has no use for it.
        let mut latest = None;
        let after = match (input.after_event, &input.after_message) {
            (Some(event_id), _) => event_id,
            (None, Some(message_id)) => self.message_in(&input.thread_id, message_id)?.event_id,
            (None, None) => {
                let newest = *latest.insert(self.store.latest_event_id()?);
                self.default_reply_cursor(&input.thread_id, input.agent.as_deref(), newest)?
            }
        };
        let mut query = EventQuery::after_event(after, 1);
        query.thread_id = Some(input.thread_id.clone());
        query.message_kinds = input.kinds;
        query.exclude_source = input.agent;
        let found = self.store.events(&query)?.into_iter().next();
        if let Some(event) = found {
            let message = match &event.message_id {
                Some(id) => self.store.message(id)?,
                None => None,
            };
            let message = message.ok_or_else(|| {
                EngineError::internal(format!(
                    "event {} names a message that does not exist",
                    event.event_id
                ))
            })?;
            return Ok(WaitReplyOutput {
                woke: true,
                next_event_id: event.event_id,
                message: Some(message),
                thread: self.view(state),
            });
        }
        if state.thread.status.is_terminal() {
            return Err(EngineError::ThreadFinished {
                thread_id: input.thread_id,
                status: state.thread.status,
                message: "no reply can arrive in a finished thread; read its result with show"
                    .into(),
            });
        }
        // In the same snapshot as the search above, so no reply between the
        // cursor and it goes unseen.
        let latest = match latest {
            Some(newest) => newest,
            None => self.store.latest_event_id()?,
        };
        Ok(WaitReplyOutput {
            woke: false,
            next_event_id: after.max(latest),
            message: None,
            thread: self.view(state),
        })
    }
}
