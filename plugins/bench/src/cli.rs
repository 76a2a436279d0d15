//! What the component adds to one `inbox` process: wall time of whole CLI
//! invocations with the built-in engine against `inbox --engine
//! <component>` with a warm compiled-code cache (and a few with the cache
//! off), on the same database, interleaved.
//!
//! Needs an `inbox` binary built with the `plugin` feature; without one the
//! section is skipped with the reason, never faked. This module must never
//! change the database except through the binary's own commands (and the
//! initial threads, sent through the built-in engine before any timing).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use inbox_bench_kit::rates::{JsonEngine, send_json};
use inbox_bench_kit::stats::Spread;
use inbox_bench_kit::stores::{self, AnyStore};
use serde::Serialize;

/// How many processes of each kind.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct CliSizes {
    /// Runs of each warm row, interleaved.
    pub(crate) runs: u64,
    /// Runs with the cache off (each compiles the component).
    pub(crate) cold_runs: u64,
    /// Threads in the database `list` lists.
    pub(crate) threads: u64,
}

/// The section's outcome.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub(crate) enum CliSection {
    /// Measured with `binary`.
    Measured(CliCosts),
    /// Not measured, and why.
    Skipped {
        /// What was missing.
        reason: String,
    },
}

/// Wall time per process, each row in seconds.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CliCosts {
    /// The binary.
    pub(crate) binary: String,
    /// What `inbox --version` printed.
    pub(crate) version: String,
    /// Threads in the database.
    pub(crate) threads: u64,
    /// One row per kind of invocation.
    pub(crate) rows: Vec<CliRow>,
}

/// One kind of invocation.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CliRow {
    /// A stable key for the report (`list-builtin`, ...).
    pub(crate) key: &'static str,
    /// The command line, for the report.
    pub(crate) command: String,
    /// Seconds per process.
    pub(crate) seconds: Spread,
}

/// What each timed invocation is.
struct Invocation {
    key: &'static str,
    args: Vec<String>,
    /// `INBOX_ENGINE_CACHE` for the process; `None` for the built-in
    /// engine, where it does not matter.
    cache: Option<String>,
    /// Cold rows compile in every process; they run fewer times.
    cold: bool,
}

/// The files a measurement uses, as arguments.
struct Files {
    /// The database file.
    db: PathBuf,
    /// `db` as an argument.
    db_arg: String,
    /// The component file as an argument.
    component_arg: String,
    /// The compiled-code cache folder as an argument.
    cache_arg: String,
}

/// Measures the binary at `binary`, database and cache under `dir`.
pub(crate) fn measure(
    binary: &Path,
    component: &Path,
    dir: &Path,
    sizes: CliSizes,
) -> Result<CliSection> {
    if !binary.is_file() {
        return Ok(CliSection::Skipped {
            reason: format!(
                "no `inbox` binary at `{}`; build one with `cargo build --release -p inbox-cli --features plugin` (or pass --cli PATH)",
                binary.display()
            ),
        });
    }
    let files = files(dir, component)?;
    let version = run(binary, &["--version".to_owned()], None)
        .map(|out| out.stdout.trim().to_owned())
        .with_context(|| format!("cannot run {}", binary.display()))?;
    fill(binary, &files, sizes.threads)?;
    if let Some(reason) = refuses_engine(binary, &files)? {
        return Ok(CliSection::Skipped { reason });
    }
    let invocations = invocations(&files);
    let samples = time_interleaved(binary, &invocations, sizes)?;
    let rows = rows(&invocations, samples, &files);
    stores::remove_sqlite(&files.db)?;
    Ok(CliSection::Measured(CliCosts {
        binary: binary.display().to_string(),
        version,
        threads: sizes.threads,
        rows,
    }))
}

/// A new database and cache folder under `dir`.
fn files(dir: &Path, component: &Path) -> Result<Files> {
    let db = dir.join("cli.db");
    stores::remove_sqlite(&db)?;
    let cache = dir.join("cli-engine-cache");
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create {}", cache.display()))?;
    Ok(Files {
        db_arg: db.display().to_string(),
        db,
        component_arg: component.display().to_string(),
        cache_arg: cache.display().to_string(),
    })
}

/// `inbox init`, then the threads `list` will list, sent in process (not
/// timed).
fn fill(binary: &Path, files: &Files, threads: u64) -> Result<()> {
    let init = run(binary, &args(&files.db_arg, None, &["init"]), None)?;
    if init.code != Some(0) {
        bail!("`inbox init` failed: {}{}", init.stdout, init.stderr);
    }
    let mut engine = AnyStore::Sqlite(stores::open_sqlite(&files.db)?).engine();
    for seq in 0..threads {
        engine.expect_exit(&send_json(seq), 0)?;
    }
    Ok(())
}

/// The first component run compiles into the cache; it also tells a
/// binary without the `plugin` feature apart (it refuses `--engine`): then
/// the reason to skip the section.
fn refuses_engine(binary: &Path, files: &Files) -> Result<Option<String>> {
    let probe = run(
        binary,
        &args(&files.db_arg, Some(&files.component_arg), &["list"]),
        Some(&files.cache_arg),
    )?;
    if probe.code == Some(0) {
        return Ok(None);
    }
    let said = first_line(&probe.stdout).or_else(|| first_line(&probe.stderr));
    Ok(Some(format!(
        "`{} --engine <component> list` exited {:?}: {}; build the binary with `cargo build --release -p inbox-cli --features plugin`",
        binary.display(),
        probe.code,
        said.unwrap_or_default()
    )))
}

/// The rows of the section, in report order.
fn invocations(files: &Files) -> [Invocation; 6] {
    let (db, component) = (&files.db_arg, Some(files.component_arg.as_str()));
    let send = [
        "send",
        "--from",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Benchmark task",
    ];
    let row = |key, args, cache: Option<&str>, cold| Invocation {
        key,
        args,
        cache: cache.map(str::to_owned),
        cold,
    };
    let warm = Some(files.cache_arg.as_str());
    [
        row("version", vec!["--version".to_owned()], None, false),
        row("list-builtin", args(db, None, &["list"]), None, false),
        row(
            "list-component",
            args(db, component, &["list"]),
            warm,
            false,
        ),
        row("send-builtin", args(db, None, &send), None, false),
        row("send-component", args(db, component, &send), warm, false),
        row(
            "list-component-cold",
            args(db, component, &["list"]),
            Some("off"),
            true,
        ),
    ]
}

/// Seconds per process of each invocation, the invocations interleaved
/// round by round.
fn time_interleaved(
    binary: &Path,
    invocations: &[Invocation],
    sizes: CliSizes,
) -> Result<Vec<Vec<f64>>> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); invocations.len()];
    for round in 0..sizes.runs {
        for (invocation, slot) in invocations.iter().zip(samples.iter_mut()) {
            if invocation.cold && round >= sizes.cold_runs {
                continue;
            }
            let start = Instant::now();
            let out = run(binary, &invocation.args, invocation.cache.as_deref())?;
            let seconds = start.elapsed().as_secs_f64();
            if out.code != Some(0) {
                bail!(
                    "`inbox {}` exited {:?}: {}{}",
                    invocation.args.join(" "),
                    out.code,
                    out.stdout,
                    out.stderr
                );
            }
            slot.push(seconds);
        }
    }
    Ok(samples)
}

/// The report's rows: each invocation's command line, as shown, and its
/// spread.
fn rows(invocations: &[Invocation], samples: Vec<Vec<f64>>, files: &Files) -> Vec<CliRow> {
    let mut rows = Vec::new();
    for (invocation, samples) in invocations.iter().zip(samples) {
        let Some(seconds) = Spread::of(&samples) else {
            continue;
        };
        let mut command = format!(
            "inbox {}",
            shown(&invocation.args, &files.db_arg, &files.component_arg)
        );
        if let Some(cache) = &invocation.cache {
            let cache = if cache == "off" {
                "off"
            } else {
                "<warm cache>"
            };
            command = format!("INBOX_ENGINE_CACHE={cache} {command}");
        }
        rows.push(CliRow {
            key: invocation.key,
            command,
            seconds,
        });
    }
    rows
}

/// `--db DB [--engine COMPONENT] --json COMMAND...`.
fn args(db: &str, component: Option<&str>, command: &[&str]) -> Vec<String> {
    let mut out = vec!["--db".to_owned(), db.to_owned()];
    if let Some(component) = component {
        out.extend(["--engine".to_owned(), component.to_owned()]);
    }
    out.push("--json".to_owned());
    out.extend(command.iter().map(|s| (*s).to_owned()));
    out
}

/// The arguments as the report shows them, without temporary paths.
fn shown(args: &[String], db: &str, component: &str) -> String {
    args.iter()
        .map(|a| {
            if a == db {
                "DB".to_owned()
            } else if a == component {
                "inbox-engine.wasm".to_owned()
            } else if a.contains(' ') {
                format!("\"{a}\"")
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What one process printed and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `binary` with `args` and a clean inbox environment, as a shell
/// would start it (pipes for output, nothing on stdin), and waits for it.
fn run(binary: &Path, args: &[String], cache: Option<&str>) -> Result<Ran> {
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Settings from the caller's shell would change what is measured.
    for var in [
        "INBOX_DB",
        "INBOX_AGENT",
        "INBOX_ENGINE",
        "INBOX_ENGINE_CACHE",
        "INBOX_NOW",
    ] {
        command.env_remove(var);
    }
    if let Some(cache) = cache {
        command.env("INBOX_ENGINE_CACHE", cache);
    }
    let out = command
        .output()
        .map_err(|e| anyhow!("cannot run {}: {e}", binary.display()))?;
    Ok(Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

/// The binary the section uses when none is given: the workspace's release
/// build of the CLI.
pub(crate) fn default_binary(target: &Path) -> PathBuf {
    target.join("release").join("inbox")
}
