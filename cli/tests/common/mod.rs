//! The test environment for `inbox` end-to-end tests, in the style of jj's
//! `cli/tests`: every test runs the real binary as separate processes in a
//! temporary folder and snapshots what a user sees (exit status, stdout,
//! stderr), normalized so that snapshots are stable:
//!
//! - ids (`thr_`, `msg_`, `art_` ULIDs) become `thr_00000000000000000000000001`,
//!   ... numbered in order of first appearance within the test (the same
//!   length as a real id, so tables stay aligned);
//! - commands run with `INBOX_NOW` (default 2026-01-01T00:00:00Z), so
//!   timestamps are fixed but for the milliseconds that pass while the test
//!   runs, which are replaced by `.mmm`;
//! - the temporary folder becomes `$TEST_DIR`.

// Test helpers report failures by panicking.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    dead_code,
    unreachable_pub
)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The `inbox` binary under test.
pub fn inbox_bin() -> &'static str {
    env!("CARGO_BIN_EXE_inbox")
}

/// The `orch` binary under test.
pub fn orch_bin() -> &'static str {
    env!("CARGO_BIN_EXE_orch")
}

/// A temporary project folder with its own database.
pub struct TestEnv {
    dir: tempfile::TempDir,
    now: RefCell<String>,
    ids: RefCell<HashMap<String, String>>,
    counters: RefCell<HashMap<String, usize>>,
}

/// What one run of `inbox` did, normalized for snapshots.
pub struct Run {
    pub status: i32,
    /// Normalized, for snapshots.
    pub stdout: String,
    /// Normalized, for snapshots.
    pub stderr: String,
    /// As printed, for parsing ids out of it.
    pub raw_stdout: String,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "exit: {}", self.status)?;
        if !self.stdout.is_empty() {
            writeln!(f, "--- stdout ---")?;
            write!(f, "{}", self.stdout)?;
            if !self.stdout.ends_with('\n') {
                writeln!(f)?;
            }
        }
        if !self.stderr.is_empty() {
            writeln!(f, "--- stderr ---")?;
            write!(f, "{}", self.stderr)?;
            if !self.stderr.ends_with('\n') {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}

impl Run {
    /// stdout parsed as the JSON contract (with the real ids).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.raw_stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{self}"))
    }
}

impl TestEnv {
    /// A fresh folder; the database is not created yet.
    pub fn new() -> TestEnv {
        TestEnv {
            dir: tempfile::tempdir().unwrap(),
            now: RefCell::new("2026-01-01T00:00:00.000Z".to_owned()),
            ids: RefCell::new(HashMap::new()),
            counters: RefCell::new(HashMap::new()),
        }
    }

    /// A fresh folder with `inbox init` already run.
    pub fn initialized() -> TestEnv {
        let env = TestEnv::new();
        let run = env.run(&["init"]);
        assert_eq!(run.status, 0, "{run}");
        env
    }

    /// The project folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The default database of the folder.
    pub fn db(&self) -> PathBuf {
        self.dir().join(".agents/coord.db")
    }

    /// Sets the instant later commands start at (`INBOX_NOW`).
    pub fn set_now(&self, now: &str) {
        *self.now.borrow_mut() = now.to_owned();
    }

    /// A `Command` for `inbox args...` in the folder, with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(inbox_bin(), args)
    }

    /// A `Command` for `orch args...`, as [`TestEnv::command`].
    pub fn orch_command(&self, args: &[&str]) -> Command {
        self.command_of(orch_bin(), args)
    }

    /// Runs `orch args...` to completion.
    pub fn orch(&self, args: &[&str]) -> Run {
        self.run_command(self.orch_command(args))
    }

    /// Runs `orch args... --json`, as [`TestEnv::json`].
    pub fn orch_json(&self, args: &[&str], status: i32) -> serde_json::Value {
        self.json_of(orch_bin(), args, status)
    }

    /// Runs `orch args` and appends `$ orch ARGS` and what it printed to
    /// `transcript`, as [`TestEnv::step`].
    pub fn orch_step(&self, transcript: &mut String, args: &[&str]) -> Run {
        let run = self.orch(args);
        transcript.push_str(&format!(
            "$ orch {}\n{run}\n",
            self.normalize(&args.join(" "))
        ));
        run
    }

    pub fn command_of(&self, binary: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut command = Command::new(binary);
        command
            .args(args)
            .current_dir(self.dir())
            .env_remove("INBOX_DB")
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_AGENT_TOKEN")
            .env_remove("INBOX_AGENT_TOKEN_FILE")
            .env("INBOX_NOW", self.now.borrow().as_str())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    /// Runs `inbox args...` to completion.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_command(self.command(args))
    }

    /// Runs a prepared command to completion.
    pub fn run_command(&self, mut command: Command) -> Run {
        let output = command.output().unwrap();
        let raw_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        Run {
            status: output.status.code().unwrap_or(-1),
            stdout: self.normalize(&raw_stdout),
            raw_stdout,
            stderr: self.normalize(&String::from_utf8_lossy(&output.stderr)),
        }
    }

    /// Runs `inbox args... --json` and returns the parsed (raw, not
    /// normalized) JSON, panicking unless the exit code is `status`.
    pub fn json(&self, args: &[&str], status: i32) -> serde_json::Value {
        self.json_of(inbox_bin(), args, status)
    }

    fn json_of(&self, binary: &str, args: &[&str], status: i32) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--json");
        let output = self.command_of(binary, &all).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(status),
            "{binary} {}\nstdout: {stdout}\nstderr: {}",
            all.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }

    /// Runs `args` and appends `$ inbox ARGS` and what it printed to
    /// `transcript`, the way a reader of the snapshot sees a session.
    pub fn step(&self, transcript: &mut String, args: &[&str]) -> Run {
        let run = self.run(args);
        transcript.push_str(&format!(
            "$ inbox {}\n{run}\n",
            self.normalize(&args.join(" "))
        ));
        run
    }

    /// Replaces what differs between runs (see the module docs).
    pub fn normalize(&self, text: &str) -> String {
        let dir = self.dir().display().to_string();
        let text = text.replace(&dir, "$TEST_DIR");
        let ids =
            regex::Regex::new(r"\b(thr|msg|art|run|council)_[0-9A-HJKMNP-TV-Z]{26}\b").unwrap();
        let text = ids
            .replace_all(&text, |caps: &regex::Captures<'_>| {
                self.stable_id(&caps[0], &caps[1])
            })
            .into_owned();
        let millis = regex::Regex::new(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d{3}Z").unwrap();
        let text = millis.replace_all(&text, "$1.mmmZ").into_owned();
        let digest = regex::Regex::new(r"\b[0-9a-f]{64}\b").unwrap();
        digest.replace_all(&text, "<sha256>").into_owned()
    }

    fn stable_id(&self, id: &str, prefix: &str) -> String {
        let mut ids = self.ids.borrow_mut();
        if let Some(stable) = ids.get(id) {
            return stable.clone();
        }
        let mut counters = self.counters.borrow_mut();
        let n = counters.entry(prefix.to_owned()).or_insert(0);
        *n += 1;
        let stable = format!("{prefix}_{n:0>26}");
        ids.insert(id.to_owned(), stable.clone());
        stable
    }
}

/// A bridge (`inbox bridge KIND ARGS... --json`) running as a child process
/// of a test, its JSON lines read as they come.
pub struct BridgeProcess {
    child: std::process::Child,
    lines: std::io::BufReader<std::process::ChildStdout>,
}

impl BridgeProcess {
    /// Starts `inbox bridge KIND ARGS... --json` in `env` and waits for its
    /// `watching` line.
    pub fn start(env: &TestEnv, kind: &str, args: &[&str]) -> BridgeProcess {
        BridgeProcess::start_with(env, kind, args, &[])
    }

    /// [`BridgeProcess::start`] with more environment variables (a test
    /// hook, say).
    pub fn start_with(
        env: &TestEnv,
        kind: &str,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> BridgeProcess {
        let mut all = vec!["bridge", kind];
        all.extend_from_slice(args);
        all.push("--json");
        let mut command = env.command(&all);
        command.envs(vars.iter().copied());
        command.stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = command.spawn().unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut bridge = BridgeProcess { child, lines };
        assert_eq!(bridge.next()["action"], "watching");
        bridge
    }

    /// The next action line.
    pub fn next(&mut self) -> serde_json::Value {
        use std::io::BufRead as _;
        let mut line = String::new();
        self.lines.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"))
    }

    /// The next action line that is `action`, skipping others.
    pub fn next_of(&mut self, action: &str) -> serde_json::Value {
        loop {
            let line = self.next();
            if line["action"] == action {
                return line;
            }
        }
    }

    /// Its process id.
    pub fn pid(&self) -> rustix::process::Pid {
        rustix::process::Pid::from_child(&self.child)
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Stops it with `signal` and returns its exit code (-1 when killed)
    /// and the lines it printed meanwhile.
    pub fn stop(mut self, signal: rustix::process::Signal) -> (i32, Vec<serde_json::Value>) {
        use std::io::BufRead as _;
        self.signal(signal);
        let mut rest = Vec::new();
        let mut line = String::new();
        while self.lines.read_line(&mut line).unwrap() > 0 {
            if let Ok(value) = serde_json::from_str(&line) {
                rest.push(value);
            }
            line.clear();
        }
        let status = self.child.wait().unwrap();
        (status.code().unwrap_or(-1), rest)
    }
}
