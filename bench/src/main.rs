//! `inbox-bench`: the benchmark harness of issue 4. It runs every
//! comparison side by side in one run on one machine — inbox against a JSONL
//! inbox, a JSON-array inbox under a lock file, a file-drop folder, Redis
//! (lists and streams) and PostgreSQL, and against the cost of starting any
//! process — and writes `docs/BENCHMARKS.md` with medians, p99s and ratios
//! against baselines measured in the same run, plus SVG plots in
//! `docs/bench/`.
//!
//! ```text
//! cargo run -p inbox-bench --release -- all            # everything (~20 min)
//! cargo run -p inbox-bench --release -- all --quick    # smoke run (~3 min), report under target/
//! cargo run -p inbox-bench --release -- send wake      # some workloads; other sections kept
//! cargo run -p inbox-bench --release -- wasm-baseline  # native figures for host-wasm/js/bench (JSON)
//! ```
//!
//! The binaries measured are found in `target/release` whichever build of
//! the harness runs, so a smoke run may take a debug harness (CI takes the
//! tests' build); a full run refuses one, as its spawn floor and in-process
//! rows would be unoptimized code.
//!
//! This file owns the command line and the run's lifetime: it builds the
//! binaries it measures, starts the servers (stopped again by their guards
//! even on error), runs the workloads and writes the report. It must never
//! touch the product's code or anything outside the scratch folder and the
//! report's folder. The file peers are the library half of this package
//! (`inbox_bench::files`); statistics, the machine's facts, the Markdown
//! writer and the in-process engine workloads come from `inbox-bench-kit`.

mod ctx;
mod fmt;
mod machine;
mod peers;
mod proc;
mod report;
mod roles;
mod services;
mod sse;
mod svg;
mod wasm_baseline;
mod workloads;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use inbox_bench_kit::machine::load;

use crate::ctx::{Bins, Ctx};
use crate::report::{Environment, Section};
use crate::services::{PostgresServer, RedisServer, TempDir};

/// Benchmarks inbox against the ways agent teams coordinate today (a JSONL
/// inbox, a JSON array under a lock file, a file-drop folder, Redis lists
/// and streams, PostgreSQL), side by side in one run, and writes
/// docs/BENCHMARKS.md and its plots in docs/bench/.
#[derive(Parser)]
#[command(
    name = "inbox-bench",
    args_conflicts_with_subcommands = true,
    after_help = "Needs redis-server and PostgreSQL (initdb/postgres); scripts/bench installs them."
)]
struct Cli {
    /// The workloads to run, in any order (default: all); the report keeps
    /// the other sections as an earlier run measured them
    #[arg(value_enum, value_name = "WORKLOAD")]
    workloads: Vec<Choice>,
    /// Small sizes and few iterations (a smoke run of about 3 minutes); the
    /// report goes to target/bench-quick/ unless --out is given. The only
    /// run a debug build of this harness accepts
    #[arg(long)]
    quick: bool,
    /// Write BENCHMARKS.md to DIR and plots to DIR/bench (default: docs/)
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Do not build inbox (with and without PostgreSQL) with `cargo build
    /// --release` first
    #[arg(long)]
    no_build: bool,
    #[command(subcommand)]
    command: Option<Sub>,
}

/// A workload named on the command line.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Choice {
    /// Every workload
    All,
    /// 1. Send throughput
    Send,
    /// 2. Claim and done
    Claim,
    /// 3. Wake latency
    Wake,
    /// 4. Request/answer round trip
    Roundtrip,
    /// 5. Read cost as the store grows
    Query,
    /// 7. orch: the leader's reads, dispatch and wake
    Orch,
    /// 8. A command's cost against a baseline build ($INBOX_BENCH_BASELINE)
    Baseline,
    /// 9. The database file under retention (auto gc off and on)
    Retention,
    /// 10. Bridges: a dropped descriptor to a thread
    Bridge,
    /// 11. Importing a mailbox log
    Import,
    /// 12. inbox on PostgreSQL against inbox on SQLite and the raw peer
    Postgres,
    /// 13. The live board (`inbox serve`): commit to visible, idle CPU
    Board,
}

#[derive(Subcommand)]
enum Sub {
    /// Only the native in-process figures the wasm benchmark compares
    /// against, as JSON on stdout
    ///
    /// Prints one JSON object: every round's sends/s and claim+done pairs/s
    /// for the native engine over SQLite in a file (normal and full
    /// durability), SQLite in memory and the in-memory store;
    /// host-wasm/js/bench/run.mjs runs it. Builds nothing and starts no
    /// server.
    WasmBaseline(wasm_baseline::Args),
    /// The harness's own child processes.
    #[command(flatten)]
    Child(roles::Child),
}

/// A workload: its key (the subcommand, the section's file name) and how
/// to run it. In report order.
type Workload = (&'static str, Choice, fn(&Ctx) -> Result<Section>);

const WORKLOADS: [Workload; 12] = [
    ("send", Choice::Send, workloads::send::run),
    ("claim", Choice::Claim, workloads::claim::run),
    ("wake", Choice::Wake, workloads::wake::run),
    ("roundtrip", Choice::Roundtrip, workloads::roundtrip::run),
    ("query", Choice::Query, workloads::query::run),
    ("orch", Choice::Orch, workloads::orch::run),
    ("baseline", Choice::Baseline, workloads::baseline::run),
    ("retention", Choice::Retention, workloads::retention::run),
    ("bridge", Choice::Bridge, workloads::bridge::run),
    ("import", Choice::Import, workloads::import::run),
    ("postgres", Choice::Postgres, workloads::postgres::run),
    ("board", Choice::Board, workloads::board::run),
];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Sub::Child(child)) => return roles::run(child),
        Some(Sub::WasmBaseline(args)) => wasm_baseline::run(&args),
        None => run(&cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The workloads chosen, in report order.
fn chosen(cli: &Cli) -> Vec<Workload> {
    let all = cli.workloads.is_empty() || cli.workloads.contains(&Choice::All);
    WORKLOADS
        .into_iter()
        .filter(|(_, choice, _)| all || cli.workloads.contains(choice))
        .collect()
}

/// The workspace root (this crate's parent folder).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// A full run: the chosen workloads, then the report.
fn run(cli: &Cli) -> Result<()> {
    let started = Instant::now();
    let root = workspace_root();
    // The spawn floor and the in-process rows are this build's own code:
    // unoptimized, they would skew every ratio the report states. A smoke
    // run checks that each workload runs, so any build will do for it.
    if cfg!(debug_assertions) && !cli.quick {
        bail!(
            "this harness is a debug build; run it with `cargo run --release -p inbox-bench` (or pass --quick for a smoke run)"
        );
    }
    if !cli.no_build {
        build(&root)?;
    }
    let bins = Bins::locate(&ctx::release_dir(&root))?;
    let out = cli.out.clone().unwrap_or_else(|| {
        root.join(if cli.quick {
            "target/bench-quick"
        } else {
            "docs"
        })
    });
    let out_dir = out.join("bench");
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let ctx = start(cli.quick, bins, out_dir)?;
    let env = machine::environment(&ctx, &root);
    let fresh = measure(&ctx, &env, &chosen(cli))?;
    let out_dir = ctx.out_dir.clone();
    drop(ctx);

    let sections = with_earlier_sections(&fresh, &out_dir);
    let total = fresh.iter().map(|s| s.seconds).sum();
    let path = out.join("BENCHMARKS.md");
    std::fs::write(&path, report::render(&env, &sections, total))
        .with_context(|| format!("cannot write {}", path.display()))?;
    print_summary(&path, started, &fresh)
}

/// Builds the binaries measured, so a run measures the commit being
/// benchmarked, not a stale build: the build as users install it (`cargo
/// install --path cli --locked`), whose figures every row reports: `inbox`,
/// `orch` and `inbox-serve` (the board's server, which `inbox serve` starts
/// from beside `inbox`), not `inbox-mcp`, which nothing here measures. Not
/// the harness: it is running (a build with other packages would relink it
/// under its worker processes).
fn build(root: &Path) -> Result<()> {
    eprintln!("installing inbox as users do (cargo install --path cli --locked)");
    let installed = ctx::release_dir(root).join(ctx::INSTALLED);
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(root)
        .args(["install", "--path", "cli", "--locked", "--root"])
        .arg(&installed)
        .args(["--bin", "inbox", "--bin", "orch", "--bin", "inbox-serve"])
        .args(["--force", "--no-track", "--quiet"])
        .status()
        .context("cannot run cargo install (pass --no-build to use the binaries already built)")?;
    if !status.success() {
        bail!("cargo install --path cli failed");
    }
    Ok(())
}

/// Starts the servers in a new scratch folder.
fn start(quick: bool, bins: Bins, out_dir: PathBuf) -> Result<Ctx> {
    eprintln!("starting redis-server (x2) and PostgreSQL on 127.0.0.1");
    let tmp = TempDir::new()?;
    Ok(Ctx {
        quick,
        redis_normal: RedisServer::start(tmp.path(), false)?,
        redis_full: RedisServer::start(tmp.path(), true)?,
        pg: PostgresServer::start(tmp.path())?,
        bins,
        out_dir,
        tmp,
    })
}

/// Runs `workloads`, saving each section as it is measured.
fn measure(ctx: &Ctx, env: &Environment, workloads: &[Workload]) -> Result<Vec<Section>> {
    let date = &env.machine.date;
    let stamp = format!("{} on commit {}", &date[..16.min(date.len())], env.commit);
    let mut fresh = Vec::new();
    for (key, _, run) in workloads {
        eprintln!("== {key}");
        let load_before = load();
        let mut section = run(ctx).with_context(|| format!("workload `{key}` failed"))?;
        section.measured = format!(
            "{stamp}{}; machine load before / after: {load_before} / {}",
            if ctx.quick { ", `--quick`" } else { "" },
            load()
        );
        section.save(&ctx.out_dir)?;
        fresh.push(section);
    }
    Ok(fresh)
}

/// This run's sections, and earlier runs' for workloads not run now.
fn with_earlier_sections(fresh: &[Section], out_dir: &Path) -> Vec<Section> {
    WORKLOADS
        .iter()
        .filter_map(|(key, _, _)| {
            fresh
                .iter()
                .find(|s| s.key == *key)
                .cloned()
                .or_else(|| Section::load(out_dir, key))
        })
        .collect()
}

/// Where the report went, the headlines and the targets, for the person
/// who ran it.
fn print_summary(path: &Path, started: Instant, fresh: &[Section]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "\nwrote {} in {:.0} s",
        path.display(),
        started.elapsed().as_secs_f64()
    )?;
    for section in fresh {
        for line in &section.headlines {
            writeln!(stdout, "{}: {line}", section.title)?;
        }
    }
    for section in fresh {
        for check in &section.checks {
            writeln!(
                stdout,
                "[{}] {} — {}",
                if check.pass { "pass" } else { "MISS" },
                check.target,
                check.measured
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("inbox-bench").chain(args.iter().copied()))
    }

    fn keys(args: &[&str]) -> Vec<&'static str> {
        let cli = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        chosen(&cli).into_iter().map(|(key, _, _)| key).collect()
    }

    #[test]
    fn workloads_run_in_report_order_and_all_is_the_default() {
        let every = [
            "send",
            "claim",
            "wake",
            "roundtrip",
            "query",
            "orch",
            "baseline",
            "retention",
            "bridge",
            "import",
            "postgres",
            "board",
        ];
        assert_eq!(keys(&[]), every);
        assert_eq!(keys(&["all", "--quick", "--no-build"]), every);
        assert_eq!(keys(&["query", "send", "send"]), ["send", "query"]);
    }

    #[test]
    fn subcommands_and_child_roles_parse() {
        let cli = parse(&["wasm-baseline", "--rounds", "1", "--ops", "5"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(cli.command, Some(Sub::WasmBaseline(_))));
        let cli = parse(&["__worker", "{}"]).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(cli.command, Some(Sub::Child(_))));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        for args in [
            &["bogus"][..],
            &["--out"],
            &["send", "wasm-baseline"],
            &["wasm-baseline", "--rounds", "0"],
            &["wasm-baseline", "--ops", "x"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
