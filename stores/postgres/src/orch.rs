//! orch's records in PostgreSQL: runs, tasks (with their needs), attempts
//! and orch events. Each row keeps the record as the engine's own JSON
//! beside the columns its queries filter and order by, exactly as the
//! SQLite store's `orch.rs` does (same queries, same per-status merges), so
//! no field is mapped by hand. It must never decide anything: it answers
//! exactly the queries described in `inbox_engine::orch::query`.

use inbox_engine::StoreError;
use inbox_engine::orch::model::{Attempt, OrchEvent, Run, RunStatus, Task, TaskStatus};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::rows::int;
use super::{Limit, Params, PgStore, placeholders, push};

const TASK_UPDATE: &str = "UPDATE tasks SET status = $3, priority_rank = $4, seq = $5, record_json = $6 \
     WHERE run_id = $1 AND task_id = $2";
const RUN_UPDATE: &str = "UPDATE runs SET created_by = $2, status = $3, created_at = $4, record_json = $5 \
     WHERE run_id = $1";

/// A record as the JSON text stored beside its columns.
pub(super) fn record<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::other(format!("cannot encode a record: {e}")))
}

impl PgStore {
    /// Decodes the JSON records a statement returns in its first column.
    pub(super) fn records<T: DeserializeOwned>(
        &mut self,
        sql: &str,
        params: &Params,
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.query_params(sql, params)?;
        rows.iter().map(|row| super::rows::record(row)).collect()
    }

    pub(super) fn orch_run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let mut params = Params::new();
        push(&mut params, run_id.to_owned());
        let mut runs = self.records("SELECT record_json FROM runs WHERE run_id = $1", &params)?;
        Ok(runs.pop())
    }

    pub(super) fn orch_runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        let mut statuses = query.statuses.clone();
        statuses.sort_unstable();
        statuses.dedup();
        if query.created_by.is_some() || statuses.len() < 2 {
            return self.orch_runs_indexed(query.created_by.as_deref(), &statuses, query.limit);
        }
        // One ordered walk of `runs_status` per status, merged.
        let mut merged = Vec::new();
        for status in statuses {
            merged.extend(self.orch_runs_indexed(None, &[status], query.limit)?);
        }
        merged.sort_by(RunQuery::compare);
        merged.truncate(query.limit);
        Ok(merged)
    }

    /// Runs newest first along `runs_created_by`, `runs_status` or
    /// `runs_newest`.
    fn orch_runs_indexed(
        &mut self,
        created_by: Option<&str>,
        statuses: &[RunStatus],
        limit: usize,
    ) -> Result<Vec<Run>, StoreError> {
        let limit = Limit(limit);
        let mut params = Params::new();
        let mut clauses = Vec::new();
        if let Some(by) = created_by {
            clauses.push(format!("created_by = {}", push(&mut params, by.to_owned())));
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
            "SELECT record_json FROM runs {filter} ORDER BY created_at DESC, run_id DESC LIMIT {limit}"
        );
        self.records(&sql, &params)
    }

    pub(super) fn orch_put_run(&mut self, run: &Run, new: bool) -> Result<(), StoreError> {
        let json = record(run)?;
        let sql = if new {
            "INSERT INTO runs (run_id, created_by, status, created_at, record_json) VALUES ($1, $2, $3, $4, $5)"
        } else {
            RUN_UPDATE
        };
        let changed = self.execute(
            sql,
            &[
                &run.run_id,
                &run.created_by,
                &run.status.as_str(),
                &run.created_at.to_string(),
                &json,
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
        let mut params = Params::new();
        push(&mut params, run_id.to_owned());
        push(&mut params, task_id.to_owned());
        let mut tasks = self.records(
            "SELECT record_json FROM tasks WHERE run_id = $1 AND task_id = $2",
            &params,
        )?;
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
        // One indexed, ordered, limited walk per status, merged here.
        let mut merged = Vec::new();
        for status in statuses {
            merged.extend(self.orch_tasks_indexed(query, &[status])?);
        }
        merged.sort_by(|a, b| query.compare(a, b));
        merged.truncate(query.limit);
        Ok(merged)
    }

    /// A run's tasks in at most one of `statuses`, in `query`'s order along
    /// `tasks_queue`, `tasks_added` or `tasks_seq`.
    fn orch_tasks_indexed(
        &mut self,
        query: &TaskQuery,
        statuses: &[TaskStatus],
    ) -> Result<Vec<Task>, StoreError> {
        let mut params = Params::new();
        let mut filter = format!("run_id = {}", push(&mut params, query.run_id.clone()));
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
            Limit(query.limit)
        );
        self.records(&sql, &params)
    }

    /// The tasks that need `query.needing`, ordered and limited here (a
    /// task's dependents are few; see the SQLite store).
    fn orch_dependents(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        let mut params = Params::new();
        let run = push(&mut params, query.run_id.clone());
        let needed = push(&mut params, query.needing.clone().unwrap_or_default());
        let mut sql = format!(
            "SELECT t.record_json FROM task_needs n JOIN tasks t
                 ON t.run_id = n.run_id AND t.task_id = n.task_id
             WHERE n.run_id = {run} AND n.needs_task_id = {needed}"
        );
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
        let sql = if new {
            "INSERT INTO tasks (run_id, task_id, status, priority_rank, seq, record_json) \
             VALUES ($1, $2, $3, $4, $5, $6)"
        } else {
            TASK_UPDATE
        };
        let changed = self.execute(
            sql,
            &[
                &task.run_id,
                &task.task_id,
                &task.status.as_str(),
                &i64::from(task.priority.rank()),
                &int(task.seq),
                &json,
            ],
        )?;
        if changed != 1 {
            return Err(StoreError::other(format!(
                "task {} was not written",
                task.task_id
            )));
        }
        if new {
            for need in &task.needs {
                self.execute(
                    "INSERT INTO task_needs (run_id, needs_task_id, task_id) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING",
                    &[&task.run_id, need, &task.task_id],
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
        let mut params = Params::new();
        push(&mut params, run_id.to_owned());
        push(&mut params, task_id.to_owned());
        self.records(
            "SELECT record_json FROM attempts WHERE run_id = $1 AND task_id = $2 ORDER BY attempt",
            &params,
        )
    }

    pub(super) fn orch_put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        let json = record(attempt)?;
        self.execute(
            "INSERT INTO attempts (run_id, task_id, attempt, record_json) VALUES ($1, $2, $3, $4)
             ON CONFLICT (run_id, task_id, attempt) DO UPDATE SET record_json = excluded.record_json",
            &[
                &attempt.run_id,
                &attempt.task_id,
                &i64::from(attempt.attempt),
                &json,
            ],
        )
        .map(drop)
    }

    pub(super) fn orch_insert_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        let json = record(event)?;
        self.execute(
            "INSERT INTO orch_events (event_id, run_id, event_type, record_json) VALUES ($1, $2, $3, $4)",
            &[
                &int(event.event_id),
                &event.run_id,
                &event.event_type.as_str(),
                &json,
            ],
        )
        .map(drop)
    }

    pub(super) fn orch_events_after(
        &mut self,
        query: &OrchEventQuery,
    ) -> Result<Vec<OrchEvent>, StoreError> {
        let mut params = Params::new();
        let mut clauses = vec![format!(
            "event_id > {}",
            push(&mut params, int(query.after_event))
        )];
        if let Some(run) = &query.run_id {
            clauses.push(format!("run_id = {}", push(&mut params, run.clone())));
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
            Limit(query.limit)
        );
        self.records(&sql, &params)
    }
}
