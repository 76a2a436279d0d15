//! The PostgreSQL store under concurrent writers, each on its own
//! connection (threads here; separate processes and machines are the next
//! step, see docs/postgres.md): a waiter walking events from a cursor
//! misses none (ids become visible in increasing order), and workers
//! draining one queue never claim a thread twice.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use inbox_engine::store::{EventQuery, TxMode};
use inbox_engine::{Engine, Request, Store, UlidIds};
use inbox_host_native::HostClock;
use inbox_pg_cluster::PgCluster;
use inbox_postgres::PgStore;
use serde_json::Value;

type PgEngine = Engine<PgStore, HostClock, UlidIds>;

fn engine(server: &PgCluster, seed: u64) -> PgEngine {
    engine_in(server, "public", seed)
}

/// An engine on the inbox database in `schema` of the server's database.
fn engine_in(server: &PgCluster, schema: &str, seed: u64) -> PgEngine {
    let mut config = server.config("postgres");
    config.options(&format!("-c search_path={schema}"));
    let store = PgStore::with_config(config).unwrap();
    Engine::new(store, HostClock::system(), UlidIds::from_seed(seed))
}

fn run(engine: &mut PgEngine, json: &str) -> Value {
    let response = engine.execute(Request::from_json(json).unwrap());
    serde_json::from_str(&response.to_json()).unwrap()
}

fn initialized(server: &PgCluster) {
    let answer = run(&mut engine(server, 1), r#"{"command":"init"}"#);
    assert_eq!(answer["ok"], true, "{answer}");
}

#[test]
fn a_waiter_walking_from_its_cursor_misses_no_event_of_concurrent_writers() {
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: waiter") else {
        return;
    };
    initialized(&server);
    let server = Arc::new(server);
    let done = Arc::new(AtomicBool::new(false));

    let reader = {
        let (server, done) = (Arc::clone(&server), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut store = PgStore::with_config(server.config("postgres")).unwrap();
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                // Read `done` before the query: the last pass then sees
                // every commit.
                let last = done.load(Ordering::SeqCst);
                store.begin(TxMode::Read).unwrap();
                let events = store
                    .events(&EventQuery::after_event(cursor, 1000))
                    .unwrap();
                store.commit().unwrap();
                for event in events {
                    assert!(event.event_id > cursor, "ids went back");
                    cursor = event.event_id;
                    seen.push(event.event_id);
                }
                if last {
                    return seen;
                }
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || {
                let mut engine = engine(&server, 100 + w);
                for i in 0..30 {
                    let send = format!(
                        r#"{{"command":"send","from_agent":"lead{w}","to_agent":"worker","subject":"s{w}-{i}"}}"#
                    );
                    assert_eq!(run(&mut engine, &send)["ok"], true);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = reader.join().unwrap();

    let all: Vec<i64> = server
        .admin()
        .query("SELECT event_id FROM events ORDER BY event_id", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(all.len(), 4 * 30, "one event per send");
    let seen: Vec<i64> = seen.into_iter().map(|id| id as i64).collect();
    assert_eq!(seen, all, "the waiter saw every event, in order");
}

#[test]
fn workers_draining_one_queue_never_claim_a_thread_twice() {
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: drain") else {
        return;
    };
    initialized(&server);
    let mut lead = engine(&server, 2);
    for i in 0..40 {
        let send = format!(
            r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"task {i}"}}"#
        );
        assert_eq!(run(&mut lead, &send)["ok"], true);
    }
    let server = Arc::new(server);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || drain(&mut engine(&server, 200 + w)))
        })
        .collect();
    let mut claimed = Vec::new();
    for worker in workers {
        claimed.extend(worker.join().unwrap());
    }
    let distinct: BTreeSet<&String> = claimed.iter().collect();
    assert_eq!(distinct.len(), claimed.len(), "a thread was claimed twice");
    assert_eq!(claimed.len(), 40, "every thread was claimed once");
}

/// Claims and finishes threads until none is left; returns their ids.
fn drain(engine: &mut PgEngine) -> Vec<String> {
    let mut claimed = Vec::new();
    loop {
        let answer = run(
            engine,
            r#"{"command":"claim","agent":"worker","next":true}"#,
        );
        if answer["thread"].is_null() {
            assert_eq!(answer["ok"], true, "{answer}");
            return claimed;
        }
        let thread = answer["thread"]["thread_id"].as_str().unwrap().to_owned();
        let token = &answer["lease"]["lease_token"];
        let done = format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread}","lease_token":{token},"summary":"ok"}}"#
        );
        assert_eq!(run(engine, &done)["ok"], true);
        claimed.push(thread);
    }
}

/// What serializing writers on the writer row costs: claim+done pairs per
/// second with 1, 2 and 4 workers on their own connections, over a Unix
/// socket to the test cluster (fsync off). A measurement to read, not a
/// check: `cargo test -p inbox-host-native --release
/// --test pg_concurrency -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run it by name with --ignored --nocapture"]
fn claim_done_rate_by_workers() {
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: rate") else {
        return;
    };
    let server = Arc::new(server);
    let tasks = 400;
    for workers in [1_u64, 2, 4] {
        let schema = format!("rate_{workers}");
        server
            .admin()
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .unwrap();
        let mut lead = engine_in(&server, &schema, 3);
        assert_eq!(run(&mut lead, r#"{"command":"init"}"#)["ok"], true);
        for i in 0..tasks {
            let send = format!(
                r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"task {i}"}}"#
            );
            assert_eq!(run(&mut lead, &send)["ok"], true);
        }
        let started = std::time::Instant::now();
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (server, schema) = (Arc::clone(&server), schema.clone());
                std::thread::spawn(move || drain(&mut engine_in(&server, &schema, 300 + w)).len())
            })
            .collect();
        let drained: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let elapsed = started.elapsed();
        assert_eq!(drained, tasks);
        println!(
            "{workers} worker(s): {tasks} claim+done pairs in {elapsed:.2?}: {:.0} pairs/s",
            tasks as f64 / elapsed.as_secs_f64()
        );
    }
}

#[test]
fn a_listener_is_woken_by_another_connections_commit_and_survives_losing_its_own() {
    use inbox_postgres::listen::Wake;
    use std::time::{Duration, Instant};
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: listen") else {
        return;
    };
    initialized(&server);
    let store = PgStore::with_config(server.config("postgres")).unwrap();
    let mut listener = store.listener().unwrap();
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"wake"}"#;
    let mut writer = engine(&server, 9);

    assert_eq!(
        listener.wait(Duration::from_millis(50)).unwrap(),
        Wake::TimedOut
    );
    assert_eq!(run(&mut writer, send)["ok"], true);
    let started = Instant::now();
    let wake = listener.wait(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(wake, Wake::Notified(Some(id)) if id >= 1),
        "{wake:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // The server ends the listener's session (as a restart or a proxy
    // would): the next wait reconnects and says so, and wakes go on.
    let ended: bool = server
        .admin()
        .query_one(
            "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'inbox-listen'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(ended);
    assert_eq!(
        listener.wait(Duration::from_secs(10)).unwrap(),
        Wake::Reconnected
    );
    assert_eq!(run(&mut writer, send)["ok"], true);
    let wake = listener.wait(Duration::from_secs(10)).unwrap();
    assert!(matches!(wake, Wake::Notified(Some(_))), "{wake:?}");
}

/// How many simple queries (so round trips, once each statement is
/// prepared) a worker's commands send, counted in the server's log: a
/// `send`, a `claim --next` and a `done` each cost two, `BEGIN` with the
/// reads the engine announced (`Store::read_ahead`) and the writes with
/// `COMMIT`. A third round trip here means a read left `BEGIN`'s batch.
#[test]
fn a_worker_s_commands_each_cost_two_round_trips() {
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: statements") else {
        return;
    };
    initialized(&server);
    // Two statements: ALTER SYSTEM cannot run in a multi-statement query.
    let mut admin = server.admin();
    admin
        .batch_execute("ALTER SYSTEM SET log_statement = 'all'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut engine = engine(&server, 4);
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"t"}"#;
    let claim = r#"{"command":"claim","agent":"worker","next":true}"#;
    // Warm up: each distinct statement is prepared once per connection.
    for _ in 0..2 {
        run(&mut engine, send);
        let answer = run(&mut engine, claim);
        run(&mut engine, &done_of(&answer));
    }
    let logged = |server: &PgCluster| {
        let log = server.log();
        log.matches("LOG:  execute").count() + log.matches("LOG:  statement:").count()
    };
    let mut answer = Value::Null;
    let mut counted = Vec::new();
    for (name, json) in [
        ("send", send.to_owned()),
        ("claim next", claim.to_owned()),
        ("done", String::new()),
    ] {
        let json = if json.is_empty() {
            done_of(&answer)
        } else {
            json
        };
        let before = logged(&server);
        answer = run(&mut engine, &json);
        std::thread::sleep(std::time::Duration::from_millis(200));
        counted.push((name, logged(&server) - before));
    }
    assert_eq!(counted, [("send", 2), ("claim next", 2), ("done", 2)]);
}

fn done_of(claimed: &Value) -> String {
    let thread = claimed["thread"]["thread_id"].as_str().unwrap();
    let token = &claimed["lease"]["lease_token"];
    format!(
        r#"{{"command":"done","agent":"worker","thread_id":"{thread}","lease_token":{token},"summary":"ok"}}"#
    )
}

#[test]
fn a_watch_sleeping_on_the_listener_wakes_for_a_send_even_after_its_sessions_were_ended() {
    use inbox_postgres::listen;
    use std::time::{Duration, Instant};
    let Some(server) = PgCluster::start_or_skip("pg_concurrency: watch") else {
        return;
    };
    initialized(&server);
    let server = Arc::new(server);
    let watcher = {
        let server = Arc::clone(&server);
        std::thread::spawn(move || {
            let mut engine = engine(&server, 11);
            let hub = PgStore::with_config(server.config("postgres"))
                .unwrap()
                .hub()
                .unwrap();
            let watch = r#"{"command":"watch","agent":"worker","timeout_seconds":30}"#;
            let call = inbox_engine::Call::from(Request::from_json(watch).unwrap());
            let started = Instant::now();
            let response = listen::wait(&mut engine, call, &hub, None).unwrap();
            (response.to_json(), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // As a server restart would: the watcher's sessions (store and
    // listener) end while it sleeps.
    server
        .admin()
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name IN ('inbox', 'inbox-listen')",
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"wake up"}"#;
    assert_eq!(run(&mut engine(&server, 12), send)["ok"], true);
    let (answer, waited) = watcher.join().unwrap();
    assert!(answer.contains("\"ok\":true"), "{answer}");
    assert!(answer.contains("wake up"), "{answer}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}
