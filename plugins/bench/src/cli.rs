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
use inbox_engine::Engine;
use inbox_host_native::{HostClock, host_ids};
use serde::Serialize;

use crate::engines::{self, JsonEngine};
use crate::rates::send_request;
use crate::stats::Spread;

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
    let db = dir.join("cli.db");
    engines::remove_database(&db)?;
    let cache = dir.join("cli-engine-cache");
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create {}", cache.display()))?;
    let db_arg = db.display().to_string();
    let component_arg = component.display().to_string();
    let cache_arg = cache.display().to_string();

    let version = run(binary, &["--version".to_owned()], None)
        .map(|out| out.stdout.trim().to_owned())
        .with_context(|| format!("cannot run {}", binary.display()))?;
    let init = run(binary, &args(&db_arg, None, &["init"]), None)?;
    if init.code != Some(0) {
        bail!("`inbox init` failed: {}{}", init.stdout, init.stderr);
    }
    // The threads `list` will list, sent in process (not timed).
    {
        let store = engines::sqlite_file_existing(&db)?;
        let mut engine = Engine::new(store, HostClock::system(), host_ids());
        for seq in 0..sizes.threads {
            engine.expect_exit(&send_request(seq), 0)?;
        }
    }
    // The first component run compiles into the cache; it also tells a
    // binary without the `plugin` feature apart (it refuses `--engine`).
    let probe = run(
        binary,
        &args(&db_arg, Some(&component_arg), &["list"]),
        Some(&cache_arg),
    )?;
    if probe.code != Some(0) {
        let said = first_line(&probe.stdout).or_else(|| first_line(&probe.stderr));
        return Ok(CliSection::Skipped {
            reason: format!(
                "`{} --engine <component> list` exited {:?}: {}; build the binary with `cargo build --release -p inbox-cli --features plugin`",
                binary.display(),
                probe.code,
                said.unwrap_or_default()
            ),
        });
    }

    let send = [
        "send",
        "--from",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Benchmark task",
    ];
    let invocations = [
        Invocation {
            key: "version",
            args: vec!["--version".to_owned()],
            cache: None,
            cold: false,
        },
        Invocation {
            key: "list-builtin",
            args: args(&db_arg, None, &["list"]),
            cache: None,
            cold: false,
        },
        Invocation {
            key: "list-component",
            args: args(&db_arg, Some(&component_arg), &["list"]),
            cache: Some(cache_arg.clone()),
            cold: false,
        },
        Invocation {
            key: "send-builtin",
            args: args(&db_arg, None, &send),
            cache: None,
            cold: false,
        },
        Invocation {
            key: "send-component",
            args: args(&db_arg, Some(&component_arg), &send),
            cache: Some(cache_arg.clone()),
            cold: false,
        },
        Invocation {
            key: "list-component-cold",
            args: args(&db_arg, Some(&component_arg), &["list"]),
            cache: Some("off".to_owned()),
            cold: true,
        },
    ];
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
    let mut rows = Vec::new();
    for (invocation, samples) in invocations.iter().zip(samples) {
        let Some(seconds) = Spread::of(&samples) else {
            continue;
        };
        let mut command = format!("inbox {}", shown(&invocation.args, &db_arg, &component_arg));
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
    engines::remove_database(&db)?;
    Ok(CliSection::Measured(CliCosts {
        binary: binary.display().to_string(),
        version,
        threads: sizes.threads,
        rows,
    }))
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
