//! Retention: what `gc` removes, and the database-wide settings it reads
//! its limits from (`settings`, which also holds the agent-token switch).
//!
//! Only two things are ever removed, each as a whole thread (with its
//! lease, messages, artifacts, events and read cursors): a finished thread
//! (done, failed, cancelled; and, if it belongs to an orch run, a run that
//! succeeded or was cancelled, so that orch never loses what it still
//! reads), and a broadcast every agent it is for has read. Three limits say
//! when, after seed 004's policy:
//!
//! 1. `keep_read_hours` (24): threads read by everyone they are for (a
//!    finished thread: by its creator; a broadcast: by each registered
//!    agent it reaches) and idle for longer go first;
//! 2. `keep_days` (7): finished threads idle for longer go, read or not;
//! 3. `keep_messages` (5,000): while the store holds more messages, the
//!    oldest finished threads go.
//!
//! "Read by everyone it is for" is never true of nobody: every reader must
//! have read every message of the thread not its own, *and* one of them
//! must have read a message someone else wrote ([`Tx::read_by_all`]). A
//! broadcast with no registered agent (or whose only registered reader is
//! its sender), or a finished thread only its creator ever wrote in (say,
//! a request cancelled before anyone answered), has been read by nobody,
//! so limit 1 never takes it. The registry is what a broadcast reaches:
//! an agent registered after it is a reader too (its mailbox shows it
//! unread), an agent unregistered no longer is (and with more than
//! [`READERS_MAX`] registered, no broadcast counts as read: those past the
//! limit would go unasked). A finished thread still
//! goes by limits 2 and 3, read or not; an open broadcast is open work
//! and never goes by age or count (cancel it to let them take it).
//!
//! Idempotency keys older than `keep_days` go too: a key is honoured at
//! least as long as the threads it made are kept. The thread that holds
//! the newest event is never removed (it goes once anything newer
//! happens), so the store's highest event id never goes back, no event id
//! is ever handed out twice, and every waiter's cursor stays valid, on
//! every store and for every inbox that reads it, older ones included. Work per call is bounded: threads are walked oldest first in
//! pages (thread ids sort in creation order, and a thread is never idle
//! for longer than it has existed, so a walk stops at the first thread
//! created too recently), at most [`SCAN_MAX`] of them.
//!
//! With `auto_gc`, writes do this as they go: a write whose events pass a
//! multiple of [`AUTO_GC_EVERY`] removes up to [`AUTO_GC_MAX`] threads
//! afterwards, so a busy database stays within its limits without anyone
//! running `gc`. This module never deletes anything but through
//! [`Store::delete_thread`] and [`Store::delete_idempotency`].

use std::collections::VecDeque;

use crate::address::{self, Address};
use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::{EventId, Kind, Settings, Status};
use crate::store::{
    AgentQuery, EventQuery, Store, ThreadOrder, ThreadPage, ThreadQuery, ThreadState,
};
use crate::time::Timestamp;
use crate::wire::*;

use super::input::*;
use super::tx::Tx;

/// With `auto_gc`, a write removes what it may each time its events pass a
/// multiple of this.
pub(super) const AUTO_GC_EVERY: EventId = 32;

/// Most threads one automatic step removes: at least as many as
/// [`AUTO_GC_EVERY`] events can open (each thread takes an event to open
/// and one to finish), so removal keeps up with any workload.
pub(super) const AUTO_GC_MAX: usize = 32;

/// Most threads one call looks at, removed or not.
pub(super) const SCAN_MAX: usize = 10_000;

/// Threads read from the store at a time.
const PAGE: usize = 256;

/// Statuses of finished threads, the ones retention may remove.
const FINISHED: [Status; 3] = [Status::Done, Status::Failed, Status::Cancelled];

/// Most registered agents a broadcast is checked against. With more
/// registered, no broadcast is removed as read: those past the limit
/// would never be asked.
const READERS_MAX: usize = 10_000;

/// What one collection may do.
#[derive(Clone, Debug)]
pub(super) struct Limits {
    keep_days: u32,
    keep_messages: u32,
    keep_read_hours: u32,
    /// Most threads removed.
    max_threads: usize,
    /// An automatic step, which counts messages only when the store may
    /// hold more than the limit (see [`Tx::collect`]).
    auto: bool,
}

impl Limits {
    fn of(settings: &Settings, max_threads: usize, auto: bool) -> Limits {
        Limits {
            keep_days: settings.keep_days,
            keep_messages: settings.keep_messages,
            keep_read_hours: settings.keep_read_hours,
            max_threads,
            auto,
        }
    }
}

/// The limits of an automatic step, if a write that recorded events
/// `first_event..next_event` (exclusive) calls for one.
pub(super) fn due(
    settings: &Settings,
    first_event: EventId,
    next_event: EventId,
) -> Option<Limits> {
    let passed = next_event > first_event
        && (next_event - 1) / AUTO_GC_EVERY > first_event.saturating_sub(1) / AUTO_GC_EVERY;
    (settings.auto_gc && passed).then(|| Limits::of(settings, AUTO_GC_MAX, true))
}

/// A collection in progress: what it removed and what it may still do.
struct Collection {
    limits: Limits,
    removed: Vec<RemovedThread>,
    removed_messages: u64,
    /// Messages the store holds, when it was worth counting them (it may
    /// hold more than the count limit).
    messages: Option<u64>,
    /// Threads still to look at.
    budget: usize,
    /// The newest event id: its thread stays.
    newest: EventId,
    /// Stopped before it was through.
    more: bool,
}

impl Collection {
    /// Whether it may look at one more thread (and counts it).
    fn look(&mut self) -> bool {
        if self.removed.len() >= self.limits.max_threads || self.budget == 0 {
            self.more = true;
            return false;
        }
        self.budget -= 1;
        true
    }
}

/// Threads of several pages merged in creation order (thread id ascending).
struct Walk {
    pages: Vec<ThreadPage>,
    heads: Vec<VecDeque<ThreadState>>,
    done: Vec<bool>,
}

impl Walk {
    fn new(pages: Vec<ThreadPage>) -> Walk {
        let n = pages.len();
        Walk {
            pages,
            heads: vec![VecDeque::new(); n],
            done: vec![false; n],
        }
    }

    fn by_status(statuses: &[Status]) -> Walk {
        Walk::new(
            (statuses.iter())
                .map(|&status| ThreadPage {
                    status: Some(status),
                    assigned_to: None,
                    after_thread_id: None,
                    limit: PAGE,
                })
                .collect(),
        )
    }

    /// The oldest thread not yet walked.
    fn next<S: Store, I: IdSource>(
        &mut self,
        tx: &mut Tx<'_, S, I>,
    ) -> Result<Option<ThreadState>, EngineError> {
        for i in 0..self.pages.len() {
            if self.heads[i].is_empty() && !self.done[i] {
                let page = tx.store.thread_page(&self.pages[i])?;
                self.done[i] = page.len() < PAGE;
                if let Some(last) = page.last() {
                    self.pages[i].after_thread_id = Some(last.thread.thread_id.clone());
                }
                self.heads[i].extend(page);
            }
        }
        let oldest = (0..self.heads.len())
            .filter_map(|i| {
                self.heads[i]
                    .front()
                    .map(|s| (i, s.thread.thread_id.clone()))
            })
            .min_by(|a, b| a.1.cmp(&b.1))
            .map(|(i, _)| i);
        Ok(oldest.and_then(|i| self.heads[i].pop_front()))
    }
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    pub(super) fn settings(&mut self, input: SettingsInput) -> Result<SettingsOutput, EngineError> {
        let before = self.store.settings()?.unwrap_or_default();
        let r = input.request;
        let mut after = input.keep.over(&before);
        after.agent_tokens = r.agent_tokens.unwrap_or(before.agent_tokens);
        after.agent_registration = r.agent_registration.unwrap_or(before.agent_registration);
        after.auto_gc = r.auto_gc.unwrap_or(before.auto_gc);
        let changed = changed_fields(&before, &after);
        self.check_settings_change(&before, &changed)?;
        if !changed.is_empty() {
            self.store.put_settings(&after)?;
        }
        Ok(SettingsOutput {
            settings: after,
            changed,
        })
    }

    pub(super) fn gc(&mut self, input: GcInput) -> Result<GcOutput, EngineError> {
        let stored = self.store.settings()?.unwrap_or_default();
        let limits = Limits::of(&input.keep.over(&stored), input.limit, false);
        let out = self.collect(&limits)?;
        self.discard = input.dry_run;
        Ok(GcOutput {
            dry_run: input.dry_run,
            ..out
        })
    }

    /// Removes what `limits` allow; see the module docs.
    pub(super) fn collect(&mut self, limits: &Limits) -> Result<GcOutput, EngineError> {
        // Counting walks an index of every message. Every message has an
        // event of its own, so the store holds at most as many messages as
        // events were ever written: an automatic step below that need not
        // count. `gc` always does, to say how many are left.
        let newest = self.store.latest_event_id()?;
        let may_be_over = newest > u64::from(limits.keep_messages);
        let messages = if may_be_over || !limits.auto {
            Some(self.store.message_count()?)
        } else {
            None
        };
        let mut run = Collection {
            limits: limits.clone(),
            removed: Vec::new(),
            removed_messages: 0,
            messages,
            budget: SCAN_MAX,
            newest,
            more: false,
        };
        let age_cutoff = self
            .now
            .plus_millis(-i64::from(limits.keep_days) * 86_400_000);
        let read_cutoff = self
            .now
            .plus_millis(-i64::from(limits.keep_read_hours) * 3_600_000);
        self.collect_idle(&mut run, age_cutoff, read_cutoff)?;
        self.collect_broadcasts(&mut run, read_cutoff)?;
        self.collect_over_count(&mut run)?;
        let expired_keys = self.store.delete_idempotency(age_cutoff, SCAN_MAX)?;
        Ok(GcOutput {
            dry_run: false,
            keep_days: limits.keep_days,
            keep_messages: limits.keep_messages,
            keep_read_hours: limits.keep_read_hours,
            removed: run.removed,
            removed_messages: run.removed_messages,
            expired_keys,
            messages_left: run.messages.unwrap_or_default(),
            more: run.more,
        })
    }

    /// Limits 1 and 2: finished threads read and idle past
    /// `read_cutoff`, or idle past `age_cutoff`.
    fn collect_idle(
        &mut self,
        run: &mut Collection,
        age_cutoff: Timestamp,
        read_cutoff: Timestamp,
    ) -> Result<(), EngineError> {
        let created_by = age_cutoff.max(read_cutoff);
        let mut walk = Walk::by_status(&FINISHED);
        while let Some(state) = walk.next(self)? {
            let thread = &state.thread;
            if thread.created_at > created_by || !run.look() {
                break;
            }
            if !self.may_remove(thread)? {
                continue;
            }
            let reason = if thread.updated_at <= age_cutoff {
                GcReason::Age
            } else if thread.updated_at <= read_cutoff
                && self.read_by_all(thread, &[thread.created_by.as_str()])?
            {
                GcReason::Read
            } else {
                continue;
            };
            self.remove(run, &state, reason)?;
        }
        Ok(())
    }

    /// Broadcasts every agent they reach has read, idle past `read_cutoff`.
    fn collect_broadcasts(
        &mut self,
        run: &mut Collection,
        read_cutoff: Timestamp,
    ) -> Result<(), EngineError> {
        let agents = self.store.agents(&AgentQuery {
            name: None,
            role: None,
            limit: READERS_MAX + 1,
        })?;
        if agents.len() > READERS_MAX {
            return Ok(());
        }
        let mut roles: Vec<&String> = agents.iter().flat_map(|a| &a.roles).collect();
        roles.sort();
        roles.dedup();
        let mut pages = vec![broadcast_page(address::BROADCAST.to_owned())];
        pages.extend(
            roles
                .iter()
                .map(|r| broadcast_page(Address::RoleBroadcast((*r).clone()).to_string())),
        );
        let mut walk = Walk::new(pages);
        while let Some(state) = walk.next(self)? {
            let thread = &state.thread;
            if thread.created_at > read_cutoff || !run.look() {
                break;
            }
            // A cancelled broadcast is a finished thread: limits 1 to 3.
            if thread.status.is_terminal() || thread.updated_at > read_cutoff {
                continue;
            }
            let readers: Vec<&str> = match Address::stored(&thread.assigned_to) {
                Address::RoleBroadcast(role) => (agents.iter())
                    .filter(|a| a.roles.contains(&role))
                    .map(|a| a.name.as_str())
                    .collect(),
                _ => agents.iter().map(|a| a.name.as_str()).collect(),
            };
            if self.read_by_all(thread, &readers)? {
                self.remove(run, &state, GcReason::Read)?;
            }
        }
        Ok(())
    }

    /// Limit 3: the oldest finished threads, while the store holds more
    /// messages than `keep_messages`.
    fn collect_over_count(&mut self, run: &mut Collection) -> Result<(), EngineError> {
        let keep = u64::from(run.limits.keep_messages);
        let over = |run: &Collection| run.messages.is_some_and(|n| n > keep);
        let mut walk = Walk::by_status(&FINISHED);
        while over(run) {
            let Some(state) = walk.next(self)? else {
                break;
            };
            if !run.look() {
                break;
            }
            if self.may_remove(&state.thread)? {
                self.remove(run, &state, GcReason::Count)?;
            }
        }
        Ok(())
    }

    /// Whether nothing still needs the finished `thread`: it belongs to no
    /// orch run, or to one that succeeded or was cancelled (a failed run
    /// may reopen and read its attempts' threads).
    fn may_remove(&mut self, thread: &crate::model::Thread) -> Result<bool, EngineError> {
        let Some(run_id) = &thread.run_id else {
            return Ok(true);
        };
        Ok(self
            .store
            .run(run_id)?
            .is_none_or(|run| run.status.is_final()))
    }

    /// Whether `thread` was read by everyone it is for, `readers`: each of
    /// them has read every message in it not its own, and one of them has
    /// read a message another wrote. A rule that holds for nobody proves
    /// nothing: with no reader, or readers who only ever wrote in it (the
    /// sender of a broadcast nobody else is registered to read, the
    /// creator of a request nobody answered), nobody read it.
    fn read_by_all(
        &mut self,
        thread: &crate::model::Thread,
        readers: &[&str],
    ) -> Result<bool, EngineError> {
        for reader in readers {
            if !self.read_by(thread, reader)? {
                return Ok(false);
            }
        }
        // The thread's creator wrote its first message, so any other
        // reader read that; the creator needs a message by someone else.
        let mut witnesses: Vec<&str> = readers.to_vec();
        witnesses.sort_by_key(|r| *r == thread.created_by.as_str());
        for reader in witnesses {
            if self.wrote_in_by_other(thread, reader)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether someone other than `reader` wrote a message in `thread`.
    fn wrote_in_by_other(
        &mut self,
        thread: &crate::model::Thread,
        reader: &str,
    ) -> Result<bool, EngineError> {
        let query = EventQuery {
            thread_id: Some(thread.thread_id.clone()),
            message_kinds: Kind::ALL.to_vec(),
            exclude_source: Some(reader.to_owned()),
            ..EventQuery::after_event(0, 1)
        };
        Ok(!self.store.events(&query)?.is_empty())
    }

    /// Whether `reader` has read every message of `thread` not its own.
    fn read_by(
        &mut self,
        thread: &crate::model::Thread,
        reader: &str,
    ) -> Result<bool, EngineError> {
        let query = ThreadQuery {
            thread_id: Some(thread.thread_id.clone()),
            unread: Some(reader.to_owned()),
            ..ThreadQuery::all(ThreadOrder::Queue, 1)
        };
        Ok(self.store.threads(&query)?.is_empty())
    }

    /// Removes the thread, unless it holds the newest event: the event
    /// sequence must never go back (see the module docs).
    fn remove(
        &mut self,
        run: &mut Collection,
        state: &ThreadState,
        reason: GcReason,
    ) -> Result<(), EngineError> {
        if state.thread.last_event_id >= run.newest {
            return Ok(());
        }
        let messages = self.store.delete_thread(&state.thread.thread_id)?;
        run.messages = run.messages.map(|n| n.saturating_sub(messages));
        run.removed_messages += messages;
        run.removed.push(RemovedThread {
            thread_id: state.thread.thread_id.clone(),
            status: state.thread.status,
            reason,
            messages,
        });
        Ok(())
    }
}

fn broadcast_page(address: String) -> ThreadPage {
    ThreadPage {
        status: None,
        assigned_to: Some(address),
        after_thread_id: None,
        limit: PAGE,
    }
}

/// The names of the settings that differ.
fn changed_fields(before: &Settings, after: &Settings) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(before), serde_json::to_value(after))
    else {
        return Vec::new();
    };
    a.iter()
        .filter(|(field, value)| b.get(*field) != Some(value))
        .map(|(field, _)| field.clone())
        .collect()
}
