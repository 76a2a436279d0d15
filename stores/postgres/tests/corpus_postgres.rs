//! The transition-script corpus against the PostgreSQL store: every
//! transcript must be byte-identical to the in-memory reference, as on
//! SQLite. Each script runs in a fresh schema of one throwaway cluster (a
//! schema per script is much cheaper than a database per script), on the
//! scripts' manual clock rather than the server's, and as an agents' role
//! given only what the roles recipe of docs/postgres.md grants.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::Store;
use inbox_pg_cluster::PgCluster;
use inbox_postgres::PgStore;

#[test]
fn every_script_matches_its_golden_transcript_on_postgres() {
    let Some(server) =
        PgCluster::start_or_skip("every_script_matches_its_golden_transcript_on_postgres")
    else {
        return;
    };
    let mut admin = server.admin();
    // Each script runs as an agents' role under the roles recipe of docs/postgres.md, as a
    // team's machines would: a command that needs more than the recipe
    // grants fails its script.
    admin
        .batch_execute(
            "CREATE ROLE inbox_agents NOLOGIN; CREATE ROLE inbox_readers NOLOGIN;
             CREATE ROLE machine_a LOGIN IN ROLE inbox_agents",
        )
        .unwrap();
    let (_, grants) = inbox_pg_cluster::roles_recipe();
    let mut n = 0;
    inbox_conformance::assert_corpus("postgres", || {
        n += 1;
        let schema = format!("corpus_{n}");
        let in_schema = |role: &str| {
            let mut config = server.config("postgres");
            config
                .user(role)
                .options(&format!("-c search_path={schema}"));
            config
        };
        admin
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        // The owner (here the superuser) creates the schema and grants.
        let mut owner = PgStore::with_config(in_schema("postgres")).unwrap();
        owner.initialize().unwrap();
        admin
            .batch_execute(&format!(
                "SET search_path = {schema}; {}; RESET search_path",
                grants.replace("SCHEMA public", &format!("SCHEMA {schema}"))
            ))
            .unwrap();
        let mut store = PgStore::with_config(in_schema("machine_a")).unwrap();
        store.use_server_clock(false);
        store.initialize().unwrap();
        store
    });
}
