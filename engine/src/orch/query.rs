//! The queries orch asks a [`crate::Store`]: [`RunQuery`], [`TaskQuery`],
//! [`OrchEventQuery`], each with its reference semantics (`matches`,
//! `compare`), which [`crate::MemoryStore`] answers with directly and a SQL
//! store translates into indexed `WHERE` clauses.
//!
//! Descriptions only: a query never decides anything. They serialize, so a
//! host across a boundary (the WebAssembly component's store) can receive
//! them as JSON.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::model::EventId;

use super::model::{OrchEvent, OrchEventType, Run, RunStatus, Task, TaskStatus};

/// A filter over runs, newest first (`created_at` descending, then
/// `run_id` descending).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQuery {
    /// Only runs this leader created.
    pub created_by: Option<String>,
    /// Only runs in these statuses (empty: any).
    pub statuses: Vec<RunStatus>,
    /// At most this many.
    pub limit: usize,
}

impl RunQuery {
    /// The reference semantics of the filters.
    pub fn matches(&self, run: &Run) -> bool {
        self.created_by
            .as_deref()
            .is_none_or(|c| run.created_by == c)
            && (self.statuses.is_empty() || self.statuses.contains(&run.status))
    }

    /// Compares two runs in result order (`Less` first).
    pub fn compare(a: &Run, b: &Run) -> Ordering {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| b.run_id.cmp(&a.run_id))
    }
}

/// The order [`TaskQuery`] returns tasks in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOrder {
    /// The order they were added (`seq`).
    Added,
    /// The ready queue: priority high to low, then `seq`.
    Queue,
}

/// A filter over one run's tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskQuery {
    /// The run.
    pub run_id: String,
    /// Only tasks in these statuses (empty: any).
    pub statuses: Vec<TaskStatus>,
    /// Only tasks whose `needs` include this task: its dependents.
    pub needing: Option<String>,
    /// Result order.
    pub order: TaskOrder,
    /// At most this many.
    pub limit: usize,
}

impl TaskQuery {
    /// Tasks of `run_id` in `statuses`, in `order`.
    pub fn in_statuses(run_id: &str, statuses: &[TaskStatus], order: TaskOrder) -> TaskQuery {
        TaskQuery {
            run_id: run_id.to_owned(),
            statuses: statuses.to_vec(),
            needing: None,
            order,
            limit: usize::MAX,
        }
    }

    /// The tasks of `run_id` that need `task_id`, in the order added.
    pub fn dependents(run_id: &str, task_id: &str) -> TaskQuery {
        TaskQuery {
            run_id: run_id.to_owned(),
            statuses: Vec::new(),
            needing: Some(task_id.to_owned()),
            order: TaskOrder::Added,
            limit: usize::MAX,
        }
    }

    /// The reference semantics of the filters.
    pub fn matches(&self, task: &Task) -> bool {
        task.run_id == self.run_id
            && (self.statuses.is_empty() || self.statuses.contains(&task.status))
            && self
                .needing
                .as_deref()
                .is_none_or(|n| task.needs.iter().any(|need| need == n))
    }

    /// Compares two tasks in this query's order (`Less` first).
    pub fn compare(&self, a: &Task, b: &Task) -> Ordering {
        match self.order {
            TaskOrder::Added => a.seq.cmp(&b.seq),
            TaskOrder::Queue => b
                .priority
                .rank()
                .cmp(&a.priority.rank())
                .then(a.seq.cmp(&b.seq)),
        }
    }
}

/// A filter over orch events with id greater than `after_event`, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchEventQuery {
    /// Only events with a greater id.
    pub after_event: EventId,
    /// Only events of this run.
    pub run_id: Option<String>,
    /// Only events of these types (empty: any).
    pub event_types: Vec<OrchEventType>,
    /// At most this many.
    pub limit: usize,
}

impl OrchEventQuery {
    /// The reference semantics.
    pub fn matches(&self, event: &OrchEvent) -> bool {
        event.event_id > self.after_event
            && self.run_id.as_deref().is_none_or(|r| event.run_id == r)
            && (self.event_types.is_empty() || self.event_types.contains(&event.event_type))
    }
}
