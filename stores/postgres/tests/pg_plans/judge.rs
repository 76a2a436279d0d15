//! What a plan of the PostgreSQL store may not do, read from
//! `auto_explain`'s JSON, and the few steps that look like it but are
//! bounded ([`allowed`], each with why). The planner ran with sequential
//! scans and sorts priced out (`enable_seqscan`, `enable_sort` and
//! `enable_incremental_sort` off), so what it still chose is what no index
//! could spare it:
//!
//! - a `Seq Scan` of a large table (any of the store's but the one-row
//!   bookkeeping tables);
//! - an index walked whole, with no index condition: what a sequential
//!   scan becomes once it is priced out;
//! - an index searched by a range only (a cursor, say) while a filter tests
//!   a column for equality: the rows of other agents, threads or runs are
//!   read and thrown away, where an index on that column would have
//!   searched them (the mailbox without `messages_to`);
//! - a `Sort`: no index gives the order asked for, so every match is read
//!   before the first is returned.
//!
//! Sorts of a few rows are the one thing this cannot judge: priced out,
//! a sort of the at most twice LIMIT rows of two merged index scans gives
//! way to a walk of a whole index in the order asked for, which the check
//! rightly refuses but the planner would never pick with sorts allowed.
//! So the store's statements are written to need no sort at all (an
//! agent's threads are merged in order, see `threads_statement` in
//! `pg/mod.rs`), and the one sort left, of a thread named by its key (at
//! most one row), is allowed by its statement.
//!
//! This module only judges plans; which statement a plan belongs to is
//! `statements`'s.

use serde_json::Value;

/// Tables of one row, read and written whole by design.
pub(crate) const ONE_ROW: [&str; 2] = ["inbox_schema", "inbox_writer"];

/// The faulty steps of `plan` (of `statement`), each as its [`header`]
/// and what is wrong with it: none when nothing is. Only steps on
/// `tables` (the store's, but [`ONE_ROW`]) and sorts are judged.
pub(crate) fn problems(statement: &str, plan: &Value, tables: &[String]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for node in nodes(plan) {
        let judged = relation(node).is_none_or(|r| tables.iter().any(|t| t == r));
        let Some(problem) = judged.then(|| problem(node)).flatten() else {
            continue;
        };
        let step = header(node);
        if allowed(statement, &step, node).is_none() {
            found.push((step, problem));
        }
    }
    found
}

/// Why a step that [`problem`] finds fault with is bounded all the same,
/// or `None` if it is not. `step` is the step's [`header`].
fn allowed(statement: &str, step: &str, node: &Value) -> Option<&'static str> {
    // Walks in an index's order that stop at the LIMIT. With no limit
    // (the largest one) they are the script runner's look at everything
    // after each step (`engine/src/script/run.rs`), or a user's listing
    // of all.
    let unfiltered = !statement.contains(" WHERE ");
    if step == "Index Scan using runs_newest on runs"
        && statement.starts_with(
            "SELECT record_json FROM runs ORDER BY created_at DESC, run_id DESC LIMIT ",
        )
    {
        return Some("reads the newest runs in index order and stops at the LIMIT");
    }
    if step == "Index Scan Backward using threads_pkey on threads t"
        && statement.contains("ORDER BY t.thread_id DESC LIMIT")
        && unfiltered
    {
        return Some("reads the newest threads in key order and stops at the LIMIT");
    }
    let task_or_run = |column: &str| statement.contains(&format!("WHERE t.{column} = $"));
    if step == "Index Scan Backward using threads_pkey on threads t"
        && task_or_run("task_id")
        && !statement.contains("t.run_id = $")
    {
        return Some(
            "a task's threads without its run (the teams bridge asks this): no index leads with \
             the task, so the newest threads are read until the LIMIT; an index of its own would \
             cost every send that names a task a page",
        );
    }
    if step == "Index Scan Backward using threads_pkey on threads t"
        && task_or_run("run_id")
        && !statement.contains("t.task_id = $")
    {
        return Some(
            "a run's threads newest first: `threads_run` leads with the run and its tasks, so \
             they are sorted, and with sorts priced out the planner walks the key instead",
        );
    }
    if step == "Index Scan using agents_pkey on agents"
        && statement.starts_with("SELECT record_json FROM agents ORDER BY name LIMIT ")
    {
        return Some("reads the registry in key order and stops at the LIMIT");
    }
    if statement == "SELECT count(*) FROM messages" {
        return Some(
            "retention's count limit needs the number: `gc` asks once per call, an automatic \
             step only once the event sequence says the store may hold more than the limit",
        );
    }
    if log_walk_by_kind(step, node) {
        return Some(
            "a waiter's walk of the log from its cursor, in id order: it reads what happened \
             since, keeping the kinds it waits for (no index on a kind gives id order across \
             several kinds)",
        );
    }
    if matches!(step, "Sort" | "Incremental Sort") && statement.contains("WHERE t.thread_id = $") {
        return Some("sorts at most one row: the statement names the thread by its key");
    }
    None
}

/// Whether `node` walks an event log (inbox's or orch's) by id, filtering
/// by equality on the kind of event alone (its status, message kind or
/// type), never on whose or which thread's it is.
fn log_walk_by_kind(step: &str, node: &Value) -> bool {
    const KINDS: [&str; 3] = ["status", "message_kind", "event_type"];
    let log = matches!(
        step,
        "Index Scan using events_pkey on events e"
            | "Index Scan using orch_events_pkey on orch_events"
    );
    let columns = field(node, "Filter")
        .map(equality_columns)
        .unwrap_or_default();
    log && !columns.is_empty() && columns.iter().all(|c| KINDS.contains(&c.as_str()))
}

/// What is wrong with one step, if anything.
fn problem(node: &Value) -> Option<String> {
    match field(node, "Node Type")? {
        "Seq Scan" => Some("reads the whole table".to_owned()),
        "Index Scan" | "Index Only Scan" | "Bitmap Index Scan" => match field(node, "Index Cond") {
            None => Some("walks the whole index".to_owned()),
            Some(condition) => range_and_filter(condition, field(node, "Filter")),
        },
        "Bitmap Heap Scan" => {
            let condition = field(node, "Recheck Cond").unwrap_or("");
            range_and_filter(condition, field(node, "Filter"))
        }
        "Sort" | "Incremental Sort" => Some(format!(
            "no index gives the order ({}): every match is read and sorted",
            list(node, "Sort Key")
        )),
        _ => None,
    }
}

/// A scan searched by `condition` with `filter` on top: wrong when the
/// filter, and not the search, picks rows by equality.
fn range_and_filter(condition: &str, filter: Option<&str>) -> Option<String> {
    let filter = filter?;
    (!equality(condition) && equality(filter)).then(|| {
        format!(
            "searched by a range alone, {condition}, it filters by equality, {filter}: \
             an index on the filtered column would search for those rows"
        )
    })
}

/// Whether a condition tests a column for equality (`=`, `= ANY`).
fn equality(condition: &str) -> bool {
    !equality_columns(condition).is_empty()
}

/// The columns a condition tests for equality (`=`, `= ANY`), literals
/// aside: `(status = 'done'::text)` tests `status`.
fn equality_columns(condition: &str) -> Vec<String> {
    let mut outside = String::new();
    let mut in_literal = false;
    for c in condition.chars() {
        if c == '\'' {
            in_literal = !in_literal;
        } else if !in_literal {
            outside.push(c);
        }
    }
    let mut columns = Vec::new();
    let mut rest = outside.as_str();
    while let Some(at) = rest.find(" = ") {
        let before = &rest[..at];
        let start = before
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .map_or(0, |i| i + 1);
        let column = &before[start..];
        // `alias.column` as `column`.
        let column = column.rsplit('.').next().unwrap_or(column);
        columns.push(column.to_owned());
        rest = &rest[at + 3..];
    }
    columns
}

/// The plan's steps, each before the steps under it.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    for child in plan["Plans"].as_array().into_iter().flatten() {
        out.extend(nodes(child));
    }
    out
}

fn field<'a>(node: &'a Value, name: &str) -> Option<&'a str> {
    node.get(name).and_then(Value::as_str)
}

fn relation(node: &Value) -> Option<&str> {
    field(node, "Relation Name")
}

/// A list field (a sort key) as text.
fn list(node: &Value, name: &str) -> String {
    let items = node[name].as_array().into_iter().flatten();
    items
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A step as `EXPLAIN` heads it: `Index Scan Backward using threads_pkey
/// on threads t`.
pub(crate) fn header(node: &Value) -> String {
    let mut out = field(node, "Node Type").unwrap_or("?").to_owned();
    if field(node, "Scan Direction") == Some("Backward") {
        out.push_str(" Backward");
    }
    if let Some(index) = field(node, "Index Name") {
        out.push_str(&format!(" using {index}"));
    }
    if let Some(relation) = relation(node) {
        out.push_str(&format!(" on {relation}"));
        match field(node, "Alias") {
            Some(alias) if alias != relation => out.push_str(&format!(" {alias}")),
            _ => {}
        }
    }
    out
}

/// The plan as `EXPLAIN` prints it, for a failure message: one step a
/// line, indented under its parent, with its conditions.
pub(crate) fn render(plan: &Value) -> String {
    let mut out = String::new();
    render_into(plan, 0, &mut out);
    out
}

fn render_into(node: &Value, depth: usize, out: &mut String) {
    let indent = "      ".repeat(depth);
    out.push_str(&format!("      {indent}-> {}\n", header(node)));
    for name in [
        "Index Cond",
        "Recheck Cond",
        "Filter",
        "Join Filter",
        "Hash Cond",
    ] {
        if let Some(condition) = field(node, name) {
            out.push_str(&format!("      {indent}     {name}: {condition}\n"));
        }
    }
    if node.get("Sort Key").is_some() {
        let key = list(node, "Sort Key");
        out.push_str(&format!("      {indent}     Sort Key: {key}\n"));
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        render_into(child, depth + 1, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_is_read_outside_literals_and_without_aliases() {
        assert_eq!(
            equality_columns(
                "((source <> 'a = b'::text) AND (e.status = ANY ('{done,failed}'::text[])))"
            ),
            ["status"]
        );
        assert!(!equality(
            "((event_id > '0'::bigint) AND (created_at >= 'x'::text))"
        ));
    }

    #[test]
    fn a_range_search_that_filters_by_equality_is_the_wrong_index() {
        let plan: Value = serde_json::json!({
            "Node Type": "Limit",
            "Plans": [{
                "Node Type": "Index Scan",
                "Index Name": "messages_pkey",
                "Relation Name": "messages",
                "Alias": "m",
                "Index Cond": "(event_id > '0'::bigint)",
                "Filter": "(to_agent = 'w1'::text)"
            }]
        });
        let found = problems("SELECT ...", &plan, &["messages".to_owned()]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "Index Scan using messages_pkey on messages m");
        // The same step on a table that is not judged.
        assert!(problems("SELECT ...", &plan, &[]).is_empty());
    }
}
