//! Retention and the engine's settings in SQLite: what `gc` and `settings`
//! ask of the [`inbox_engine::Store`]. The settings are one row of the
//! `settings` table (`engine`, the engine's JSON), read by the statement
//! every process already prepares for its durability. Removing a thread
//! deletes its rows table by table, each by an index of its thread (the
//! engine never removes the one holding the newest event, so the highest
//! event id stays in `events` or `orch_events`). It must never decide what
//! to remove; that is the engine's.

use inbox_engine::store::{ThreadPage, ThreadState};
use inbox_engine::{Settings, StoreError, Timestamp};

use super::{SqliteStore, THREAD_COLUMNS, push, sql_int, sql_limit};
use crate::sql::{Param, Sql, sql_params};

/// The `settings` key of the engine's settings.
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

impl<C: Sql> SqliteStore<C> {
    pub(super) fn engine_settings(&mut self) -> Result<Option<Settings>, StoreError> {
        let Some(json) = self.setting(ENGINE_SETTINGS)? else {
            return Ok(None);
        };
        Settings::from_stored(&json).map(Some).map_err(|e| {
            StoreError::other(format!(
                "{}: the stored settings do not decode ({e}); set them again with `inbox settings`",
                self.location()
            ))
        })
    }

    pub(super) fn put_engine_settings(&mut self, settings: &Settings) -> Result<(), StoreError> {
        let json = super::orch::record(settings)?;
        self.set_setting(ENGINE_SETTINGS, &json)
    }

    pub(super) fn threads_in_order(
        &mut self,
        query: &ThreadPage,
    ) -> Result<Vec<ThreadState>, StoreError> {
        // `thread_id > ''` matches every thread: one statement text whether
        // or not the page has a cursor. Each filter's index ends with
        // thread_id (the table is WITHOUT ROWID), so it serves the order.
        let mut params = vec![Param::from(
            query.after_thread_id.as_deref().unwrap_or_default(),
        )];
        let mut clauses = vec!["t.thread_id > ?1".to_owned()];
        if let Some(status) = query.status {
            let p = push(&mut params, status.as_str());
            clauses.push(format!("t.status = {p}"));
        }
        if let Some(assigned_to) = &query.assigned_to {
            let p = push(&mut params, assigned_to);
            clauses.push(format!("t.assigned_to = {p}"));
        }
        let sql = format!(
            "SELECT {THREAD_COLUMNS} FROM threads t LEFT JOIN leases l ON l.thread_id = t.thread_id
             WHERE {} ORDER BY t.thread_id LIMIT {}",
            clauses.join(" AND "),
            sql_limit(query.limit)
        );
        self.thread_states(&sql, &params, query.limit)
    }

    pub(super) fn count_messages(&mut self) -> Result<u64, StoreError> {
        let n = self.aggregate("SELECT count(*) FROM messages")?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    pub(super) fn remove_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        let mut messages = 0;
        for table in THREAD_TABLES {
            let gone = self.execute(
                &format!("DELETE FROM {table} WHERE thread_id = ?1"),
                &sql_params![thread_id],
            )?;
            if table == "messages" {
                messages = gone as u64;
            }
        }
        Ok(messages)
    }

    pub(super) fn expire_idempotency(
        &mut self,
        before: Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        let gone = self.execute(
            "DELETE FROM idempotency WHERE key IN
                 (SELECT key FROM idempotency WHERE created_at < ?1 ORDER BY created_at, key LIMIT ?2)",
            &sql_params![before.to_string(), sql_int(limit as u64)],
        )?;
        Ok(gone as u64)
    }
}
