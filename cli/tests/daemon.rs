//! `inbox daemon`: commands hand their calls to a real daemon process over
//! its socket and answer exactly as they would alone; whatever is at the
//! socket's place that is not this user's live daemon is passed over or
//! refused; a call sent without an answer is never run twice, and never
//! after its command gave up or went away; no connection, however slowly
//! it sends or reads, holds up another command.
//!
//! The commands here run without `INBOX_NOW`: a test build's chosen clock
//! keeps a command from handing its call over (the daemon runs on the
//! system clock), so every other test runs its commands itself.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::common::TestEnv;

/// `inbox args...` in `env` on the system clock.
fn live(env: &TestEnv, args: &[&str]) -> Command {
    let mut command = env.command(args);
    command.env_remove("INBOX_NOW");
    command
}

/// Runs `inbox args... --json` on the system clock; exit code and JSON.
fn json(env: &TestEnv, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let output = live(env, &all).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), value)
}

/// The error message of a failure in the JSON contract.
fn message(failure: &serde_json::Value) -> &str {
    failure["error"]["message"].as_str().unwrap_or_default()
}

fn socket(env: &TestEnv) -> PathBuf {
    PathBuf::from(format!("{}-daemon", env.db().display()))
}

/// A daemon running as a child process.
struct Daemon {
    child: Child,
    first: serde_json::Value,
}

impl Daemon {
    /// Starts `inbox daemon --json ARGS` and waits for its first line.
    fn start(env: &TestEnv, args: &[&str]) -> Daemon {
        let mut all = vec!["daemon", "--json"];
        all.extend_from_slice(args);
        let mut child = live(env, &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let first = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Daemon { child, first }
    }

    fn signal(&self, signal: Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Stops it with SIGTERM: its exit code and how many calls it ran.
    fn stop(mut self) -> (i32, u64) {
        self.signal(Signal::TERM);
        let status = self.child.wait().unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let ran = stderr
            .split("after running ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in its last line: {stderr:?}"));
        (status.code().unwrap_or(-1), ran)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `done` of `thread` with lease token `token`.
fn done_args<'a>(thread: &'a str, token: &'a str) -> [&'a str; 9] {
    [
        "done",
        "--agent",
        "w1",
        "--thread",
        thread,
        "--lease-token",
        token,
        "--summary",
        "ok",
    ]
}

fn thread_ids(env: &TestEnv) -> Vec<String> {
    let (status, list) = json(env, &["list"]);
    assert_eq!(status, 0, "{list}");
    list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_worker_loop_runs_through_the_daemon_and_answers_as_alone() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    assert_eq!(daemon.first["ok"], true);
    assert_eq!(daemon.first["command"], "daemon");
    assert_eq!(daemon.first["socket"], socket(&env).display().to_string());

    let (status, sent) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0, "{sent}");
    assert_eq!(sent["command"], "send");
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let (status, claimed) = json(&env, &["claim", "--agent", "w1", "--next"]);
    assert_eq!(status, 0, "{claimed}");
    assert_eq!(claimed["thread"]["thread_id"], thread.as_str());
    let token = claimed["lease"]["lease_token"].to_string();
    // A refusal keeps its exit code and its JSON, byte for byte as the
    // command alone says it (the harness's commands run alone).
    let wrong = done_args(&thread, "99");
    let (status, refused) = json(&env, &wrong);
    assert_eq!(status, 30, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_value");
    let mut with_json = wrong.to_vec();
    with_json.push("--json");
    let there = live(&env, &with_json).output().unwrap();
    let alone = env.command(&with_json).output().unwrap();
    assert_eq!(there.status.code(), Some(30));
    assert_eq!(alone.status.code(), Some(30));
    assert_eq!(
        String::from_utf8_lossy(&there.stdout),
        String::from_utf8_lossy(&alone.stdout)
    );
    let (status, done) = json(&env, &done_args(&thread, &token));
    assert_eq!(status, 0, "{done}");
    assert_eq!(done["thread"]["status"], "done");
    // Nothing left: exit 10, as alone.
    let (status, empty) = json(&env, &["claim", "--agent", "w1", "--next"]);
    assert_eq!(status, 10, "{empty}");
    // Text for people too.
    let plain = live(&env, &["show", "--thread", &thread]).output().unwrap();
    assert_eq!(plain.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&plain.stdout).contains("done"));
    // People are told which way the command went.
    let said = String::from_utf8_lossy(&plain.stderr);
    assert!(said.contains("coord.db"), "{said}");
    assert!(said.contains("through inbox daemon"), "{said}");

    let (status, ran) = daemon.stop();
    assert_eq!((status, ran), (0, 7));
    assert!(!socket(&env).exists(), "the daemon removes its socket");
    // What it wrote is in the file for commands without it.
    let (_, shown) = json(&env, &["show", "--thread", &thread]);
    assert_eq!(shown["thread"]["status"], "done");
}

#[test]
fn waits_init_orch_and_a_chosen_clock_run_in_the_command() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    let (status, _) = json(
        &env,
        &["watch", "--agent", "lead", "--timeout-seconds", "0"],
    );
    assert_eq!(status, 10);
    let (status, _) = json(&env, &["init"]);
    assert_eq!(status, 0);
    let out = env
        .orch_command(&["run", "list", "--json"])
        .env_remove("INBOX_NOW")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The harness's commands carry INBOX_NOW.
    env.json(&["list"], 0);
    assert_eq!(daemon.stop(), (0, 0));
}

#[test]
fn a_dead_daemons_socket_is_passed_over_and_replaced() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    daemon.signal(Signal::KILL);
    drop(daemon);
    assert!(socket(&env).exists(), "a killed daemon leaves its socket");
    let (status, sent) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0, "{sent}");
    let again = Daemon::start(&env, &[]);
    assert_eq!(again.first["ok"], true);
    assert_eq!(thread_ids(&env).len(), 1);
    assert_eq!(again.stop(), (0, 1));
}

#[test]
fn a_second_daemon_and_a_file_in_the_sockets_place_are_refused() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    let (status, second) = json(&env, &["daemon"]);
    assert_eq!(status, 50, "{second}");
    assert_eq!(second["error"]["code"], "storage_error");
    assert!(message(&second).contains("already serves"), "{second}");
    assert_eq!(daemon.stop(), (0, 0));

    std::fs::write(socket(&env), "not a socket").unwrap();
    let (status, refused) = json(&env, &["daemon"]);
    assert_eq!(status, 50, "{refused}");
    assert!(message(&refused).contains("left alone"), "{refused}");
    assert_eq!(
        std::fs::read_to_string(socket(&env)).unwrap(),
        "not a socket"
    );
    // Commands pass the file over.
    let (status, _) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0);
}

#[test]
fn a_link_in_the_sockets_place_is_not_followed_to_another_databases_daemon() {
    let other = TestEnv::initialized();
    let daemon = Daemon::start(&other, &[]);
    let env = TestEnv::initialized();
    std::os::unix::fs::symlink(socket(&other), socket(&env)).unwrap();
    let (status, _) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0);
    assert_eq!(
        thread_ids(&env).len(),
        1,
        "the send went to its own database"
    );
    assert_eq!(daemon.stop(), (0, 0));
    assert!(thread_ids(&other).is_empty());
}

/// A stand-in at the socket's place that reads the call and answers with
/// `answer` (nothing: closes).
fn stand_in(env: &TestEnv, answer: &'static [u8]) -> std::thread::JoinHandle<Vec<u8>> {
    let path = socket(env);
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = Vec::new();
        BufReader::new(&stream)
            .read_until(b'\n', &mut line)
            .unwrap();
        (&stream).write_all(answer).unwrap();
        // Gone for the commands after it: closing the listener is not
        // enough, since a child process another test has forked but not
        // yet exec'd holds a copy of it, and a command connecting then was
        // reset when that copy closed (seen once in CI).
        std::fs::remove_file(&path).unwrap();
        line
    })
}

#[test]
fn a_call_sent_without_an_answer_is_an_error_and_never_run_again() {
    let no_response = b"{\"ran\":{\"exit\":0,\"changed\":true,\"now\":\"2026-01-01T00:00:00.000Z\",\"durability\":\"normal\"}}\nnot json\n";
    for answer in [
        &b""[..],
        b"{\"ran\": 42}\n",
        b"no newline, then closed",
        no_response,
    ] {
        let env = TestEnv::initialized();
        let stand_in = stand_in(&env, answer);
        let (status, lost) = json(
            &env,
            &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
        );
        let call = stand_in.join().unwrap();
        assert!(call.starts_with(b"{\"protocol\":\"inbox-daemon/2\""));
        assert_eq!(status, 50, "{lost}");
        assert_eq!(lost["ok"], false);
        assert_eq!(lost["command"], "send");
        assert_eq!(lost["error"]["code"], "storage_error");
        // A daemon that said it ran the call ran it; otherwise it may have.
        let said = if answer == no_response {
            "ran it, and then"
        } else {
            "may or may not have run; it will not run after this"
        };
        assert!(message(&lost).contains(said), "{lost}");
        assert!(
            thread_ids(&env).is_empty(),
            "the command did not run it itself"
        );
    }
}

#[test]
fn a_refusal_lets_the_command_run_the_call_itself() {
    // Said to a call line, or before a connection whose call the daemon
    // did not take is closed.
    for answer in [
        &b"{\"refused\":\"another build\"}\n"[..],
        b"{\"not_run\":\"the daemon is stopping\"}\n",
    ] {
        let env = TestEnv::initialized();
        let stand_in = stand_in(&env, answer);
        let (status, sent) = json(
            &env,
            &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
        );
        stand_in.join().unwrap();
        assert_eq!(status, 0, "{sent}");
        assert_eq!(thread_ids(&env).len(), 1);
    }
}

#[test]
fn bad_and_stalled_connections_hold_nobody_up_for_long() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    // Not a call: refused, and the daemon goes on.
    let mut bad = UnixStream::connect(socket(&env)).unwrap();
    bad.write_all(b"not json\n").unwrap();
    let mut answer = String::new();
    BufReader::new(&bad).read_line(&mut answer).unwrap();
    assert!(answer.starts_with("{\"refused\":"), "{answer}");
    // A line longer than any call: closed unanswered, unread.
    let mut long = UnixStream::connect(socket(&env)).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut written = 0;
    while written <= 17 << 20 {
        match long.write(&chunk) {
            Ok(n) => written += n,
            Err(_) => break,
        }
    }
    // A client that connects and sends nothing: dropped within seconds.
    let _stalled = UnixStream::connect(socket(&env)).unwrap();
    let started = Instant::now();
    let (status, _) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(daemon.stop(), (0, 1));
}

#[test]
fn a_replaced_database_is_reopened_as_a_command_would_open_it() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "old"],
    );
    let aside = env.dir().join("aside");
    std::fs::create_dir(&aside).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{suffix}", env.db().display()));
        if from.exists() {
            std::fs::rename(&from, aside.join(format!("coord.db{suffix}"))).unwrap();
        }
    }
    env.run(&["init"]);
    let (status, sent) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "new"],
    );
    assert_eq!(status, 0, "{sent}");
    let (_, list) = json(&env, &["list"]);
    let subjects: Vec<_> = list["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["new"]);
    assert_eq!(daemon.stop(), (0, 3));
}

#[test]
fn a_schema_of_a_newer_inbox_is_refused_as_a_command_alone_refuses_it() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    json(&env, &["list"]);
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let (status, refused) = json(&env, &["list"]);
    assert_eq!(refused["error"]["code"], "schema_too_new", "{refused}");
    assert_eq!(refused, env.json(&["list"], status));
    assert_eq!(daemon.stop(), (0, 1));
}

#[test]
fn a_missing_database_or_a_postgresql_url_is_refused_with_the_contract_s_codes() {
    let env = TestEnv::new();
    let (status, missing) = json(&env, &["daemon"]);
    assert_eq!(status, 50, "{missing}");
    assert_eq!(missing["error"]["code"], "not_initialized");
    assert!(!socket(&env).exists());
    let (status, url) = json(&env, &["daemon", "--db", "postgres://me@localhost/inbox"]);
    assert_eq!(status, 30, "{url}");
    assert_eq!(url["error"]["code"], "invalid_value");
    assert!(message(&url).contains("SQLite file"), "{url}");
}

/// How long a test build's command waits before its call's deadline
/// (`INBOX_DAEMON_WAIT_MS`; a release build always waits 55 s).
const WAIT_ENV: &str = "INBOX_DAEMON_WAIT_MS";

/// The exit code and JSON of a finished `--json` command.
fn finished(output: &std::process::Output) -> (i32, serde_json::Value) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), value)
}

/// `send` of a new thread from lead to w1, `--json`.
const SEND: [&str; 8] = [
    "send",
    "--from",
    "lead",
    "--to",
    "w1",
    "--subject",
    "S",
    "--json",
];

/// Threads in the database, as a command alone reads them (not through
/// any daemon).
fn threads_alone(env: &TestEnv) -> usize {
    env.json(&["list"], 0)["threads"].as_array().unwrap().len()
}

/// Clients that connect to the daemon and send the first bytes of a call
/// one at a time, each well within any wait for a single byte, until the
/// daemon closes them or `stop` is set: how long each was kept open. The
/// daemon must say `not_run` before it closes one.
fn drips(env: &TestEnv, count: usize, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<Option<Duration>>> {
    (0..count)
        .map(|_| {
            let mut stream = UnixStream::connect(socket(env)).unwrap();
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let started = Instant::now();
                let call = b"{\"protocol\":\"inbox-daemon/2\",\"request\":";
                for byte in call.iter().cycle() {
                    if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(90) {
                        return None;
                    }
                    if stream.write_all(&[*byte]).is_err() {
                        let kept = started.elapsed();
                        let answer = first_answer(&stream).expect("closed without a word");
                        assert!(answer["not_run"].is_string(), "{answer}");
                        return Some(kept);
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                None
            })
        })
        .collect()
}

#[test]
fn slow_drip_clients_hold_no_command_up_and_are_closed_within_seconds() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let drips = drips(&env, 4, &stop);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, sent) = finished(&live(&env, &SEND).output().unwrap());
    let took = started.elapsed();
    let closed_early = drips.into_iter().map(|drip| drip.join().unwrap());
    let closed: Vec<_> = closed_early.collect();
    stop.store(true, Ordering::SeqCst);
    // Liveness only: the send waits for no drip (it used to wait until it
    // gave up after 60 s, exit 50, and the daemon ran it later).
    assert_eq!(status, 0, "{sent}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // However they drip, the daemon closes them within seconds of taking
    // them (each has a few seconds for its whole line).
    for kept in closed {
        assert!(
            kept.is_some_and(|kept| kept < Duration::from_secs(30)),
            "{kept:?}"
        );
    }
    assert_eq!(thread_ids(&env).len(), 1);
    assert_eq!(daemon.stop(), (0, 2));
}

#[test]
fn a_call_whose_command_gave_up_never_runs_later() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    // The daemon stops (a stopped process, a long queue: it does not get
    // to the call in time); the command gives up.
    daemon.signal(Signal::STOP);
    let output = live(&env, &SEND).env(WAIT_ENV, "1000").output().unwrap();
    let (status, lost) = finished(&output);
    assert_eq!(status, 50, "{lost}");
    assert_eq!(lost["error"]["code"], "storage_error");
    assert!(message(&lost).contains("may or may not have run"), "{lost}");
    // The daemon goes on: it takes the call its command gave up on, and
    // must not run it. Well past the moment it used to commit it:
    daemon.signal(Signal::CONT);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        threads_alone(&env),
        0,
        "the call ran after its command gave up"
    );
    // The daemon has dealt with it (it takes connections in turn).
    assert!(thread_ids(&env).is_empty());
    assert_eq!(threads_alone(&env), 0);
    // What the command said: it will not run, and what to do.
    assert!(message(&lost).contains("will not run after this"), "{lost}");
    assert!(
        message(&lost).contains("look before running it again"),
        "{lost}"
    );
    assert_eq!(daemon.stop(), (0, 1));
}

#[test]
fn a_command_that_gives_up_while_the_database_is_locked_says_a_commit_may_yet_finish() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    daemon.signal(Signal::STOP);
    // Another process holds SQLite's write lock past the command's wait:
    // the command cannot tell that no commit of its call is under way.
    let holder = rusqlite::Connection::open(env.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let output = live(&env, &SEND).env(WAIT_ENV, "1000").output().unwrap();
    holder.execute_batch("ROLLBACK").unwrap();
    let (status, lost) = finished(&output);
    assert_eq!(status, 50, "{lost}");
    assert!(message(&lost).contains("may or may not have run"), "{lost}");
    assert!(message(&lost).contains("may yet finish"), "{lost}");
    assert!(
        message(&lost).contains("once the other writers are done"),
        "{lost}"
    );
    // Nor does it begin later.
    daemon.signal(Signal::CONT);
    assert!(thread_ids(&env).is_empty());
    assert_eq!(threads_alone(&env), 0);
    assert_eq!(daemon.stop(), (0, 1));
}

#[test]
fn a_call_whose_command_was_killed_while_it_waited_never_runs() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    daemon.signal(Signal::STOP);
    let mut command = live(&env, &SEND)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Time to start and send its call (it then waits for the answer).
    std::thread::sleep(Duration::from_secs(2));
    command.kill().unwrap();
    command.wait().unwrap();
    daemon.signal(Signal::CONT);
    assert!(
        thread_ids(&env).is_empty(),
        "the call of a killed command ran"
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(threads_alone(&env), 0);
    assert_eq!(daemon.stop(), (0, 1));
}

#[test]
fn calls_held_up_past_their_deadline_are_neither_committed_nor_begun() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    // Another process holds SQLite's write lock: the daemon begins the
    // first call at once and waits for the lock (a slow write), past the
    // call's deadline but within SQLite's busy budget; the second call
    // waits in the queue behind it, past its own deadline too.
    let holder = rusqlite::Connection::open(env.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let commands: Vec<Child> = (0..2)
        .map(|_| {
            let command = live(&env, &SEND)
                .env(WAIT_ENV, "1000")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            command
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    holder.execute_batch("ROLLBACK").unwrap();
    for command in commands {
        let (status, refused) = finished(&command.wait_with_output().unwrap());
        assert_eq!(status, 50, "{refused}");
        // Not "may or may not": the daemon said it did not, and never will.
        assert_eq!(refused["error"]["code"], "storage_busy", "{refused}");
        assert!(message(&refused).contains("never will"), "{refused}");
        assert!(message(&refused).contains("run it again"), "{refused}");
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(threads_alone(&env), 0);
    // And the next call runs as usual.
    let (status, sent) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    assert_eq!(status, 0, "{sent}");
    assert_eq!(threads_alone(&env), 1);
    assert_eq!(daemon.stop(), (0, 1));
}

/// The line a real command sends for `args`, caught by a stand-in at the
/// socket's place.
fn call_line(env: &TestEnv, args: &[&str]) -> Vec<u8> {
    let stand_in = stand_in(env, b"");
    let output = live(env, args).output().unwrap();
    assert_eq!(output.status.code(), Some(50));
    let mut line = stand_in.join().unwrap();
    assert_eq!(line.last(), Some(&b'\n'));
    line.shrink_to_fit();
    line
}

#[test]
fn commands_that_stop_reading_their_answers_hold_no_command_up() {
    let env = TestEnv::initialized();
    let body = "x".repeat(900 << 10);
    let file = env.dir().join("body.md");
    std::fs::write(&file, &body).unwrap();
    let file = file.display().to_string();
    let (status, sent) = json(
        &env,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w1",
            "--subject",
            "big",
            "--body-file",
            &file,
        ],
    );
    assert_eq!(status, 0, "{sent}");
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let (status, _) = json(
            &env,
            &[
                "reply",
                "--from",
                "lead",
                "--thread",
                &thread,
                "--summary",
                "s",
                "--body-file",
                &file,
            ],
        );
        assert_eq!(status, 0);
    }
    // A show of the thread answers with megabytes, more than a socket
    // holds; its line is a real command's own.
    let show = call_line(&env, &["show", "--thread", &thread, "--json"]);
    let daemon = Daemon::start(&env, &[]);
    // Commands that send it and never read (stopped, or wedged): more of
    // them than a command would wait out at a few seconds each.
    let stalled: Vec<UnixStream> = (0..16)
        .map(|_| {
            let mut stream = UnixStream::connect(socket(&env)).unwrap();
            stream.write_all(&show).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, sent) = finished(&live(&env, &SEND).output().unwrap());
    let took = started.elapsed();
    assert_eq!(status, 0, "{sent}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // Each was closed (after as much of its answer as it took).
    for mut stream in stalled {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        assert!(stream.read_to_end(&mut Vec::new()).is_ok(), "not closed");
    }
    assert_eq!(threads_alone(&env), 2);
    drop(daemon);
}

#[test]
fn a_lost_call_says_what_to_do_for_its_kind() {
    let env = TestEnv::initialized();
    let mut keyed = SEND.to_vec();
    keyed.extend(["--idempotency-key", "k1"]);
    for (args, said) in [
        (
            &["list", "--json"][..],
            "it changes nothing, so run it again",
        ),
        (&SEND[..], "look before running it again"),
        (&keyed[..], "run it again with the same --idempotency-key"),
    ] {
        let stand_in = stand_in(&env, b"");
        let (status, lost) = finished(&live(&env, args).output().unwrap());
        stand_in.join().unwrap();
        assert_eq!(status, 50, "{lost}");
        assert!(message(&lost).contains(said), "{lost}");
    }
    // As it says: the same key, however often, applies once.
    for _ in 0..2 {
        let (status, sent) = finished(&live(&env, &keyed).output().unwrap());
        assert_eq!(status, 0, "{sent}");
    }
    assert_eq!(threads_alone(&env), 1);
}

/// `command` run in a time namespace of its own whose monotonic clock is
/// `offset` seconds off this one's (`unshare --time`, root only); `None`
/// where that cannot be done here.
fn on_another_clock(command: &Command, offset: i64) -> Option<Command> {
    let offset = offset.to_string();
    let can = Command::new("unshare")
        .args(["--time", "--monotonic", &offset, "true"])
        .status()
        .is_ok_and(|status| status.success());
    if !can {
        return None;
    }
    let mut moved = Command::new("unshare");
    moved
        .args(["--time", "--monotonic", &offset, "--"])
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => moved.env(key, value),
            None => moved.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        moved.current_dir(dir);
    }
    Some(moved)
}

#[test]
fn a_command_on_another_clock_runs_its_call_itself() {
    let env = TestEnv::initialized();
    let daemon = Daemon::start(&env, &[]);
    // Behind: its deadline would look long past to the daemon; ahead: far
    // off. Either way the daemon cannot judge it, and runs nothing.
    for offset in [-100, 100_000] {
        let Some(mut command) = on_another_clock(&live(&env, &SEND), offset) else {
            eprintln!("skipped: no time namespace here (needs root and unshare --time)");
            return;
        };
        let (status, sent) = finished(&command.output().unwrap());
        assert_eq!(status, 0, "{sent}");
    }
    assert_eq!(threads_alone(&env), 2);
    assert_eq!(
        daemon.stop(),
        (0, 0),
        "the commands ran their calls themselves"
    );
}

/// The first line a daemon answered on `stream`, within a minute: `None`
/// when it closed the connection without one.
fn first_answer(stream: &UnixStream) -> Option<serde_json::Value> {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap_or(0);
    line.ends_with('\n')
        .then(|| serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
}

#[test]
fn commands_held_up_by_another_process_s_write_lock_all_end_well() {
    let env = TestEnv::initialized();
    // Lines of real commands, caught before the daemon starts: sent by
    // clients that connect while the daemon is idle (it takes them at
    // once) and send their whole line within a second of it, but only
    // once the daemon is busy with another call.
    let lines: Vec<Vec<u8>> = (0..3).map(|_| call_line(&env, &SEND)).collect();
    let daemon = Daemon::start(&env, &[]);
    let early: Vec<UnixStream> = lines
        .iter()
        .map(|_| UnixStream::connect(socket(&env)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // Another process (gc, import, a bridge) holds SQLite's write lock for
    // longer than a connection's few seconds, within the busy budget.
    let holder = rusqlite::Connection::open(env.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let held = Instant::now();
    let spawn = || {
        live(&env, &SEND)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The daemon takes this one and waits for the lock.
    let mut commands = vec![spawn()];
    std::thread::sleep(Duration::from_millis(700));
    for (mut stream, line) in early.iter().zip(&lines) {
        stream.write_all(line).unwrap();
    }
    // More commands arrive while it waits.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(500));
        commands.push(spawn());
    }
    std::thread::sleep(Duration::from_secs(8).saturating_sub(held.elapsed()));
    holder.execute_batch("ROLLBACK").unwrap();
    for command in commands {
        let (status, sent) = finished(&command.wait_with_output().unwrap());
        assert_eq!(status, 0, "{sent}");
    }
    // The lines that came while the daemon waited were run once it could:
    // its wait was not held against them.
    for stream in &early {
        let answer = first_answer(stream).expect("closed without a word about the call");
        assert_eq!(answer["ran"]["exit"], 0, "{answer}");
    }
    assert_eq!(threads_alone(&env), 7);
    assert_eq!(daemon.stop(), (0, 7));
}

#[test]
fn a_flood_of_idle_connections_fails_no_command() {
    let env = TestEnv::initialized();
    // A thread that `show` answers with megabytes, more than a socket
    // holds: the daemon sends its answer over many turns.
    let body = env.dir().join("body.md");
    std::fs::write(&body, "x".repeat(900 << 10)).unwrap();
    let body = body.to_str().unwrap();
    let mut large = SEND.to_vec();
    large.extend(["--body-file", body]);
    let (status, sent) = finished(&live(&env, &large).output().unwrap());
    assert_eq!(status, 0, "{sent}");
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let reply = [
            "reply",
            "--from",
            "lead",
            "--thread",
            &thread,
            "--summary",
            "s",
            "--body-file",
            body,
        ];
        assert_eq!(live(&env, &reply).status().unwrap().code(), Some(0));
    }
    let show = ["show", "--thread", &thread, "--json"];
    let daemon = Daemon::start(&env, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // A same-user client that connects again and again and sends nothing,
    // keeping its latest connections open.
    let flood = {
        let (stop, made, path) = (Arc::clone(&stop), Arc::clone(&made), socket(&env));
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(stream) = UnixStream::connect(&path) {
                    open.push_back(stream);
                    made.fetch_add(1, Ordering::SeqCst);
                }
                if open.len() > 200 {
                    open.pop_front();
                }
            }
        })
    };
    while made.load(Ordering::SeqCst) < 100 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Small calls, large ones that the daemon takes in several turns, and
    // reads whose answers it sends in several turns, while more
    // connections come.
    let results: Vec<_> = [&SEND[..], &large, &show, &SEND, &large, &show, &show]
        .iter()
        .map(|args| finished(&live(&env, args).output().unwrap()))
        .collect();
    stop.store(true, Ordering::SeqCst);
    flood.join().unwrap();
    for (status, answer) in results {
        assert_eq!(status, 0, "{answer}");
    }
    assert_eq!(threads_alone(&env), 5);
    // Some calls may have run in their commands, turned away; none failed.
    assert_eq!(daemon.stop().0, 0);
}

#[test]
fn every_connection_closed_before_its_call_ran_is_told_so() {
    let env = TestEnv::initialized();
    let line = call_line(&env, &SEND);
    let daemon = Daemon::start(&env, &[]);
    // Sends nothing: closed after its few seconds, with a word.
    let idle = UnixStream::connect(socket(&env)).unwrap();
    let answer = first_answer(&idle).expect("closed without a word");
    assert!(answer["not_run"].is_string(), "{answer}");
    // A line longer than any call.
    let long = UnixStream::connect(socket(&env)).unwrap();
    let writer = {
        let long = long.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 20];
            while (&long).write_all(&chunk).is_ok() {}
        })
    };
    let answer = first_answer(&long).expect("closed without a word");
    assert!(answer["not_run"].is_string(), "{answer}");
    writer.join().unwrap();
    // When the daemon is asked to stop: half a line taken, and connections
    // it has not yet accepted, more than it accepts in a turn, a real
    // command's among them.
    let half_line = |stream: UnixStream| {
        (&stream).write_all(&line[..line.len() / 2]).unwrap();
        stream
    };
    let mut halves = vec![half_line(UnixStream::connect(socket(&env)).unwrap())];
    std::thread::sleep(Duration::from_millis(200));
    daemon.signal(Signal::STOP);
    halves.extend((0..20).map(|_| half_line(UnixStream::connect(socket(&env)).unwrap())));
    let command = live(&env, &SEND)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    daemon.signal(Signal::TERM);
    daemon.signal(Signal::CONT);
    assert_eq!(daemon.stop(), (0, 0));
    for half in &halves {
        let answer = first_answer(half).expect("closed without a word");
        assert!(answer["not_run"].is_string(), "{answer}");
    }
    let (status, sent) = finished(&command.wait_with_output().unwrap());
    assert_eq!(status, 0, "{sent}");
    assert_eq!(threads_alone(&env), 1, "the command ran its call itself");
}
