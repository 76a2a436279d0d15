//! What the report says about the machine, the versions measured and how
//! every system is configured. Read-only: it asks the OS, git and the
//! binaries, and must never change anything.

use std::path::Path;
use std::process::Command;

use crate::ctx::Ctx;
use crate::report::Environment;
use crate::services::{PG_CONFIG, REDIS_FULL_CONFIG, REDIS_NORMAL_CONFIG, RedisServer};

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

/// The machine's load right now, as the report prints it: the 1-minute
/// load average and the share of the last 60 s in which runnable tasks
/// waited for a CPU (`/proc/pressure/cpu`) or for I/O. Other sessions share
/// this machine; a loaded run is noisier, and the report says so.
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

/// p50 and p99 of `fdatasync` after a 4 KiB write in `dir`, in µs.
pub(crate) fn fsync_cost(dir: &Path, n: usize) -> String {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("fsync-probe");
    let mut samples = Vec::with_capacity(n);
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&path)?;
        for i in 0..n {
            file.seek(SeekFrom::Start((i % 16) as u64 * 4096))?;
            file.write_all(&[b'x'; 4096])?;
            let t0 = std::time::Instant::now();
            file.sync_data()?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(()) => {
            let s = crate::stats::Summary::of(&samples);
            format!(
                "p50 {}, p99 {}, max {} ({n} writes of 4 KiB, each followed by `fdatasync`)",
                crate::stats::fmt_us(s.p50),
                crate::stats::fmt_us(s.p99),
                crate::stats::fmt_us(s.max)
            )
        }
        Err(e) => format!("could not measure: {e}"),
    }
}

/// Collects the environment of this run.
pub(crate) fn environment(ctx: &Ctx, root: &Path) -> Environment {
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
    let git = |args: &[&str]| first_line(Command::new("git").arg("-C").arg(root).args(args));
    let dirty = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--porcelain", "--untracked-files=no", "--", "."])
        // The report's own files change with every run; they are not the
        // code being measured.
        .args([":(exclude)docs/BENCHMARKS.md", ":(exclude)docs/bench"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let commit = format!(
        "{}{}",
        git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into()),
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        }
    );
    let filesystem = first_line(
        Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(ctx.tmp.path()),
    )
    .map(|fs| {
        format!(
            "{fs} ({})",
            ctx.tmp
                .path()
                .parent()
                .map_or(String::new(), |p| p.display().to_string())
        )
    })
    .unwrap_or_else(|| "unknown".into());
    let mut versions = vec![
        (
            "inbox".to_owned(),
            first_line(Command::new(&ctx.bins.inbox).arg("--version")).unwrap_or_default(),
        ),
        ("SQLite (bundled)".to_owned(), rusqlite::version().to_owned()),
        ("redis-server".to_owned(), RedisServer::version()),
        ("PostgreSQL".to_owned(), ctx.pg.version()),
        (
            "rustc".to_owned(),
            first_line(Command::new("rustc").arg("--version")).unwrap_or_else(|| "unknown".into()),
        ),
        (
            "clients".to_owned(),
            "Rust crates `redis` 1.x (sync) and `postgres` 0.19 (sync), one connection per client; `redis-cli` and `psql` for the CLI variants".to_owned(),
        ),
    ];
    versions.push((
        "fsync cost in the scratch folder (start of run)".to_owned(),
        fsync_cost(ctx.tmp.path(), 200),
    ));
    versions.push(("machine load (start of run)".to_owned(), load()));
    let configuration = vec![
        (
            "inbox".to_owned(),
            "`inbox init --durability normal` (WAL, `synchronous=NORMAL`, the default) / `--durability full` (`synchronous=FULL`: fsync per commit). Everything else as shipped.".to_owned(),
        ),
        (
            "JSONL inbox (seed 002)".to_owned(),
            "normal: one `O_APPEND` write per message, no fsync; full: `fdatasync` after each append (and the cursor file written through a temporary file, fsynced with its folder). Waiters poll the file size every 1 s; claiming workers share the cursor under `flock`.".to_owned(),
        ),
        (
            "JSON array + lock".to_owned(),
            "normal: lock file (`O_EXCL`), read + parse + rewrite the whole array through a temporary file and rename, no fsync; full: the temporary file and the folder fsynced before the lock is released. Not in the wait workloads (its readers poll like JSONL's).".to_owned(),
        ),
        (
            "file-drop (seed 001)".to_owned(),
            "normal: one file per descriptor, claimed by rename, no fsync; full: file and folder fsynced on every create and rename. The poller looks every 2 s (the seed's default) and takes one descriptor per tick; claim workers drain without the tick.".to_owned(),
        ),
        ("Redis (normal)".to_owned(), REDIS_NORMAL_CONFIG.to_owned()),
        ("Redis (full)".to_owned(), REDIS_FULL_CONFIG.to_owned()),
        ("PostgreSQL".to_owned(), PG_CONFIG.to_owned()),
        (
            "process-spawn floor".to_owned(),
            "`inbox-bench-noop`: `fn main() {}` in this crate, built in the same release profile as `inbox`, started with the same `std::process::Command` (stdout and stderr piped, waited for).".to_owned(),
        ),
    ];
    Environment {
        date: crate::files::now_iso(),
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        memory,
        filesystem,
        commit,
        versions,
        configuration,
    }
}
