//! The PostgreSQL store's schema rules and its care with secrets: an empty
//! schema is `not_initialized`, `initialize` is safe to repeat, a newer
//! schema is refused untouched with `schema_too_new`, another program's
//! tables are never adopted, a password never appears in an error, a
//! message body with a NUL (which PostgreSQL's text cannot hold) is kept,
//! and a session the server ends (as a restart does) is replaced before
//! the next command runs.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{Store, StoreErrorKind};
use inbox_pg_cluster::PgCluster;
use inbox_postgres::PgStore;
use inbox_postgres::schema::SCHEMA_VERSION;

fn store_in(server: &PgCluster, schema: &str) -> Result<PgStore, inbox_engine::StoreError> {
    let mut config = server.config("postgres");
    config.options(&format!("-c search_path={schema}"));
    PgStore::with_config(config)
}

#[test]
fn the_schema_is_created_once_and_a_newer_one_is_refused_untouched() {
    let Some(server) = PgCluster::start_or_skip("pg_schema") else {
        return;
    };
    let mut admin = server.admin();
    admin
        .batch_execute("CREATE SCHEMA bus; CREATE SCHEMA other; CREATE TABLE other.t (x int)")
        .unwrap();

    let mut store = store_in(&server, "bus").unwrap();
    let error = store.ensure_schema().unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::NotInitialized, "{error}");
    assert_eq!(store.initialize().unwrap().schema_version, SCHEMA_VERSION);
    assert_eq!(store.initialize().unwrap().schema_version, SCHEMA_VERSION);
    drop(store);
    assert_eq!(
        store_in(&server, "bus").unwrap().ensure_schema().unwrap(),
        SCHEMA_VERSION
    );

    admin
        .batch_execute("UPDATE bus.inbox_schema SET version = version + 1")
        .unwrap();
    let error = store_in(&server, "bus").err().unwrap();
    assert_eq!(error.kind, StoreErrorKind::SchemaTooNew, "{error}");

    let error = store_in(&server, "other").err().unwrap();
    assert_eq!(error.kind, StoreErrorKind::Other, "{error}");
    assert!(error.message.contains("no inbox schema"), "{error}");
}

#[test]
fn a_password_never_appears_in_an_error() {
    // Nothing listens on port 1: the connection fails, and says where.
    let error = PgStore::connect("postgres://agent:s3cret-pw@127.0.0.1:1/team")
        .err()
        .unwrap();
    assert!(!error.message.contains("s3cret-pw"), "{error}");
    assert!(
        error.message.contains("postgres://agent@127.0.0.1:1/team"),
        "{error}"
    );
    let error = PgStore::connect("postgres://agent:s3cret-pw@127.0.0.1:1/team?sslmode=require")
        .err()
        .unwrap();
    assert!(!error.message.contains("s3cret-pw"), "{error}");
    assert!(
        error.message.contains("postgres://agent@127.0.0.1:1/team"),
        "{error}"
    );
}

#[test]
fn a_body_with_a_nul_is_kept_byte_for_byte() {
    let Some(server) = PgCluster::start_or_skip("pg_schema: nul") else {
        return;
    };
    let store = PgStore::with_config(server.config("postgres")).unwrap();
    let mut engine = inbox_engine::Engine::new(
        store,
        inbox_host_native::HostClock::system(),
        inbox_engine::UlidIds::from_seed(1),
    );
    for json in [
        r#"{"command":"init"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s","body":"a\u0000b"}"#,
    ] {
        let response = engine.execute(inbox_engine::Request::from_json(json).unwrap());
        assert!(
            response.to_json().contains("\"ok\":true"),
            "{}",
            response.to_json()
        );
    }
    let body: Vec<u8> = server
        .admin()
        .query_one("SELECT body FROM messages", &[])
        .unwrap()
        .get(0);
    assert_eq!(body, b"a\0b");
}

#[test]
fn a_url_in_the_flag_or_the_environment_opens_postgres() {
    use inbox_postgres::{open, url_named};
    use std::path::Path;
    let url = Path::new("postgres://agent@db.example/team");
    let file = Path::new("team.db");
    assert_eq!(url_named(Some(url), None).as_deref(), url.to_str());
    assert_eq!(url_named(None, Some(url)).as_deref(), url.to_str());
    assert_eq!(url_named(Some(file), Some(url)), None, "the flag wins");
    assert_eq!(url_named(None, Some(Path::new(""))), None);

    let Some(server) = PgCluster::start_or_skip("pg_schema: url") else {
        return;
    };
    server.admin().batch_execute("CREATE SCHEMA team").unwrap();
    // The socket folder as the URL's host, the schema in its options.
    let host = server
        .socket_dir()
        .display()
        .to_string()
        .replace('/', "%2F");
    let url = format!("postgresql://postgres@{host}:5432/postgres?options=-csearch_path%3Dteam");
    let error = open(&url, false).err().unwrap();
    assert_eq!(error.kind, StoreErrorKind::NotInitialized, "{error}");
    open(&url, true).unwrap();
    assert_eq!(
        open(&url, false).unwrap().ensure_schema().unwrap(),
        SCHEMA_VERSION
    );
}

#[test]
fn a_session_the_server_ended_is_replaced_before_the_next_command_runs() {
    let Some(server) = PgCluster::start_or_skip("pg_schema: lost session") else {
        return;
    };
    let mut config = server.config("postgres");
    config.password("s3cret-pw");
    let store = PgStore::with_config(config).unwrap();
    let mut engine = inbox_engine::Engine::new(
        store,
        inbox_host_native::HostClock::system(),
        inbox_engine::UlidIds::from_seed(1),
    );
    let init = inbox_engine::Request::from_json(r#"{"command":"init"}"#).unwrap();
    assert!(engine.execute(init).to_json().contains("\"ok\":true"));
    // As a server restart would: every session of the database ends.
    server
        .admin()
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'inbox'",
        )
        .unwrap();
    // The next command finds the session gone at BEGIN, before anything
    // of it ran, connects again and runs once.
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#;
    let answer = engine
        .execute(inbox_engine::Request::from_json(send).unwrap())
        .to_json();
    assert!(answer.contains("\"ok\":true"), "{answer}");
    let threads: i64 = server
        .admin()
        .query_one("SELECT count(*) FROM threads", &[])
        .unwrap()
        .get(0);
    assert_eq!(threads, 1);
}

#[test]
fn records_are_stamped_with_the_servers_clock_not_the_hosts() {
    let Some(server) = PgCluster::start_or_skip("pg_schema: clock") else {
        return;
    };
    let store = PgStore::with_config(server.config("postgres")).unwrap();
    // A host whose clock is stuck in 1970.
    let stuck = inbox_engine::ManualClock::new(inbox_engine::Timestamp::from_millis(0));
    let mut engine = inbox_engine::Engine::new(store, stuck, inbox_engine::UlidIds::from_seed(1));
    for json in [
        r#"{"command":"init"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#,
    ] {
        let response = engine.execute(inbox_engine::Request::from_json(json).unwrap());
        assert!(
            response.to_json().contains("\"ok\":true"),
            "{}",
            response.to_json()
        );
    }
    let created: String = server
        .admin()
        .query_one("SELECT created_at FROM threads", &[])
        .unwrap()
        .get(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let stamped = inbox_engine::Timestamp::parse(&created)
        .unwrap()
        .as_millis();
    let skew = (i128::from(stamped) - i128::try_from(now).unwrap()).abs();
    assert!(skew < 60_000, "stamped {created}, {skew} ms from now");
}

#[test]
fn a_writer_kept_from_the_writer_row_past_its_lock_timeout_reports_storage_busy() {
    let Some(server) = PgCluster::start_or_skip("pg_schema: busy") else {
        return;
    };
    let mut config = server.config("postgres");
    // The URL's own options win over the store's defaults (10 s).
    config.options("-c lock_timeout=300ms");
    let store = PgStore::with_config(config).unwrap();
    let mut engine = inbox_engine::Engine::new(
        store,
        inbox_host_native::HostClock::system(),
        inbox_engine::UlidIds::from_seed(1),
    );
    let init = inbox_engine::Request::from_json(r#"{"command":"init"}"#).unwrap();
    assert!(engine.execute(init).to_json().contains("\"ok\":true"));
    // A stuck writer holds the row.
    let mut stuck = server.admin();
    let mut tx = stuck.transaction().unwrap();
    tx.batch_execute("SELECT id FROM inbox_writer WHERE id = 1 FOR UPDATE")
        .unwrap();
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#;
    let started = std::time::Instant::now();
    let answer = engine
        .execute(inbox_engine::Request::from_json(send).unwrap())
        .to_json();
    assert!(answer.contains("\"code\":\"storage_busy\""), "{answer}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    tx.rollback().unwrap();
    let answer = engine
        .execute(inbox_engine::Request::from_json(send).unwrap())
        .to_json();
    assert!(answer.contains("\"ok\":true"), "{answer}");
}
