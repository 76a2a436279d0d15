//! Every statement the SQLite store runs, checked with `EXPLAIN QUERY PLAN`:
//! none may sort its whole result to order it ("USE TEMP B-TREE FOR ORDER
//! BY") or walk a large table it could have searched. A plan like that is
//! invisible with small test data and ruinous at a million messages (one
//! such plan once made a `watch` poll take 33 ms there instead of 0.01 ms),
//! so the guard runs on every statement of a full worker loop.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_conformance::query_shapes as common;

use std::collections::BTreeSet;
use std::sync::Mutex;

use inbox_engine::Store;
use inbox_sqlite::open_or_create;
use rusqlite::trace::{TraceEvent, TraceEventCodes};

static STATEMENTS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(statement, sql) = event {
        let sql = statement.expanded_sql().unwrap_or_else(|| sql.to_owned());
        STATEMENTS.lock().unwrap().insert(sql);
    }
}

/// Runs the whole transition-script corpus through the SQLite store with
/// tracing on; returns every distinct statement (with its values inlined).
fn statements() -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    for (i, script) in inbox_conformance::corpus().iter().enumerate() {
        let mut store = open_or_create(&dir.path().join(format!("{i}.db"))).unwrap();
        store.initialize().unwrap();
        store
            .connection_mut()
            .trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record))
            .unwrap();
        let _ = inbox_engine::run_script(&script.text, store).unwrap();
    }
    every_shape(&dir.path().join("shapes.db"));
    STATEMENTS.lock().unwrap().clone()
}

/// Asks every shape of orch and thread query
/// ([`common::every_orch_query`], [`common::every_thread_query`]) of a
/// store of its own, with tracing on.
fn every_shape(path: &std::path::Path) {
    let mut store = open_or_create(path).unwrap();
    store.initialize().unwrap();
    store
        .connection_mut()
        .trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record))
        .unwrap();
    common::every_orch_query(&mut store);
    common::every_thread_query(&mut store);
}

/// One step of a plan: what it does and what its parent step does ("" at
/// the top).
struct Step {
    detail: String,
    parent: String,
}

/// A statement's `WHERE` clause on, without the join before it (whose
/// `ON` names statuses too: `thread_sql::held_lease`).
fn filters(sql: &str) -> &str {
    sql.split_once(" WHERE ").map_or("", |(_, filters)| filters)
}

/// Why a plan step is acceptable although it reads "SCAN" or uses a temp
/// B-tree, or `None` if it is not.
fn allowed(sql: &str, step: &Step) -> Option<&'static str> {
    let (parent, step) = (step.parent.as_str(), step.detail.as_str());
    let subquery = |name: Option<&str>| {
        // SQLite's name of a subquery in FROM: `(subquery-N)`, or its
        // alias (`s0`, `s1`... in the merge of several statuses).
        name.is_some_and(|n| {
            n.starts_with("(subquery-")
                || n.strip_prefix('s')
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        })
    };
    if subquery(step.strip_prefix("SCAN "))
        || step == "SCAN picked"
        || step == "UNION USING TEMP B-TREE"
    {
        return Some("a temporary result of at most a few times the LIMIT");
    }
    // A sort of what the limited scans found, not inside one of them: a
    // limited scan that sorts has read every row it could match.
    let in_a_scan =
        subquery(parent.strip_prefix("CO-ROUTINE ")) || parent.starts_with("MATERIALIZE");
    if step == "USE TEMP B-TREE FOR ORDER BY" && sql.starts_with("WITH picked") && !in_a_scan {
        return Some("orders the merged result of a few limited scans");
    }
    if step == "USE TEMP B-TREE FOR ORDER BY"
        && sql.contains("t.run_id = ")
        && !sql.contains("t.task_id = ")
    {
        return Some(
            "orders one run's threads: `threads_run` leads with the run and its tasks, and an \
             index of a run's threads newest first would cost every send a page",
        );
    }
    if step == "SCAN runs USING INDEX runs_newest" && sql.contains(" LIMIT ") {
        return Some("reads the newest runs in index order and stops at the LIMIT");
    }
    if step == "SCAN CONSTANT ROW" {
        return Some(
            "a SELECT with no table: its scalar subqueries are planned (and checked) apart",
        );
    }
    if step == "SCAN leases USING INDEX leases_unreleased" {
        return Some("walks unreleased leases in expiry order and stops at the first live one");
    }
    if step == "SCAN t"
        && sql.contains("ORDER BY t.thread_id DESC LIMIT")
        && !sql.contains(" WHERE ")
    {
        return Some("reads the newest threads in key order and stops at the LIMIT");
    }
    if step == "SCAN t"
        && sql.contains("WHERE t.task_id = ")
        && !sql.contains("t.run_id = ")
        && !filters(sql).contains("t.status IN")
    {
        return Some(
            "a task's threads without its run (the teams bridge asks this): no index leads \
             with the task, so the newest threads are read until the LIMIT; an index of its \
             own would cost every send that names a task a page",
        );
    }
    if step == "SCAN agents" && sql.contains("FROM agents ORDER BY name LIMIT") {
        return Some("reads the registry in key order and stops at the LIMIT");
    }
    if step.starts_with("SCAN messages USING COVERING INDEX")
        && sql == "SELECT count(*) FROM messages"
    {
        return Some(
            "retention's count limit needs the number: `gc` asks once per call, an automatic \
             step only once the event sequence says the store may hold more than the limit",
        );
    }
    None
}

/// `sql`'s plan, as `EXPLAIN QUERY PLAN` gives it.
fn plan_of(conn: &rusqlite::Connection, sql: &str) -> Vec<Step> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows: Vec<(i64, i64, String)> = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let detail_of = |id: i64| {
        rows.iter()
            .find(|(step, _, _)| *step == id)
            .map_or(String::new(), |(_, _, detail)| detail.clone())
    };
    rows.iter()
        .map(|(_, parent, detail)| Step {
            detail: detail.clone(),
            parent: detail_of(*parent),
        })
        .collect()
}

/// What is wrong with `steps`, the plan of `sql`: one line each.
fn problems(sql: &str, steps: &[Step]) -> Vec<String> {
    let plan: Vec<&str> = steps.iter().map(|s| s.detail.as_str()).collect();
    let mut bad = Vec::new();
    let mut refuse = |what: &str| {
        bad.push(format!(
            "{what}\n    in: {sql}\n    plan: {}",
            plan.join(" | ")
        ));
    };
    // An event query about one thread walks that thread's events, never
    // another index's (a source's events may be most of the store).
    if sql.contains("FROM events e")
        && sql.contains("e.thread_id = ")
        && !plan.iter().any(|s| s.contains("USING INDEX events_thread"))
    {
        refuse("not by its thread");
    }
    // Threads of an agent or a run are found by its index, never by
    // walking every thread of a status (most of the store, for `done`) in
    // search of that agent's.
    let narrowed = ["t.created_by = ", "t.assigned_to = ", "t.run_id = "]
        .iter()
        .any(|filter| sql.contains(filter));
    if narrowed && plan.iter().any(|s| s.contains("INDEX threads_status ")) {
        refuse("walks a status for an agent's or a run's threads");
    }
    for step in steps {
        let detail = &step.detail;
        let suspicious = detail.starts_with("SCAN ") || detail.contains("TEMP B-TREE");
        if suspicious && allowed(sql, step).is_none() {
            refuse(detail);
        }
    }
    bad
}

#[test]
fn no_statement_sorts_everything_or_scans_a_large_table() {
    let statements = statements();
    assert!(
        statements.len() > 30,
        "too few statements traced: {}",
        statements.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_or_create(&dir.path().join("plans.db")).unwrap();
    store.initialize().unwrap();
    let conn = store.connection();
    let mut checked = 0;
    let mut bad = Vec::new();
    for sql in &statements {
        let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let upper = sql.to_ascii_uppercase();
        let reads_or_updates = upper.starts_with("SELECT")
            || upper.starts_with("WITH")
            || upper.starts_with("UPDATE")
            || upper.starts_with("DELETE");
        // Unlimited reads are checked too: the engine's orch rules make
        // them (a run's open tasks, a task's dependents).
        if !reads_or_updates {
            continue;
        }
        checked += 1;
        bad.extend(problems(&sql, &plan_of(conn, &sql)));
    }
    assert!(checked > 20, "too few reads checked: {checked}");
    assert!(
        bad.is_empty(),
        "query plans that read more than they should:\n{}",
        bad.join("\n")
    );
}

/// The rules above refuse the plans they name: each statement here is one
/// the SQLite store once ran, or could run if written another way.
#[test]
fn the_plan_rules_refuse_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_or_create(&dir.path().join("plans.db")).unwrap();
    store.initialize().unwrap();
    let conn = store.connection();
    let refused = |sql: &str, why: &str| {
        let found = problems(sql, &plan_of(conn, sql));
        assert!(
            found.iter().any(|p| p.starts_with(why)),
            "{sql}\nshould be refused for {why:?}; found {found:?}"
        );
    };
    // Several statuses in one IN: every thread of them, sorted.
    refused(
        "SELECT t.thread_id FROM threads t WHERE t.status IN ('pending', 'claimed') \
         ORDER BY t.thread_id DESC LIMIT 50",
        "USE TEMP B-TREE FOR ORDER BY",
    );
    // An agent's pending threads, looked for among every pending thread.
    refused(
        "SELECT t.thread_id FROM threads t WHERE t.created_by = 'lead' AND t.status IN ('pending') \
         ORDER BY t.thread_id DESC LIMIT 50",
        "walks a status",
    );
    // A merge whose limited scan sorts: it read all it could match.
    refused(
        "WITH picked AS (SELECT thread_id FROM (SELECT t.thread_id FROM threads t \
         WHERE t.created_by = 'lead' ORDER BY t.created_at LIMIT 50)) \
         SELECT t.thread_id FROM picked JOIN threads t ON t.thread_id = picked.thread_id \
         ORDER BY t.created_at LIMIT 50",
        "USE TEMP B-TREE FOR ORDER BY",
    );
}
