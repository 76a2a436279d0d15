//! A coarse guard on the PostgreSQL store's queries: the whole corpus runs
//! with sequential scans priced out of the planner's choice
//! (`enable_seqscan = off`, which makes one the last resort, not
//! impossible), and afterwards no table but the one-row bookkeeping tables
//! has been scanned sequentially (beyond the one scan that building each of
//! its indexes takes), foreign key checks included. It is weaker than the
//! SQLite store's plan check: a query may still walk the wrong index with
//! a filter (removing `messages_to` goes unnoticed: the mailbox query then
//! walks the primary key). An `EXPLAIN` of every statement is the next
//! step (docs/postgres.md).

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::Store;
use inbox_host_native::PgStore;
use inbox_pg_cluster::PgCluster;

/// Tables of one row, read and written whole by design.
const ONE_ROW: [&str; 2] = ["inbox_schema", "inbox_writer"];

#[test]
fn the_corpus_on_postgres_makes_no_sequential_scan() {
    let Some(server) = PgCluster::start_or_skip("pg_plans") else {
        return;
    };
    let mut admin = server.admin();
    let mut n = 0;
    inbox_conformance::assert_corpus("postgres", || {
        n += 1;
        let schema = format!("plans_{n}");
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        let mut config = server.config("postgres");
        config.options(&format!("-c search_path={schema} -c enable_seqscan=off"));
        let mut store = PgStore::with_config(config).unwrap();
        store.use_server_clock(false);
        store.initialize().unwrap();
        store
    });
    // A session's statistics reach the server when it ends.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let scanned: Vec<String> = server
        .admin()
        .query(
            // Building an index scans its table once: the migration's
            // scans are one per index of the table.
            "SELECT schemaname || '.' || relname || ' (' || seq_scan || ')' \
             FROM pg_stat_user_tables s \
             WHERE schemaname LIKE 'plans_%' AND NOT relname = ANY($1) \
               AND seq_scan > (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) \
             ORDER BY 1",
            &[&ONE_ROW.to_vec()],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(scanned.is_empty(), "scanned sequentially: {scanned:?}");
}
