//! Running the `inbox` binary under test as separate OS processes, the way
//! agents run it: one process per command, `--json`, a clean environment and
//! the real clock. Also: finding (or building) that binary, and stopping,
//! resuming and killing processes.
//!
//! Every process's stdout and stderr go to files, not pipes, so that a
//! process can be killed at any moment without a reader to coordinate and
//! without a full pipe ever blocking it. This module must never interpret an
//! outcome beyond the JSON contract; the checks decide what is acceptable.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::failure::Failure;

/// The `inbox` binary under test.
#[derive(Clone, Debug)]
pub struct Inbox {
    bin: PathBuf,
}

impl Inbox {
    /// The binary at `bin`.
    pub fn new(bin: PathBuf) -> Inbox {
        Inbox { bin }
    }

    /// Where the binary is.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// `inbox ARGS --db DB --json`, run in the database's folder with the
    /// real clock and none of the caller's `INBOX_*` variables.
    pub fn command(&self, db: &Path, args: &[String]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .arg("--db")
            .arg(db)
            .arg("--json")
            .env_remove("INBOX_DB")
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_NOW")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        if let Some(dir) = db.parent() {
            command.current_dir(dir);
        }
        command
    }

    /// Runs `inbox ARGS` on `db` to completion.
    pub fn run(&self, check: &str, db: &Path, args: &[String]) -> Result<Outcome, Failure> {
        let started = Instant::now();
        let output = self.command(db, args).output().map_err(|e| {
            Failure::harness(check, format!("cannot run {}: {e}", self.bin.display()))
        })?;
        Ok(Outcome {
            args: args.to_vec(),
            code: output.status.code(),
            signal: output.status.signal(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            elapsed: started.elapsed(),
        })
    }

    /// Starts `inbox ARGS` on `db` with stdout and stderr going to files
    /// named `stem.out` / `stem.err` in `dir`; `stdin` says what it reads.
    pub fn spawn(
        &self,
        check: &str,
        db: &Path,
        args: &[String],
        dir: &Path,
        stem: &str,
        stdin: Stdio,
    ) -> Result<Running, Failure> {
        let out_path = dir.join(format!("{stem}.out"));
        let err_path = dir.join(format!("{stem}.err"));
        let file = |path: &Path| {
            std::fs::File::create(path).map_err(|e| {
                Failure::harness(check, format!("cannot create {}: {e}", path.display()))
            })
        };
        let (out, err) = (file(&out_path)?, file(&err_path)?);
        let mut command = self.command(db, args);
        command.stdin(stdin).stdout(out).stderr(err);
        let started = Instant::now();
        let child = command.spawn().map_err(|e| {
            Failure::harness(check, format!("cannot start {}: {e}", self.bin.display()))
        })?;
        Ok(Running {
            child,
            args: args.to_vec(),
            started,
            out_path,
            err_path,
        })
    }
}

impl Inbox {
    /// Like [`Inbox::spawn`], but the process is frozen (SIGSTOP) before it
    /// even becomes `inbox`: a shell stops itself, and when continued
    /// (SIGCONT) execs `inbox ARGS`. Returns once the process is stopped.
    pub fn spawn_frozen(
        &self,
        check: &str,
        db: &Path,
        args: &[String],
        dir: &Path,
        stem: &str,
    ) -> Result<Running, Failure> {
        let mut wrapped = vec![
            "-c".to_owned(),
            r#"kill -STOP $$ && exec "$@""#.to_owned(),
            "sh".to_owned(),
            self.bin.display().to_string(),
        ];
        wrapped.extend(args.iter().cloned());
        let shell = Inbox::new(PathBuf::from("sh"));
        // `sh -c SCRIPT sh BIN ARGS... --db DB --json`: the shell's own
        // arguments are exactly inbox's command line.
        let mut running = shell.spawn(check, db, &wrapped, dir, stem, Stdio::null())?;
        running.args = args.to_vec();
        if !wait_stopped(running.pid(), Duration::from_secs(10)) {
            running.kill();
            return Err(Failure::harness(check, "a frozen process never stopped"));
        }
        Ok(running)
    }
}

/// A process started by [`Inbox::spawn`].
#[derive(Debug)]
pub struct Running {
    /// The process.
    pub child: Child,
    /// Its arguments (without `--db` and `--json`).
    pub args: Vec<String>,
    /// When it was started.
    pub started: Instant,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Running {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL (harmless if it already exited).
    pub fn kill(&mut self) {
        // std never signals a child it has already reaped, and a zombie
        // ignores the signal: either way the outcome stays what it was.
        let _ = self.child.kill();
    }

    /// Waits for it to end and collects what it printed.
    pub fn finish(mut self, check: &str) -> Result<Outcome, Failure> {
        let status = self
            .child
            .wait()
            .map_err(|e| Failure::harness(check, format!("cannot wait for inbox: {e}")))?;
        let elapsed = self.started.elapsed();
        Ok(Outcome {
            args: self.args,
            code: status.code(),
            signal: status.signal(),
            stdout: read_lossy(&self.out_path),
            stderr: read_lossy(&self.err_path),
            elapsed,
        })
    }

    /// Like [`Running::finish`], but kills the process first if it has not
    /// ended within `limit` (and then reports that it hung).
    pub fn finish_within(mut self, check: &str, limit: Duration) -> Result<Outcome, Failure> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return self.finish(check),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    self.kill();
                    let outcome = self.finish(check)?;
                    return Err(Failure::violation(
                        check,
                        "every command ends on its own",
                        format!("still running after {limit:?}, killed:\n{outcome}"),
                    ));
                }
                Err(e) => {
                    return Err(Failure::harness(
                        check,
                        format!("cannot wait for inbox: {e}"),
                    ));
                }
            }
        }
    }
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// What one `inbox` process did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Its arguments (without `--db` and `--json`).
    pub args: Vec<String>,
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
    /// From start to exit.
    pub elapsed: Duration,
}

impl Outcome {
    /// The command name (`send`, `claim`, ...).
    pub fn command(&self) -> &str {
        self.args.first().map_or("", String::as_str)
    }

    /// Whether a signal (our SIGKILL) ended it.
    pub fn killed(&self) -> bool {
        self.signal.is_some()
    }

    /// stdout as the JSON contract promises it: exactly one line holding one
    /// JSON object with a boolean `ok`.
    pub fn json(&self) -> Option<serde_json::Value> {
        let line = self.stdout.strip_suffix('\n')?;
        if line.contains('\n') {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        value.get("ok")?.as_bool()?;
        Some(value)
    }

    /// The error code of a failed command.
    pub fn error_code(&self) -> Option<String> {
        self.json()?
            .pointer("/error/code")?
            .as_str()
            .map(str::to_owned)
    }

    /// Anything concurrency must never produce: a storage or internal error
    /// (exit 50) or SQLite's lock error leaking through.
    pub fn storage_trouble(&self) -> bool {
        self.code == Some(50)
            || self.stdout.contains("database is locked")
            || self.stderr.contains("database is locked")
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        format!("inbox {} --json", shell_words(&self.args))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ended = match (self.code, self.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "ended without a status".to_owned(),
        };
        write!(
            f,
            "$ {}\n{ended} after {:?}\nstdout: {}\nstderr: {}",
            self.command_line(),
            self.elapsed,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

/// Arguments quoted for a shell, so a printed command can be pasted.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to `pid` with the `kill` command
/// (this crate has no unsafe code, so no direct syscall).
pub fn signal(check: &str, pid: u32, signal: &str) -> Result<(), Failure> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .status()
        .map_err(|e| Failure::harness(check, format!("cannot run kill -{signal} {pid}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::harness(
            check,
            format!("kill -{signal} {pid} failed: {status}"),
        ))
    }
}

/// The scheduler state of `pid` from `/proc` (`T` when stopped), if known.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits until `pid` is stopped (SIGSTOP delivered); false if it is not
/// within `limit`. Where `/proc` cannot tell, trusts the signal.
pub fn wait_stopped(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match process_state(pid) {
            Some('T') | None => return true,
            Some(_) if Instant::now() >= deadline => return false,
            Some(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Finds the `inbox` binary: `explicit`, else `$INBOX_FAULT_BIN`, else the
/// one next to this executable (`target/<profile>/`), building it with
/// `cargo build -p inbox-cli` in this workspace when it is missing. With
/// `build` set, always runs that build first, so a test never runs a stale
/// binary (cargo makes it a no-op when nothing changed).
pub fn locate_inbox(explicit: Option<&Path>, build: bool) -> Result<Inbox, String> {
    if let Some(path) = explicit {
        return checked(path.to_owned());
    }
    if let Some(path) = std::env::var_os("INBOX_FAULT_BIN").filter(|p| !p.is_empty()) {
        return checked(PathBuf::from(path));
    }
    let (profile_dir, profile) = profile_dir()?;
    let candidate = profile_dir.join("inbox");
    // Build only inside a cargo target folder (it holds CACHEDIR.TAG), never
    // next to an installed copy of this harness.
    let in_target = profile_dir
        .parent()
        .is_some_and(|target| target.join("CACHEDIR.TAG").is_file());
    if in_target && (build || !candidate.is_file()) {
        build_inbox(&profile_dir, &profile)?;
    }
    if !candidate.is_file() {
        return Err(format!(
            "no inbox binary at {}; pass --inbox PATH (or set INBOX_FAULT_BIN)",
            candidate.display()
        ));
    }
    checked(candidate)
}

fn checked(path: PathBuf) -> Result<Inbox, String> {
    let output = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if !output.status.success() || !output.stdout.starts_with(b"inbox ") {
        return Err(format!(
            "{} --version did not answer `inbox <version>`; is it the inbox binary?",
            path.display()
        ));
    }
    Ok(Inbox::new(path))
}

/// `target/<profile>` holding this executable (tests live one level deeper,
/// in `deps/`), and the profile's name.
fn profile_dir() -> Result<(PathBuf, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or("this executable has no folder")?
        .to_owned();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    Ok((dir, profile))
}

fn build_inbox(profile_dir: &Path, profile: &str) -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut command = Command::new(cargo);
            command
                .args(["build", "-p", "inbox-cli", "--bin", "inbox"])
                .current_dir(&workspace)
                .stdin(Stdio::null());
            match profile {
                "debug" => {}
                "release" => {
                    command.arg("--release");
                }
                other => {
                    command.args(["--profile", other]);
                }
            }
            if let Some(target) = profile_dir.parent() {
                command.arg("--target-dir").arg(target);
            }
            let output = command
                .output()
                .map_err(|e| format!("cannot run cargo to build inbox: {e}"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "cargo build -p inbox-cli failed:\n{}",
                    String::from_utf8_lossy(&output.stderr)
                ))
            }
        })
        .clone()
}
