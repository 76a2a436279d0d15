//! Workers as separate processes that share nothing but the database URL
//! (no files, no memory), as agents on several machines do: racing for one
//! thread, exactly one wins; draining a queue together, no thread is
//! claimed twice and none is lost; a worker SIGKILLed while it holds the
//! writer row does not hold up the others. Each worker is this test binary run
//! again on its `worker_process` entry, which does nothing unless the
//! parent hands it a URL.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use inbox_engine::{Engine, Request, UlidIds};
use inbox_host_native::{HostClock, PgStore};
use inbox_pg_cluster::PgCluster;
use serde_json::Value;

/// The variable that turns `worker_process` into a worker.
const URL_ENV: &str = "INBOX_PG_WORKER_URL";

/// With it, the worker takes the writer row and holds it until killed.
const HOLD_ENV: &str = "INBOX_PG_WORKER_HOLD";

fn run(engine: &mut Engine<PgStore, HostClock, UlidIds>, json: &str) -> Value {
    let response = engine.execute(Request::from_json(json).unwrap());
    serde_json::from_str(&response.to_json()).unwrap()
}

/// A worker's entry: claims and finishes threads until none is left,
/// printing `claimed <thread id>` for each. Run by the tests below in
/// child processes; on its own it does nothing.
#[test]
#[ignore = "the worker the other tests start as a separate process"]
fn worker_process() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    let seed = std::process::id().into();
    let mut store = PgStore::connect(&url).unwrap();
    if std::env::var_os(HOLD_ENV).is_some() {
        // Take the writer row and never let go: the parent kills us.
        inbox_engine::Store::begin(&mut store, inbox_engine::store::TxMode::Write).unwrap();
        println!("holding");
        std::thread::sleep(std::time::Duration::from_secs(60));
        return;
    }
    let mut engine = Engine::new(store, HostClock::system(), UlidIds::from_seed(seed));
    loop {
        let answer = run(
            &mut engine,
            r#"{"command":"claim","agent":"worker","next":true}"#,
        );
        let Some(thread) = answer["thread"]["thread_id"].as_str() else {
            assert_eq!(answer["ok"], true, "{answer}");
            return;
        };
        println!("claimed {thread}");
        let token = &answer["lease"]["lease_token"];
        let done = format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread}","lease_token":{token},"summary":"ok"}}"#
        );
        assert_eq!(run(&mut engine, &done)["ok"], true);
    }
}

/// The URL of the server's `postgres` database over its socket.
fn url(server: &PgCluster) -> String {
    let host = server
        .socket_dir()
        .display()
        .to_string()
        .replace('/', "%2F");
    format!("postgresql://postgres@{host}:5432/postgres")
}

/// Sends `threads` threads to `worker`, then runs `workers` worker
/// processes at once; returns every thread they claimed.
fn race(threads: usize, workers: usize) -> Option<Vec<String>> {
    let server = PgCluster::start_or_skip("pg_processes")?;
    let url = url(&server);
    let store = inbox_host_native::open::open_postgres(&url, true).unwrap();
    let mut lead = Engine::new(store, HostClock::system(), UlidIds::from_seed(1));
    for i in 0..threads {
        let send = format!(
            r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"task {i}"}}"#
        );
        assert_eq!(run(&mut lead, &send)["ok"], true);
    }
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .args(["worker_process", "--exact", "--ignored", "--nocapture"])
                .env(URL_ENV, &url)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut claimed = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed");
        let text = String::from_utf8(out.stdout).unwrap();
        claimed.extend(
            text.lines()
                .filter_map(|line| line.strip_prefix("claimed "))
                .map(str::to_owned),
        );
    }
    Some(claimed)
}

#[test]
fn sixteen_processes_racing_for_one_thread_leave_one_winner() {
    let Some(claimed) = race(1, 16) else {
        return;
    };
    assert_eq!(claimed.len(), 1, "{claimed:?}");
}

#[test]
fn eight_processes_draining_two_hundred_threads_claim_each_once() {
    let Some(claimed) = race(200, 8) else {
        return;
    };
    let distinct: BTreeSet<&String> = claimed.iter().collect();
    assert_eq!(distinct.len(), claimed.len(), "a thread was claimed twice");
    assert_eq!(claimed.len(), 200, "a thread was lost");
}

#[test]
fn a_worker_killed_while_it_holds_the_writer_row_does_not_hold_up_the_others() {
    use std::io::BufRead;
    let Some(server) = PgCluster::start_or_skip("pg_processes: kill") else {
        return;
    };
    let url = url(&server);
    let store = inbox_host_native::open::open_postgres(&url, true).unwrap();
    let mut lead = Engine::new(store, HostClock::system(), UlidIds::from_seed(1));
    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env(URL_ENV, &url)
        .env(HOLD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = holder.stdout.take().unwrap();
    let holding = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "holding");
    assert!(holding, "the worker never took the writer row");
    // SIGKILL: no rollback, no goodbye; the server sees the socket close.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let started = std::time::Instant::now();
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"after"}"#;
    assert_eq!(run(&mut lead, send)["ok"], true);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
