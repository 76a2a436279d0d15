//! The SQL of a thread query ([`ThreadQuery`]) that both stores run, the
//! SQLite store and the PostgreSQL one: the columns a thread is read with,
//! the filters, the orders and the plain filtered statement, written once.
//! Each store binds the parameters its own way (`?n` or `$n`, its own value
//! type) through [`Bind`], and keeps what only its planner needs (how "an
//! agent's threads" is merged) to itself.
//!
//! This module must never run a statement; it only writes SQL text.

use std::sync::OnceLock;

use inbox_engine::rules;
use inbox_engine::store::{ThreadOrder, ThreadQuery};

/// A statement's parameters as a store collects them.
pub trait Bind {
    /// Adds a text parameter; returns its placeholder.
    fn text(&mut self, value: String) -> String;
}

/// A store binds with a closure that adds the value to its parameters and
/// returns the placeholder.
impl<F: FnMut(String) -> String> Bind for F {
    fn text(&mut self, value: String) -> String {
        self(value)
    }
}

/// A thread and its lease (`t`, `l`), in the order both stores' row
/// decoders read them.
pub const THREAD_COLUMNS: &str = "t.thread_id, t.run_id, t.task_id, t.subject, t.created_by, t.assigned_to, \
     t.status, t.priority, t.attempts, t.max_attempts, t.latest_message_id, t.last_event_id, \
     t.created_at, t.updated_at, l.agent, l.lease_token, l.attempt, l.lease_seconds, l.claimed_at, \
     l.expires_at, l.released_at";

/// Every thread's lease (`l`), held or released.
pub const EVERY_LEASE: &str = "LEFT JOIN leases l ON l.thread_id = t.thread_id";

/// Only a held lease ([`ThreadQuery::keep_lease_of`]): what the SQLite
/// store joins when a query leaves released leases out. Most threads are
/// finished, and a lease left unread is a fifth of `list`'s time.
///
/// The lease is looked up only for a thread in a status a holder is in
/// ([`rules::HELD`]): for any other the key is `NULL`, and SQLite skips a
/// search for a `NULL` key without reading a page. A condition on the thread
/// in the `ON` clause would be checked only after the search, and the
/// searches are most of the join's cost (a sixth of `list` at 1M messages).
/// The statuses are a `CASE` of plain comparisons: SQLite builds a
/// temporary index for an `IN` list of three on every run.
///
/// Not for PostgreSQL: its planner takes `released_at IS NULL` for the
/// partial index `leases_unreleased` and walks that whole index for every
/// thread (`stores/postgres/tests/pg_plans.rs`), so the PostgreSQL store joins
/// [`EVERY_LEASE`] and applies [`ThreadQuery::keep_lease_of`] to the rows.
pub fn held_lease() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let held: String = rules::HELD
            .iter()
            .map(|s| format!(" WHEN '{s}' THEN t.thread_id"))
            .collect();
        format!(
            "LEFT JOIN leases l ON l.thread_id = CASE t.status{held} END AND l.released_at IS NULL"
        )
    })
}

/// `ORDER BY` for `order`: each is served by an index of both schemas.
pub fn order_by(order: ThreadOrder) -> &'static str {
    match order {
        ThreadOrder::Queue => "t.priority_rank DESC, t.created_at, t.thread_id",
        ThreadOrder::NewestFirst => "t.thread_id DESC",
    }
}

/// How a filter on `status` is written: for the planner to search an index
/// by it, or only to check it on the rows another filter's index finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusTerm {
    /// `t.status IN (...)`.
    Indexed,
    /// `+t.status IN (...)`: SQLite's way to keep a term off every index.
    /// Not for PostgreSQL, which has no unary `+` for text.
    Unindexed,
}

/// Whether `query` filters on anything that an index other than the
/// status one finds: a thread, an agent (as creator, assignee or either)
/// or a run. Not a task alone: no index leads with it (the run's does),
/// so a task's threads of a status are better found among that status's.
pub fn narrowed(query: &ThreadQuery) -> bool {
    query.thread_id.is_some()
        || query.assigned_to.is_some()
        || query.created_by.is_some()
        || query.agent.is_some()
        || query.run_id.is_some()
}

/// Whether `query` asks for the newest threads of several statuses and
/// nothing narrower, which both stores answer with [`by_statuses`]: one
/// `IN` over the status index reads every thread of those statuses and
/// sorts them (SQLite: 32 ms at 40k threads for `pending` and `claimed`),
/// or walks every thread newest first (PostgreSQL).
pub fn merges_statuses(query: &ThreadQuery) -> bool {
    query.order == ThreadOrder::NewestFirst && query.statuses.len() > 1 && !narrowed(query)
}

/// The first `limit` threads newest first of each of `query`'s statuses
/// (passing its other filters), merged newest first and limited again: at
/// most statuses x `limit` rows are read. A thread has one status, so the
/// scans never meet and need no deduplication (PostgreSQL then merges them
/// in order as they come, with no sort).
pub fn by_statuses(
    query: &ThreadQuery,
    params: &mut impl Bind,
    leases: &str,
    limit: i64,
) -> String {
    let others = ThreadQuery {
        statuses: Vec::new(),
        ..query.clone()
    };
    let rest: String = filters(&others, params, StatusTerm::Indexed)
        .iter()
        .map(|c| format!(" AND {c}"))
        .collect();
    let order = order_by(query.order);
    let scans: Vec<String> = query
        .statuses
        .iter()
        .enumerate()
        .map(|(i, status)| {
            let p = params.text(status.to_string());
            format!(
                "SELECT thread_id FROM (SELECT t.thread_id FROM threads t WHERE t.status = {p}{rest}
                                        ORDER BY {order} LIMIT {limit}) AS s{i}"
            )
        })
        .collect();
    format!(
        "WITH picked AS ({})
         SELECT {THREAD_COLUMNS} FROM picked JOIN threads t ON t.thread_id = picked.thread_id
         {leases} ORDER BY {order} LIMIT {limit}",
        scans.join(" UNION ALL ")
    )
}

/// The `WHERE` clauses of `query`'s filters but `agent`, with their
/// parameters bound; the status filter written as `status` says.
pub fn filters(query: &ThreadQuery, params: &mut impl Bind, status: StatusTerm) -> Vec<String> {
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
        let column = match status {
            StatusTerm::Indexed => "t.status",
            StatusTerm::Unindexed => "+t.status",
        };
        clauses.push(format!("{column} IN ({})", list.join(", ")));
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
/// [`held_lease`]) that pass every one of `clauses`, in `order`, at most
/// `limit`.
pub fn filtered(clauses: &[String], leases: &str, order: &str, limit: i64) -> String {
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
