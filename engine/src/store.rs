//! The storage boundary: the [`Store`] trait every host implements, and the
//! query descriptions ([`ThreadQuery`], [`EventQuery`], [`MessageQuery`]; for
//! orch's records, those in [`crate::orch::query`]) it answers.
//!
//! A store keeps records and answers indexed queries; it never decides
//! anything. Which thread may be claimed, what a lapsed lease means, which
//! event to write: all of that is the engine's. The queries here are exact
//! descriptions with a reference implementation (`matches` methods, used by
//! [`crate::MemoryStore`]), so a SQL store can translate them into indexed
//! `WHERE` clauses and the conformance corpus can prove it did so faithfully.
//!
//! # Transactions
//!
//! The engine brackets every command with [`Store::begin`] and
//! [`Store::commit`] (or [`Store::rollback`] on any error), so one command is
//! one atomic transaction. Write transactions must be serialized against each
//! other: a store must make "read the lease, then write a new one" atomic under
//! concurrent writers (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: a lock taken at
//! begin, or `SERIALIZABLE` with retry). Read transactions see one consistent
//! snapshot and are never upgraded.
//!
//! # Event ids
//!
//! The engine assigns event ids: inside a write transaction it reads
//! [`Store::latest_event_id`] and counts up from there. Because write
//! transactions are serialized, event ids become visible in increasing order,
//! which is what lets a waiter resume from "after event N" without missing
//! anything. inbox's events and orch's events share the one sequence (one
//! cursor orders both), so either kind's ids may skip the other's. A store
//! must report the highest id ever written, of either kind; retention
//! never removes the newest event, so the highest stored id is it.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::model::{
    Agent, Event, EventId, EventType, IdempotencyRecord, Kind, Lease, Message, ReadCursor,
    Settings, Status, Thread,
};
use crate::orch::model::{Attempt, OrchEvent, Run, Task};
use crate::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use crate::time::Timestamp;

/// What [`Store::initialize`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreInfo {
    /// Where the data lives (a file path), or `None` in memory.
    pub location: Option<String>,
    /// The schema version after initializing.
    pub schema_version: u32,
}

/// Whether a transaction may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxMode {
    /// Queries only; may run beside other readers and one writer.
    Read,
    /// Queries and writes; serialized with every other write transaction.
    Write,
}

/// A thread together with its lease record: everything needed to decide
/// the thread's effective status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadState {
    /// The thread as stored.
    pub thread: Thread,
    /// Its lease record (live, lapsed, or released), if it was ever claimed.
    pub lease: Option<Lease>,
}

/// The order [`Store::threads`] returns threads in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadOrder {
    /// Work-queue order for `fetch`: priority high to low, then oldest
    /// `created_at` first, then `thread_id`.
    Queue,
    /// Newest threads first for `list`: `thread_id` descending (ids sort in
    /// creation order). An immutable key, so that the store's filter indexes
    /// can serve the order without being rewritten by every command.
    NewestFirst,
}

/// A filter over threads. Every `Some`/non-empty field must match; an
/// empty `statuses` matches every status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadQuery {
    /// Exactly this thread.
    pub thread_id: Option<String>,
    /// Stored status is one of these (empty: any).
    pub statuses: Vec<Status>,
    /// `assigned_to` equals this.
    pub assigned_to: Option<String>,
    /// `created_by` equals this.
    pub created_by: Option<String>,
    /// `created_by` or `assigned_to` equals this: the threads an agent is
    /// part of (a request's `agent` filter).
    pub agent: Option<String>,
    /// `run_id` equals this.
    pub run_id: Option<String>,
    /// `task_id` equals this.
    pub task_id: Option<String>,
    /// Unread by this agent: the thread has a message not written by it
    /// whose event id is after its read cursor on the thread (or any such
    /// message, if it has no cursor there). `fetch`'s `unread`.
    pub unread: Option<String>,
    /// Whether a thread comes with its lease also when that lease was
    /// released. When false, a released lease reads as none: no rule tells
    /// the two apart (a released lease is neither live nor lapsed), so the
    /// reads that only present threads (`list`, `fetch`) ask for none and a
    /// store need not decode it. Nor need it look for a lease on a thread
    /// whose status no holder is in ([`crate::rules::HELD`]): most threads
    /// are finished or waiting, and their lookups were a sixth of `list`.
    /// `claim` needs it: the next lease token follows the released one.
    pub released_leases: bool,
    /// Result order.
    pub order: ThreadOrder,
    /// At most this many results.
    pub limit: usize,
}

impl ThreadQuery {
    /// A query matching every thread, in `order`, up to `limit`.
    pub fn all(order: ThreadOrder, limit: usize) -> ThreadQuery {
        ThreadQuery {
            thread_id: None,
            statuses: Vec::new(),
            assigned_to: None,
            created_by: None,
            agent: None,
            run_id: None,
            task_id: None,
            unread: None,
            released_leases: true,
            order,
            limit,
        }
    }

    /// The reference semantics of every filter but `unread` (which needs
    /// messages and cursors; see [`ThreadQuery::is_unread`]).
    pub fn matches(&self, thread: &Thread) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let eq_opt = |want: &Option<String>, have: &Option<String>| {
            want.is_none() || want.as_deref() == have.as_deref()
        };
        eq(&self.thread_id, &thread.thread_id)
            && (self.statuses.is_empty() || self.statuses.contains(&thread.status))
            && eq(&self.assigned_to, &thread.assigned_to)
            && eq(&self.created_by, &thread.created_by)
            && self
                .agent
                .as_deref()
                .is_none_or(|a| thread.created_by == a || thread.assigned_to == a)
            && eq_opt(&self.run_id, &thread.run_id)
            && eq_opt(&self.task_id, &thread.task_id)
    }

    /// The reference semantics of `released_leases`: `state`, read with
    /// whatever lease its thread has, as the query returns it.
    pub fn keep_lease_of(&self, mut state: ThreadState) -> ThreadState {
        if !self.released_leases {
            let held = crate::rules::HELD.contains(&state.thread.status);
            state.lease = state.lease.filter(|l| held && l.released_at.is_none());
        }
        state
    }

    /// The reference semantics of `unread`: `messages` are the thread's
    /// messages, `cursor` the reader's cursor on it.
    pub fn is_unread<'a>(
        reader: &str,
        messages: impl IntoIterator<Item = &'a Message>,
        cursor: Option<&ReadCursor>,
    ) -> bool {
        let after = cursor.map_or(0, |c| c.last_read_event_id);
        messages
            .into_iter()
            .any(|m| m.event_id > after && m.from_agent != reader)
    }

    /// Compares two threads in this query's order (`Less` comes first).
    pub fn compare(&self, a: &Thread, b: &Thread) -> std::cmp::Ordering {
        match self.order {
            ThreadOrder::Queue => b
                .priority
                .rank()
                .cmp(&a.priority.rank())
                .then(a.created_at.cmp(&b.created_at))
                .then(a.thread_id.cmp(&b.thread_id)),
            ThreadOrder::NewestFirst => b.thread_id.cmp(&a.thread_id),
        }
    }
}

/// A filter over events with id greater than `after_event`, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events with a greater id.
    pub after_event: EventId,
    /// Only events about this thread.
    pub thread_id: Option<String>,
    /// Only events about threads of this orch run (the `run_id` copied onto
    /// the event).
    pub run_id: Option<String>,
    /// Only events about threads this agent created or is assigned
    /// (the thread's current `created_by` / `assigned_to`).
    pub agent: Option<String>,
    /// Only events that left the thread in one of these statuses (empty: any).
    pub statuses: Vec<Status>,
    /// Only events of these types (empty: any).
    pub event_types: Vec<EventType>,
    /// Only events that wrote a message of one of these kinds (empty: any
    /// event, with or without a message).
    pub message_kinds: Vec<Kind>,
    /// Only events caused by this agent.
    pub source: Option<String>,
    /// Skip events caused by this agent.
    pub exclude_source: Option<String>,
    /// At most this many results.
    pub limit: usize,
}

impl EventQuery {
    /// Events after `after_event`, unfiltered, up to `limit`.
    pub fn after_event(after_event: EventId, limit: usize) -> EventQuery {
        EventQuery {
            after_event,
            thread_id: None,
            run_id: None,
            agent: None,
            statuses: Vec::new(),
            event_types: Vec::new(),
            message_kinds: Vec::new(),
            source: None,
            exclude_source: None,
            limit,
        }
    }

    /// The reference semantics: `thread` is the event's thread as stored now.
    pub fn matches(&self, event: &Event, thread: &Thread) -> bool {
        event.event_id > self.after_event
            && self
                .thread_id
                .as_deref()
                .is_none_or(|t| event.thread_id == t)
            && self
                .run_id
                .as_deref()
                .is_none_or(|r| event.run_id.as_deref() == Some(r))
            && self
                .agent
                .as_deref()
                .is_none_or(|a| thread.created_by == a || thread.assigned_to == a)
            && (self.statuses.is_empty() || self.statuses.contains(&event.status))
            && (self.event_types.is_empty() || self.event_types.contains(&event.event_type))
            && (self.message_kinds.is_empty()
                || event
                    .message_kind
                    .is_some_and(|k| self.message_kinds.contains(&k)))
            && self.source.as_deref().is_none_or(|s| event.source == s)
            && self.exclude_source.as_deref() != Some(event.source.as_str())
    }
}

/// A filter over one thread's messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageQuery {
    /// The thread.
    pub thread_id: String,
    /// Only messages written by this agent.
    pub from_agent: Option<String>,
    /// Only messages recorded after this event (0: from the first).
    pub after_event: EventId,
    /// Newest first instead of oldest first.
    pub newest_first: bool,
    /// At most this many results.
    pub limit: usize,
}

impl MessageQuery {
    /// The reference semantics of the filters.
    pub fn matches(&self, message: &Message) -> bool {
        message.thread_id == self.thread_id
            && message.event_id > self.after_event
            && self
                .from_agent
                .as_deref()
                .is_none_or(|a| message.from_agent == a)
    }
}

/// The reads a write transaction starts with ([`Store::read_ahead`]):
/// the command's thread, or the agent and the head of its own queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadAhead {
    /// [`Store::thread`] of this id.
    pub thread: Option<String>,
    /// [`Store::agents`] with this query.
    pub agents: Option<AgentQuery>,
    /// [`Store::threads`] with this query.
    pub threads: Option<ThreadQuery>,
}

/// A filter over registered agents, by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentQuery {
    /// Exactly this agent.
    pub name: Option<String>,
    /// Only members of this role.
    pub role: Option<String>,
    /// At most this many results.
    pub limit: usize,
}

impl AgentQuery {
    /// The reference semantics of the filters.
    pub fn matches(&self, agent: &Agent) -> bool {
        self.name.as_deref().is_none_or(|n| agent.name == n)
            && self
                .role
                .as_deref()
                .is_none_or(|r| agent.roles.iter().any(|have| have == r))
    }
}

/// A filter over the messages addressed to one address, across threads,
/// oldest first: one address's part of an agent's mailbox (the engine
/// merges an agent's addresses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxQuery {
    /// `to_agent` equals this (an agent name, `role:NAME`, `broadcast`...).
    pub to_agent: String,
    /// Only messages recorded after this event.
    pub after_event: EventId,
    /// Only messages written at or after this instant.
    pub since: Option<Timestamp>,
    /// Whose mailbox: its own messages never match, and `unread_only`
    /// means after its read cursor on the message's thread.
    pub reader: String,
    /// Only messages after the reader's cursor on their thread (any, if it
    /// has none there).
    pub unread_only: bool,
    /// At most this many results.
    pub limit: usize,
}

impl MailboxQuery {
    /// The reference semantics; `cursor` is the reader's cursor on the
    /// message's thread.
    pub fn matches(&self, message: &Message, cursor: Option<&ReadCursor>) -> bool {
        message.to_agent == self.to_agent
            && message.event_id > self.after_event
            && message.from_agent != self.reader
            && self.since.is_none_or(|t| message.created_at >= t)
            && (!self.unread_only || message.event_id > cursor.map_or(0, |c| c.last_read_event_id))
    }
}

/// A page of threads in creation order (thread id ascending) after a
/// cursor: what retention walks, oldest first, so that it can stop at the
/// first thread too young to remove. Served by the index of whichever
/// filter is given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadPage {
    /// Stored status equals this.
    pub status: Option<Status>,
    /// `assigned_to` equals this.
    pub assigned_to: Option<String>,
    /// Only threads with a greater id.
    pub after_thread_id: Option<String>,
    /// At most this many results.
    pub limit: usize,
}

impl ThreadPage {
    /// The reference semantics of the filters (order: `thread_id` ascending).
    pub fn matches(&self, thread: &Thread) -> bool {
        self.status.is_none_or(|s| thread.status == s)
            && (self.assigned_to.as_deref()).is_none_or(|a| thread.assigned_to == a)
            && (self.after_thread_id.as_deref())
                .is_none_or(|after| thread.thread_id.as_str() > after)
    }
}

/// Durable (or in-memory) storage of the engine's records.
///
/// Implementations: [`crate::MemoryStore`] here; SQLite in `host-native`
/// (and compiled to wasm in `host-wasm`); a host-provided store across the
/// plugin boundary. Every method but [`Store::initialize`] is called inside a
/// transaction opened by [`Store::begin`]; writes only inside
/// [`TxMode::Write`] transactions. Methods take `&mut self` so that stores
/// can keep statement caches and cross an FFI boundary without interior
/// mutability.
pub trait Store {
    /// Creates or migrates the schema. Called by `init`, outside any
    /// transaction; must be safe to repeat.
    fn initialize(&mut self) -> Result<StoreInfo, StoreError>;

    /// Opens a transaction. Nested transactions are a protocol error.
    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError>;

    /// A hint for the next [`TxMode::Write`] transaction, given just
    /// before its [`Store::begin`]: the reads it will start with. A store
    /// that talks to a server may run them in `begin`'s own round trip and
    /// answer them from what it read until the transaction first writes;
    /// it must answer exactly what the reads would return then. Others
    /// ignore it (the default), and nothing else may depend on it.
    fn read_ahead(&mut self, reads: ReadAhead) {
        let _ = reads;
    }

    /// The store's own clock, if every writer shares it: a database server's
    /// time (PostgreSQL's `now()`), read inside the transaction just
    /// opened. The engine then stamps the transaction's records and judges
    /// lapsed leases by it instead of by the host's clock, so that machines
    /// whose clocks disagree cannot expire each other's leases early. `None`
    /// (the default) for stores whose writers all share the host's clock:
    /// SQLite on one machine, memory.
    fn clock(&mut self) -> Result<Option<Timestamp>, StoreError> {
        Ok(None)
    }

    /// Makes the transaction's writes durable and visible.
    fn commit(&mut self) -> Result<(), StoreError>;

    /// Discards the transaction's writes. Called after any error, including a
    /// failed commit; must leave the store usable.
    fn rollback(&mut self) -> Result<(), StoreError>;

    /// One thread with its lease record.
    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError>;

    /// Threads matching `query`, in its order, at most `query.limit`.
    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError>;

    /// Stores a new thread. Its id is new.
    fn insert_thread(&mut self, thread: &Thread) -> Result<(), StoreError>;

    /// Writes a stored thread's changing fields (same `thread_id`): its
    /// status, attempts, latest message, last event and `updated_at`. The
    /// others are fixed when it is inserted; an update that would change one
    /// fails ([`Thread::keeps_fixed_fields_of`]).
    fn update_thread(&mut self, thread: &Thread) -> Result<(), StoreError>;

    /// Stores the thread's lease record, replacing the previous one.
    fn put_lease(&mut self, lease: &Lease) -> Result<(), StoreError>;

    /// Leases not released whose `expires_at <= now`, earliest expiry first,
    /// at most `limit`.
    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError>;

    /// The earliest `expires_at` of any lease not released, lapsed or not.
    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError>;

    /// Stores a new message and its artifacts. Its ids are new.
    fn insert_message(&mut self, message: &Message) -> Result<(), StoreError>;

    /// One message with its artifacts.
    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError>;

    /// Messages of one thread with their artifacts, ordered by event id.
    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError>;

    /// The highest event id ever written, inbox's or orch's; 0 if none.
    fn latest_event_id(&mut self) -> Result<EventId, StoreError>;

    /// Stores an event. Its id is greater than every event id before it.
    fn insert_event(&mut self, event: &Event) -> Result<(), StoreError>;

    /// Events matching `query`, oldest first, at most `query.limit`.
    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError>;

    /// One agent's read cursor on one thread.
    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError>;

    /// Stores a read cursor, replacing the agent's previous one on the thread.
    fn put_read_cursor(&mut self, cursor: &ReadCursor) -> Result<(), StoreError>;

    /// Registered agents matching `query`, by name, at most `query.limit`.
    fn agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError>;

    /// Stores an agent, replacing the one with the same name.
    fn put_agent(&mut self, agent: &Agent) -> Result<(), StoreError>;

    /// Removes an agent; nothing if it is not registered.
    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError>;

    /// Leases not released whose `expires_at > now`, earliest expiry
    /// first, at most `limit`: what is held right now.
    fn live_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError>;

    /// The newest event this agent caused (its `source`), if any.
    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError>;

    /// Messages matching `query` with their artifacts, oldest first, at
    /// most `query.limit`.
    fn mailbox(&mut self, query: &MailboxQuery) -> Result<Vec<Message>, StoreError>;

    /// The write recorded under this idempotency key, if any.
    fn idempotency(&mut self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// Records a write under its idempotency key (the key is new).
    fn put_idempotency(&mut self, record: &IdempotencyRecord) -> Result<(), StoreError>;

    /// Removes up to `limit` idempotency records made before `before`,
    /// oldest first; returns how many.
    fn delete_idempotency(&mut self, before: Timestamp, limit: usize) -> Result<u64, StoreError>;

    /// The engine's settings, if they were ever stored.
    fn settings(&mut self) -> Result<Option<Settings>, StoreError>;

    /// Stores the engine's settings, replacing them.
    fn put_settings(&mut self, settings: &Settings) -> Result<(), StoreError>;

    /// Threads matching `query`, thread id ascending, at most `query.limit`.
    fn thread_page(&mut self, query: &ThreadPage) -> Result<Vec<ThreadState>, StoreError>;

    /// How many messages the store holds.
    fn message_count(&mut self) -> Result<u64, StoreError>;

    /// Removes a thread with everything of it (lease, messages, artifacts,
    /// events, read cursors); returns how many messages went. The engine
    /// never removes the thread that holds the newest event, so
    /// [`Store::latest_event_id`] never goes back.
    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError>;

    /// One run.
    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError>;

    /// Runs matching `query`, newest first, at most `query.limit`.
    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError>;

    /// Stores a new run. Its id is new.
    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError>;

    /// Replaces a stored run (same `run_id`).
    fn update_run(&mut self, run: &Run) -> Result<(), StoreError>;

    /// One task of one run.
    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError>;

    /// Tasks matching `query`, in its order, at most `query.limit`.
    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError>;

    /// Stores a new task (its `(run_id, task_id)` is new), with its needs.
    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError>;

    /// Replaces a stored task (same run and task id; `needs` never change).
    fn update_task(&mut self, task: &Task) -> Result<(), StoreError>;

    /// One task's attempts, first first.
    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError>;

    /// Stores an attempt, replacing the one with the same run, task and
    /// attempt number.
    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError>;

    /// Stores an orch event. Its id is greater than every event id before it.
    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError>;

    /// Orch events matching `query`, oldest first, at most `query.limit`.
    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError>;
}

/// Defines an enum of stores and implements [`Store`] for it by handing
/// each call to the store the value holds. A host that can run over
/// several stores runs one engine over this enum (`Engine<MyStores, ..>`)
/// instead of one engine per store: the engine's code, which is generic
/// over the store, is then compiled once rather than once per store (the
/// wasm module's size and a native build's time). Each arm is a plain
/// `match`, so the stores keep their types for whatever else the host does
/// with them.
///
/// ```
/// inbox_engine::store_enum! {
///     /// The stores this host runs over.
///     pub enum Stores {
///         /// In memory.
///         Memory(inbox_engine::MemoryStore),
///     }
/// }
/// ```
#[macro_export]
macro_rules! store_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])* $variant:ident($store:ty),)+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[doc = $doc])* $(#[cfg($cfg)])* $variant($store),)+
        }

        impl $crate::Store for $name {
            fn initialize(&mut self) -> Result<$crate::store::StoreInfo, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.initialize(),)* }
            }

            fn begin(&mut self, mode: $crate::store::TxMode) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.begin(mode),)* }
            }

            fn read_ahead(&mut self, reads: $crate::store::ReadAhead) {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.read_ahead(reads),)* }
            }

            fn clock(&mut self) -> Result<Option<$crate::Timestamp>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.clock(),)* }
            }

            fn commit(&mut self) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.commit(),)* }
            }

            fn rollback(&mut self) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.rollback(),)* }
            }

            fn thread(&mut self, thread_id: &str) -> Result<Option<$crate::store::ThreadState>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.thread(thread_id),)* }
            }

            fn threads(&mut self, query: &$crate::store::ThreadQuery) -> Result<Vec<$crate::store::ThreadState>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.threads(query),)* }
            }

            fn insert_thread(&mut self, thread: &$crate::model::Thread) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_thread(thread),)* }
            }

            fn update_thread(&mut self, thread: &$crate::model::Thread) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.update_thread(thread),)* }
            }

            fn put_lease(&mut self, lease: &$crate::model::Lease) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_lease(lease),)* }
            }

            fn lapsed_leases(&mut self, now: $crate::Timestamp, limit: usize) -> Result<Vec<$crate::model::Lease>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.lapsed_leases(now, limit),)* }
            }

            fn next_lease_expiry(&mut self) -> Result<Option<$crate::Timestamp>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.next_lease_expiry(),)* }
            }

            fn insert_message(&mut self, message: &$crate::model::Message) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_message(message),)* }
            }

            fn message(&mut self, message_id: &str) -> Result<Option<$crate::model::Message>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.message(message_id),)* }
            }

            fn messages(&mut self, query: &$crate::store::MessageQuery) -> Result<Vec<$crate::model::Message>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.messages(query),)* }
            }

            fn latest_event_id(&mut self) -> Result<$crate::model::EventId, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.latest_event_id(),)* }
            }

            fn insert_event(&mut self, event: &$crate::model::Event) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_event(event),)* }
            }

            fn events(&mut self, query: &$crate::store::EventQuery) -> Result<Vec<$crate::model::Event>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.events(query),)* }
            }

            fn read_cursor(&mut self, thread_id: &str, agent: &str) -> Result<Option<$crate::model::ReadCursor>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.read_cursor(thread_id, agent),)* }
            }

            fn put_read_cursor(&mut self, cursor: &$crate::model::ReadCursor) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_read_cursor(cursor),)* }
            }

            fn agents(&mut self, query: &$crate::store::AgentQuery) -> Result<Vec<$crate::model::Agent>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.agents(query),)* }
            }

            fn put_agent(&mut self, agent: &$crate::model::Agent) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_agent(agent),)* }
            }

            fn delete_agent(&mut self, name: &str) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.delete_agent(name),)* }
            }

            fn live_leases(&mut self, now: $crate::Timestamp, limit: usize) -> Result<Vec<$crate::model::Lease>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.live_leases(now, limit),)* }
            }

            fn last_event_by(&mut self, source: &str) -> Result<Option<$crate::model::Event>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.last_event_by(source),)* }
            }

            fn mailbox(&mut self, query: &$crate::store::MailboxQuery) -> Result<Vec<$crate::model::Message>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.mailbox(query),)* }
            }

            fn idempotency(&mut self, key: &str) -> Result<Option<$crate::model::IdempotencyRecord>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.idempotency(key),)* }
            }

            fn put_idempotency(&mut self, record: &$crate::model::IdempotencyRecord) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_idempotency(record),)* }
            }

            fn delete_idempotency(&mut self, before: $crate::Timestamp, limit: usize) -> Result<u64, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.delete_idempotency(before, limit),)* }
            }

            fn settings(&mut self) -> Result<Option<$crate::model::Settings>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.settings(),)* }
            }

            fn put_settings(&mut self, settings: &$crate::model::Settings) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_settings(settings),)* }
            }

            fn thread_page(&mut self, query: &$crate::store::ThreadPage) -> Result<Vec<$crate::store::ThreadState>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.thread_page(query),)* }
            }

            fn message_count(&mut self) -> Result<u64, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.message_count(),)* }
            }

            fn delete_thread(&mut self, thread_id: &str) -> Result<u64, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.delete_thread(thread_id),)* }
            }

            fn run(&mut self, run_id: &str) -> Result<Option<$crate::orch::model::Run>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.run(run_id),)* }
            }

            fn runs(&mut self, query: &$crate::orch::query::RunQuery) -> Result<Vec<$crate::orch::model::Run>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.runs(query),)* }
            }

            fn insert_run(&mut self, run: &$crate::orch::model::Run) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_run(run),)* }
            }

            fn update_run(&mut self, run: &$crate::orch::model::Run) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.update_run(run),)* }
            }

            fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<$crate::orch::model::Task>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.task(run_id, task_id),)* }
            }

            fn tasks(&mut self, query: &$crate::orch::query::TaskQuery) -> Result<Vec<$crate::orch::model::Task>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.tasks(query),)* }
            }

            fn insert_task(&mut self, task: &$crate::orch::model::Task) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_task(task),)* }
            }

            fn update_task(&mut self, task: &$crate::orch::model::Task) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.update_task(task),)* }
            }

            fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<$crate::orch::model::Attempt>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.attempts(run_id, task_id),)* }
            }

            fn put_attempt(&mut self, attempt: &$crate::orch::model::Attempt) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.put_attempt(attempt),)* }
            }

            fn insert_orch_event(&mut self, event: &$crate::orch::model::OrchEvent) -> Result<(), $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.insert_orch_event(event),)* }
            }

            fn orch_events(&mut self, query: &$crate::orch::query::OrchEventQuery) -> Result<Vec<$crate::orch::model::OrchEvent>, $crate::StoreError> {
                match self { $($(#[cfg($cfg)])* Self::$variant(store) => store.orch_events(query),)* }
            }
        }
    };
}
