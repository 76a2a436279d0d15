//! `inbox daemon`: commands hand their calls to a real daemon process over
//! its socket and answer exactly as they would alone; whatever is at the
//! socket's place that is not this user's live daemon is passed over or
//! refused, and a call sent without an answer is never run twice.
//!
//! The commands here run without `INBOX_NOW`: a test build's chosen clock
//! keeps a command from handing its call over (the daemon runs on the
//! system clock), so every other test runs its commands itself.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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
        assert!(call.starts_with(b"{\"protocol\":\"inbox-daemon/1\""));
        assert_eq!(status, 50, "{lost}");
        assert_eq!(lost["ok"], false);
        assert_eq!(lost["command"], "send");
        assert_eq!(lost["error"]["code"], "storage_error");
        assert!(message(&lost).contains("may or may not have run"), "{lost}");
        assert!(
            thread_ids(&env).is_empty(),
            "the command did not run it itself"
        );
    }
}

#[test]
fn a_refusal_lets_the_command_run_the_call_itself() {
    let env = TestEnv::initialized();
    let stand_in = stand_in(&env, b"{\"refused\":\"another build\"}\n");
    let (status, sent) = json(
        &env,
        &["send", "--from", "lead", "--to", "w1", "--subject", "S"],
    );
    stand_in.join().unwrap();
    assert_eq!(status, 0, "{sent}");
    assert_eq!(thread_ids(&env).len(), 1);
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
