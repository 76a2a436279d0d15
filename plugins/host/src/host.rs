//! What a component imports, served from an engine [`Store`], a [`Clock`]
//! and a seed: [`HostState`] is the data of the wasmtime store.
//!
//! Every `store` import forwards to the engine store after one check of the
//! transaction protocol: the component is untrusted, so a read outside a
//! transaction, a write outside a write transaction or a second `begin` is
//! refused with a store error instead of reaching the data. The host also
//! remembers whether a transaction is open, so that a call that traps can be
//! rolled back (see [`HostState::abandon_transaction`]).

use inbox_engine::{Clock, Store, StoreError, TxMode};

use crate::bindings::inbox::engine::types as wit;
use crate::bindings::inbox::engine::{clock, entropy, store, types};
use crate::limits::MemoryCap;

mod convert {
    inbox_plugin_convert::wit_conversions!(crate::bindings::inbox::engine::types);
}

/// The host side of one instance: the engine store, the clock, the seed
/// source, the open transaction and the memory cap.
pub struct HostState<S, C> {
    pub(crate) store: S,
    pub(crate) clock: C,
    next_seed: u64,
    /// Where secrets come from (see `PluginEngine::set_secrets`).
    pub(crate) secrets: Option<inbox_engine::ids::SecretSource>,
    transaction: Option<TxMode>,
    pub(crate) memory: MemoryCap,
}

impl<S: Store, C: Clock> HostState<S, C> {
    pub(crate) fn new(store: S, clock: C, seed: u64, memory: MemoryCap) -> HostState<S, C> {
        HostState {
            store,
            clock,
            next_seed: seed,
            secrets: None,
            transaction: None,
            memory,
        }
    }

    /// Whether the component has a transaction open.
    pub fn in_transaction(&self) -> bool {
        self.transaction.is_some()
    }

    /// Rolls back the open transaction, if any: after a trap, or when a call
    /// returned without closing it. Returns the rollback's own failure.
    pub(crate) fn abandon_transaction(&mut self) -> Result<(), StoreError> {
        match self.transaction.take() {
            Some(_) => self.store.rollback(),
            None => Ok(()),
        }
    }

    fn reading(&self) -> Result<(), wit::StoreError> {
        match self.transaction {
            Some(_) => Ok(()),
            None => Err(protocol("read outside a transaction; call begin first")),
        }
    }

    fn writing(&self) -> Result<(), wit::StoreError> {
        match self.transaction {
            Some(TxMode::Write) => Ok(()),
            Some(TxMode::Read) => Err(protocol("write inside a read transaction")),
            None => Err(protocol("write outside a transaction; call begin first")),
        }
    }
}

fn protocol(problem: &str) -> wit::StoreError {
    wit::StoreError {
        kind: wit::StoreErrorKind::Other,
        message: format!("the engine component broke the store protocol: {problem}"),
    }
}

/// A store result for the component. Records the component sent go through
/// it too: a payload that is not a JSON object is refused before it reaches
/// the store.
fn out<T>(result: Result<T, StoreError>) -> Result<T, wit::StoreError> {
    result.map_err(|e| convert::store_error_to_wit(&e))
}

impl<S, C> types::Host for HostState<S, C> {}

impl<S: Store, C: Clock> store::Host for HostState<S, C> {
    fn initialize(&mut self) -> Result<wit::StoreInfo, wit::StoreError> {
        if self.transaction.is_some() {
            return Err(protocol("initialize inside a transaction"));
        }
        out(self.store.initialize()).map(convert::store_info_to_wit)
    }

    fn begin(&mut self, mode: wit::TxMode) -> Result<(), wit::StoreError> {
        if self.transaction.is_some() {
            return Err(protocol("begin inside a transaction"));
        }
        let mode = convert::tx_mode_from_wit(mode);
        out(self.store.begin(mode))?;
        self.transaction = Some(mode);
        Ok(())
    }

    fn commit(&mut self) -> Result<(), wit::StoreError> {
        if self.transaction.is_none() {
            return Err(protocol("commit without a transaction"));
        }
        // A failed commit leaves the transaction open: the engine rolls back.
        out(self.store.commit())?;
        self.transaction = None;
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), wit::StoreError> {
        if self.transaction.take().is_none() {
            return Err(protocol("rollback without a transaction"));
        }
        out(self.store.rollback())
    }

    fn get_thread(
        &mut self,
        thread_id: String,
    ) -> Result<Option<wit::ThreadState>, wit::StoreError> {
        self.reading()?;
        let state = out(self.store.thread(&thread_id))?;
        Ok(state.as_ref().map(convert::thread_state_to_wit))
    }

    fn threads(
        &mut self,
        query: wit::ThreadQuery,
    ) -> Result<Vec<wit::ThreadState>, wit::StoreError> {
        self.reading()?;
        let states = out(self.store.threads(&convert::thread_query_from_wit(query)))?;
        Ok(states.iter().map(convert::thread_state_to_wit).collect())
    }

    fn insert_thread(&mut self, thread: wit::Thread) -> Result<(), wit::StoreError> {
        self.writing()?;
        out(self.store.insert_thread(&convert::thread_from_wit(thread)))
    }

    fn update_thread(&mut self, thread: wit::Thread) -> Result<(), wit::StoreError> {
        self.writing()?;
        out(self.store.update_thread(&convert::thread_from_wit(thread)))
    }

    fn put_lease(&mut self, lease: wit::Lease) -> Result<(), wit::StoreError> {
        self.writing()?;
        out(self.store.put_lease(&convert::lease_from_wit(lease)))
    }

    fn lapsed_leases(&mut self, now: i64, limit: u64) -> Result<Vec<wit::Lease>, wit::StoreError> {
        self.reading()?;
        let now = inbox_engine::Timestamp::from_millis(now);
        let leases = out(self
            .store
            .lapsed_leases(now, convert::limit_from_wit(limit)))?;
        Ok(leases.iter().map(convert::lease_to_wit).collect())
    }

    fn next_lease_expiry(&mut self) -> Result<Option<i64>, wit::StoreError> {
        self.reading()?;
        Ok(out(self.store.next_lease_expiry())?.map(|at| at.as_millis()))
    }

    fn insert_message(&mut self, message: wit::Message) -> Result<(), wit::StoreError> {
        self.writing()?;
        let message = out(convert::message_from_wit(message))?;
        out(self.store.insert_message(&message))
    }

    fn get_message(&mut self, message_id: String) -> Result<Option<wit::Message>, wit::StoreError> {
        self.reading()?;
        let message = out(self.store.message(&message_id))?;
        Ok(message.as_ref().map(convert::message_to_wit))
    }

    fn messages(&mut self, query: wit::MessageQuery) -> Result<Vec<wit::Message>, wit::StoreError> {
        self.reading()?;
        let messages = out(self.store.messages(&convert::message_query_from_wit(query)))?;
        Ok(messages.iter().map(convert::message_to_wit).collect())
    }

    fn latest_event_id(&mut self) -> Result<u64, wit::StoreError> {
        self.reading()?;
        out(self.store.latest_event_id())
    }

    fn insert_event(&mut self, event: wit::Event) -> Result<(), wit::StoreError> {
        self.writing()?;
        let event = out(convert::event_from_wit(event))?;
        out(self.store.insert_event(&event))
    }

    fn events(&mut self, query: wit::EventQuery) -> Result<Vec<wit::Event>, wit::StoreError> {
        self.reading()?;
        let events = out(self.store.events(&convert::event_query_from_wit(query)))?;
        Ok(events.iter().map(convert::event_to_wit).collect())
    }

    fn get_read_cursor(
        &mut self,
        thread_id: String,
        agent: String,
    ) -> Result<Option<wit::ReadCursor>, wit::StoreError> {
        self.reading()?;
        let cursor = out(self.store.read_cursor(&thread_id, &agent))?;
        Ok(cursor.as_ref().map(convert::read_cursor_to_wit))
    }

    fn put_read_cursor(&mut self, cursor: wit::ReadCursor) -> Result<(), wit::StoreError> {
        self.writing()?;
        out(self
            .store
            .put_read_cursor(&convert::read_cursor_from_wit(cursor)))
    }

    fn get_run(&mut self, run_id: String) -> Result<Option<String>, wit::StoreError> {
        self.reading()?;
        let run = out(self.store.run(&run_id))?;
        Ok(run.as_ref().map(convert::run::to_json))
    }

    fn runs(&mut self, query: String) -> Result<Vec<String>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::run_query::from_json(&query))?;
        let runs = out(self.store.runs(&query))?;
        Ok(runs.iter().map(convert::run::to_json).collect())
    }

    fn insert_run(&mut self, run: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let run = out(convert::run::from_json(&run))?;
        out(self.store.insert_run(&run))
    }

    fn update_run(&mut self, run: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let run = out(convert::run::from_json(&run))?;
        out(self.store.update_run(&run))
    }

    fn get_task(
        &mut self,
        run_id: String,
        task_id: String,
    ) -> Result<Option<String>, wit::StoreError> {
        self.reading()?;
        let task = out(self.store.task(&run_id, &task_id))?;
        Ok(task.as_ref().map(convert::task::to_json))
    }

    fn tasks(&mut self, query: String) -> Result<Vec<String>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::task_query::from_json(&query))?;
        let tasks = out(self.store.tasks(&query))?;
        Ok(tasks.iter().map(convert::task::to_json).collect())
    }

    fn insert_task(&mut self, task: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let task = out(convert::task::from_json(&task))?;
        out(self.store.insert_task(&task))
    }

    fn update_task(&mut self, task: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let task = out(convert::task::from_json(&task))?;
        out(self.store.update_task(&task))
    }

    fn attempts(
        &mut self,
        run_id: String,
        task_id: String,
    ) -> Result<Vec<String>, wit::StoreError> {
        self.reading()?;
        let attempts = out(self.store.attempts(&run_id, &task_id))?;
        Ok(attempts.iter().map(convert::attempt::to_json).collect())
    }

    fn put_attempt(&mut self, attempt: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let attempt = out(convert::attempt::from_json(&attempt))?;
        out(self.store.put_attempt(&attempt))
    }

    fn insert_orch_event(&mut self, event: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let event = out(convert::orch_event::from_json(&event))?;
        out(self.store.insert_orch_event(&event))
    }

    fn orch_events(&mut self, query: String) -> Result<Vec<String>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::orch_event_query::from_json(&query))?;
        let events = out(self.store.orch_events(&query))?;
        Ok(events.iter().map(convert::orch_event::to_json).collect())
    }

    fn agents(&mut self, query: String) -> Result<Vec<String>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::agent_query::from_json(&query))?;
        let agents = out(self.store.agents(&query))?;
        Ok(agents.iter().map(convert::agent::to_json).collect())
    }

    fn put_agent(&mut self, agent: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let agent = out(convert::agent::from_json(&agent))?;
        out(self.store.put_agent(&agent))
    }

    fn delete_agent(&mut self, name: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        out(self.store.delete_agent(&name))
    }

    fn live_leases(&mut self, now: i64, limit: u64) -> Result<Vec<wit::Lease>, wit::StoreError> {
        self.reading()?;
        let now = inbox_engine::Timestamp::from_millis(now);
        let leases = out(self.store.live_leases(now, convert::limit_from_wit(limit)))?;
        Ok(leases.iter().map(convert::lease_to_wit).collect())
    }

    fn last_event_by(&mut self, source: String) -> Result<Option<wit::Event>, wit::StoreError> {
        self.reading()?;
        let event = out(self.store.last_event_by(&source))?;
        Ok(event.as_ref().map(convert::event_to_wit))
    }

    fn get_idempotency(&mut self, key: String) -> Result<Option<String>, wit::StoreError> {
        self.reading()?;
        let record = out(self.store.idempotency(&key))?;
        Ok(record.as_ref().map(convert::idempotency::to_json))
    }

    fn put_idempotency(&mut self, entry: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let record = out(convert::idempotency::from_json(&entry))?;
        out(self.store.put_idempotency(&record))
    }

    fn delete_idempotency(&mut self, before: i64, limit: u64) -> Result<u64, wit::StoreError> {
        self.writing()?;
        let before = inbox_engine::Timestamp::from_millis(before);
        out(self
            .store
            .delete_idempotency(before, convert::limit_from_wit(limit)))
    }

    fn get_settings(&mut self) -> Result<Option<String>, wit::StoreError> {
        self.reading()?;
        let settings = out(self.store.settings())?;
        Ok(settings.as_ref().map(convert::settings::to_json))
    }

    fn put_settings(&mut self, settings: String) -> Result<(), wit::StoreError> {
        self.writing()?;
        let settings = out(convert::settings::from_json(&settings))?;
        out(self.store.put_settings(&settings))
    }

    fn thread_page(&mut self, query: String) -> Result<Vec<wit::ThreadState>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::thread_page::from_json(&query))?;
        let states = out(self.store.thread_page(&query))?;
        Ok(states.iter().map(convert::thread_state_to_wit).collect())
    }

    fn message_count(&mut self) -> Result<u64, wit::StoreError> {
        self.reading()?;
        out(self.store.message_count())
    }

    fn delete_thread(&mut self, thread_id: String) -> Result<u64, wit::StoreError> {
        self.writing()?;
        out(self.store.delete_thread(&thread_id))
    }

    fn mailbox(&mut self, query: String) -> Result<Vec<wit::Message>, wit::StoreError> {
        self.reading()?;
        let query = out(convert::mailbox_query::from_json(&query))?;
        let messages = out(self.store.mailbox(&query))?;
        Ok(messages.iter().map(convert::message_to_wit).collect())
    }
}

impl<S, C: Clock> clock::Host for HostState<S, C> {
    fn now(&mut self) -> i64 {
        self.clock.now().as_millis()
    }
}

impl<S, C> entropy::Host for HostState<S, C> {
    fn seed(&mut self) -> u64 {
        // splitmix64: every instance (a replacement after a trap included)
        // gets a different seed, deterministic from the host's.
        self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.next_seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn secret_bytes(&mut self) -> Vec<u8> {
        // Never from the seed above: that sequence is predictable.
        self.secrets
            .and_then(|source| source())
            .map_or_else(Vec::new, |bytes| bytes.to_vec())
    }
}
