//! Every statement the PostgreSQL store runs, checked by its plan, as
//! `query_plans.rs` checks the SQLite store's: none may read a large table
//! whole, walk an index whole, search an index by a range while filtering
//! by equality what another index would have searched (the mailbox without
//! `messages_to`), or sort what it returns. The rules, and the few bounded
//! exceptions, are in `pg_plans/judge.rs`. Such a plan is invisible with
//! small test data and ruinous at a million messages.
//!
//! The whole corpus runs (its transcripts checked too), and then every
//! shape of orch and thread query (`common::every_orch_query`,
//! `common::every_thread_query`), each store in a schema
//! of its own on a throwaway server, with the planner's sequential scans
//! and sorts priced out (so what it still picks is what no index spares
//! it), autovacuum off (so the plans are those for tables of unknown size
//! at every run), and the server's `auto_explain` sending the client the
//! plan of every statement the executor runs: queries, writes, the
//! pipeline's `EXECUTE`s of SQL-prepared statements (`pg/pipeline.rs`),
//! the foreign key checks (nested statements), custom and generic plans
//! alike. `pg_plans/statements.rs` names the statement each plan is for.
//! The server's own counters then cross-check the collection: no table but
//! the one-row ones was scanned sequentially.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_conformance::query_shapes as common;
#[path = "pg_plans/judge.rs"]
mod judge;
#[path = "pg_plans/statements.rs"]
mod statements;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use inbox_engine::Store;
use inbox_pg_cluster::PgCluster;
use inbox_pg_cluster::postgres::Client;
use inbox_postgres::PgStore;
use serde_json::Value;

/// Session settings of every store of the check: `auto_explain` loaded,
/// reporting every statement's plan (nested ones too) in JSON as a NOTICE,
/// and every statement sent reported too (`log_statement`, whose LOG
/// messages the client is sent at `client_min_messages = log`), for
/// naming the statement of each plan; sequential scans and sorts made the
/// last resort (not impossible: a plan that still has one had no other
/// way).
const PLANNER: &str = "-c session_preload_libraries=auto_explain \
     -c auto_explain.log_min_duration=0 -c auto_explain.log_nested_statements=on \
     -c auto_explain.log_format=json -c auto_explain.log_level=notice \
     -c log_statement=all -c client_min_messages=log \
     -c enable_seqscan=off -c enable_sort=off -c enable_incremental_sort=off";

/// What a session reported, in order.
enum Notice {
    /// A `log_statement` message: what the session was sent.
    Sent(String),
    /// `auto_explain`'s JSON for one statement that ran.
    Plan(String),
}

/// One store's session's notices, in order.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<Notice>>>);

impl Notices {
    /// Keeps a plan (`duration: ... ms  plan:\n{json}`), or any other
    /// message (what was sent, a warning) for [`statements::Session::sent`]
    /// to read.
    fn keep(&self, message: &str) {
        let notice = match message.split_once("plan:\n") {
            Some((_, json)) => Notice::Plan(json.to_owned()),
            None => Notice::Sent(message.to_owned()),
        };
        self.0.lock().unwrap().push(notice);
    }

    fn take(&self) -> Vec<Notice> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// A store in a new schema of `server` whose session reports its plans to
/// `notices`.
fn store(server: &PgCluster, admin: &mut Client, schema: &str, notices: &Notices) -> PgStore {
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let mut config = server.config("postgres");
    config.options(&format!("-c search_path={schema} {PLANNER}"));
    let sink = notices.clone();
    config.notice_callback(move |notice| sink.keep(notice.message()));
    let mut store = PgStore::with_config(config)
        .unwrap_or_else(|e| panic!("{e} (auto_explain comes with PostgreSQL's contrib modules)"));
    store.use_server_clock(false);
    store.initialize().unwrap();
    store
}

/// Runs the corpus (checking its transcripts too) and every orch query
/// shape, a store each; returns each session's plans.
fn sessions(server: &PgCluster) -> Vec<Notices> {
    let mut admin = server.admin();
    // Plans for tables the planner knows nothing of (it assumes ten pages
    // each), the same at every run: no analysis of a few test rows halfway.
    admin
        .batch_execute("ALTER SYSTEM SET autovacuum = off")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let mut all = Vec::new();
    inbox_conformance::assert_corpus("postgres", || {
        let notices = Notices::default();
        all.push(notices.clone());
        store(
            server,
            &mut admin,
            &format!("plans_{}", all.len()),
            &notices,
        )
    });
    let notices = Notices::default();
    let mut orch = store(server, &mut admin, "plans_orch", &notices);
    common::every_orch_query(&mut orch);
    common::every_thread_query(&mut orch);
    all.push(notices);
    all
}

/// The store's tables, whose steps are judged: the ones its migrations
/// create, but the one-row ones. Catalogs that opening a store inspects
/// are not its data.
fn large_tables(admin: &mut Client) -> Vec<String> {
    admin
        .query(
            "SELECT tablename::text FROM pg_tables \
             WHERE schemaname = 'plans_orch' AND NOT tablename = ANY($1) ORDER BY 1",
            &[&judge::ONE_ROW.to_vec()],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// What the check found: every distinct statement, and each faulty step
/// of each (by statement and step) with what is wrong with it and the
/// plan, as the first plan that had it says.
#[derive(Default)]
struct Findings {
    statements: BTreeSet<String>,
    plans: usize,
    bad: BTreeMap<(String, String), (String, String)>,
}

impl Findings {
    /// Judges one session's plans, in order.
    fn judge(&mut self, notices: &[Notice], tables: &[String]) {
        let mut session = statements::Session::default();
        for notice in notices {
            let json = match notice {
                Notice::Sent(message) => {
                    session.sent(message);
                    continue;
                }
                Notice::Plan(json) => json,
            };
            let report: Value = serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("auto_explain's JSON does not parse ({e}): {json}"));
            let text = report["Query Text"].as_str().unwrap_or("");
            let statement = placed(session.statement(text));
            let plan = &report["Plan"];
            for (step, problem) in judge::problems(&statement, plan, tables) {
                self.bad
                    .entry((statement.clone(), step))
                    .or_insert_with(|| (problem, judge::render(plan)));
            }
            self.statements.insert(statement);
            self.plans += 1;
        }
    }

    fn report(&self) -> String {
        self.bad
            .iter()
            .map(|((statement, step), (problem, plan))| {
                format!("{step}: {problem}\n    in: {statement}\n    plan:\n{plan}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A statement's text for the check: a nested one must be a foreign key
/// check (anything else means the plans lost track of what was sent), and
/// is named without its schema, one per store here.
fn placed(statement: statements::Statement) -> String {
    if !statement.nested {
        return statement.text;
    }
    assert!(
        statement.text.starts_with("SELECT 1 FROM ONLY "),
        "a plan of no statement the session was sent, nor a foreign key check: {}",
        statement.text
    );
    without_schema(&statement.text)
}

/// `"plans_N".table` as `table`.
fn without_schema(statement: &str) -> String {
    let mut out = String::new();
    let mut rest = statement;
    while let Some(at) = rest.find("\"plans_") {
        let Some(end) = rest[at..].find("\".") else {
            break;
        };
        out.push_str(&rest[..at]);
        rest = &rest[at + end + 2..];
    }
    out.push_str(rest);
    out
}

#[test]
fn no_statement_sorts_everything_or_scans_a_large_table() {
    let Some(server) = PgCluster::start_or_skip("pg_plans") else {
        return;
    };
    let sessions = sessions(&server);
    let tables = large_tables(&mut server.admin());
    let mut findings = Findings::default();
    for notices in &sessions {
        findings.judge(&notices.take(), &tables);
    }
    assert!(
        findings.statements.len() > 80,
        "too few statements reported: {} (is auto_explain reporting?)",
        findings.statements.len()
    );
    assert!(
        findings.bad.is_empty(),
        "query plans that read more than they should ({} statements, {} plans checked):\n{}",
        findings.statements.len(),
        findings.plans,
        findings.report()
    );
    eprintln!(
        "pg_plans: {} plans of {} statements checked",
        findings.plans,
        findings.statements.len()
    );
    no_sequential_scan_counted(&server);
}

/// The server's own counters agree: no table but the one-row ones was
/// scanned sequentially, beyond the one scan that building each of its
/// indexes takes (a statement the plans above missed would show here).
fn no_sequential_scan_counted(server: &PgCluster) {
    // A session's statistics reach the server when it ends.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let scanned: Vec<String> = server
        .admin()
        .query(
            "SELECT schemaname || '.' || relname || ' (' || seq_scan || ')' \
             FROM pg_stat_user_tables s \
             WHERE schemaname LIKE 'plans_%' AND NOT relname = ANY($1) \
               AND seq_scan > (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) \
             ORDER BY 1",
            &[&judge::ONE_ROW.to_vec()],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(scanned.is_empty(), "scanned sequentially: {scanned:?}");
}
