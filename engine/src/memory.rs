//! [`MemoryStore`]: the engine's storage in plain Rust collections, for tests,
//! transition scripts and the wasm package's memory mode.
//!
//! It is also the reference implementation of the [`Store`] queries: it
//! answers them with the `matches` methods in [`crate::store`], so other
//! stores can be checked against it. Rollback replays an undo log instead of
//! copying the state at `begin`, so a transaction costs what it writes, not
//! what the store holds. It is single-threaded by design: it must never be
//! shared between threads or processes without a lock around it, and it never
//! persists anything.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::error::StoreError;
use crate::model::{
    Agent, Event, EventId, IdempotencyRecord, Lease, Message, ReadCursor, Settings, Thread,
};
use crate::orch::model::{Attempt, OrchEvent, Run, Task};
use crate::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use crate::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, Store, StoreInfo, ThreadPage, ThreadQuery,
    ThreadState, TxMode,
};
use crate::time::Timestamp;

/// A lookup table by id. Its hasher has fixed keys: std's default
/// `RandomState` seeds itself from the OS, which the engine never asks.
type Index<V> = HashMap<String, V, BuildHasherDefault<DefaultHasher>>;

/// Storage in memory; everything is lost when it is dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStore {
    data: Data,
    tx: Option<TxMode>,
    undo: Vec<Undo>,
    /// Whether the open transaction has copied the records for a removal.
    copied: bool,
}

/// The records. Compared as a whole by property tests ("fetch changes
/// nothing", "a failed command changes nothing").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Data {
    threads: BTreeMap<String, Thread>,
    leases: BTreeMap<String, Lease>,
    /// All messages in event order; `message_index` and `thread_messages`
    /// point into it.
    messages: Vec<Message>,
    message_index: Index<usize>,
    thread_messages: Index<Vec<usize>>,
    /// inbox's events in id order (ids skip those of orch events).
    events: Vec<Event>,
    /// Each thread's events, as indexes into `events`, in order.
    thread_events: Index<Vec<usize>>,
    cursors: BTreeMap<(String, String), ReadCursor>,
    /// Registered agents by name.
    agents: BTreeMap<String, Agent>,
    /// Writes done under an idempotency key, by key.
    idempotency: BTreeMap<String, IdempotencyRecord>,
    /// The engine's settings, once stored.
    settings: Option<Settings>,
    /// The highest event id written, of either kind.
    last_event_id: EventId,
    runs: BTreeMap<String, Run>,
    /// By (run, task).
    tasks: BTreeMap<(String, String), Task>,
    /// By (run, task, attempt).
    attempts: BTreeMap<(String, String, u32), Attempt>,
    /// orch's events in id order.
    orch_events: Vec<OrchEvent>,
}

/// How to take back one write.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Undo {
    InsertThread(String),
    UpdateThread(Thread),
    PutLease(String, Option<Lease>),
    InsertMessage,
    InsertEvent,
    PutCursor((String, String), Option<ReadCursor>),
    PutAgent(String, Option<Agent>),
    PutIdempotency(String, Option<IdempotencyRecord>),
    PutSettings(Option<Settings>),
    /// Every record as it was before the transaction's first removal.
    /// Removals are rare (retention) and touch the positional indexes, so
    /// they are undone by a copy rather than a log of their own.
    Removal(Box<Data>),
    /// The event id counter before an insert.
    LastEvent(EventId),
    PutRun(String, Option<Run>),
    /// Boxed: a task is the largest record, and every other undo entry
    /// would pay for its size.
    PutTask((String, String), Option<Box<Task>>),
    PutAttempt((String, String, u32), Option<Attempt>),
    InsertOrchEvent,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// True when both stores hold the same records (transaction state aside).
    pub fn same_records(&self, other: &MemoryStore) -> bool {
        self.data == other.data
    }

    fn reading(&self) -> Result<(), StoreError> {
        match self.tx {
            Some(_) => Ok(()),
            None => Err(StoreError::other(
                "memory store used outside a transaction; call begin first",
            )),
        }
    }

    fn writing(&self) -> Result<(), StoreError> {
        match self.tx {
            Some(TxMode::Write) => Ok(()),
            _ => Err(StoreError::other(
                "memory store written outside a write transaction",
            )),
        }
    }

    /// Checks that `id` comes after every event id so far and moves the
    /// counter to it.
    fn next_event_id(&mut self, id: EventId) -> Result<(), StoreError> {
        if id <= self.data.last_event_id {
            return Err(StoreError::other(format!(
                "event id {id} out of sequence; the last was {}",
                self.data.last_event_id
            )));
        }
        self.undo.push(Undo::LastEvent(self.data.last_event_id));
        self.data.last_event_id = id;
        Ok(())
    }

    fn state(&self, thread: &Thread) -> ThreadState {
        ThreadState {
            thread: thread.clone(),
            lease: self.data.leases.get(&thread.thread_id).cloned(),
        }
    }

    fn thread_messages(&self, thread_id: &str) -> impl DoubleEndedIterator<Item = &Message> {
        self.data
            .thread_messages
            .get(thread_id)
            .into_iter()
            .flatten()
            .map(|&i| &self.data.messages[i])
    }
}

impl Store for MemoryStore {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        Ok(StoreInfo {
            location: None,
            schema_version: 1,
        })
    }

    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        if self.tx.is_some() {
            return Err(StoreError::other("memory store: transaction already open"));
        }
        self.tx = Some(mode);
        self.undo.clear();
        self.copied = false;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.reading()?;
        self.tx = None;
        self.undo.clear();
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        while let Some(undo) = self.undo.pop() {
            let data = &mut self.data;
            match undo {
                Undo::InsertThread(id) => {
                    data.threads.remove(&id);
                }
                Undo::UpdateThread(old) => {
                    data.threads.insert(old.thread_id.clone(), old);
                }
                Undo::PutLease(id, old) => match old {
                    Some(old) => {
                        data.leases.insert(id, old);
                    }
                    None => {
                        data.leases.remove(&id);
                    }
                },
                Undo::InsertMessage => {
                    if let Some(message) = data.messages.pop() {
                        data.message_index.remove(&message.message_id);
                        if let Some(list) = data.thread_messages.get_mut(&message.thread_id) {
                            list.pop();
                            if list.is_empty() {
                                data.thread_messages.remove(&message.thread_id);
                            }
                        }
                    }
                }
                Undo::InsertEvent => {
                    if let Some(event) = data.events.pop()
                        && let Some(list) = data.thread_events.get_mut(&event.thread_id)
                    {
                        list.pop();
                        if list.is_empty() {
                            data.thread_events.remove(&event.thread_id);
                        }
                    }
                }
                Undo::PutCursor(key, old) => restore(&mut data.cursors, key, old),
                Undo::PutAgent(key, old) => restore(&mut data.agents, key, old),
                Undo::PutIdempotency(key, old) => restore(&mut data.idempotency, key, old),
                Undo::PutSettings(old) => data.settings = old,
                Undo::Removal(before) => *data = *before,
                Undo::LastEvent(id) => data.last_event_id = id,
                Undo::PutRun(key, old) => restore(&mut data.runs, key, old),
                Undo::PutTask(key, old) => restore(&mut data.tasks, key, old.map(|t| *t)),
                Undo::PutAttempt(key, old) => restore(&mut data.attempts, key, old),
                Undo::InsertOrchEvent => {
                    data.orch_events.pop();
                }
            }
        }
        self.tx = None;
        Ok(())
    }

    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        self.reading()?;
        Ok(self.data.threads.get(thread_id).map(|t| self.state(t)))
    }

    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        self.reading()?;
        let mut found: Vec<&Thread> = self
            .data
            .threads
            .values()
            .filter(|t| query.matches(t))
            .filter(|t| {
                query.unread.as_deref().is_none_or(|reader| {
                    let cursor = self
                        .data
                        .cursors
                        .get(&(t.thread_id.clone(), reader.to_owned()));
                    ThreadQuery::is_unread(reader, self.thread_messages(&t.thread_id), cursor)
                })
            })
            .collect();
        found.sort_by(|a, b| query.compare(a, b));
        Ok(found
            .into_iter()
            .take(query.limit)
            .map(|t| query.keep_lease_of(self.state(t)))
            .collect())
    }

    fn insert_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        self.writing()?;
        if self.data.threads.contains_key(&thread.thread_id) {
            return Err(StoreError::other(format!(
                "thread {} already exists",
                thread.thread_id
            )));
        }
        self.data
            .threads
            .insert(thread.thread_id.clone(), thread.clone());
        self.undo.push(Undo::InsertThread(thread.thread_id.clone()));
        Ok(())
    }

    fn update_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        self.writing()?;
        let stored = self
            .data
            .threads
            .get_mut(&thread.thread_id)
            .ok_or_else(|| StoreError::missing_thread(&thread.thread_id))?;
        if !thread.keeps_fixed_fields_of(stored) {
            return Err(StoreError::fixed_fields_changed(&thread.thread_id));
        }
        let old = std::mem::replace(stored, thread.clone());
        self.undo.push(Undo::UpdateThread(old));
        Ok(())
    }

    fn put_lease(&mut self, lease: &Lease) -> Result<(), StoreError> {
        self.writing()?;
        let old = self
            .data
            .leases
            .insert(lease.thread_id.clone(), lease.clone());
        self.undo.push(Undo::PutLease(lease.thread_id.clone(), old));
        Ok(())
    }

    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.reading()?;
        let mut lapsed: Vec<&Lease> = self
            .data
            .leases
            .values()
            .filter(|l| l.is_lapsed(now))
            .collect();
        lapsed.sort_by(|a, b| {
            a.expires_at
                .cmp(&b.expires_at)
                .then(a.thread_id.cmp(&b.thread_id))
        });
        Ok(lapsed.into_iter().take(limit).cloned().collect())
    }

    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError> {
        self.reading()?;
        Ok(self
            .data
            .leases
            .values()
            .filter(|l| l.released_at.is_none())
            .map(|l| l.expires_at)
            .min())
    }

    fn insert_message(&mut self, message: &Message) -> Result<(), StoreError> {
        self.writing()?;
        if self.data.message_index.contains_key(&message.message_id) {
            return Err(StoreError::other(format!(
                "message {} already exists",
                message.message_id
            )));
        }
        let index = self.data.messages.len();
        self.data.messages.push(message.clone());
        self.data
            .message_index
            .insert(message.message_id.clone(), index);
        self.data
            .thread_messages
            .entry(message.thread_id.clone())
            .or_default()
            .push(index);
        self.undo.push(Undo::InsertMessage);
        Ok(())
    }

    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        self.reading()?;
        Ok(self
            .data
            .message_index
            .get(message_id)
            .map(|&i| self.data.messages[i].clone()))
    }

    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        self.reading()?;
        let matching = |m: &&Message| query.matches(m);
        let found: Vec<Message> = if query.newest_first {
            self.thread_messages(&query.thread_id)
                .rev()
                .filter(matching)
                .take(query.limit)
                .cloned()
                .collect()
        } else {
            self.thread_messages(&query.thread_id)
                .filter(matching)
                .take(query.limit)
                .cloned()
                .collect()
        };
        Ok(found)
    }

    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        self.reading()?;
        Ok(self.data.last_event_id)
    }

    fn insert_event(&mut self, event: &Event) -> Result<(), StoreError> {
        self.writing()?;
        self.next_event_id(event.event_id)?;
        self.data
            .thread_events
            .entry(event.thread_id.clone())
            .or_default()
            .push(self.data.events.len());
        self.data.events.push(event.clone());
        self.undo.push(Undo::InsertEvent);
        Ok(())
    }

    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        self.reading()?;
        let start = self
            .data
            .events
            .partition_point(|e| e.event_id <= query.after_event);
        let candidates: Box<dyn Iterator<Item = &Event>> = match &query.thread_id {
            // Thread-scoped queries (fencing checks, reply waits) walk only
            // that thread's events.
            Some(thread_id) => Box::new(
                self.data
                    .thread_events
                    .get(thread_id)
                    .into_iter()
                    .flatten()
                    .filter(move |&&i| i >= start)
                    .map(|&i| &self.data.events[i]),
            ),
            None => Box::new(self.data.events[start..].iter()),
        };
        Ok(candidates
            .filter(|e| {
                self.data
                    .threads
                    .get(&e.thread_id)
                    .is_some_and(|t| query.matches(e, t))
            })
            .take(query.limit)
            .cloned()
            .collect())
    }

    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError> {
        self.reading()?;
        Ok(self
            .data
            .cursors
            .get(&(thread_id.to_owned(), agent.to_owned()))
            .cloned())
    }

    fn put_read_cursor(&mut self, cursor: &ReadCursor) -> Result<(), StoreError> {
        self.writing()?;
        let key = (cursor.thread_id.clone(), cursor.agent.clone());
        let old = self.data.cursors.insert(key.clone(), cursor.clone());
        self.undo.push(Undo::PutCursor(key, old));
        Ok(())
    }

    fn agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        self.reading()?;
        Ok((self.data.agents.values())
            .filter(|a| query.matches(a))
            .take(query.limit)
            .cloned()
            .collect())
    }

    fn put_agent(&mut self, agent: &Agent) -> Result<(), StoreError> {
        self.writing()?;
        let old = self.data.agents.insert(agent.name.clone(), agent.clone());
        self.undo.push(Undo::PutAgent(agent.name.clone(), old));
        Ok(())
    }

    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError> {
        self.writing()?;
        let old = self.data.agents.remove(name);
        self.undo.push(Undo::PutAgent(name.to_owned(), old));
        Ok(())
    }

    fn live_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.reading()?;
        let mut live: Vec<&Lease> = self
            .data
            .leases
            .values()
            .filter(|l| l.is_live(now))
            .collect();
        live.sort_by(|a, b| {
            a.expires_at
                .cmp(&b.expires_at)
                .then(a.thread_id.cmp(&b.thread_id))
        });
        Ok(live.into_iter().take(limit).cloned().collect())
    }

    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        self.reading()?;
        Ok(self
            .data
            .events
            .iter()
            .rev()
            .find(|e| e.source == source)
            .cloned())
    }

    fn mailbox(&mut self, query: &MailboxQuery) -> Result<Vec<Message>, StoreError> {
        self.reading()?;
        let start = self
            .data
            .messages
            .partition_point(|m| m.event_id <= query.after_event);
        Ok(self.data.messages[start..]
            .iter()
            .filter(|m| {
                let cursor = self
                    .data
                    .cursors
                    .get(&(m.thread_id.clone(), query.reader.clone()));
                query.matches(m, cursor)
            })
            .take(query.limit)
            .cloned()
            .collect())
    }

    fn idempotency(&mut self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.reading()?;
        Ok(self.data.idempotency.get(key).cloned())
    }

    fn put_idempotency(&mut self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        self.writing()?;
        let old = self
            .data
            .idempotency
            .insert(record.key.clone(), record.clone());
        self.undo
            .push(Undo::PutIdempotency(record.key.clone(), old));
        Ok(())
    }

    fn delete_idempotency(&mut self, before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        self.writing()?;
        let mut old: Vec<&IdempotencyRecord> = (self.data.idempotency.values())
            .filter(|r| r.created_at < before)
            .collect();
        old.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key)));
        let keys: Vec<String> = old.into_iter().take(limit).map(|r| r.key.clone()).collect();
        for key in &keys {
            let old = self.data.idempotency.remove(key);
            self.undo.push(Undo::PutIdempotency(key.clone(), old));
        }
        Ok(keys.len() as u64)
    }

    fn settings(&mut self) -> Result<Option<Settings>, StoreError> {
        self.reading()?;
        Ok(self.data.settings.clone())
    }

    fn put_settings(&mut self, settings: &Settings) -> Result<(), StoreError> {
        self.writing()?;
        let old = self.data.settings.replace(settings.clone());
        self.undo.push(Undo::PutSettings(old));
        Ok(())
    }

    fn thread_page(&mut self, query: &ThreadPage) -> Result<Vec<ThreadState>, StoreError> {
        self.reading()?;
        Ok((self.data.threads.values())
            .filter(|t| query.matches(t))
            .take(query.limit)
            .map(|t| self.state(t))
            .collect())
    }

    fn message_count(&mut self) -> Result<u64, StoreError> {
        self.reading()?;
        Ok(self.data.messages.len() as u64)
    }

    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        self.writing()?;
        if !self.copied {
            self.undo.push(Undo::Removal(Box::new(self.data.clone())));
            self.copied = true;
        }
        let data = &mut self.data;
        data.threads.remove(thread_id);
        data.leases.remove(thread_id);
        data.cursors.retain(|(thread, _), _| thread != thread_id);
        let before = data.messages.len();
        data.messages.retain(|m| m.thread_id != thread_id);
        let removed = (before - data.messages.len()) as u64;
        data.events.retain(|e| e.thread_id != thread_id);
        data.reindex();
        Ok(removed)
    }

    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.reading()?;
        Ok(self.data.runs.get(run_id).cloned())
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.reading()?;
        let mut runs: Vec<Run> = (self.data.runs.values())
            .filter(|r| query.matches(r))
            .cloned()
            .collect();
        runs.sort_by(RunQuery::compare);
        runs.truncate(query.limit);
        Ok(runs)
    }

    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.writing()?;
        if self.data.runs.contains_key(&run.run_id) {
            return Err(StoreError::other(format!(
                "run {} already exists",
                run.run_id
            )));
        }
        self.put_run(run);
        Ok(())
    }

    fn update_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.writing()?;
        if !self.data.runs.contains_key(&run.run_id) {
            return Err(StoreError::other(format!(
                "run {} does not exist",
                run.run_id
            )));
        }
        self.put_run(run);
        Ok(())
    }

    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError> {
        self.reading()?;
        Ok(self
            .data
            .tasks
            .get(&(run_id.to_owned(), task_id.to_owned()))
            .cloned())
    }

    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        self.reading()?;
        let run = query.run_id.clone();
        let mut tasks: Vec<Task> = self
            .data
            .tasks
            .range((run.clone(), String::new())..)
            .take_while(|((r, _), _)| *r == run)
            .map(|(_, t)| t)
            .filter(|t| query.matches(t))
            .cloned()
            .collect();
        tasks.sort_by(|a, b| query.compare(a, b));
        tasks.truncate(query.limit);
        Ok(tasks)
    }

    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.writing()?;
        let key = (task.run_id.clone(), task.task_id.clone());
        if self.data.tasks.contains_key(&key) {
            return Err(StoreError::other(format!(
                "task {} already exists",
                task.task_id
            )));
        }
        self.put_task(key, task);
        Ok(())
    }

    fn update_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.writing()?;
        let key = (task.run_id.clone(), task.task_id.clone());
        if !self.data.tasks.contains_key(&key) {
            return Err(StoreError::other(format!(
                "task {} does not exist",
                task.task_id
            )));
        }
        self.put_task(key, task);
        Ok(())
    }

    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.reading()?;
        let (run, task) = (run_id.to_owned(), task_id.to_owned());
        Ok(self
            .data
            .attempts
            .range((run.clone(), task.clone(), 0)..)
            .take_while(|((r, t, _), _)| *r == run && *t == task)
            .map(|(_, a)| a.clone())
            .collect())
    }

    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        self.writing()?;
        let key = (
            attempt.run_id.clone(),
            attempt.task_id.clone(),
            attempt.attempt,
        );
        let old = self.data.attempts.insert(key.clone(), attempt.clone());
        self.undo.push(Undo::PutAttempt(key, old));
        Ok(())
    }

    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        self.writing()?;
        self.next_event_id(event.event_id)?;
        self.data.orch_events.push(event.clone());
        self.undo.push(Undo::InsertOrchEvent);
        Ok(())
    }

    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        self.reading()?;
        let start = self
            .data
            .orch_events
            .partition_point(|e| e.event_id <= query.after_event);
        Ok(self.data.orch_events[start..]
            .iter()
            .filter(|e| query.matches(e))
            .take(query.limit)
            .cloned()
            .collect())
    }
}

impl Data {
    /// Rebuilds the positional indexes after a removal.
    fn reindex(&mut self) {
        self.message_index.clear();
        self.thread_messages.clear();
        for (i, message) in self.messages.iter().enumerate() {
            self.message_index.insert(message.message_id.clone(), i);
            let list = self.thread_messages.entry(message.thread_id.clone());
            list.or_default().push(i);
        }
        self.thread_events.clear();
        for (i, event) in self.events.iter().enumerate() {
            let list = self.thread_events.entry(event.thread_id.clone());
            list.or_default().push(i);
        }
    }
}

impl MemoryStore {
    fn put_run(&mut self, run: &Run) {
        let old = self.data.runs.insert(run.run_id.clone(), run.clone());
        self.undo.push(Undo::PutRun(run.run_id.clone(), old));
    }

    fn put_task(&mut self, key: (String, String), task: &Task) {
        let old = self.data.tasks.insert(key.clone(), task.clone());
        self.undo.push(Undo::PutTask(key, old.map(Box::new)));
    }
}

/// Puts back what a key held before a write: the old value, or nothing.
fn restore<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, old: Option<V>) {
    match old {
        Some(old) => map.insert(key, old),
        None => map.remove(&key),
    };
}
