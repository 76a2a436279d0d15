//! The agent registry, the mailbox and the idempotency keys in SQLite, for the
//! [`inbox_engine::Store`] methods the engine's address rules call. An agent
//! row keeps the record as the engine's JSON (like orch's records) beside
//! `agent_roles`, one row per (role, agent), which serves "members of a
//! role". Every query is served by an index of schema version 3 (checked by
//! `tests/query_plans.rs`). It must never decide anything: it answers
//! exactly the queries described in `inbox_engine::store`.

use inbox_engine::store::{AgentQuery, MailboxQuery};
use inbox_engine::{Agent, Event, IdempotencyRecord, Lease, Message, StoreError, Timestamp};

use super::{
    EVENT_COLUMNS, MESSAGE_COLUMNS, SqliteStore, event_row, message_row, push, sql_int, sql_limit,
};
use crate::sql::{Flow, Param, Sql, sql_params};

impl<C: Sql> SqliteStore<C> {
    pub(super) fn registry_agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        let mut params: Vec<Param<'_>> = Vec::new();
        let sql = match (&query.name, &query.role) {
            (Some(name), role) => {
                let name = push(&mut params, name);
                let role = match role {
                    Some(role) => format!(
                        " AND name IN (SELECT name FROM agent_roles WHERE role = {})",
                        push(&mut params, role)
                    ),
                    None => String::new(),
                };
                format!("SELECT record_json FROM agents WHERE name = {name}{role}")
            }
            (None, Some(role)) => format!(
                "SELECT a.record_json FROM agent_roles r JOIN agents a ON a.name = r.name
                 WHERE r.role = {} ORDER BY r.name LIMIT {}",
                push(&mut params, role),
                sql_limit(query.limit)
            ),
            (None, None) => format!(
                "SELECT record_json FROM agents ORDER BY name LIMIT {}",
                sql_limit(query.limit)
            ),
        };
        self.records(&sql, &params)
    }

    pub(super) fn registry_put(&mut self, agent: &Agent) -> Result<(), StoreError> {
        let json = super::orch::record(agent)?;
        self.execute(
            "INSERT INTO agents (name, record_json) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET record_json = excluded.record_json",
            &sql_params![&agent.name, json],
        )?;
        self.execute(
            "DELETE FROM agent_roles WHERE name = ?1",
            &sql_params![&agent.name],
        )?;
        for role in &agent.roles {
            self.execute(
                "INSERT INTO agent_roles (role, name) VALUES (?1, ?2)",
                &sql_params![role, &agent.name],
            )?;
        }
        Ok(())
    }

    pub(super) fn registry_delete(&mut self, name: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM agent_roles WHERE name = ?1",
            &sql_params![name],
        )?;
        self.execute("DELETE FROM agents WHERE name = ?1", &sql_params![name])?;
        Ok(())
    }

    pub(super) fn idempotency_record(
        &mut self,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let mut records = self.records(
            "SELECT record_json FROM idempotency WHERE key = ?1",
            &sql_params![key],
        )?;
        Ok(records.pop())
    }

    pub(super) fn put_idempotency_record(
        &mut self,
        record: &IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let json = super::orch::record(record)?;
        self.execute(
            "INSERT INTO idempotency (key, created_at, record_json) VALUES (?1, ?2, ?3)",
            &sql_params![&record.key, record.created_at.to_string(), json],
        )?;
        Ok(())
    }

    pub(super) fn live(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        // The same walk as `lapsed_leases` (and the same statement, so one
        // plan), past the lapsed ones: `now` is compared here, not bound, so
        // the partial index's plan is not recompiled for every new `now`.
        let mut live = Vec::new();
        if limit == 0 {
            return Ok(live);
        }
        self.unreleased_leases(&mut |lease| {
            if lease.expires_at > now {
                live.push(lease);
            }
            if live.len() < limit {
                Flow::More
            } else {
                Flow::Stop
            }
        })?;
        Ok(live)
    }

    pub(super) fn newest_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events e WHERE e.source = ?1 ORDER BY e.event_id DESC LIMIT 1"
        );
        self.row(&sql, &sql_params![source], event_row)
    }

    pub(super) fn mailbox_messages(
        &mut self,
        query: &MailboxQuery,
    ) -> Result<Vec<Message>, StoreError> {
        let since = if query.since.is_some() {
            "AND m.created_at >= ?4"
        } else {
            "AND ?4 IS NULL"
        };
        let unread = if query.unread_only {
            "AND m.event_id > coalesce((SELECT c.last_read_event_id FROM thread_reads c
                                       WHERE c.thread_id = m.thread_id AND c.agent = ?3), 0)"
        } else {
            ""
        };
        let columns = MESSAGE_COLUMNS
            .split(", ")
            .map(|c| format!("m.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {columns} FROM messages m
             WHERE m.to_agent = ?1 AND m.event_id > ?2 AND m.from_agent != ?3 {since} {unread}
             ORDER BY m.event_id LIMIT {}",
            sql_limit(query.limit)
        );
        let params = sql_params![
            &query.to_agent,
            sql_int(query.after_event),
            &query.reader,
            query.since.map(|t| t.to_string()),
        ];
        let messages = self.rows(&sql, &params, query.limit, message_row)?;
        self.with_artifacts_across_threads(messages)
    }

    /// [`SqliteStore::with_artifacts`] for messages of many threads: one
    /// query per thread, in the messages' order.
    fn with_artifacts_across_threads(
        &self,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>, StoreError> {
        inbox_store_sql::per_thread(messages, |group| self.with_artifacts(group))
    }
}
