//! Every statement the SQLite store runs, checked with `EXPLAIN QUERY PLAN`:
//! none may sort its whole result to order it ("USE TEMP B-TREE FOR ORDER
//! BY") or walk a large table it could have searched. A plan like that is
//! invisible with small test data and ruinous at a million messages (one
//! such plan once made a `watch` poll take 33 ms there instead of 0.01 ms),
//! so the guard runs on every statement of a full worker loop.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;

use inbox_engine::Store;
use inbox_host_native::open_or_create;
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
    every_orch_query(&dir.path().join("orch.db"));
    STATEMENTS.lock().unwrap().clone()
}

/// Asks every shape of orch query ([`common::every_orch_query`]) of a
/// store of its own, with tracing on.
fn every_orch_query(path: &std::path::Path) {
    let mut store = open_or_create(path).unwrap();
    store.initialize().unwrap();
    store
        .connection_mut()
        .trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record))
        .unwrap();
    common::every_orch_query(&mut store);
}

/// Why a plan step is acceptable although it reads "SCAN" or uses a temp
/// B-tree, or `None` if it is not.
fn allowed(sql: &str, step: &str) -> Option<&'static str> {
    if step.starts_with("SCAN (subquery-")
        || step == "SCAN picked"
        || step == "UNION USING TEMP B-TREE"
    {
        return Some("a temporary result of at most twice the LIMIT");
    }
    if step == "USE TEMP B-TREE FOR ORDER BY" && sql.starts_with("WITH picked") {
        return Some("orders the merged result of two limited scans");
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
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = stmt
            .query_map([], |row| row.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        // An event query about one thread walks that thread's events,
        // never another index's (a source's events may be most of the
        // store).
        if sql.contains("FROM events e") && sql.contains("e.thread_id = ") {
            let threads = plan.iter().any(|s| s.contains("USING INDEX events_thread"));
            if !threads {
                bad.push(format!(
                    "not by its thread\n    in: {sql}\n    plan: {}",
                    plan.join(" | ")
                ));
            }
        }
        for step in &plan {
            let suspicious = step.starts_with("SCAN ") || step.contains("TEMP B-TREE");
            if suspicious && allowed(&sql, step).is_none() {
                bad.push(format!(
                    "{step}\n    in: {sql}\n    plan: {}",
                    plan.join(" | ")
                ));
            }
        }
    }
    assert!(checked > 20, "too few reads checked: {checked}");
    assert!(
        bad.is_empty(),
        "query plans that read more than they should:\n{}",
        bad.join("\n")
    );
}
