//! The transition-script corpus against the PostgreSQL store: every
//! transcript must be byte-identical to the in-memory reference, as on
//! SQLite. Each script runs in a fresh schema of one throwaway cluster (a
//! schema per script is much cheaper than a database per script), on the
//! scripts' manual clock rather than the server's.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::Store;
use inbox_host_native::PgStore;
use inbox_pg_cluster::PgCluster;

#[test]
fn every_script_matches_its_golden_transcript_on_postgres() {
    let Some(server) =
        PgCluster::start_or_skip("every_script_matches_its_golden_transcript_on_postgres")
    else {
        return;
    };
    let mut admin = server.admin();
    let mut n = 0;
    inbox_conformance::assert_corpus("postgres", || {
        n += 1;
        let schema = format!("corpus_{n}");
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        let mut config = server.config("postgres");
        config.options(&format!("-c search_path={schema}"));
        let mut store = PgStore::with_config(config).unwrap();
        store.use_server_clock(false);
        store.initialize().unwrap();
        store
    });
}
