//! orch's records in SQLite: runs, tasks (with their needs), attempts and
//! orch events, for the [`inbox_engine::Store`] methods the engine's orch
//! rules call. Each row keeps the record as the engine's own JSON beside
//! the columns its queries filter and order by, so this module maps no
//! field by hand and cannot drift from the model; every query is served by
//! an index of schema version 2 (checked by `tests/query_plans.rs`). It
//! must never decide anything: it answers exactly the queries described in
//! `inbox_engine::orch::query`.

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, RunStatus, Task, TaskStatus};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use inbox_engine::{EventId, StoreError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{SqliteStore, placeholders, push, sql_int, sql_limit, text_at};
use crate::sql::{Flow, Param, Sql, sql_params};

// The statements a recording wait runs when a worker's thread moved (see
// `ORCH_WAKE`), named so that preparing them ahead uses the same text.
const TASK_BY_ID: &str = "SELECT record_json FROM tasks WHERE run_id = ?1 AND task_id = ?2";
const TASK_UPDATE: &str = "UPDATE tasks SET status = ?3, priority_rank = ?4, seq = ?5, record_json = ?6 WHERE run_id = ?1 AND task_id = ?2";
const ATTEMPTS_OF_TASK: &str =
    "SELECT record_json FROM attempts WHERE run_id = ?1 AND task_id = ?2 ORDER BY attempt";
const ATTEMPT_PUT: &str = "INSERT OR REPLACE INTO attempts (run_id, task_id, attempt, record_json) VALUES (?1, ?2, ?3, ?4)";
const ORCH_EVENT_INSERT: &str =
    "INSERT INTO orch_events (event_id, run_id, event_type, record_json) VALUES (?1, ?2, ?3, ?4)";
const RUN_UPDATE: &str = "UPDATE runs SET created_by = ?2, status = ?3, created_at = ?4, record_json = ?5 WHERE run_id = ?1";

/// orch's statements that `orch wait` first runs when it records what a
/// worker did (an attempt ended: the task, its attempts, an event, the run).
pub(super) const ORCH_WAKE: &[&str] = &[
    TASK_BY_ID,
    TASK_UPDATE,
    ATTEMPTS_OF_TASK,
    ATTEMPT_PUT,
    ORCH_EVENT_INSERT,
    RUN_UPDATE,
];

/// A record as the JSON text stored beside its columns.
pub(super) fn record<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::other(format!("cannot encode a record: {e}")))
}

impl<C: Sql> SqliteStore<C> {
    /// Decodes the JSON records a statement returns in its first column,
    /// straight from the row's text.
    pub(super) fn records<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        let mut undecoded = None;
        self.conn
            .each_row(sql, params, &mut |row| {
                match serde_json::from_str(text_at(row, 0)?) {
                    Ok(record) => out.push(record),
                    Err(e) => {
                        undecoded = Some(e);
                        return Ok(Flow::Stop);
                    }
                }
                Ok(Flow::More)
            })
            .map_err(|e| self.error(e))?;
        match undecoded {
            None => Ok(out),
            Some(e) => Err(StoreError::other(format!(
                "{}: a stored record does not decode: {e}",
                self.location
            ))),
        }
    }

    pub(super) fn orch_latest_event_id(&mut self) -> Result<EventId, StoreError> {
        // Two steps down the right edges of two B-trees.
        let max = self.aggregate(
            "SELECT max(coalesce((SELECT max(event_id) FROM events), 0), \
                        coalesce((SELECT max(event_id) FROM orch_events), 0))",
        )?;
        Ok(u64::try_from(max).unwrap_or(0))
    }

    pub(super) fn orch_run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let mut runs = self.records(
            "SELECT record_json FROM runs WHERE run_id = ?1",
            &sql_params![run_id],
        )?;
        Ok(runs.pop())
    }

    pub(super) fn orch_runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        let mut statuses = query.statuses.clone();
        statuses.sort_unstable();
        statuses.dedup();
        if query.created_by.is_some() || statuses.len() < 2 {
            return self.orch_runs_indexed(query.created_by.as_deref(), &statuses, query.limit);
        }
        // As for tasks: one ordered walk of `runs_status` per status, merged,
        // rather than reading every run in them to sort them.
        let mut merged = Vec::new();
        for status in statuses {
            merged.extend(self.orch_runs_indexed(None, &[status], query.limit)?);
        }
        merged.sort_by(RunQuery::compare);
        merged.truncate(query.limit);
        Ok(merged)
    }

    /// Runs newest first along `runs_created_by` (one leader's runs, of
    /// any status asked), `runs_status` (one status) or `runs_newest`.
    fn orch_runs_indexed(
        &mut self,
        created_by: Option<&str>,
        statuses: &[RunStatus],
        limit: usize,
    ) -> Result<Vec<Run>, StoreError> {
        let mut params = Vec::new();
        let mut clauses = Vec::new();
        if let Some(by) = created_by {
            clauses.push(format!("created_by = {}", push(&mut params, by)));
        }
        if !statuses.is_empty() {
            clauses.push(format!(
                "status IN ({})",
                placeholders(statuses, &mut params)
            ));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let sql = format!(
            "SELECT record_json FROM runs {filter} ORDER BY created_at DESC, run_id DESC LIMIT {}",
            sql_limit(limit)
        );
        self.records(&sql, &params)
    }

    pub(super) fn orch_put_run(&mut self, run: &Run, new: bool) -> Result<(), StoreError> {
        let json = record(run)?;
        let sql = if new {
            "INSERT INTO runs (run_id, created_by, status, created_at, record_json) VALUES (?1, ?2, ?3, ?4, ?5)"
        } else {
            RUN_UPDATE
        };
        let changed = self.execute(
            sql,
            &sql_params![
                &run.run_id,
                &run.created_by,
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
        let mut tasks = self.records(TASK_BY_ID, &sql_params![run_id, task_id])?;
        Ok(tasks.pop())
    }

    pub(super) fn orch_tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        if query.needing.is_some() {
            return self.orch_dependents(query);
        }
        let mut statuses = query.statuses.clone();
        if statuses.is_empty() && query.order == TaskOrder::Queue {
            // No index orders a whole run by priority: the queue of every
            // status, merged, is the same answer.
            statuses = TaskStatus::ALL.to_vec();
        }
        statuses.sort_unstable();
        statuses.dedup();
        if statuses.len() < 2 {
            return self.orch_tasks_indexed(query, &statuses);
        }
        // One indexed, ordered, limited walk per status, merged here:
        // `status IN (...)` would read every task of the run and sort them
        // (10 ms at ten thousand tasks, against 0.1 ms this way). Each status
        // once: a repeated one would return its tasks twice.
        let mut merged = Vec::new();
        for status in statuses {
            merged.extend(self.orch_tasks_indexed(query, &[status])?);
        }
        merged.sort_by(|a, b| query.compare(a, b));
        merged.truncate(query.limit);
        Ok(merged)
    }

    /// A run's tasks in at most one of `statuses`, walked in `query`'s order
    /// along `tasks_queue`, `tasks_added` or `tasks_seq`.
    fn orch_tasks_indexed(
        &mut self,
        query: &TaskQuery,
        statuses: &[TaskStatus],
    ) -> Result<Vec<Task>, StoreError> {
        let mut params = vec![Param::from(&query.run_id)];
        let mut filter = "run_id = ?1".to_owned();
        if !statuses.is_empty() {
            filter.push_str(&format!(
                " AND status IN ({})",
                placeholders(statuses, &mut params)
            ));
        }
        let order = match query.order {
            TaskOrder::Added => "seq",
            TaskOrder::Queue => "priority_rank DESC, seq",
        };
        let sql = format!(
            "SELECT record_json FROM tasks WHERE {filter} ORDER BY {order} LIMIT {}",
            sql_limit(query.limit)
        );
        self.records(&sql, &params)
    }

    /// The tasks that need `query.needing`: its reverse-needs keys walked,
    /// each task looked up, then ordered and limited here. A task's
    /// dependents are few, and no index orders them by `seq` (let alone by
    /// priority), so SQL would sort them all the same; a LIMIT before that
    /// sort would keep the wrong ones.
    fn orch_dependents(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        let needed = query.needing.as_deref().unwrap_or_default();
        let mut params = vec![Param::from(&query.run_id), Param::from(needed)];
        let mut sql = "SELECT t.record_json FROM task_needs n CROSS JOIN tasks t \
                       ON t.run_id = n.run_id AND t.task_id = n.task_id \
                       WHERE n.run_id = ?1 AND n.needs_task_id = ?2"
            .to_owned();
        if !query.statuses.is_empty() {
            sql.push_str(&format!(
                " AND t.status IN ({})",
                placeholders(&query.statuses, &mut params)
            ));
        }
        let mut tasks: Vec<Task> = self.records(&sql, &params)?;
        tasks.sort_by(|a, b| query.compare(a, b));
        tasks.truncate(query.limit);
        Ok(tasks)
    }

    pub(super) fn orch_put_task(&mut self, task: &Task, new: bool) -> Result<(), StoreError> {
        let json = record(task)?;
        let p = sql_params![
            &task.run_id,
            &task.task_id,
            task.status.as_str(),
            i64::from(task.priority.rank()),
            sql_int(task.seq),
            json
        ];
        let changed = if new {
            self.execute(
                "INSERT INTO tasks (run_id, task_id, status, priority_rank, seq, record_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                &p,
            )?
        } else {
            self.execute(TASK_UPDATE, &p)?
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
                    &sql_params![&task.run_id, need, &task.task_id],
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
        self.records(ATTEMPTS_OF_TASK, &sql_params![run_id, task_id])
    }

    pub(super) fn orch_put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        let json = record(attempt)?;
        self.execute(
            ATTEMPT_PUT,
            &sql_params![&attempt.run_id, &attempt.task_id, attempt.attempt, json],
        )
        .map(drop)
    }

    pub(super) fn orch_insert_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        let json = record(event)?;
        self.execute(
            ORCH_EVENT_INSERT,
            &sql_params![
                sql_int(event.event_id),
                &event.run_id,
                event.event_type.as_str(),
                json
            ],
        )
        .map(drop)
    }

    pub(super) fn orch_events_after(
        &mut self,
        query: &OrchEventQuery,
    ) -> Result<Vec<OrchEvent>, StoreError> {
        let mut params = vec![Param::from(sql_int(query.after_event))];
        let mut clauses = vec!["event_id > ?1".to_owned()];
        if let Some(run) = &query.run_id {
            clauses.push(format!("run_id = {}", push(&mut params, run)));
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
        self.records(&sql, &params)
    }
}
