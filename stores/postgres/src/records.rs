//! The agent registry, the mailbox, idempotency keys, the engine's
//! settings and retention in PostgreSQL: the same tables and queries as the
//! SQLite store's `agents.rs` and `retention.rs`, each served by an index of
//! [`super::schema`]. Records the engine keeps as JSON (agents, idempotency
//! records, settings) are stored as its serde text, so the two stores
//! cannot drift from the model. It must never decide anything: what to
//! remove, and when, is the engine's.

use inbox_engine::store::{AgentQuery, MailboxQuery, ThreadPage, ThreadState};
use inbox_engine::{Agent, IdempotencyRecord, Message, Settings, StoreError, Timestamp};

use super::pipeline::Lit;
use super::rows::{MESSAGE_COLUMNS, int};
use super::{Limit, Params, PgStore, push};
use inbox_store_sql::thread_sql::THREAD_COLUMNS;

/// The `settings` key of the engine's settings (the SQLite store's).
const ENGINE_SETTINGS: &str = "engine";

/// The tables a thread's rows live in, children first (foreign keys).
const THREAD_TABLES: [&str; 6] = [
    "artifacts",
    "messages",
    "events",
    "thread_reads",
    "leases",
    "threads",
];

impl PgStore {
    pub(super) fn registry_agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        if let Some(agents) = self.ahead.agents(query) {
            return Ok(agents);
        }
        let (sql, params) = agents_statement(query);
        self.records(&sql, &params)
    }

    pub(super) fn registry_put(&mut self, agent: &Agent) -> Result<(), StoreError> {
        let json = super::orch::record(agent)?;
        self.execute(
            "INSERT INTO agents (name, record_json) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET record_json = excluded.record_json",
            &[&agent.name, &json],
        )?;
        self.execute("DELETE FROM agent_roles WHERE name = $1", &[&agent.name])?;
        for role in &agent.roles {
            self.execute(
                "INSERT INTO agent_roles (role, name) VALUES ($1, $2)",
                &[role, &agent.name],
            )?;
        }
        Ok(())
    }

    pub(super) fn registry_delete(&mut self, name: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM agent_roles WHERE name = $1", &[&name])?;
        self.execute("DELETE FROM agents WHERE name = $1", &[&name])?;
        Ok(())
    }

    pub(super) fn mailbox_messages(
        &mut self,
        query: &MailboxQuery,
    ) -> Result<Vec<Message>, StoreError> {
        let mut params = Params::new();
        let to = push(&mut params, query.to_agent.clone());
        let after = push(&mut params, int(query.after_event));
        let reader = push(&mut params, query.reader.clone());
        let mut clauses = vec![
            format!("m.to_agent = {to}"),
            format!("m.event_id > {after}"),
            format!("m.from_agent <> {reader}"),
        ];
        if let Some(since) = query.since {
            clauses.push(format!(
                "m.created_at >= {}",
                push(&mut params, since.to_string())
            ));
        }
        if query.unread_only {
            clauses.push(format!(
                "m.event_id > coalesce((SELECT c.last_read_event_id FROM thread_reads c
                                        WHERE c.thread_id = m.thread_id AND c.agent = {reader}), 0)"
            ));
        }
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE {} ORDER BY m.event_id LIMIT {}",
            clauses.join(" AND "),
            Limit(query.limit)
        );
        let messages = self.messages_of(&sql, &params)?;
        self.with_artifacts_across_threads(messages)
    }

    pub(super) fn idempotency_record(
        &mut self,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let mut params = Params::new();
        push(&mut params, key.to_owned());
        let mut records = self.records(
            "SELECT record_json FROM idempotency WHERE key = $1",
            &params,
        )?;
        Ok(records.pop())
    }

    pub(super) fn put_idempotency_record(
        &mut self,
        record: &IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let json = super::orch::record(record)?;
        self.write(
            "INSERT INTO idempotency (key, created_at, record_json) VALUES ($1, $2, $3)",
            vec![
                Lit::from(&record.key),
                Lit::from(record.created_at.to_string()),
                Lit::from(json),
            ],
        )
    }

    pub(super) fn expire_idempotency(
        &mut self,
        before: Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        let limit = Limit(limit);
        // The keys to delete as an array, looked up one by one in the key's
        // index: as `key IN (SELECT ...)`, the planner may instead hash them
        // and walk the whole table to join with them, as it thinks best
        // for the sizes it estimates.
        let sql = format!(
            "DELETE FROM idempotency WHERE key = ANY (ARRAY(
                 SELECT key FROM idempotency WHERE created_at < $1 ORDER BY created_at, key LIMIT {limit}))"
        );
        self.execute(&sql, &[&before.to_string()])
    }

    pub(super) fn engine_settings(&mut self) -> Result<Option<Settings>, StoreError> {
        let json = match self.ahead.settings.clone() {
            // Read by `BEGIN` (see `super::pipeline`).
            Some(json) => json,
            None => {
                let row = self.query_opt(
                    "SELECT value FROM settings WHERE key = $1",
                    &[&ENGINE_SETTINGS],
                )?;
                row.map(|row| super::rows::get::<String>(&row, 0))
                    .transpose()?
            }
        };
        let Some(json) = json else {
            return Ok(None);
        };
        Settings::from_stored(&json).map(Some).map_err(|e| {
            StoreError::other(format!(
                "{}: the stored settings do not decode ({e}); set them again with `inbox settings`",
                self.location
            ))
        })
    }

    pub(super) fn put_engine_settings(&mut self, settings: &Settings) -> Result<(), StoreError> {
        let json = super::orch::record(settings)?;
        self.execute(
            "INSERT INTO settings (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&ENGINE_SETTINGS, &json],
        )
        .map(drop)
    }

    pub(super) fn threads_in_order(
        &mut self,
        query: &ThreadPage,
    ) -> Result<Vec<ThreadState>, StoreError> {
        // `thread_id > ''` matches every thread: one statement text whether
        // or not the page has a cursor.
        let mut params = Params::new();
        let after = push(
            &mut params,
            query.after_thread_id.clone().unwrap_or_default(),
        );
        let mut clauses = vec![format!("t.thread_id > {after}")];
        if let Some(status) = query.status {
            let p = push(&mut params, status.as_str().to_owned());
            clauses.push(format!("t.status = {p}"));
        }
        if let Some(assigned_to) = &query.assigned_to {
            let p = push(&mut params, assigned_to.clone());
            clauses.push(format!("t.assigned_to = {p}"));
        }
        let sql = format!(
            "SELECT {THREAD_COLUMNS} FROM threads t LEFT JOIN leases l ON l.thread_id = t.thread_id
             WHERE {} ORDER BY t.thread_id LIMIT {}",
            clauses.join(" AND "),
            Limit(query.limit)
        );
        self.thread_states(&sql, &params)
    }

    pub(super) fn remove_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        let mut messages = 0;
        for table in THREAD_TABLES {
            let gone = self.execute(
                &format!("DELETE FROM {table} WHERE thread_id = $1"),
                &[&thread_id],
            )?;
            if table == "messages" {
                messages = gone;
            }
        }
        Ok(messages)
    }
}

/// [`Store::agents`](inbox_engine::Store::agents)'s statement for `query`.
pub(super) fn agents_statement(query: &AgentQuery) -> (String, Params) {
    let mut params = Params::new();
    let limit = Limit(query.limit);
    let sql = match (&query.name, &query.role) {
        (Some(name), role) => {
            let name = push(&mut params, name.clone());
            let role = match role {
                Some(role) => format!(
                    " AND name IN (SELECT name FROM agent_roles WHERE role = {})",
                    push(&mut params, role.clone())
                ),
                None => String::new(),
            };
            format!("SELECT record_json FROM agents WHERE name = {name}{role}")
        }
        (None, Some(role)) => format!(
            "SELECT a.record_json FROM agent_roles r JOIN agents a ON a.name = r.name
             WHERE r.role = {} ORDER BY r.name LIMIT {limit}",
            push(&mut params, role.clone())
        ),
        (None, None) => format!("SELECT record_json FROM agents ORDER BY name LIMIT {limit}"),
    };
    (sql, params)
}
