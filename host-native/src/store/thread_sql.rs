//! The SQL of a thread query ([`ThreadQuery`]) that both stores run, the
//! SQLite store and the PostgreSQL one: the columns a thread is read with,
//! the filters, the orders and the plain filtered statement, written once.
//! Each store binds the parameters its own way (`?n` or `$n`, its own value
//! type) through [`Bind`], and keeps what only its planner needs (how "an
//! agent's threads" is merged) to itself.
//!
//! This module must never run a statement; it only writes SQL text.

use inbox_engine::store::{ThreadOrder, ThreadQuery};

/// A statement's parameters as a store collects them.
pub(crate) trait Bind {
    /// Adds a text parameter; returns its placeholder.
    fn text(&mut self, value: String) -> String;
}

/// A thread and its lease (`t`, `l`), in the order both stores' row
/// decoders read them.
pub(crate) const THREAD_COLUMNS: &str = "t.thread_id, t.run_id, t.task_id, t.subject, t.created_by, t.assigned_to, \
     t.status, t.priority, t.attempts, t.max_attempts, t.latest_message_id, t.last_event_id, \
     t.created_at, t.updated_at, l.agent, l.lease_token, l.attempt, l.lease_seconds, l.claimed_at, \
     l.expires_at, l.released_at";

/// Every thread's lease (`l`), held or released.
pub(crate) const EVERY_LEASE: &str = "LEFT JOIN leases l ON l.thread_id = t.thread_id";

/// Only a held lease: what the SQLite store joins when a query leaves
/// released leases out (most threads are finished, and a lease left unread
/// is a fifth of `list`'s time). Not for PostgreSQL: its planner takes
/// `released_at IS NULL` for the partial index `leases_unreleased` and walks
/// that whole index for every thread (`host-native/tests/pg_plans.rs`), so
/// the PostgreSQL store joins [`EVERY_LEASE`] and drops a released lease as
/// it reads the rows ([`ThreadQuery::keep_lease_of`]).
pub(crate) const HELD_LEASE: &str =
    "LEFT JOIN leases l ON l.thread_id = t.thread_id AND l.released_at IS NULL";

/// `ORDER BY` for `order`: each is served by an index of both schemas.
pub(crate) fn order_by(order: ThreadOrder) -> &'static str {
    match order {
        ThreadOrder::Queue => "t.priority_rank DESC, t.created_at, t.thread_id",
        ThreadOrder::NewestFirst => "t.thread_id DESC",
    }
}

/// The `WHERE` clauses of `query`'s filters but `agent`, with their
/// parameters bound.
pub(crate) fn filters(query: &ThreadQuery, params: &mut impl Bind) -> Vec<String> {
    let mut clauses = Vec::new();
    let columns = [
        ("thread_id", &query.thread_id),
        ("assigned_to", &query.assigned_to),
        ("created_by", &query.created_by),
        ("run_id", &query.run_id),
        ("task_id", &query.task_id),
    ];
    for (column, value) in columns {
        if let Some(value) = value {
            clauses.push(format!("t.{column} = {}", params.text(value.clone())));
        }
    }
    if !query.statuses.is_empty() {
        let list: Vec<String> = query
            .statuses
            .iter()
            .map(|status| params.text(status.to_string()))
            .collect();
        clauses.push(format!("t.status IN ({})", list.join(", ")));
    }
    if let Some(reader) = &query.unread {
        let p = params.text(reader.clone());
        clauses.push(format!(
            "EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = t.thread_id AND m.from_agent <> {p}
               AND m.event_id > COALESCE((SELECT r.last_read_event_id FROM thread_reads r
                                          WHERE r.thread_id = t.thread_id AND r.agent = {p}), 0))"
        ));
    }
    clauses
}

/// Threads (with their leases, joined by `leases`: [`EVERY_LEASE`] or
/// [`HELD_LEASE`]) that pass every one of `clauses`, in `order`, at most
/// `limit`.
pub(crate) fn filtered(clauses: &[String], leases: &str, order: &str, limit: i64) -> String {
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    format!(
        "SELECT {THREAD_COLUMNS} FROM threads t {leases}
         {filter} ORDER BY {order} LIMIT {limit}"
    )
}
