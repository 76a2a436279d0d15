//! What a report says about the machine it ran on and the code it measured:
//! the CPU, memory, kernel and file system ([`Machine`]), the machine's load
//! ([`load`]), the commit ([`commit`]) and versions of tools.
//!
//! Read-only: it asks the OS, git, rustc and Cargo.lock, and must never
//! change anything. It never fails either: what it cannot read it reports
//! as `unknown`.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// The machine of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// When the run started (RFC 3339, UTC).
    pub date: String,
    /// The CPU model.
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// Total memory.
    pub memory: String,
    /// The kernel release.
    pub kernel: String,
    /// The file system of the folder the stores live in, and that folder's
    /// parent.
    pub filesystem: String,
}

impl Machine {
    /// Collects the machine's facts; `scratch` is the folder the stores of
    /// the run live in.
    pub fn collect(scratch: &Path) -> Machine {
        Machine {
            date: now_rfc3339(),
            cpu: cpu(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory: memory(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            filesystem: filesystem(scratch),
        }
    }
}

fn cpu() -> String {
    read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn memory() -> String {
    read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            let kb: u64 = l
                .strip_prefix("MemTotal:")?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kb as f64 / 1_048_576.0))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `ext4 (/tmp)`: the file system `dir` is on, and `dir`'s parent.
fn filesystem(dir: &Path) -> String {
    first_line(Command::new("stat").args(["-f", "-c", "%T"]).arg(dir))
        .map(|fs| {
            format!(
                "{fs} ({})",
                dir.parent()
                    .map_or(String::new(), |p| p.display().to_string())
            )
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The machine's load right now: the 1-minute load average and the share
/// of the last 60 s in which runnable tasks waited for a CPU or for I/O
/// (`/proc/pressure`). Other sessions share this machine; a loaded run is
/// noisier, and the reports say so.
pub fn load() -> String {
    let loadavg = read("/proc/loadavg");
    let one = loadavg.split_whitespace().next().unwrap_or("?").to_owned();
    let pressure = |what: &str| -> String {
        read(&format!("/proc/pressure/{what}"))
            .lines()
            .next()
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix("avg60="))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "?".into())
    };
    format!(
        "load {one}, CPU pressure {} %, I/O pressure {} %",
        pressure("cpu"),
        pressure("io")
    )
}

/// The commit measured.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The short hash of `HEAD` (`unknown` outside a git checkout).
    pub sha: String,
    /// Whether tracked files differ from it, outside the excluded paths.
    pub dirty: bool,
}

/// The commit of the checkout at `root`; changes to `exclude` (pathspecs
/// relative to `root`: the report's own files, which change with every run
/// and are not the code measured) do not make it dirty.
pub fn commit(root: &Path, exclude: &[&str]) -> Commit {
    let git = || {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(root);
        cmd
    };
    let sha = first_line(git().args(["rev-parse", "--short", "HEAD"]));
    let dirty = git()
        .args(["status", "--porcelain", "--untracked-files=no", "--", "."])
        .args(exclude.iter().map(|path| format!(":(exclude){path}")))
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    Commit {
        sha: sha.unwrap_or_else(|| "unknown".into()),
        dirty,
    }
}

/// `rustc --version`.
pub fn rustc() -> String {
    first_line(Command::new("rustc").arg("--version")).unwrap_or_else(|| "unknown".into())
}

/// The version Cargo.lock (the text `lock`) records for package `name`.
pub fn locked_version(lock: &str, name: &str) -> Option<String> {
    let header = format!("name = \"{name}\"\nversion = \"");
    let at = lock.find(&header)? + header.len();
    let rest = &lock[at..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Now, as RFC 3339 with milliseconds (the engine's own timestamp format).
pub fn now_rfc3339() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    inbox_engine::Timestamp::from_millis(millis).to_string()
}

/// The first line `cmd` prints on stdout, trimmed; `None` when it cannot
/// run or that line is empty.
pub fn first_line(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_version_from_cargo_lock() {
        let lock = "[[package]]\nname = \"wasmtime\"\nversion = \"36.0.20\"\n\n[[package]]\nname = \"wasmtime-environ\"\nversion = \"36.0.20\"\n";
        assert_eq!(locked_version(lock, "wasmtime").as_deref(), Some("36.0.20"));
        assert_eq!(locked_version(lock, "rusqlite"), None);
    }

    #[test]
    fn timestamps_are_rfc3339_with_milliseconds() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 24, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'), "{now}");
    }
}
