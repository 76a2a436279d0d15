//! What the report says about the machine (the kit's [`Machine`]), the
//! versions measured, the cost of an fsync here and how every system is
//! configured. Read-only: it asks the OS, git and the binaries, and must
//! never change anything but its own probe file in the scratch folder.

use std::path::Path;
use std::process::Command;

use inbox_bench_kit::machine::{self, Machine, first_line, load};
use inbox_bench_kit::stats::Summary;
use inbox_bench_kit::stores;

use crate::ctx::Ctx;
use crate::fmt::fmt_us;
use crate::report::Environment;
use crate::services::{PG_CONFIG, REDIS_FULL_CONFIG, REDIS_NORMAL_CONFIG, RedisServer};

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
            let s = Summary::of(&samples);
            format!(
                "p50 {}, p99 {}, max {} ({n} writes of 4 KiB, each followed by `fdatasync`)",
                fmt_us(s.p50),
                fmt_us(s.p99),
                fmt_us(s.max)
            )
        }
        Err(e) => format!("could not measure: {e}"),
    }
}

/// Collects the environment of this run.
pub(crate) fn environment(ctx: &Ctx, root: &Path) -> Environment {
    // The report's own files change with every run; they are not the code
    // being measured.
    let commit = machine::commit(root, &["docs/BENCHMARKS.md", "docs/bench"]);
    Environment {
        machine: Machine::collect(ctx.tmp.path()),
        commit: format!(
            "{}{}",
            commit.sha,
            if commit.dirty {
                " (with uncommitted changes)"
            } else {
                ""
            }
        ),
        versions: versions(ctx),
        configuration: CONFIGURATION
            .iter()
            .map(|(name, config)| ((*name).to_owned(), (*config).to_owned()))
            .collect(),
    }
}

/// The programs and libraries measured, and the machine's state at the
/// start of the run.
fn versions(ctx: &Ctx) -> Vec<(String, String)> {
    [
        (
            "inbox",
            format!(
                "{} ({})",
                first_line(Command::new(&ctx.bins.inbox).arg("--version")).unwrap_or_default(),
                linking(&ctx.bins.inbox)
            ),
        ),
        (
            "SQLite floor (`inbox-bench-sqlite-floor`)",
            linking(&ctx.bins.sqlite_floor).to_owned(),
        ),
        ("SQLite (bundled)", stores::sqlite_version().to_owned()),
        ("redis-server", RedisServer::version()),
        ("PostgreSQL", ctx.pg.version()),
        ("rustc", machine::rustc()),
        (
            "clients",
            "Rust crates `redis` 1.x (sync) and `postgres` 0.19 (sync), one connection per client; `redis-cli` and `psql` for the CLI variants".to_owned(),
        ),
        (
            "fsync cost in the scratch folder (start of run)",
            fsync_cost(ctx.tmp.path(), 200),
        ),
        ("machine load (start of run)", load()),
    ]
    .into_iter()
    .map(|(name, version)| (name.to_owned(), version))
    .collect()
}

/// How an ELF executable is linked: dynamically when it names an
/// interpreter (`PT_INTERP`, the dynamic loader), else statically, with
/// glibc or musl. Read by hand: four fields of the header do not need an
/// ELF crate.
pub(crate) fn linking(path: &Path) -> &'static str {
    let Ok(bytes) = std::fs::read(path) else {
        return "unreadable";
    };
    let field = |at: usize, len: usize| -> Option<u64> {
        let raw = bytes.get(at..at + len)?;
        Some(raw.iter().rev().fold(0, |n, b| n << 8 | u64::from(*b)))
    };
    // 64-bit little-endian ELF only: what the harness runs on.
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return "not a 64-bit ELF executable";
    }
    let (Some(offset), Some(size), Some(count)) = (field(0x20, 8), field(0x36, 2), field(0x38, 2))
    else {
        return "not a 64-bit ELF executable";
    };
    let interpreter = (0..count).any(|i| {
        let at = usize::try_from(offset + i * size).unwrap_or(usize::MAX);
        field(at, 4) == Some(3)
    });
    if interpreter {
        "dynamically linked"
    } else if contains(&bytes, b"GNU C Library") {
        // glibc's version banner, which a static glibc executable carries.
        "statically linked with glibc"
    } else {
        // The other C library a static Linux build may carry.
        "statically linked with musl"
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// How every system is configured, as the report's last table says.
const CONFIGURATION: [(&str, &str); 11] = [
    (
        "inbox",
        "`inbox init --durability normal` (WAL, `synchronous=NORMAL`, the default) / `--durability full` (`synchronous=FULL`: fsync per commit). Everything else as shipped.",
    ),
    (
        "bare SQLite queue and waiter (claim and wake workloads)",
        "The SQLite `inbox` links, WAL, 2 KiB pages, `synchronous=NORMAL` / `FULL`, SQLite's default checkpoints. One table of tasks with a partial index on the pending ones; claim is one `UPDATE ... RETURNING` of the first pending task, done one `UPDATE` checking the claim's token, each in its own `BEGIN IMMEDIATE` transaction. Waiting for the lock is SQLite's own busy handler (`busy_timeout`). No lease expiry, messages, event log or writer gate: what SQLite does under the same load with none of inbox's work. The waiter: a table of messages indexed by recipient; a message is one `INSERT` in its own `BEGIN IMMEDIATE` transaction; the waiter learns of it as inbox's does (inotify on the folder for the WAL's writes, kept armed; `PRAGMA data_version`, looked at every 50 µs for 10 ms after a write), then reads it with one indexed `SELECT`. Woken by a reply's rows (wake workload): each message also writes what an inbox reply writes, in the same transaction: the message unique by id and indexed by thread and by recipient, an event indexed by thread and by source, and an `UPDATE` of the thread's row (its latest message and event; its status index untouched): eight pages, as inbox's reply to a thread at work.",
    ),
    (
        "JSONL inbox (seed 002)",
        "normal: one `O_APPEND` write per message, no fsync; full: `fdatasync` after each append (and the cursor file written through a temporary file, fsynced with its folder). Waiters poll the file size every 1 s; claiming workers share the cursor under `flock`.",
    ),
    (
        "JSON array + lock",
        "normal: lock file (`O_EXCL`), read + parse + rewrite the whole array through a temporary file and rename, no fsync; full: the temporary file and the folder fsynced before the lock is released. Not in the wait workloads (its readers poll like JSONL's).",
    ),
    (
        "file-drop (seed 001)",
        "normal: one file per descriptor, claimed by rename, no fsync; full: file and folder fsynced on every create and rename. The poller looks every 2 s (the seed's default) and takes one descriptor per tick; claim workers drain without the tick.",
    ),
    ("Redis (normal)", REDIS_NORMAL_CONFIG),
    ("Redis (full)", REDIS_FULL_CONFIG),
    ("PostgreSQL", PG_CONFIG),
    (
        "process-spawn floor",
        "`inbox-bench-noop`: `fn main() {}` in this crate, built in cargo's `release` profile and dynamically linked, as cargo links by default (the floor issue 20's targets were set against), started with the same `std::process::Command` (stdout and stderr piped, waited for). `inbox` is measured as `cargo install --path cli --locked` installs it: the same profile, linked the same way.",
    ),
    (
        "SQLite floor",
        "`inbox-bench-sqlite-floor DB normal|full`: opens an SQLite database with the SQLite `inbox` links and the settings it gives a one-command process (WAL, 2 KiB pages, no checkpoint on close, a truncating checkpoint at the WAL length `inbox` truncates at, `CHECKPOINT_FRAMES`), commits one 200-byte row to a table with one index in one `BEGIN IMMEDIATE` transaction, and exits. Built and linked like the floor and `inbox`. What any CLI command that writes an SQLite file pays, started as inbox starts; inbox's engine, schema and argument parser are not in it.",
    ),
    (
        "SQLite floor, inbox's schema in the file",
        "The same program and row, in a database created with inbox's schema beside the floor's table (`inbox-bench-sqlite-floor DB init-inbox-schema`; the write never touches inbox's tables). SQLite reads and parses a file's whole schema before a connection's first statement, so the difference between the two floors is what inbox's schema costs every fresh process; inbox's engine, statements and argument parser are still not in it.",
    ),
];
