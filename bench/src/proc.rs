//! Child processes, timing and CPU accounting: the harness's only contact
//! with the operating system's process table.
//!
//! It owns spawning (timed, or with a line reader whose timestamps are taken
//! the moment a line arrives), killing what the harness started (only by the
//! pid it got back from `spawn`, never by name), `/proc/<pid>/stat` CPU time,
//! free loopback ports and a small jitter source. It must never decide what a
//! workload measures; workloads call it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// Microseconds between two instants, as the f64 every summary takes.
pub(crate) fn us_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

/// Microseconds from `a` to `b` (negative when `b` is earlier).
pub(crate) fn us_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64() * 1e6
    } else {
        -((a - b).as_secs_f64() * 1e6)
    }
}

/// Runs `cmd` to completion with stdin closed and stdout/stderr captured,
/// and returns its wall time (spawn to reaped) in µs with its output.
pub(crate) fn run_timed(cmd: &mut Command) -> Result<(f64, Output)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    let output = child
        .wait_with_output()
        .with_context(|| format!("cannot wait for {}", describe(cmd)))?;
    Ok((us_since(start), output))
}

/// Like [`run_timed`], but a non-zero exit (other than those in `allowed`)
/// is an error that quotes the command and its stderr.
pub(crate) fn run_checked(cmd: &mut Command, allowed: &[i32]) -> Result<(f64, Output)> {
    let (us, output) = run_timed(cmd)?;
    let code = output.status.code().unwrap_or(-1);
    if code != 0 && !allowed.contains(&code) {
        bail!(
            "{} exited with {}: {}{}",
            describe(cmd),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    Ok((us, output))
}

/// `program arg arg ...`, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    if text.len() > 200 {
        text.truncate(200);
        text.push('…');
    }
    text
}

/// A child the harness started: killed and reaped when dropped, so an error
/// anywhere never leaves a worker or a server behind.
pub(crate) struct ChildGuard {
    child: Option<Child>,
    name: String,
}

impl ChildGuard {
    /// Spawns `cmd` with the given stdio.
    pub(crate) fn spawn(cmd: &mut Command, name: &str) -> Result<ChildGuard> {
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {name}: {}", describe(cmd)))?;
        Ok(ChildGuard {
            child: Some(child),
            name: name.to_owned(),
        })
    }

    /// The child's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The child's stdin, once.
    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut().and_then(|c| c.stdin.take())
    }

    /// Reads the child's stdout line by line on a thread; see [`Lines`].
    pub(crate) fn lines(&mut self) -> Result<Lines> {
        let stdout = self
            .child
            .as_mut()
            .and_then(|c| c.stdout.take())
            .ok_or_else(|| anyhow!("{}: stdout is not piped", self.name))?;
        Ok(Lines::new(stdout, &self.name))
    }

    /// Sends `signal` to the child (by its own pid).
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        if let Some(pid) = i32::try_from(self.pid())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// Waits up to `timeout` for the child to exit; true if it did.
    pub(crate) fn wait_timeout(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Some(child) = self.child.as_mut() {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => {
                    self.child = None;
                    return true;
                }
                Ok(None) if Instant::now() >= deadline => return false,
                Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        true
    }

    /// Waits for the child and returns its exit code (-1 if killed).
    pub(crate) fn wait_code(&mut self) -> Result<i32> {
        match self.child.take() {
            Some(mut child) => {
                let status = child
                    .wait()
                    .with_context(|| format!("cannot wait for {}", self.name))?;
                Ok(status.code().unwrap_or(-1))
            }
            None => Ok(-1),
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// A child's stdout, read line by line on its own thread. Each line carries
/// the instant it was read, taken on the reading thread as soon as `read`
/// returned, so a busy main thread does not inflate a wake latency.
pub(crate) struct Lines {
    rx: Receiver<(Instant, String)>,
    name: String,
}

impl Lines {
    fn new(stdout: impl std::io::Read + Send + 'static, name: &str) -> Lines {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let at = Instant::now();
                        if tx.send((at, line.trim_end().to_owned())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Lines {
            rx,
            name: name.to_owned(),
        }
    }

    /// The next line and when it arrived; an error on timeout or end of
    /// output, naming the child.
    pub(crate) fn next(&self, timeout: Duration) -> Result<(Instant, String)> {
        match self.rx.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => {
                bail!("{} printed nothing within {timeout:?}", self.name)
            }
            Err(RecvTimeoutError::Disconnected) => {
                bail!("{} closed its output (it exited or crashed)", self.name)
            }
        }
    }

    /// The next line, which must equal `expected` (e.g. `ready`); a line
    /// starting with `error:` is reported as the child's error.
    pub(crate) fn expect(&self, expected: &str, timeout: Duration) -> Result<Instant> {
        let (at, line) = self.next(timeout)?;
        if line == expected {
            Ok(at)
        } else if let Some(error) = line.strip_prefix("error:") {
            bail!("{}: {}", self.name, error.trim())
        } else {
            bail!("{}: expected `{expected}`, got `{line}`", self.name)
        }
    }
}

/// Writes one line to a child's stdin.
pub(crate) fn send_line(stdin: &mut ChildStdin, line: &str) -> Result<()> {
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stdin.flush())
        .context("cannot write to a child process")
}

/// CPU time the process has used so far, in nanoseconds, from
/// `/proc/<pid>/schedstat` (the scheduler's own account, all threads). Clock
/// ticks from `/proc/<pid>/stat` are too coarse here: at 100 Hz an idle
/// waiter's few milliseconds over twenty seconds read as zero.
pub(crate) fn cpu_nanos(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/schedstat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| anyhow!("{path}: unexpected format: {text}"))
}

/// CPU time the whole process has used so far (user + system, every
/// thread, the exited ones included), in clock ticks, from fields 14 and 15
/// of `/proc/<pid>/stat`; see [`clock_ticks_per_second`].
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name (field 2) is in parentheses and may hold spaces;
    // the fields after it start with the state, field 3.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    match (field(14), field(15)) {
        (Some(utime), Some(stime)) => Ok(utime + stime),
        _ => bail!("{path}: unexpected format: {text}"),
    }
}

/// The kernel's clock ticks per second (`sysconf(_SC_CLK_TCK)`, what
/// `getconf CLK_TCK` prints), the unit of [`cpu_ticks`].
pub(crate) fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// CPU time every live thread of the process has used so far, in
/// nanoseconds: the sum of `/proc/<pid>/task/*/schedstat`. Finer than
/// [`cpu_ticks`] (`/proc/<pid>/schedstat` alone is the main thread's), but
/// a thread that has exited is no longer counted.
pub(crate) fn threads_cpu_nanos(pid: u32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for task in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        // A thread may end between the listing and the read.
        if let Ok(text) = std::fs::read_to_string(task?.path().join("schedstat")) {
            total += text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind a port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// Finds `program` on `PATH` (or under `extra` directories).
pub(crate) fn which(program: &str, extra: &[&str]) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(std::path::PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// A small xorshift generator for jitter and shuffles; quality does not
/// matter, only that workers and iterations do not move in lockstep.
pub(crate) struct Rng(u64);

impl Rng {
    /// Seeded from the clock, the pid and `salt`.
    pub(crate) fn new(salt: u64) -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng((nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            | 1)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A uniform duration in `[low, high)`.
    pub(crate) fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_micros().max(1) as u64;
        low + Duration::from_micros(self.next_u64() % span)
    }
}
