//! What the report says about the machine and the versions measured, the
//! way `bench/src/machine.rs` describes them for the main benchmark (that
//! crate is a binary, so the idea is copied, not imported). Read-only: it
//! asks the OS, git, rustc and Cargo.lock, and must never change anything.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// The machine and versions of one run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Environment {
    /// When the run started (RFC 3339, UTC).
    pub(crate) date: String,
    /// The CPU model.
    pub(crate) cpu: String,
    /// Logical CPUs available to this process.
    pub(crate) cpus: usize,
    /// Total memory.
    pub(crate) memory: String,
    /// The kernel release.
    pub(crate) kernel: String,
    /// The file system of the temporary folder the SQLite files live in.
    pub(crate) filesystem: String,
    /// The commit measured, and whether the tree had changes.
    pub(crate) commit: String,
    /// `rustc --version`.
    pub(crate) rustc: String,
    /// wasmtime, as Cargo.lock pins it.
    pub(crate) wasmtime: String,
    /// The bundled SQLite.
    pub(crate) sqlite: String,
    /// `release` or `debug`: how this harness (and the host) was built.
    pub(crate) profile: &'static str,
}

/// Collects the environment; `tmp` is the folder the stores live in,
/// `root` the workspace.
pub(crate) fn environment(root: &Path, tmp: &Path, sqlite: String) -> Environment {
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let memory = read("/proc/meminfo")
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
        .unwrap_or_else(|| "unknown".into());
    let filesystem = first_line(Command::new("stat").args(["-f", "-c", "%T"]).arg(tmp))
        .map(|fs| {
            format!(
                "{fs} ({})",
                tmp.parent()
                    .map_or(String::new(), |p| p.display().to_string())
            )
        })
        .unwrap_or_else(|| "unknown".into());
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    Environment {
        date: now_rfc3339(),
        cpu,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        memory,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        filesystem,
        commit: commit(root),
        rustc: first_line(Command::new("rustc").arg("--version"))
            .unwrap_or_else(|| "unknown".into()),
        wasmtime: locked_version(&lock, "wasmtime").unwrap_or_else(|| "unknown".into()),
        sqlite,
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    }
}

/// The machine's load right now: the 1-minute load average and the share
/// of the last 60 s in which runnable tasks waited for a CPU or for I/O
/// (`/proc/pressure`), as the other benchmark reports print it. Other
/// sessions share this machine; a loaded run is noisier.
pub(crate) fn load() -> String {
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

/// The short commit, noting uncommitted changes outside the report itself
/// (which changes with every run and is not the code measured).
fn commit(root: &Path) -> String {
    let sha =
        first_line(
            Command::new("git")
                .arg("-C")
                .arg(root)
                .args(["rev-parse", "--short", "HEAD"]),
        );
    let dirty = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--porcelain", "--untracked-files=no", "--", "."])
        .arg(":(exclude)docs/plugin-benchmarks.md")
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    format!(
        "{}{}",
        sha.unwrap_or_else(|| "unknown".into()),
        if dirty { " + uncommitted changes" } else { "" }
    )
}

/// The version Cargo.lock records for package `name`.
pub(crate) fn locked_version(lock: &str, name: &str) -> Option<String> {
    let header = format!("name = \"{name}\"\nversion = \"");
    let at = lock.find(&header)? + header.len();
    let rest = &lock[at..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Now, as RFC 3339 with milliseconds (the engine's own timestamp format).
pub(crate) fn now_rfc3339() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    inbox_engine::Timestamp::from_millis(millis).to_string()
}

fn first_line(cmd: &mut Command) -> Option<String> {
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
}
