//! Many `inbox` processes on one database at once: what the bus promises
//! when agents race and crash, checked with the real binary against a real
//! SQLite file, one OS process per command.
//!
//! - A claim race has exactly one winner; the losers get `lease_conflict`
//!   (exit 20), never a storage error or "database is locked".
//! - Workers draining a queue concurrently claim each thread exactly once,
//!   and every thread ends `done`; with `claim --next` no worker ever loses
//!   a race at all.
//! - A writer killed with SIGKILL at any moment leaves the database intact:
//!   every acknowledged command is there, whole, and nothing is half written.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use crate::common::TestEnv;

/// What one `inbox` process did.
struct Outcome {
    /// The exit code; `None` when a signal ended the process.
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn of(mut command: Command) -> Outcome {
        let output = command.output().unwrap();
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{self}"))
    }

    /// The error code of a failed `--json` command.
    fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Anything no concurrent use may ever produce: a storage or internal
    /// error (exit 50), or SQLite's lock error leaking through.
    fn storage_trouble(&self) -> bool {
        self.code == Some(50)
            || self.stdout.contains("database is locked")
            || self.stderr.contains("database is locked")
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit: {:?}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `inbox args... --json` in `dir`, as `TestEnv::command` builds it but on
/// the real clock, so that it can be built in any thread (`TestEnv` is not
/// `Sync`).
fn inbox(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(crate::common::inbox_bin());
    command
        .args(args)
        .arg("--json")
        .current_dir(dir)
        .env_remove("INBOX_DB")
        .env_remove("INBOX_AGENT")
        .env_remove("INBOX_NOW")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    command
}

/// Opens a thread for `worker` and returns its id.
fn send_task(dir: &Path, subject: &str) -> String {
    let sent = Outcome::of(inbox(
        dir,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            subject,
        ],
    ));
    assert_eq!(sent.code, Some(0), "{sent}");
    sent.json()["thread"]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A small deterministic PRNG (xorshift64): "random-ish" choices that are
/// the same on every run.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn sixteen_processes_racing_for_one_thread_one_wins() {
    const RACERS: usize = 16;
    const RACES: usize = 5;
    let env = TestEnv::initialized();
    for race in 0..RACES {
        let thread = send_task(env.dir(), &format!("Race {race}"));
        // Every racer is its own process; the barrier releases the threads
        // that spawn them at the same moment, so the claims really overlap.
        let barrier = Arc::new(Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                let command = inbox(
                    env.dir(),
                    &["claim", "--agent", "worker", "--thread", &thread],
                );
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    Outcome::of(command)
                })
            })
            .collect();
        let outcomes: Vec<Outcome> = racers.into_iter().map(|r| r.join().unwrap()).collect();

        for outcome in &outcomes {
            assert!(!outcome.storage_trouble(), "race {race}: {outcome}");
        }
        let winners: Vec<&Outcome> = outcomes.iter().filter(|o| o.code == Some(0)).collect();
        assert_eq!(winners.len(), 1, "race {race}: exactly one claim wins");
        assert_eq!(
            winners[0].json()["lease"]["lease_token"],
            1,
            "{}",
            winners[0]
        );
        for loser in outcomes.iter().filter(|o| o.code != Some(0)) {
            assert_eq!(loser.code, Some(20), "race {race}: {loser}");
            assert_eq!(loser.error_code(), "lease_conflict", "{loser}");
        }
    }
}

/// One successful claim by a worker loop.
struct Claimed {
    thread: String,
    token: u64,
    worker: usize,
}

#[test]
fn workers_draining_a_queue_claim_each_thread_exactly_once() {
    const THREADS: usize = 40;
    const WORKERS: usize = 8;
    let env = TestEnv::initialized();
    let sent: BTreeSet<String> = (0..THREADS)
        .map(|i| send_task(env.dir(), &format!("Task {i}")))
        .collect();
    assert_eq!(sent.len(), THREADS);

    let mut claims = Vec::new();
    let (mut conflicts, mut finished) = (0, 0);
    for (claimed, lost) in run_workers(env.dir(), WORKERS, worker_loop) {
        claims.extend(claimed);
        conflicts += lost.conflicts;
        finished += lost.finished;
    }
    eprintln!(
        "{WORKERS} workers claimed {} threads; lost races: {conflicts} lease_conflict, \
         {finished} already finished (thread_finished)",
        claims.len()
    );

    assert_each_claimed_once_and_done(env.dir(), &sent, &claims);
}

#[test]
fn workers_claiming_next_never_collide() {
    const THREADS: usize = 40;
    const WORKERS: usize = 8;
    let env = TestEnv::initialized();
    let sent: BTreeSet<String> = (0..THREADS)
        .map(|i| send_task(env.dir(), &format!("Task {i}")))
        .collect();

    let claims: Vec<Claimed> = run_workers(env.dir(), WORKERS, claim_next_loop)
        .into_iter()
        .flatten()
        .collect();
    assert_each_claimed_once_and_done(env.dir(), &sent, &claims);
}

/// Runs `workers` worker loops on threads of this process (each one starts
/// `inbox` processes), numbered from 0, and returns what each reported.
fn run_workers<T: Send + 'static>(
    dir: &Path,
    workers: usize,
    worker: fn(&Path, usize) -> T,
) -> Vec<T> {
    let dir: Arc<PathBuf> = Arc::new(dir.to_owned());
    let loops: Vec<_> = (0..workers)
        .map(|n| {
            let dir = Arc::clone(&dir);
            std::thread::spawn(move || worker(&dir, n))
        })
        .collect();
    loops.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Every thread of `sent` was claimed exactly once, with token 1, and ended
/// `done`; nothing else was claimed.
fn assert_each_claimed_once_and_done(dir: &Path, sent: &BTreeSet<String>, claims: &[Claimed]) {
    let mut per_thread: BTreeMap<&str, Vec<&Claimed>> = BTreeMap::new();
    for claim in claims {
        per_thread.entry(&claim.thread).or_default().push(claim);
    }
    for thread in sent {
        let claimed = per_thread.get(thread.as_str()).map_or(&[][..], |c| &c[..]);
        let by: Vec<String> = claimed
            .iter()
            .map(|c| format!("worker {} (token {})", c.worker, c.token))
            .collect();
        assert_eq!(claimed.len(), 1, "{thread} was claimed by {by:?}");
        assert_eq!(claimed[0].token, 1, "{thread} was claimed by {by:?}");
    }
    assert_eq!(claims.len(), sent.len(), "no claim of a thread never sent");

    let list = Outcome::of(inbox(dir, &["list", "--limit", "1000"]));
    assert_eq!(list.code, Some(0), "{list}");
    let listed = list.json();
    let threads = listed["threads"].as_array().unwrap();
    assert_eq!(threads.len(), sent.len());
    for thread in threads {
        assert_eq!(thread["status"], "done", "{thread}");
        assert_eq!(thread["attempts"], 1, "{thread}");
    }
}

/// Claim races a worker lost.
#[derive(Default)]
struct Lost {
    /// Another worker held the thread: `lease_conflict`, exit 20.
    conflicts: usize,
    /// Another worker had claimed and finished the thread since this one's
    /// `fetch`: `thread_finished`, also exit 20.
    finished: usize,
}

/// Fetch, claim, finish until `fetch` says there is nothing left (exit 10).
/// Returns the successful claims and the claim races this worker lost.
fn worker_loop(dir: &Path, worker: usize) -> (Vec<Claimed>, Lost) {
    let mut rng = Rng::new(worker as u64 + 1);
    let mut claimed = Vec::new();
    let mut lost = Lost::default();
    let check = |step: &str, outcome: &Outcome| {
        assert!(
            !outcome.storage_trouble(),
            "worker {worker}, {step}: {outcome}"
        );
    };
    for _ in 0..1000 {
        let fetched = Outcome::of(inbox(dir, &["fetch", "--agent", "worker"]));
        check("fetch", &fetched);
        match fetched.code {
            Some(10) => return (claimed, lost),
            Some(0) => {}
            _ => panic!("worker {worker}, fetch: {fetched}"),
        }
        let candidates = fetched.json()["threads"].as_array().unwrap().clone();
        assert!(!candidates.is_empty(), "exit 0 with no thread: {fetched}");
        // Pick among the first few candidates, so that workers who fetched
        // the same queue often go for the same thread.
        let pick = rng.below(candidates.len().min(3) as u64) as usize;
        let thread = candidates[pick]["thread_id"].as_str().unwrap().to_owned();

        let claim = Outcome::of(inbox(
            dir,
            &["claim", "--agent", "worker", "--thread", &thread],
        ));
        check("claim", &claim);
        match claim.code {
            Some(0) => {}
            Some(20) => {
                // Another worker got there first (it holds the thread, or
                // has already finished it): look again. Exit 20 is exactly
                // "move on", which is what a worker loop relies on.
                match claim.error_code().as_str() {
                    "lease_conflict" => lost.conflicts += 1,
                    "thread_finished" => lost.finished += 1,
                    other => panic!("worker {worker}, claim {thread}: unexpected {other}: {claim}"),
                }
                continue;
            }
            _ => panic!("worker {worker}, claim {thread}: {claim}"),
        }
        let token = claim.json()["lease"]["lease_token"].as_u64().unwrap();
        claimed.push(Claimed {
            thread: thread.clone(),
            token,
            worker,
        });

        finish(dir, worker, &thread, token);
    }
    panic!("worker {worker} never drained the queue");
}

/// `claim --next`, finish, until `claim --next` says there is nothing left
/// (exit 10). Any other exit fails the test: picking and leasing in one
/// transaction leaves no race to lose.
fn claim_next_loop(dir: &Path, worker: usize) -> Vec<Claimed> {
    let mut claimed = Vec::new();
    for _ in 0..1000 {
        let claim = Outcome::of(inbox(dir, &["claim", "--agent", "worker", "--next"]));
        match claim.code {
            Some(10) => return claimed,
            Some(0) => {}
            _ => panic!("worker {worker}, claim --next: {claim}"),
        }
        let answer = claim.json();
        let thread = answer["thread"]["thread_id"].as_str().unwrap().to_owned();
        let token = answer["lease"]["lease_token"].as_u64().unwrap();
        claimed.push(Claimed {
            thread: thread.clone(),
            token,
            worker,
        });
        finish(dir, worker, &thread, token);
    }
    panic!("worker {worker} never drained the queue");
}

/// `done` on a thread the worker holds; it must succeed.
fn finish(dir: &Path, worker: usize, thread: &str, token: u64) {
    let done = Outcome::of(inbox(
        dir,
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            thread,
            "--lease-token",
            &token.to_string(),
            "--summary",
            &format!("Done by worker {worker}"),
        ],
    ));
    assert!(
        !done.storage_trouble(),
        "worker {worker}, done {thread}: {done}"
    );
    assert_eq!(done.code, Some(0), "worker {worker}, done {thread}: {done}");
}

#[test]
fn a_writer_killed_mid_stream_leaves_an_intact_database() {
    const SENDS: usize = 150;
    let env = TestEnv::initialized();

    // How long one send takes here, so that kill delays spread over the
    // whole life of a process: start-up, opening the file, the write
    // transaction, the commit and checkpoint, printing.
    let started = Instant::now();
    for i in 0..5 {
        send_task(env.dir(), &format!("Warm-up {i}"));
    }
    let typical = started.elapsed() / 5;
    let span_micros = (typical.as_micros() as u64 * 3 / 2).max(1000);
    eprintln!("one send takes about {typical:?}; kills land within {span_micros} µs");

    let mut rng = Rng::new(150);
    let mut acknowledged = Vec::new();
    let mut killed = 0;
    let mut other = 0;
    for i in 0..SENDS {
        let subject = format!("Message {i}");
        let mut child = inbox(
            env.dir(),
            &[
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                &subject,
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let child = Arc::new(Mutex::new(child));

        // Every fourth send runs undisturbed; the others are shot with
        // SIGKILL (Child::kill) somewhere in their life, or just after it.
        let killer = (i % 4 != 0).then(|| {
            let child = Arc::clone(&child);
            let delay = Duration::from_micros(rng.below(span_micros));
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                // Ok even if the child already exited: std never signals a
                // reaped child.
                let _ = child.lock().unwrap().kill();
            })
        });
        let mut out = String::new();
        let mut err = String::new();
        stdout.read_to_string(&mut out).unwrap();
        stderr.read_to_string(&mut err).unwrap();
        if let Some(killer) = killer {
            killer.join().unwrap();
        }
        let status = child.lock().unwrap().wait().unwrap();
        let outcome = Outcome {
            code: status.code(),
            stdout: out,
            stderr: err,
        };
        assert!(!outcome.storage_trouble(), "send {i}: {outcome}");
        match outcome.code {
            None => killed += 1,
            Some(0) => {
                // Acknowledged: exit 0 and the JSON with the new thread's id.
                let thread = outcome.json()["thread"]["thread_id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                acknowledged.push(thread);
            }
            Some(_) => {
                other += 1;
                eprintln!("send {i} failed without a signal: {outcome}");
            }
        }
    }
    eprintln!(
        "{SENDS} sends: {} acknowledged, {killed} killed, {other} failed otherwise",
        acknowledged.len()
    );
    assert!(killed > 0, "no send was killed: the test proved nothing");
    assert!(!acknowledged.is_empty());
    assert_eq!(other, 0, "a send failed without being killed");

    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let broken_keys: usize = conn
        .prepare("PRAGMA foreign_key_check")
        .unwrap()
        .query_map([], |_| Ok(()))
        .unwrap()
        .count();
    assert_eq!(broken_keys, 0, "foreign_key_check found rows");

    // Acknowledged means durable: the thread is there with its one message.
    for thread in &acknowledged {
        let messages: i64 = conn
            .query_row(
                "SELECT count(*) FROM messages WHERE thread_id = ?1",
                [thread],
                |row| row.get(0),
            )
            .unwrap();
        let exists: i64 = conn
            .query_row(
                "SELECT count(*) FROM threads WHERE thread_id = ?1",
                [thread],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!((exists, messages), (1, 1), "acknowledged thread {thread}");
    }
    // Nothing half written: a send that committed (acknowledged or killed
    // between its commit and its output) wrote the thread, its message and
    // its event together, and a killed transaction left no trace.
    let half_written: i64 = conn
        .query_row(
            "SELECT count(*) FROM threads t
             WHERE (SELECT count(*) FROM messages m WHERE m.thread_id = t.thread_id) != 1
                OR (SELECT count(*) FROM events e WHERE e.thread_id = t.thread_id) != 1",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(
        half_written, 0,
        "threads without exactly one message and event"
    );
    let (count, max): (i64, i64) = conn
        .query_row("SELECT count(*), max(event_id) FROM events", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(count, max, "event ids have gaps");
    let threads: i64 = conn
        .query_row("SELECT count(*) FROM threads", [], |row| row.get(0))
        .unwrap();
    assert!(threads as usize >= acknowledged.len() + 5);
    eprintln!(
        "{} killed sends had committed before they died",
        threads as usize - acknowledged.len() - 5
    );
    assert!(threads as usize <= SENDS + 5);
    drop(conn);

    let list = Outcome::of(inbox(env.dir(), &["list", "--limit", "1000"]));
    assert_eq!(list.code, Some(0), "{list}");
    assert_eq!(
        list.json()["threads"].as_array().unwrap().len() as i64,
        threads
    );
}
