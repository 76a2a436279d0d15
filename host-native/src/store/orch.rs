//! orch's records in SQLite: runs, tasks (with their needs), attempts and
//! orch events, for the [`inbox_engine::Store`] methods the engine's orch
//! rules call. Each row keeps the record as the engine's own JSON beside
//! the columns its queries filter and order by, so this module maps no
//! field by hand and cannot drift from the model; every query is served by
//! an index of schema version 2 (checked by `tests/query_plans.rs`). It
//! must never decide anything: it answers exactly the queries described in
//! `inbox_engine::orch::query`.

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use inbox_engine::{EventId, StoreError};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{SqliteStore, placeholders, push, sql_int, sql_limit};

/// A record as the JSON text stored beside its columns.
fn record<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::other(format!("cannot encode a record: {e}")))
}

impl SqliteStore {
    /// Decodes the JSON records a statement returns in its first column.
    fn records<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<T>, StoreError> {
        let texts: Vec<String> = {
            let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.error(e))?;
            let rows = stmt
                .query_map(params_from_iter(params), |row| row.get(0))
                .map_err(|e| self.error(e))?;
            rows.collect::<Result<_, _>>().map_err(|e| self.error(e))?
        };
        texts
            .iter()
            .map(|text| {
                serde_json::from_str(text).map_err(|e| {
                    StoreError::other(format!(
                        "{}: a stored orch record does not decode: {e}",
                        self.location
                    ))
                })
            })
            .collect()
    }

    fn execute(&mut self, sql: &str, params: impl rusqlite::Params) -> Result<usize, StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(|e| self.error(e))
    }

    pub(super) fn orch_latest_event_id(&mut self) -> Result<EventId, StoreError> {
        // Two steps down the right edges of two B-trees.
        let max: i64 = self
            .conn
            .prepare_cached(
                "SELECT max(coalesce((SELECT max(event_id) FROM events), 0), \
                            coalesce((SELECT max(event_id) FROM orch_events), 0))",
            )
            .and_then(|mut s| s.query_row([], |row| row.get(0)))
            .map_err(|e| self.error(e))?;
        Ok(u64::try_from(max).unwrap_or(0))
    }

    pub(super) fn orch_run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let mut runs = self.records(
            "SELECT record_json FROM runs WHERE run_id = ?1",
            vec![Value::Text(run_id.to_owned())],
        )?;
        Ok(runs.pop())
    }

    pub(super) fn orch_runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        let mut params = Vec::new();
        let mut clauses = Vec::new();
        if let Some(by) = &query.created_by {
            clauses.push(format!(
                "created_by = {}",
                push(&mut params, Value::Text(by.clone()))
            ));
        }
        if !query.statuses.is_empty() {
            clauses.push(format!(
                "status IN ({})",
                placeholders(&query.statuses, &mut params)
            ));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let sql = format!(
            "SELECT record_json FROM runs {filter} ORDER BY created_at DESC, run_id DESC LIMIT {}",
            sql_limit(query.limit)
        );
        self.records(&sql, params)
    }

    pub(super) fn orch_put_run(&mut self, run: &Run, new: bool) -> Result<(), StoreError> {
        let json = record(run)?;
        let sql = if new {
            "INSERT INTO runs (run_id, created_by, status, created_at, record_json) VALUES (?1, ?2, ?3, ?4, ?5)"
        } else {
            "UPDATE runs SET created_by = ?2, status = ?3, created_at = ?4, record_json = ?5 WHERE run_id = ?1"
        };
        let changed = self.execute(
            sql,
            params![
                run.run_id,
                run.created_by,
                run.status.as_str(),
                run.created_at.to_string(),
                json
            ],
        )?;
        if changed != 1 {
            return Err(StoreError::other(format!(
                "run {} was not written",
                run.run_id
            )));
        }
        Ok(())
    }

    pub(super) fn orch_task(
        &mut self,
        run_id: &str,
        task_id: &str,
    ) -> Result<Option<Task>, StoreError> {
        let mut tasks = self.records(
            "SELECT record_json FROM tasks WHERE run_id = ?1 AND task_id = ?2",
            vec![
                Value::Text(run_id.to_owned()),
                Value::Text(task_id.to_owned()),
            ],
        )?;
        Ok(tasks.pop())
    }

    pub(super) fn orch_tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        if query.statuses.len() > 1 && query.needing.is_none() {
            // One indexed, ordered, limited walk per status, merged here:
            // `status IN (...)` would read every task of the run and sort
            // them (10 ms at ten thousand tasks, against 0.1 ms this way).
            let mut merged = Vec::new();
            for &status in &query.statuses {
                let one = TaskQuery {
                    statuses: vec![status],
                    ..query.clone()
                };
                merged.extend(self.orch_tasks_indexed(&one)?);
            }
            merged.sort_by(|a, b| query.compare(a, b));
            merged.truncate(query.limit);
            return Ok(merged);
        }
        self.orch_tasks_indexed(query)
    }

    fn orch_tasks_indexed(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        let mut params = vec![Value::Text(query.run_id.clone())];
        let mut clauses = vec!["t.run_id = ?1".to_owned()];
        let mut from = "tasks t".to_owned();
        if let Some(needed) = &query.needing {
            // Dependents: walk the reverse-needs keys, look each task up.
            from =
                "task_needs n CROSS JOIN tasks t ON t.run_id = n.run_id AND t.task_id = n.task_id"
                    .to_owned();
            clauses.push("n.run_id = ?1".to_owned());
            clauses.push(format!(
                "n.needs_task_id = {}",
                push(&mut params, Value::Text(needed.clone()))
            ));
        }
        if !query.statuses.is_empty() {
            clauses.push(format!(
                "t.status IN ({})",
                placeholders(&query.statuses, &mut params)
            ));
        }
        let order = match (query.order, query.needing.is_some()) {
            // A task's dependents are few: order them after the lookup.
            (_, true) | (TaskOrder::Added, false) => "t.seq",
            (TaskOrder::Queue, false) => "t.priority_rank DESC, t.seq",
        };
        let sql = format!(
            "SELECT t.record_json FROM {from} WHERE {} ORDER BY {order} LIMIT {}",
            clauses.join(" AND "),
            sql_limit(query.limit)
        );
        let mut tasks: Vec<Task> = self.records(&sql, params)?;
        if query.needing.is_some() {
            tasks.sort_by(|a, b| query.compare(a, b));
        }
        Ok(tasks)
    }

    pub(super) fn orch_put_task(&mut self, task: &Task, new: bool) -> Result<(), StoreError> {
        let json = record(task)?;
        let p = params![
            task.run_id,
            task.task_id,
            task.status.as_str(),
            task.priority.rank(),
            sql_int(task.seq),
            json
        ];
        let changed = if new {
            self.execute(
                "INSERT INTO tasks (run_id, task_id, status, priority_rank, seq, record_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                p,
            )?
        } else {
            self.execute(
                "UPDATE tasks SET status = ?3, priority_rank = ?4, seq = ?5, record_json = ?6 WHERE run_id = ?1 AND task_id = ?2",
                p,
            )?
        };
        if changed != 1 {
            return Err(StoreError::other(format!(
                "task {} was not written",
                task.task_id
            )));
        }
        if new {
            for need in &task.needs {
                self.execute(
                    "INSERT OR IGNORE INTO task_needs (run_id, needs_task_id, task_id) VALUES (?1, ?2, ?3)",
                    params![task.run_id, need, task.task_id],
                )?;
            }
        }
        Ok(())
    }

    pub(super) fn orch_attempts(
        &mut self,
        run_id: &str,
        task_id: &str,
    ) -> Result<Vec<Attempt>, StoreError> {
        self.records(
            "SELECT record_json FROM attempts WHERE run_id = ?1 AND task_id = ?2 ORDER BY attempt",
            vec![
                Value::Text(run_id.to_owned()),
                Value::Text(task_id.to_owned()),
            ],
        )
    }

    pub(super) fn orch_put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        let json = record(attempt)?;
        self.execute(
            "INSERT OR REPLACE INTO attempts (run_id, task_id, attempt, record_json) VALUES (?1, ?2, ?3, ?4)",
            params![attempt.run_id, attempt.task_id, attempt.attempt, json],
        )
        .map(drop)
    }

    pub(super) fn orch_insert_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        let json = record(event)?;
        self.execute(
            "INSERT INTO orch_events (event_id, run_id, event_type, record_json) VALUES (?1, ?2, ?3, ?4)",
            params![sql_int(event.event_id), event.run_id, event.event_type.as_str(), json],
        )
        .map(drop)
    }

    pub(super) fn orch_events_after(
        &mut self,
        query: &OrchEventQuery,
    ) -> Result<Vec<OrchEvent>, StoreError> {
        let mut params = vec![Value::Integer(sql_int(query.after_event))];
        let mut clauses = vec!["event_id > ?1".to_owned()];
        if let Some(run) = &query.run_id {
            clauses.push(format!(
                "run_id = {}",
                push(&mut params, Value::Text(run.clone()))
            ));
        }
        if !query.event_types.is_empty() {
            clauses.push(format!(
                "event_type IN ({})",
                placeholders(&query.event_types, &mut params)
            ));
        }
        let sql = format!(
            "SELECT record_json FROM orch_events WHERE {} ORDER BY event_id LIMIT {}",
            clauses.join(" AND "),
            sql_limit(query.limit)
        );
        self.records(&sql, params)
    }
}
