//! The PostgreSQL store under faults, each made for real on a throwaway
//! cluster: the server restarted (fast shutdown, then started again on
//! the same data) in the middle of a command and under a waiting `watch`;
//! a backend SIGKILLed inside a write transaction (PostgreSQL then
//! restarts every backend); a statement timeout; a client left idle
//! inside a transaction; TLS asked for by `sslmode` over TCP, with and
//! without a server that offers it; passwords from the URL, `PGPASSWORD`
//! and a password file, never printed. What is read from the environment
//! is tested in child processes (this test binary run again on
//! `connect_child`), since a test must not change its own environment.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::time::{Duration, Instant};

use inbox_engine::{Call, Engine, Store, UlidIds};
use inbox_host_native::HostClock;
use inbox_pg_cluster::{Options, PgCluster};
use inbox_postgres::PgStore;
use inbox_postgres::listen;
use serde_json::Value;

type PgEngine = Engine<PgStore, HostClock, UlidIds>;

/// The variable that turns `connect_child` into a connection attempt.
const CHILD_URL: &str = "INBOX_PG_FAULTS_URL";

const PASSWORD: &str = "s3cret-pw";

fn run(engine: &mut PgEngine, json: &str) -> Value {
    let response = engine.execute_call(Call::from_json(json).unwrap());
    serde_json::from_str(&response.to_json()).unwrap()
}

fn engine_at(url: &str, seed: u64) -> PgEngine {
    let store = PgStore::connect(url).unwrap();
    Engine::new(store, HostClock::system(), UlidIds::from_seed(seed))
}

/// The server's socket URL with extra startup `options` (URL-encoded).
fn url_with(server: &PgCluster, options: &str) -> String {
    let url = server.url("postgres");
    if options.is_empty() {
        url
    } else {
        format!("{url}&options={options}")
    }
}

/// An initialized inbox in the server's `postgres` database.
fn initialized(server: &PgCluster, options: &str) -> PgEngine {
    let mut engine = engine_at(&url_with(server, options), 1);
    assert_eq!(run(&mut engine, r#"{"command":"init"}"#)["ok"], true);
    engine
}

/// A number the server answers (`SELECT count(*) ...`).
fn count(server: &PgCluster, sql: &str) -> i64 {
    server.admin().query_one(sql, &[]).unwrap().get(0)
}

fn send_json(subject: &str, key: Option<&str>) -> String {
    let key = key.map_or(String::new(), |k| format!(r#","idempotency_key":"{k}""#));
    format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"{subject}"{key}}}"#
    )
}

/// Polls `sql` (a boolean) until it holds, for at most 20 s.
fn until(server: &PgCluster, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server
        .admin()
        .query_one(sql, &[])
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(Instant::now() < deadline, "never came true: {sql}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_restart_mid_command_is_a_clear_storage_error_and_the_retry_applies_once() {
    let Some(mut server) = PgCluster::start_or_skip("pg_faults: restart") else {
        return;
    };
    // Long lock waits: the command below must still be waiting when the
    // server goes down.
    let mut engine = initialized(&server, "-clock_timeout%3D60s");
    let first = run(&mut engine, &send_json("before", Some("k1")));
    assert_eq!(first["ok"], true, "{first}");

    // Between commands: the next one reconnects at BEGIN and, retried
    // with its key, replays rather than writing again.
    server.restart();
    let again = run(&mut engine, &send_json("before", Some("k1")));
    assert_eq!(again["ok"], true, "{again}");
    assert_eq!(again["thread"]["thread_id"], first["thread"]["thread_id"]);
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 1);

    // In the middle of a command: its insert waits on a table lock when
    // the server shuts down.
    let mut blocker = server.admin();
    blocker
        .batch_execute("BEGIN; LOCK TABLE threads IN SHARE MODE")
        .unwrap();
    // The engine is not `Send`: the sender lives in its own thread, and
    // retries when told the server is back.
    let url = url_with(&server, "-clock_timeout%3D60s");
    let (back, is_back) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        let mut engine = engine_at(&url, 2);
        let cut = run(&mut engine, &send_json("during", Some("k2")));
        is_back.recv().unwrap();
        let retried = run(&mut engine, &send_json("during", Some("k2")));
        let replayed = run(&mut engine, &send_json("during", Some("k2")));
        (cut, retried, replayed)
    });
    until(
        &server,
        "SELECT count(*) = 1 FROM pg_stat_activity \
         WHERE application_name = 'inbox' AND wait_event_type = 'Lock'",
    );
    server.restart();
    drop(blocker);
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 1);
    back.send(()).unwrap();
    let (cut, retried, replayed) = sender.join().unwrap();
    assert_eq!(cut["ok"], false, "{cut}");
    assert_eq!(cut["error"]["code"], "storage_error", "{cut}");
    let message = cut["error"]["message"].as_str().unwrap();
    assert!(message.contains("retry"), "{message}");

    // The retry applies once, and retrying it again replays it.
    assert_eq!(retried["ok"], true, "{retried}");
    assert_eq!(
        replayed["thread"]["thread_id"],
        retried["thread"]["thread_id"]
    );
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 2);
    assert_eq!(
        count(
            &server,
            "SELECT count(*) FROM threads WHERE subject = 'during'"
        ),
        1
    );
}

#[test]
fn a_wait_goes_on_across_a_restart_and_wakes_for_a_send_after_it() {
    let Some(mut server) = PgCluster::start_or_skip("pg_faults: wait") else {
        return;
    };
    drop(initialized(&server, ""));
    let url = server.url("postgres");
    let watcher = {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut engine = engine_at(&url, 11);
            let hub = engine.store().hub().unwrap();
            let watch = r#"{"command":"watch","agent":"worker","timeout_seconds":60}"#;
            let started = Instant::now();
            let response =
                listen::wait(&mut engine, Call::from_json(watch).unwrap(), &hub, None).unwrap();
            (response.to_json(), started.elapsed())
        })
    };
    until(
        &server,
        "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'inbox-listen' \
         AND state = 'idle' AND query LIKE 'LISTEN%'",
    );
    // Down long enough for the waiter to look while nothing answers.
    server.stop();
    std::thread::sleep(Duration::from_millis(2500));
    server.start();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !watcher.is_finished(),
        "the wait ended while the server was away"
    );
    let sent = Instant::now();
    assert_eq!(
        run(&mut engine_at(&url, 12), &send_json("wake up", None))["ok"],
        true
    );
    let (answer, waited) = watcher.join().unwrap();
    assert!(answer.contains("\"ok\":true"), "{answer}");
    assert!(answer.contains("wake up"), "{answer}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "woke late: {:?}",
        sent.elapsed()
    );
    assert!(waited < Duration::from_secs(30), "{waited:?}");
}

#[test]
fn a_look_that_fails_because_the_server_is_down_is_made_again_when_it_is_back() {
    let Some(mut server) = PgCluster::start_or_skip("pg_faults: wait, first look") else {
        return;
    };
    drop(initialized(&server, ""));
    let url = server.url("postgres");
    let (ready, is_ready) = std::sync::mpsc::channel::<()>();
    let (go, is_go) = std::sync::mpsc::channel::<()>();
    let watcher = {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut engine = engine_at(&url, 21);
            let hub = engine.store().hub().unwrap();
            ready.send(()).unwrap();
            is_go.recv().unwrap();
            // The server is down: the first look fails with storage_error.
            // From a cursor, so the send below counts whenever the look
            // that finds it comes.
            let watch =
                r#"{"command":"watch","agent":"worker","after_event":0,"timeout_seconds":60}"#;
            let response =
                listen::wait(&mut engine, Call::from_json(watch).unwrap(), &hub, None).unwrap();
            response.to_json()
        })
    };
    is_ready.recv().unwrap();
    server.stop();
    go.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    server.start();
    assert!(!watcher.is_finished(), "the wait ended on its failed look");
    assert_eq!(
        run(&mut engine_at(&url, 22), &send_json("back", None))["ok"],
        true
    );
    let answer = watcher.join().unwrap();
    assert!(answer.contains("\"ok\":true"), "{answer}");
    assert!(answer.contains("back"), "{answer}");
}

#[test]
fn a_backend_killed_inside_a_write_leaves_nothing_half_written() {
    let Some(server) = PgCluster::start_or_skip("pg_faults: sigkill") else {
        return;
    };
    // Commits flushed to the log (the cluster's default is off): a crash
    // keeps what was committed, and only that.
    let durable = "-csynchronous_commit%3Don";
    let mut engine = initialized(&server, durable);
    let sent = run(&mut engine, &send_json("kept", None));
    assert_eq!(sent["ok"], true, "{sent}");
    let thread_id = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let events = count(&server, "SELECT count(*) FROM events");

    // A writer inside its transaction, holding the writer row, has
    // written a thread and an event but not committed.
    let mut writer = PgStore::connect(&url_with(&server, durable)).unwrap();
    writer.begin(inbox_engine::store::TxMode::Write).unwrap();
    let mut copy = writer.thread(&thread_id).unwrap().unwrap().thread;
    copy.thread_id = "thr_half_written".to_owned();
    writer.insert_thread(&copy).unwrap();
    let latest = writer.latest_event_id().unwrap();
    let mut event = writer
        .events(&inbox_engine::store::EventQuery::after_event(0, 100))
        .unwrap()
        .pop()
        .unwrap();
    event.event_id = latest + 1;
    event.thread_id = copy.thread_id.clone();
    writer.insert_event(&event).unwrap();
    let pid: i32 = server
        .admin()
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'inbox' \
             AND state = 'idle in transaction'",
            &[],
        )
        .unwrap()
        .get(0);
    server.kill_backend(pid);

    let error = writer.commit().unwrap_err();
    assert_eq!(error.kind, inbox_engine::StoreErrorKind::Other, "{error}");
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 1);
    assert_eq!(count(&server, "SELECT count(*) FROM events"), events);
    // Every session was ended by the crash; both stores connect again at
    // their next BEGIN, and the writer row is free.
    let next = run(&mut engine, &send_json("after", None));
    assert_eq!(next["ok"], true, "{next}");
    writer.begin(inbox_engine::store::TxMode::Write).unwrap();
    writer.rollback().unwrap();
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 2);
}

#[test]
fn a_statement_timeout_is_storage_busy_and_applies_nothing() {
    let Some(server) = PgCluster::start_or_skip("pg_faults: statement timeout") else {
        return;
    };
    // A low statement timeout; the lock timeout stays long, so it is the
    // statement timeout that ends the wait.
    let mut engine = initialized(
        &server,
        "-cstatement_timeout%3D300ms%20-clock_timeout%3D60s",
    );
    let mut blocker = server.admin();
    blocker
        .batch_execute("BEGIN; LOCK TABLE threads IN SHARE MODE")
        .unwrap();
    let events = count(&server, "SELECT count(*) FROM events");
    let started = Instant::now();
    let answer = run(&mut engine, &send_json("slow", None));
    assert_eq!(answer["error"]["code"], "storage_busy", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("statement timeout"), "{message}");
    assert!(message.contains("retry the command"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
    blocker.batch_execute("ROLLBACK").unwrap();
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 0);
    assert_eq!(count(&server, "SELECT count(*) FROM events"), events);
    assert_eq!(run(&mut engine, &send_json("slow", None))["ok"], true);
    assert_eq!(count(&server, "SELECT count(*) FROM threads"), 1);
}

#[test]
fn a_client_idle_inside_a_transaction_is_ended_and_frees_the_writer_row() {
    let Some(server) = PgCluster::start_or_skip("pg_faults: idle in transaction") else {
        return;
    };
    drop(initialized(&server, ""));
    let mut stuck = PgStore::connect(&url_with(
        &server,
        "-cidle_in_transaction_session_timeout%3D500ms",
    ))
    .unwrap();
    stuck.begin(inbox_engine::store::TxMode::Write).unwrap();
    // Another writer, which would report storage_busy after 5 s if the
    // stuck one kept the writer row.
    let mut engine = engine_at(&url_with(&server, "-clock_timeout%3D5s"), 2);
    let started = Instant::now();
    let answer = run(&mut engine, &send_json("through", None));
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        count(
            &server,
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'"
        ),
        0
    );
    // The stuck client learns its transaction is gone, then goes on.
    let error = stuck.commit().unwrap_err();
    assert_eq!(error.kind, inbox_engine::StoreErrorKind::Other, "{error}");
    stuck.begin(inbox_engine::store::TxMode::Read).unwrap();
    stuck.rollback().unwrap();
}

/// A connection attempt in a child process: prints `connected` or
/// `error: <message>`. Run by the tests below with the environment they
/// test; on its own it does nothing.
#[test]
#[ignore = "the connection attempt the other tests run in a child process"]
fn connect_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    match PgStore::connect(&url) {
        Ok(_) => println!("connected"),
        Err(error) => println!("error: {}", error.message),
    }
}

/// What `connect_child` printed for `url` with `env` set (and no
/// `PGPASSWORD`, `PGPASSFILE`, `PGSSLROOTCERT` or `~` of the parent's).
fn connect_in_child(url: &str, env: &[(&str, &str)], home: &std::path::Path) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "connect_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env(CHILD_URL, url)
        .env("HOME", home)
        .env_remove("PGPASSWORD")
        .env_remove("PGPASSFILE")
        .env_remove("PGSSLROOTCERT");
    for (name, value) in env {
        child.env(name, value);
    }
    let out = child.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout
        .lines()
        .find(|l| *l == "connected" || l.starts_with("error: "))
        .unwrap_or_else(|| panic!("the child said nothing: {stdout}"))
        .to_owned()
}

/// Whether the sessions named `application` are encrypted.
fn encrypted(server: &PgCluster, application: &str) -> Vec<bool> {
    server
        .admin()
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1",
            &[&application],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn sslmode_require_encrypts_over_tcp_and_verifies_against_a_given_root() {
    let tls = Options {
        tcp: true,
        tls: true,
        ..Options::default()
    };
    let Some(server) = PgCluster::start_or_skip_with("pg_faults: tls", tls) else {
        return;
    };
    let port = server.tcp_port();
    let url =
        |mode: &str| format!("postgresql://postgres@127.0.0.1:{port}/postgres?sslmode={mode}");
    let store = PgStore::connect(&url("require")).unwrap();
    let listener = store.listener().unwrap();
    assert_eq!(encrypted(&server, "inbox"), [true]);
    assert_eq!(encrypted(&server, "inbox-listen"), [true]);
    drop((store, listener));
    // The check can fail: a plain session shows up as one.
    let plain = PgStore::connect(&url("disable")).unwrap();
    assert_eq!(encrypted(&server, "inbox"), [false]);
    drop(plain);

    // With a root certificate, the server's must chain to it, and its
    // name is not checked (libpq's verify-ca): the certificate names
    // `localhost` only, and `127.0.0.1` is accepted too. The system's
    // roots (verify-full) do not know the test's authority.
    let home = tempfile::tempdir().unwrap();
    let ca = server.ca_cert();
    let ca = ca.to_str().unwrap();
    let localhost = format!("postgresql://postgres@localhost:{port}/postgres?sslmode=require");
    for url in [url("require"), localhost] {
        assert_eq!(
            connect_in_child(&url, &[("PGSSLROOTCERT", ca)], home.path()),
            "connected"
        );
    }
    let refused = connect_in_child(&url("require"), &[("PGSSLROOTCERT", "system")], home.path());
    assert!(refused.starts_with("error: "), "{refused}");
    assert!(refused.contains("certificate"), "{refused}");
    let missing = connect_in_child(
        &url("require"),
        &[("PGSSLROOTCERT", "/nonexistent.crt")],
        home.path(),
    );
    assert!(missing.contains("/nonexistent.crt"), "{missing}");
}

#[test]
fn sslmode_require_against_a_server_without_tls_fails_without_the_password() {
    let tcp = Options {
        tcp: true,
        ..Options::default()
    };
    let Some(server) = PgCluster::start_or_skip_with("pg_faults: no tls", tcp) else {
        return;
    };
    let port = server.tcp_port();
    let base = format!("postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres");
    let error = PgStore::connect(&format!("{base}?sslmode=require"))
        .err()
        .unwrap();
    assert_eq!(error.kind, inbox_engine::StoreErrorKind::Other, "{error}");
    assert!(error.message.contains("TLS"), "{error}");
    assert!(
        error
            .message
            .contains(&format!("postgres://postgres@127.0.0.1:{port}/postgres")),
        "{error}"
    );
    assert!(!error.message.contains(PASSWORD), "{error}");
    // What the client's URL parser does not know is refused, saying what
    // it takes instead.
    for option in ["sslmode=verify-full", "sslrootcert=/etc/root.crt"] {
        let error = PgStore::connect(&format!("{base}?{option}")).err().unwrap();
        assert!(error.message.contains("PGSSLROOTCERT"), "{error}");
        assert!(
            error.message.contains(option.split('=').next().unwrap()),
            "{error}"
        );
        assert!(!error.message.contains(PASSWORD), "{error}");
    }
    // `prefer` (the default) falls back to a plain session.
    let store = PgStore::connect(&format!("{base}?sslmode=prefer")).unwrap();
    assert_eq!(encrypted(&server, "inbox"), [false]);
    drop(store);
}

#[test]
fn a_password_from_the_url_the_environment_or_a_private_file_is_used_and_never_printed() {
    let scram = Options {
        tcp: true,
        scram: true,
        ..Options::default()
    };
    let Some(server) = PgCluster::start_or_skip_with("pg_faults: passwords", scram) else {
        return;
    };
    server
        .admin()
        .batch_execute(&format!("CREATE ROLE agent LOGIN PASSWORD '{PASSWORD}'"))
        .unwrap();
    let port = server.tcp_port();
    let url = format!("postgresql://agent@127.0.0.1:{port}/postgres");
    let with = |password: &str| format!("postgresql://agent:{password}@127.0.0.1:{port}/postgres");
    PgStore::connect(&with(PASSWORD)).unwrap();
    let wrong = PgStore::connect(&with("wr0ng-pw")).err().unwrap();
    assert!(
        wrong.message.contains("password authentication failed"),
        "{wrong}"
    );
    assert!(!wrong.message.contains("wr0ng-pw"), "{wrong}");

    let home = tempfile::tempdir().unwrap();
    let child = |env: &[(&str, &str)]| connect_in_child(&url, env, home.path());
    let none = child(&[]);
    assert!(none.contains("password missing"), "{none}");
    assert_eq!(child(&[("PGPASSWORD", PASSWORD)]), "connected");
    let wrong = child(&[("PGPASSWORD", "wr0ng-pw")]);
    assert!(wrong.contains("password authentication failed"), "{wrong}");
    assert!(!wrong.contains("wr0ng-pw"), "{wrong}");

    use std::os::unix::fs::PermissionsExt;
    let file = home.path().join("pgpass");
    std::fs::write(&file, format!("127.0.0.1:{port}:*:agent:{PASSWORD}\n")).unwrap();
    let file_env = [("PGPASSFILE", file.to_str().unwrap())];
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(child(&file_env), "connected");
    // Readable by others: ignored, as libpq ignores it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ignored = child(&file_env);
    assert!(ignored.contains("password missing"), "{ignored}");
    assert!(!ignored.contains(PASSWORD), "{ignored}");
    // `~/.pgpass` when no PGPASSFILE is set.
    let pgpass = home.path().join(".pgpass");
    std::fs::rename(&file, &pgpass).unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(child(&[]), "connected");
}
