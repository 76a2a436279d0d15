//! Workers as separate processes that share nothing but the database URL
//! (no files, no memory), as agents on several machines do:
//!
//! - 16 racing for one thread: exactly one wins;
//! - 32 draining 2,000 threads: each is claimed and done exactly once;
//! - workers SIGKILLed while they hold a claim (and others killed at
//!   random mid-run): their leases lapse, the others finish every thread,
//!   each exactly once;
//! - a worker SIGKILLed while it holds the writer row does not hold up the
//!   others;
//! - a server backend SIGKILLed while workers run: PostgreSQL restarts
//!   every backend, the workers see storage errors and retry with
//!   idempotency keys, and every thread is still done exactly once;
//! - waiters blocked in `pg::listen::wait` (`watch`, `wait-reply`) wake
//!   for a writer in another process within a bound;
//! - as root, with `ip netns`: workers and a waiter in another network
//!   namespace, which reach the server only over TCP on a veth pair
//!   (skipped, saying why, where namespaces cannot be made, unless
//!   `INBOX_REQUIRE_NETNS` is set).
//!
//! Each worker is this test binary run again on its `worker_process`
//! entry, which does nothing unless the parent hands it a URL. The tests
//! take turns (one lock): each starts its own cluster and up to 32
//! processes on a 2-core machine, and their time bounds mean something
//! only when the others are not running beside them. `INBOX_PG_LONG=1`
//! runs the drain and kill tests larger. This file must never signal a
//! process it did not start, except the one backend of its own cluster
//! that the backend test kills on purpose.

// Tests report failures by panicking; workers report by printing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::BTreeSet;
use std::io::BufRead;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inbox_engine::{Call, Engine, Request, UlidIds};
use inbox_host_native::HostClock;
use inbox_pg_cluster::PgCluster;
use inbox_postgres::PgStore;
use inbox_postgres::listen;
use serde_json::{Value, json};

/// The variable that turns `worker_process` into a worker.
const URL_ENV: &str = "INBOX_PG_WORKER_URL";

/// What the worker does (see [`Role`]); `drain` when unset.
const ROLE_ENV: &str = "INBOX_PG_WORKER_ROLE";

/// The lease a worker asks for, in seconds (900 when unset).
const LEASE_ENV: &str = "INBOX_PG_WORKER_LEASE";

/// A watcher's number of rounds.
const ROUNDS_ENV: &str = "INBOX_PG_WORKER_ROUNDS";

/// A `wait-reply` waiter's thread and lease token.
const THREAD_ENV: &str = "INBOX_PG_WORKER_THREAD";
const TOKEN_ENV: &str = "INBOX_PG_WORKER_TOKEN";

/// How long a retrying worker keeps retrying one command: a crash restart
/// of the server takes a second or two.
const RETRY_BUDGET: Duration = Duration::from_secs(60);

type PgEngine = Engine<PgStore, HostClock, UlidIds>;

/// Runs a call (a request, with its envelope's idempotency key if any).
fn run(engine: &mut PgEngine, json: &str) -> Value {
    let response = engine.execute_call(Call::from_json(json).unwrap());
    serde_json::from_str(&response.to_json()).unwrap()
}

/// The wall clock in milliseconds: one kernel clock for every process of
/// the test, so a waiter's wake and the writer's send can be compared.
fn unix_millis() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// The tests take turns: see the module's comment.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the long sizes were asked for.
fn long() -> bool {
    std::env::var("INBOX_PG_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

// ---------------------------------------------------------------------
// The worker side.

/// What a worker process does.
enum Role {
    /// Claims and finishes threads until none is left; any error fails it.
    Drain,
    /// As `Drain`, but retries a command that failed with a storage error
    /// (same idempotency key, so a retry never applies twice), takes a lost
    /// lease in its stride, and goes on until no thread is open at all.
    Retry,
    /// Takes the writer row and holds it until killed.
    Hold,
    /// Claims one thread and stalls, lease held, until killed.
    Stall,
    /// `watch` rounds on the listener.
    Watch,
    /// One `wait-reply` on the listener.
    WaitReply,
}

fn role() -> Role {
    match std::env::var(ROLE_ENV).as_deref() {
        Err(_) | Ok("drain") => Role::Drain,
        Ok("retry") => Role::Retry,
        Ok("hold") => Role::Hold,
        Ok("stall") => Role::Stall,
        Ok("watch") => Role::Watch,
        Ok("wait-reply") => Role::WaitReply,
        Ok(other) => panic!("unknown worker role {other}"),
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().unwrap())
}

/// A worker's entry. Run by the tests below in child processes; on its own
/// it does nothing.
#[test]
#[ignore = "the worker the other tests start as a separate process"]
fn worker_process() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    match role() {
        Role::Drain => drain(&mut Worker::connect(&url, false)),
        Role::Retry => drain(&mut Worker::connect(&url, true)),
        Role::Hold => hold(&url),
        Role::Stall => stall(&mut Worker::connect(&url, false)),
        Role::Watch => watch(&url),
        Role::WaitReply => wait_reply(&url),
    }
}

/// An engine over its own connection, and how it runs commands.
struct Worker {
    engine: PgEngine,
    /// Retry storage errors under idempotency keys.
    retry: bool,
    /// Commands sent: the idempotency keys' counter.
    sent: u64,
}

impl Worker {
    fn connect(url: &str, retry: bool) -> Worker {
        let started = Instant::now();
        let store = loop {
            match PgStore::connect(url) {
                Ok(store) => break store,
                // The server may be restarting after a crash.
                Err(e) if retry && started.elapsed() < RETRY_BUDGET => {
                    println!("retried connect: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("cannot connect: {e}"),
            }
        };
        let seed = std::process::id().into();
        let engine = Engine::new(store, HostClock::system(), UlidIds::from_seed(seed));
        Worker {
            engine,
            retry,
            sent: 0,
        }
    }

    /// Runs one command. A retrying worker gives a write an idempotency
    /// key and repeats it, key and all, while the store reports a storage
    /// error: a command whose commit happened but whose answer was lost
    /// then answers with its first outcome instead of applying twice.
    fn run(&mut self, mut command: Value, write: bool) -> Value {
        if !self.retry {
            return run(&mut self.engine, &command.to_string());
        }
        self.sent += 1;
        if write {
            command["idempotency_key"] = json!(format!("{}-{}", std::process::id(), self.sent));
        }
        let started = Instant::now();
        loop {
            let answer = run(&mut self.engine, &command.to_string());
            let code = answer["error"]["code"].as_str().unwrap_or("");
            if !matches!(code, "storage_error" | "storage_busy") {
                return answer;
            }
            assert!(
                started.elapsed() < RETRY_BUDGET,
                "still failing after {RETRY_BUDGET:?}: {answer}"
            );
            println!("retried {code}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether no thread is open (pending, claimed, in progress, blocked):
    /// a retrying worker stays until then, since a lease left by a killed
    /// worker makes its thread claimable again only once it lapses.
    fn nothing_open(&mut self) -> bool {
        let list = json!({"command": "list", "status": ["pending", "claimed", "in_progress", "blocked"], "limit": 1});
        let answer = self.run(list, false);
        assert_eq!(answer["ok"], true, "{answer}");
        answer["threads"].as_array().unwrap().is_empty()
    }
}

/// Claims and finishes threads, printing `claimed <id>` and `done <id>`
/// (or `lost <id> <code>` when a retrying worker's lease lapsed first).
fn drain(worker: &mut Worker) {
    let lease = env_number(LEASE_ENV, 900);
    loop {
        let claim =
            json!({"command": "claim", "agent": "worker", "next": true, "lease_seconds": lease});
        let answer = worker.run(claim, true);
        assert_eq!(answer["ok"], true, "{answer}");
        let Some(thread) = answer["thread"]["thread_id"].as_str() else {
            if !worker.retry || worker.nothing_open() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        println!("claimed {thread}");
        let done = json!({"command": "done", "agent": "worker", "thread_id": thread,
            "lease_token": answer["lease"]["lease_token"], "summary": "ok"});
        let answer = worker.run(done, true);
        let code = answer["error"]["code"].as_str().unwrap_or("");
        if answer["ok"] == true {
            println!("done {thread}");
        } else if worker.retry && lost_lease(code) {
            println!("lost {thread} {code}");
        } else {
            panic!("done {thread}: {answer}");
        }
    }
}

/// The answers of a `done` whose lease lapsed and went to another worker.
fn lost_lease(code: &str) -> bool {
    matches!(
        code,
        "lease_lost" | "not_lease_holder" | "invalid_state" | "thread_finished"
    )
}

/// Takes the writer row and never lets go: the parent kills us.
fn hold(url: &str) {
    let mut store = PgStore::connect(url).unwrap();
    inbox_engine::Store::begin(&mut store, inbox_engine::store::TxMode::Write).unwrap();
    println!("holding");
    std::thread::sleep(Duration::from_secs(60));
}

/// Claims one thread and stalls with its lease, as a worker whose machine
/// froze: the parent kills us.
fn stall(worker: &mut Worker) {
    let lease = env_number(LEASE_ENV, 900);
    let claim =
        json!({"command": "claim", "agent": "worker", "next": true, "lease_seconds": lease});
    let answer = worker.run(claim, true);
    let thread = answer["thread"]["thread_id"].as_str().unwrap();
    println!("claimed {thread}");
    std::thread::sleep(Duration::from_secs(60));
}

/// An engine and the process's listening hub, on their own connections.
fn waiter(url: &str) -> (PgEngine, listen::Hub) {
    let store = PgStore::connect(url).unwrap();
    let listener = store.hub().unwrap();
    let seed = std::process::id().into();
    let engine = Engine::new(store, HostClock::system(), UlidIds::from_seed(seed));
    (engine, listener)
}

/// Blocks in `listen::wait` on `request`; returns the answer and prints
/// `woke <round> <unix millis> <answer>`.
fn wait_once(engine: &mut PgEngine, listener: &listen::Hub, round: u64, request: &Value) -> Value {
    println!("waiting {round}");
    let call = Call::from(Request::from_json(&request.to_string()).unwrap());
    let response = listen::wait(engine, call, listener, None).unwrap();
    let answer: Value = serde_json::from_str(&response.to_json()).unwrap();
    println!("woke {round} {} {answer}", unix_millis());
    answer
}

/// `watch` for agent `watcher`, round after round from its last cursor
/// (the first from the latest event when it starts).
fn watch(url: &str) {
    let (mut engine, listener) = waiter(url);
    let mut after = Value::Null;
    for round in 0..env_number(ROUNDS_ENV, 1) {
        let watch = json!({"command": "watch", "agent": "watcher", "after_event": after, "timeout_seconds": 30});
        let answer = wait_once(&mut engine, &listener, round, &watch);
        after = answer["next_event_id"].clone();
    }
}

/// `wait-reply` on a blocked thread, as its worker waiting for an answer.
fn wait_reply(url: &str) {
    let (mut engine, listener) = waiter(url);
    let thread = std::env::var(THREAD_ENV).unwrap();
    let token = env_number(TOKEN_ENV, 0);
    let wait = json!({"command": "wait-reply", "agent": "worker", "thread_id": thread,
        "lease_token": token, "timeout_seconds": 30});
    wait_once(&mut engine, &listener, 0, &wait);
}

// ---------------------------------------------------------------------
// The parent side.

/// A worker process and its stdout, line by line.
struct Process {
    child: Child,
    lines: Receiver<String>,
    /// Lines already taken from `lines`.
    seen: Vec<String>,
}

/// Starts a worker with `role` and extra variables; inside network
/// namespace `netns` when given (`ip netns exec` execs the worker, so the
/// child's pid is the worker's).
fn spawn(url: &str, role: &str, vars: &[(&str, String)], netns: Option<&str>) -> Process {
    let exe = std::env::current_exe().unwrap();
    let mut command = match netns {
        Some(netns) => {
            let mut ip = Command::new("ip");
            ip.args(["netns", "exec", netns]).arg(&exe);
            ip
        }
        None => Command::new(&exe),
    };
    command
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env(URL_ENV, url)
        .env(ROLE_ENV, role)
        .envs(vars.iter().map(|(k, v)| (*k, v)))
        .stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if send.send(line).is_err() {
                return;
            }
        }
    });
    Process {
        child,
        lines,
        seen: Vec::new(),
    }
}

impl Process {
    /// The next line starting with `prefix` (others are kept for
    /// [`Process::finish`]); fails after `timeout`.
    fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no `{prefix}` line within {timeout:?}; so far: {:?}",
                        self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the worker ended before `{prefix}`: {:?}", self.seen)
                }
            }
        }
    }

    /// Waits for the worker to end, which it must do successfully; returns
    /// everything it printed.
    fn finish(mut self) -> Vec<String> {
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        assert!(status.success(), "a worker failed: {:?}", self.seen);
        std::mem::take(&mut self.seen)
    }

    /// Fails if the worker ended in failure (an ended worker that
    /// succeeded is fine: it found nothing left).
    fn assert_not_failed(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            self.seen.extend(self.lines.try_iter());
            assert!(status.success(), "a worker failed: {:?}", self.seen);
        }
    }

    /// SIGKILL: no rollback, no goodbye; the server sees the socket close.
    fn kill(mut self) -> Vec<String> {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Process {
    /// A test that failed leaves no worker behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The URL of the server's `postgres` database over its socket.
fn url(server: &PgCluster) -> String {
    server.url("postgres")
}

/// The lead's engine, on a database initialized by `inbox init`'s path.
fn lead(url: &str) -> PgEngine {
    let store = inbox_postgres::open(url, true).unwrap();
    Engine::new(store, HostClock::system(), UlidIds::from_seed(1))
}

/// Sends `threads` threads from `lead` to `worker`.
fn send_threads(url: &str, threads: usize) {
    let mut lead = lead(url);
    for i in 0..threads {
        let send = json!({"command": "send", "from_agent": "lead", "to_agent": "worker",
            "subject": format!("task {i}"), "max_attempts": 10});
        assert_eq!(run(&mut lead, &send.to_string())["ok"], true);
    }
}

/// The ids after `prefix ` in `lines` (`claimed`, `done`).
fn ids(lines: &[String], prefix: &str) -> Vec<String> {
    let prefix = format!("{prefix} ");
    lines
        .iter()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.split(' ').next().unwrap().to_owned())
        .collect()
}

/// Every thread was done exactly once: the workers said `done` once per
/// thread, and the database agrees ([`assert_done_once_in_database`]).
fn assert_each_done_once(server: &PgCluster, done: &[String], threads: usize) {
    assert_no_thread_twice(done, "done");
    assert_eq!(done.len(), threads, "a thread was lost");
    assert_done_once_in_database(server, threads);
}

fn assert_no_thread_twice(ids: &[String], what: &str) {
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "a thread was {what} twice");
}

/// The database holds `threads` threads, every one done, and exactly one
/// event that left each done.
fn assert_done_once_in_database(server: &PgCluster, threads: usize) {
    let mut admin = admin_when_up(server);
    let count = |admin: &mut postgres::Client, sql: &str| -> i64 {
        admin.query_one(sql, &[]).unwrap().get(0)
    };
    let total = i64::try_from(threads).unwrap();
    assert_eq!(count(&mut admin, "SELECT count(*) FROM threads"), total);
    let done_threads = "SELECT count(*) FROM threads WHERE status = 'done'";
    assert_eq!(count(&mut admin, done_threads), total);
    let done_events = "SELECT count(*) FROM events WHERE status = 'done'";
    assert_eq!(count(&mut admin, done_events), total);
}

/// A superuser connection, waiting for a server in crash recovery.
fn admin_when_up(server: &PgCluster) -> postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match server.config("postgres").connect(postgres::NoTls) {
            Ok(client) => return client,
            Err(e) if Instant::now() > deadline => panic!("the server is not back: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Runs a one-row query as the superuser, over a crash restart of the
/// server (which may end a session that had just connected).
fn query_when_up<T: postgres::types::FromSqlOwned>(server: &PgCluster, sql: &str) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match admin_when_up(server).query_one(sql, &[]) {
            Ok(row) => return row.get(0),
            Err(e) if Instant::now() > deadline => panic!("{sql}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Threads done so far, by the events that left one done.
fn done_so_far(server: &PgCluster) -> i64 {
    query_when_up(server, "SELECT count(*) FROM events WHERE status = 'done'")
}

/// Waits until at least `at_least` threads are done; fails at once if a
/// worker failed meanwhile.
fn wait_for_progress(server: &PgCluster, at_least: i64, workers: &mut [Process]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while done_so_far(server) < at_least {
        assert!(Instant::now() < deadline, "no progress to {at_least}");
        for worker in workers.iter_mut() {
            worker.assert_not_failed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `workers` draining workers at once and returns every line they
/// printed.
fn drain_with(url: &str, workers: usize) -> Vec<String> {
    let processes: Vec<Process> = (0..workers)
        .map(|_| spawn(url, "drain", &[], None))
        .collect();
    processes.into_iter().flat_map(Process::finish).collect()
}

// ---------------------------------------------------------------------
// The tests.

#[test]
fn sixteen_processes_racing_for_one_thread_leave_one_winner() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: race") else {
        return;
    };
    send_threads(&url(&server), 1);
    let lines = drain_with(&url(&server), 16);
    assert_eq!(ids(&lines, "claimed").len(), 1, "{lines:?}");
    assert_each_done_once(&server, &ids(&lines, "done"), 1);
}

/// The issue's size: 32 worker processes, 2,000 threads. Nothing fails
/// (a plain worker stops at its first error), no thread is claimed twice
/// and none is left.
#[test]
fn thirty_two_processes_draining_two_thousand_threads_finish_each_exactly_once() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: drain") else {
        return;
    };
    let threads = if long() { 10_000 } else { 2_000 };
    let started = Instant::now();
    send_threads(&url(&server), threads);
    let sent = started.elapsed();
    let lines = drain_with(&url(&server), 32);
    eprintln!(
        "{threads} threads sent in {sent:?}, drained by 32 processes in {:?}",
        started.elapsed() - sent
    );
    assert_no_thread_twice(&ids(&lines, "claimed"), "claimed");
    assert_each_done_once(&server, &ids(&lines, "done"), threads);
}

#[test]
fn a_worker_killed_while_it_holds_the_writer_row_does_not_hold_up_the_others() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: kill") else {
        return;
    };
    let url = url(&server);
    let mut lead = lead(&url);
    let mut holder = spawn(&url, "hold", &[], None);
    holder.expect("holding", Duration::from_secs(30));
    holder.kill();
    let started = Instant::now();
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"after"}"#;
    assert_eq!(run(&mut lead, send)["ok"], true);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Four workers stall holding a claim and are SIGKILLed; while eight
/// retrying workers drain the rest on 2-second leases, three of them are
/// SIGKILLed at random points (inside a transaction, between a claim and
/// its `done`, anywhere) and replaced. Every lease a dead worker held
/// lapses, and every thread is done exactly once.
#[test]
fn workers_killed_mid_claim_leave_their_threads_to_the_others() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: killed workers") else {
        return;
    };
    let url = url(&server);
    let threads = if long() { 2_000 } else { 300 };
    send_threads(&url, threads);
    let lease = [(LEASE_ENV, "2".to_owned())];
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut worker = spawn(&url, "stall", &lease, None);
        let line = worker.expect("claimed ", Duration::from_secs(30));
        stalled.push(line["claimed ".len()..].to_owned());
        worker.kill();
    }
    let mut workers: Vec<Process> = (0..8).map(|_| spawn(&url, "retry", &lease, None)).collect();
    let mut lines = Vec::new();
    for (n, victim) in [1usize, 4, 6].into_iter().enumerate() {
        let at_least = i64::try_from(threads * (n + 1) / 5).unwrap();
        wait_for_progress(&server, at_least, &mut workers);
        let replacement = spawn(&url, "retry", &lease, None);
        lines.extend(std::mem::replace(&mut workers[victim], replacement).kill());
    }
    lines.extend(workers.into_iter().flat_map(Process::finish));
    // A worker killed between its `done`'s commit and its printing it has
    // done a thread it never said: the database is the full account.
    assert_no_thread_twice(&ids(&lines, "done"), "done");
    assert_done_once_in_database(&server, threads);
    let mut admin = admin_when_up(&server);
    for thread in &stalled {
        let sql = "SELECT attempts FROM threads WHERE thread_id = $1";
        let attempts: i64 = admin.query_one(sql, &[thread]).unwrap().get(0);
        assert!(
            attempts > 1,
            "{thread}: its killed claimer's lease never lapsed"
        );
    }
}

/// A backend of the server, serving one of the workers, is SIGKILLed
/// twice while sixteen retrying workers drain the queue: the postmaster
/// then ends every backend and restarts (crash recovery), so every worker
/// loses its session mid-whatever. They see `storage_error`, retry the
/// same command under the same idempotency key once the server is back,
/// and every thread is done exactly once.
///
/// The workers' sessions commit synchronously (`synchronous_commit=on`,
/// PostgreSQL's default, in their URL): the test cluster's server-wide
/// `off` would let a crash drop the last commits it had already
/// acknowledged, which no retry can see.
#[test]
fn a_server_backend_killed_mid_run_costs_retries_not_threads() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: backend kill") else {
        return;
    };
    let url = format!("{}&options=-c%20synchronous_commit%3Don", url(&server));
    let threads = if long() { 5_000 } else { 1_000 };
    send_threads(&url, threads);
    let mut workers: Vec<Process> = (0..16).map(|_| spawn(&url, "retry", &[], None)).collect();
    for quarter in [1, 2] {
        let at_least = i64::try_from(threads * quarter / 4).unwrap();
        wait_for_progress(&server, at_least, &mut workers);
        let before = done_so_far(&server);
        assert!(
            before < i64::try_from(threads).unwrap(),
            "the work was over before the kill"
        );
        kill_a_backend(&server);
    }
    let lines: Vec<String> = workers.into_iter().flat_map(Process::finish).collect();
    let retried = lines.iter().filter(|l| l.starts_with("retried")).count();
    assert!(retried > 0, "no worker noticed the crash");
    assert!(
        server.log().contains("was terminated by signal 9"),
        "{}",
        server.log()
    );
    eprintln!("{threads} threads, 2 backend kills, {retried} retries");
    assert_each_done_once(&server, &ids(&lines, "done"), threads);
}

/// SIGKILLs the backend of one worker's session (one inside a transaction
/// if any is).
fn kill_a_backend(server: &PgCluster) {
    let sql = "SELECT pid FROM pg_stat_activity WHERE application_name = 'inbox' \
               ORDER BY state = 'idle' LIMIT 1";
    let pid: i32 = query_when_up(server, sql);
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid} failed");
}

/// Four `watch` waiters (five rounds each) and two `wait-reply` waiters,
/// each a process blocked in `pg::listen::wait`, wake when this process
/// writes: within the poll fallback plus a second every time, and on a
/// notification rather than the fallback poll (the median wake is far
/// below a poll period).
#[test]
fn waiters_in_other_processes_wake_for_a_writer_within_a_bound() {
    let _turn = one_at_a_time();
    let Some(server) = PgCluster::start_or_skip("pg_processes: waiters") else {
        return;
    };
    let url = url(&server);
    let mut lead = lead(&url);
    let mut latencies = watch_rounds(&url, &mut lead, None, 4, 5);
    latencies.extend(answer_waiters(&url, &mut lead, 2));
    assert_wakes_bounded(&mut latencies);
}

/// Starts `waiters` watchers (in `netns` if given) and wakes them `rounds`
/// times by sending to `watcher`; returns each wake's latency.
fn watch_rounds(
    url: &str,
    lead: &mut PgEngine,
    netns: Option<&str>,
    waiters: usize,
    rounds: u64,
) -> Vec<u64> {
    let vars = [(ROUNDS_ENV, rounds.to_string())];
    let mut watchers: Vec<Process> = (0..waiters)
        .map(|_| spawn(url, "watch", &vars, netns))
        .collect();
    let mut latencies = Vec::new();
    for round in 0..rounds {
        for watcher in &mut watchers {
            watcher.expect(&format!("waiting {round}"), Duration::from_secs(30));
        }
        // Let each look and fall asleep on its listener.
        std::thread::sleep(Duration::from_millis(200));
        let subject = format!("round {round}");
        let sent_at = unix_millis();
        let send = json!({"command": "send", "from_agent": "lead", "to_agent": "watcher", "subject": subject});
        assert_eq!(run(lead, &send.to_string())["ok"], true);
        for watcher in &mut watchers {
            let (latency, answer) = woke(watcher, round, sent_at);
            assert_eq!(answer["woke"], true, "{answer}");
            assert_eq!(answer["events"][0]["summary"], subject, "{answer}");
            latencies.push(latency);
        }
    }
    watchers.into_iter().for_each(|w| drop(w.finish()));
    latencies
}

/// The wake of `round`: its latency after `sent_at` and the answer.
fn woke(waiter: &mut Process, round: u64, sent_at: u64) -> (u64, Value) {
    let line = waiter.expect(&format!("woke {round} "), Duration::from_secs(30));
    let mut fields = line.splitn(4, ' ').skip(2);
    let at: u64 = fields.next().unwrap().parse().unwrap();
    let answer = serde_json::from_str(fields.next().unwrap()).unwrap();
    (at.saturating_sub(sent_at), answer)
}

/// `waiters` workers each block on a question in their own thread
/// (`wait-reply` in their own process); the lead answers each; returns the
/// wakes' latencies.
fn answer_waiters(url: &str, lead: &mut PgEngine, waiters: usize) -> Vec<u64> {
    let mut blocked = Vec::new();
    for i in 0..waiters {
        let (thread, token) = blocked_thread(lead, i);
        let vars = [(THREAD_ENV, thread.clone()), (TOKEN_ENV, token.to_string())];
        let mut waiter = spawn(url, "wait-reply", &vars, None);
        waiter.expect("waiting 0", Duration::from_secs(30));
        blocked.push((thread, waiter));
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut latencies = Vec::new();
    for (thread, mut waiter) in blocked {
        let sent_at = unix_millis();
        let answer = json!({"command": "reply", "from_agent": "lead", "thread_id": thread,
            "kind": "answer", "summary": "Admins only"});
        assert_eq!(run(lead, &answer.to_string())["ok"], true);
        let (latency, answer) = woke(&mut waiter, 0, sent_at);
        assert_eq!(answer["woke"], true, "{answer}");
        assert_eq!(answer["message"]["kind"], "answer", "{answer}");
        assert_eq!(answer["thread"]["status"], "in_progress", "{answer}");
        latencies.push(latency);
        drop(waiter.finish());
    }
    latencies
}

/// A thread the worker claimed and blocked on a question (through the
/// lead's engine, which can act as anyone): its id and the lease token.
fn blocked_thread(lead: &mut PgEngine, i: usize) -> (String, u64) {
    let send = json!({"command": "send", "from_agent": "lead", "to_agent": "worker", "subject": format!("page {i}")});
    let sent = run(lead, &send.to_string());
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let claim = json!({"command": "claim", "agent": "worker", "thread_id": thread});
    let claimed = run(lead, &claim.to_string());
    let token = claimed["lease"]["lease_token"].as_u64().unwrap();
    let block = json!({"command": "update", "agent": "worker", "thread_id": thread,
        "lease_token": token, "status": "blocked", "summary": "Which roles?"});
    assert_eq!(run(lead, &block.to_string())["ok"], true);
    (thread, token)
}

/// Every wake within [`listen::POLL_FALLBACK`] and a second, and the
/// median under a tenth of it: a notification wakes a waiter in a few
/// milliseconds, while the fallback poll alone would put the median near
/// half a period.
fn assert_wakes_bounded(latencies: &mut [u64]) {
    latencies.sort_unstable();
    eprintln!("wake latencies (ms): {latencies:?}");
    let bound =
        u64::try_from((listen::POLL_FALLBACK + Duration::from_secs(1)).as_millis()).unwrap();
    let median = latencies[latencies.len() / 2];
    let notified = u64::try_from(listen::POLL_FALLBACK.as_millis()).unwrap() / 10;
    assert!(latencies.iter().all(|&l| l < bound), "{latencies:?}");
    assert!(median < notified, "median {median} ms: {latencies:?}");
}

// ---------------------------------------------------------------------
// Another network namespace: another machine, as far as TCP can tell.

/// A network namespace joined to this one by a veth pair, with one
/// address on each end; deleted (with the pair) when dropped.
///
/// The addresses are link-local (169.254.0.0/16), a /30 chosen from this
/// process's id so that two runs on one machine do not collide: not
/// 127.0.0.0/8, because this namespace routes the whole of it to `lo`, so
/// an answer to a loopback address on a veth would never leave.
struct Netns {
    name: String,
    host_side: String,
    /// This namespace's end, where the server listens.
    host: Ipv4Addr,
    /// The other namespace's end, where its workers connect from.
    peer: Ipv4Addr,
}

impl Netns {
    /// Sets one up, or says why it cannot be (not root, no `ip`, no
    /// permission to make namespaces in this container).
    fn create() -> Result<Netns, String> {
        let pid = std::process::id();
        let third = u8::try_from(100 + (pid / 64) % 64).unwrap();
        let base = u8::try_from((pid % 64) * 4).unwrap();
        let netns = Netns {
            name: format!("inbox-pg-{pid}"),
            host_side: format!("ipg{pid}h"),
            host: Ipv4Addr::new(169, 254, third, base + 1),
            peer: Ipv4Addr::new(169, 254, third, base + 2),
        };
        let peer_side = format!("ipg{pid}p");
        let (name, host_side) = (netns.name.as_str(), netns.host_side.as_str());
        let (host, peer) = (format!("{}/30", netns.host), format!("{}/30", netns.peer));
        ip(&["netns", "add", name])?;
        let steps: [&[&str]; 6] = [
            &[
                "link", "add", host_side, "type", "veth", "peer", "name", &peer_side, "netns", name,
            ],
            &["addr", "add", &host, "dev", host_side],
            &["link", "set", host_side, "up"],
            &["-n", name, "addr", "add", &peer, "dev", &peer_side],
            &["-n", name, "link", "set", &peer_side, "up"],
            &["-n", name, "link", "set", "lo", "up"],
        ];
        for step in steps {
            ip(step)?;
        }
        Ok(netns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so the
        // pair; the second is for a namespace that went first.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_side]);
    }
}

/// Runs `ip` with `args`; its complaint on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Four workers in another network namespace, whose only way to the
/// server is TCP over a veth pair, drain a queue beside four on this
/// machine's socket, each thread done exactly once, each remote worker
/// doing its share; then a waiter in that namespace wakes for a send from
/// this one. Skipped, saying why, where network namespaces cannot be made
/// (not root, a container without the capability), unless
/// `INBOX_REQUIRE_NETNS` is set.
#[test]
fn workers_and_a_waiter_in_another_network_namespace_reach_the_server_over_tcp() {
    let _turn = one_at_a_time();
    let netns = match Netns::create() {
        Ok(netns) => netns,
        Err(why) if std::env::var_os("INBOX_REQUIRE_NETNS").is_none() => {
            eprintln!("SKIPPED pg_processes: netns: cannot make a network namespace here: {why}");
            return;
        }
        Err(why) => panic!("INBOX_REQUIRE_NETNS is set, but: {why}"),
    };
    let options = inbox_pg_cluster::Options {
        tcp: true,
        listen_on: Some((netns.host, netns.peer)),
        ..Default::default()
    };
    let Some(server) = PgCluster::start_or_skip_with("pg_processes: netns", options) else {
        return;
    };
    // Each session's start in the log, with the address it came from.
    let mut admin = admin_when_up(&server);
    // Two calls: ALTER SYSTEM may not share a transaction.
    admin
        .batch_execute("ALTER SYSTEM SET log_connections = on")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    let local = url(&server);
    let remote = format!(
        "postgresql://postgres@{}:{}/postgres",
        netns.host,
        server.tcp_port()
    );
    let threads = 400;
    send_threads(&local, threads);
    let remote_workers: Vec<Process> = (0..4)
        .map(|_| spawn(&remote, "drain", &[], Some(&netns.name)))
        .collect();
    let local_workers: Vec<Process> = (0..4).map(|_| spawn(&local, "drain", &[], None)).collect();
    let mut lines = Vec::new();
    for worker in remote_workers {
        let printed = worker.finish();
        assert!(
            !ids(&printed, "done").is_empty(),
            "a remote worker did nothing: {printed:?}"
        );
        lines.extend(printed);
    }
    lines.extend(local_workers.into_iter().flat_map(Process::finish));
    assert_each_done_once(&server, &ids(&lines, "done"), threads);
    let mut latencies = watch_rounds(&remote, &mut lead(&local), Some(&netns.name), 1, 3);
    assert_wakes_bounded(&mut latencies);
    assert_remote_sessions_came_over_tcp(&server, netns.peer);
}

/// The server logged sessions from the other namespace's address: the
/// remote workers and waiter reached it over TCP (four workers and a
/// waiter's two connections at least).
fn assert_remote_sessions_came_over_tcp(server: &PgCluster, peer: Ipv4Addr) {
    let log = server.log();
    let remote = log
        .matches(&format!("connection received: host={peer} "))
        .count();
    assert!(remote >= 6, "{remote} sessions from {peer}:\n{log}");
}
