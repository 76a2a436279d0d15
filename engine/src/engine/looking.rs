//! [`Looking`]: a store seen through a read transaction, for a read that
//! may find it has something to record. Its reads go to the store; its
//! first write is refused, and remembered, so the engine knows the answer
//! it was building is not the truth yet (a lease lapsed, a worker's `done`
//! not yet followed in its run) and asks again in a short write that
//! records it (see `Engine::look`).
//!
//! [`LookingIds`] does the same for ids: a read that asks for a new id is
//! about to write a new record, and must not use up an id the write that
//! follows would have had (transcripts number their ids).
//!
//! This is how orch's reads and `orch wait`'s looks take no write lock when
//! there is nothing to record: most of the time. It must never let a write
//! through, and never decide anything itself.

use crate::ids::{IdKind, IdSource};
use crate::model::{
    Agent, Event, EventId, IdempotencyRecord, Lease, Message, ReadCursor, Settings, Thread,
};
use crate::orch::model::{Attempt, OrchEvent, Run, Task};
use crate::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use crate::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, ReadAhead, Store, StoreInfo, ThreadPage,
    ThreadQuery, ThreadState, TxMode,
};
use crate::{StoreError, Timestamp};

/// `store` for reading only; see the module docs.
pub(super) struct Looking<'s, S> {
    store: &'s mut S,
    /// Whether anything tried to write.
    wrote: bool,
}

impl<'s, S: Store> Looking<'s, S> {
    pub(super) fn new(store: &'s mut S) -> Self {
        Looking {
            store,
            wrote: false,
        }
    }

    /// Whether the read tried to write (its answer must then be dropped).
    pub(super) fn wrote(&self) -> bool {
        self.wrote
    }

    /// Refuses a write, and remembers it.
    fn refuse(&mut self) -> StoreError {
        self.wrote = true;
        StoreError::other("a read found something to record; it is asked again in a write")
    }
}

/// Reads pass through to the store.
macro_rules! reads {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&mut self, $($arg: $ty),*) -> Result<$out, StoreError> {
            self.store.$name($($arg),*)
        })*
    };
}

/// Writes are refused (see [`Looking::refuse`]).
macro_rules! writes {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&mut self, $($arg: $ty),*) -> Result<$out, StoreError> {
            $(let _ = $arg;)*
            Err(self.refuse())
        })*
    };
}

impl<S: Store> Store for Looking<'_, S> {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        Err(self.refuse())
    }

    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        self.store.begin(mode)
    }

    fn read_ahead(&mut self, reads: ReadAhead) {
        self.store.read_ahead(reads);
    }

    fn clock(&mut self) -> Result<Option<Timestamp>, StoreError> {
        self.store.clock()
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.store.commit()
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        self.store.rollback()
    }

    reads! {
        thread(thread_id: &str) -> Option<ThreadState>;
        threads(query: &ThreadQuery) -> Vec<ThreadState>;
        lapsed_leases(now: Timestamp, limit: usize) -> Vec<Lease>;
        next_lease_expiry() -> Option<Timestamp>;
        message(message_id: &str) -> Option<Message>;
        messages(query: &MessageQuery) -> Vec<Message>;
        latest_event_id() -> EventId;
        events(query: &EventQuery) -> Vec<Event>;
        read_cursor(thread_id: &str, agent: &str) -> Option<ReadCursor>;
        agents(query: &AgentQuery) -> Vec<Agent>;
        live_leases(now: Timestamp, limit: usize) -> Vec<Lease>;
        last_event_by(source: &str) -> Option<Event>;
        mailbox(query: &MailboxQuery) -> Vec<Message>;
        idempotency(key: &str) -> Option<IdempotencyRecord>;
        settings() -> Option<Settings>;
        thread_page(query: &ThreadPage) -> Vec<ThreadState>;
        message_count() -> u64;
        run(run_id: &str) -> Option<Run>;
        runs(query: &RunQuery) -> Vec<Run>;
        task(run_id: &str, task_id: &str) -> Option<Task>;
        tasks(query: &TaskQuery) -> Vec<Task>;
        attempts(run_id: &str, task_id: &str) -> Vec<Attempt>;
        orch_events(query: &OrchEventQuery) -> Vec<OrchEvent>;
    }

    writes! {
        insert_thread(thread: &Thread) -> ();
        update_thread(thread: &Thread) -> ();
        put_lease(lease: &Lease) -> ();
        insert_message(message: &Message) -> ();
        insert_event(event: &Event) -> ();
        put_read_cursor(cursor: &ReadCursor) -> ();
        put_agent(agent: &Agent) -> ();
        delete_agent(name: &str) -> ();
        put_idempotency(record: &IdempotencyRecord) -> ();
        delete_idempotency(before: Timestamp, limit: usize) -> u64;
        put_settings(settings: &Settings) -> ();
        delete_thread(thread_id: &str) -> u64;
        insert_run(run: &Run) -> ();
        update_run(run: &Run) -> ();
        insert_task(task: &Task) -> ();
        update_task(task: &Task) -> ();
        put_attempt(attempt: &Attempt) -> ();
        insert_orch_event(event: &OrchEvent) -> ();
    }
}

/// The ids of a look: asking for one marks the look as one that would
/// write; what it returns is never stored.
#[derive(Default)]
pub(super) struct LookingIds {
    asked: bool,
}

impl LookingIds {
    /// Whether the look asked for an id (its answer must then be dropped).
    pub(super) fn asked(&self) -> bool {
        self.asked
    }
}

impl IdSource for LookingIds {
    fn next_id(&mut self, kind: IdKind, _now: Timestamp) -> String {
        self.asked = true;
        format!("{}looking", kind.prefix())
    }

    fn secret(&mut self) -> Option<String> {
        self.asked = true;
        None
    }
}
