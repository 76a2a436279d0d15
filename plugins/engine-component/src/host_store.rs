//! The engine's [`Store`] trait over the host's `store` import: every call
//! crosses the sandbox boundary once, with the records converted field for
//! field (orch's records as the engine's JSON). The host decides where the
//! data lives; this side keeps nothing between calls.

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use inbox_engine::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, ThreadPage, ThreadQuery,
};
use inbox_engine::{
    Agent, Event, EventId, IdempotencyRecord, Lease, Message, ReadCursor, Settings, Store,
    StoreError, StoreInfo, Thread, ThreadState, Timestamp, TxMode,
};

use crate::bindings::inbox::engine::store as host;
use crate::convert;

/// The store the host provides. Stateless: the host holds the connection,
/// the transaction and the data.
pub(crate) struct HostStore;

impl Store for HostStore {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        host::initialize()
            .map(convert::store_info_from_wit)
            .map_err(convert::store_error_from_wit)
    }

    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        host::begin(convert::tx_mode_to_wit(mode)).map_err(convert::store_error_from_wit)
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        host::commit().map_err(convert::store_error_from_wit)
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        host::rollback().map_err(convert::store_error_from_wit)
    }

    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        host::get_thread(thread_id)
            .map(|state| state.map(convert::thread_state_from_wit))
            .map_err(convert::store_error_from_wit)
    }

    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        host::threads(&convert::thread_query_to_wit(query))
            .map(|states| {
                states
                    .into_iter()
                    .map(convert::thread_state_from_wit)
                    .collect()
            })
            .map_err(convert::store_error_from_wit)
    }

    fn insert_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        host::insert_thread(&convert::thread_to_wit(thread)).map_err(convert::store_error_from_wit)
    }

    fn update_thread(&mut self, thread: &Thread) -> Result<(), StoreError> {
        host::update_thread(&convert::thread_to_wit(thread)).map_err(convert::store_error_from_wit)
    }

    fn put_lease(&mut self, lease: &Lease) -> Result<(), StoreError> {
        host::put_lease(&convert::lease_to_wit(lease)).map_err(convert::store_error_from_wit)
    }

    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        host::lapsed_leases(now.as_millis(), convert::limit_to_wit(limit))
            .map(|leases| leases.into_iter().map(convert::lease_from_wit).collect())
            .map_err(convert::store_error_from_wit)
    }

    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError> {
        host::next_lease_expiry()
            .map(|at| at.map(Timestamp::from_millis))
            .map_err(convert::store_error_from_wit)
    }

    fn insert_message(&mut self, message: &Message) -> Result<(), StoreError> {
        host::insert_message(&convert::message_to_wit(message))
            .map_err(convert::store_error_from_wit)
    }

    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        host::get_message(message_id)
            .map_err(convert::store_error_from_wit)?
            .map(convert::message_from_wit)
            .transpose()
    }

    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        host::messages(&convert::message_query_to_wit(query))
            .map_err(convert::store_error_from_wit)?
            .into_iter()
            .map(convert::message_from_wit)
            .collect()
    }

    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        host::latest_event_id().map_err(convert::store_error_from_wit)
    }

    fn insert_event(&mut self, event: &Event) -> Result<(), StoreError> {
        host::insert_event(&convert::event_to_wit(event)).map_err(convert::store_error_from_wit)
    }

    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        host::events(&convert::event_query_to_wit(query))
            .map_err(convert::store_error_from_wit)?
            .into_iter()
            .map(convert::event_from_wit)
            .collect()
    }

    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError> {
        host::get_read_cursor(thread_id, agent)
            .map(|cursor| cursor.map(convert::read_cursor_from_wit))
            .map_err(convert::store_error_from_wit)
    }

    fn put_read_cursor(&mut self, cursor: &ReadCursor) -> Result<(), StoreError> {
        host::put_read_cursor(&convert::read_cursor_to_wit(cursor))
            .map_err(convert::store_error_from_wit)
    }

    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let text = host::get_run(run_id).map_err(convert::store_error_from_wit)?;
        text.map(|t| convert::run::from_json(&t)).transpose()
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        let texts = host::runs(&convert::run_query::to_json(query))
            .map_err(convert::store_error_from_wit)?;
        texts.iter().map(|t| convert::run::from_json(t)).collect()
    }

    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError> {
        host::insert_run(&convert::run::to_json(run)).map_err(convert::store_error_from_wit)
    }

    fn update_run(&mut self, run: &Run) -> Result<(), StoreError> {
        host::update_run(&convert::run::to_json(run)).map_err(convert::store_error_from_wit)
    }

    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError> {
        let text = host::get_task(run_id, task_id).map_err(convert::store_error_from_wit)?;
        text.map(|t| convert::task::from_json(&t)).transpose()
    }

    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        let texts = host::tasks(&convert::task_query::to_json(query))
            .map_err(convert::store_error_from_wit)?;
        texts.iter().map(|t| convert::task::from_json(t)).collect()
    }

    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError> {
        host::insert_task(&convert::task::to_json(task)).map_err(convert::store_error_from_wit)
    }

    fn update_task(&mut self, task: &Task) -> Result<(), StoreError> {
        host::update_task(&convert::task::to_json(task)).map_err(convert::store_error_from_wit)
    }

    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError> {
        let texts = host::attempts(run_id, task_id).map_err(convert::store_error_from_wit)?;
        texts
            .iter()
            .map(|t| convert::attempt::from_json(t))
            .collect()
    }

    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        host::put_attempt(&convert::attempt::to_json(attempt))
            .map_err(convert::store_error_from_wit)
    }

    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        host::insert_orch_event(&convert::orch_event::to_json(event))
            .map_err(convert::store_error_from_wit)
    }

    fn agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        let texts = host::agents(&convert::agent_query::to_json(query))
            .map_err(convert::store_error_from_wit)?;
        texts.iter().map(|t| convert::agent::from_json(t)).collect()
    }

    fn put_agent(&mut self, agent: &Agent) -> Result<(), StoreError> {
        host::put_agent(&convert::agent::to_json(agent)).map_err(convert::store_error_from_wit)
    }

    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError> {
        host::delete_agent(name).map_err(convert::store_error_from_wit)
    }

    fn live_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        host::live_leases(now.as_millis(), convert::limit_to_wit(limit))
            .map(|leases| leases.into_iter().map(convert::lease_from_wit).collect())
            .map_err(convert::store_error_from_wit)
    }

    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        host::last_event_by(source)
            .map_err(convert::store_error_from_wit)?
            .map(convert::event_from_wit)
            .transpose()
    }

    fn mailbox(&mut self, query: &MailboxQuery) -> Result<Vec<Message>, StoreError> {
        host::mailbox(&convert::mailbox_query::to_json(query))
            .map_err(convert::store_error_from_wit)?
            .into_iter()
            .map(convert::message_from_wit)
            .collect()
    }

    fn idempotency(&mut self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        host::get_idempotency(key)
            .map_err(convert::store_error_from_wit)?
            .map(|t| convert::idempotency::from_json(&t))
            .transpose()
    }

    fn put_idempotency(&mut self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        host::put_idempotency(&convert::idempotency::to_json(record))
            .map_err(convert::store_error_from_wit)
    }

    fn delete_idempotency(&mut self, before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        host::delete_idempotency(before.as_millis(), convert::limit_to_wit(limit))
            .map_err(convert::store_error_from_wit)
    }

    fn settings(&mut self) -> Result<Option<Settings>, StoreError> {
        host::get_settings()
            .map_err(convert::store_error_from_wit)?
            .map(|t| convert::settings::from_json(&t))
            .transpose()
    }

    fn put_settings(&mut self, settings: &Settings) -> Result<(), StoreError> {
        host::put_settings(&convert::settings::to_json(settings))
            .map_err(convert::store_error_from_wit)
    }

    fn thread_page(&mut self, query: &ThreadPage) -> Result<Vec<ThreadState>, StoreError> {
        let states = host::thread_page(&convert::thread_page::to_json(query))
            .map_err(convert::store_error_from_wit)?;
        Ok(states
            .into_iter()
            .map(convert::thread_state_from_wit)
            .collect())
    }

    fn message_count(&mut self) -> Result<u64, StoreError> {
        host::message_count().map_err(convert::store_error_from_wit)
    }

    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        host::delete_thread(thread_id).map_err(convert::store_error_from_wit)
    }

    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        let texts = host::orch_events(&convert::orch_event_query::to_json(query))
            .map_err(convert::store_error_from_wit)?;
        texts
            .iter()
            .map(|t| convert::orch_event::from_json(t))
            .collect()
    }
}
