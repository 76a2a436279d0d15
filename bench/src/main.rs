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
//! This file owns the command line and the run's lifetime: it builds the
//! binaries it measures, starts the servers (stopped again by their guards
//! even on error), runs the workloads and writes the report. It must never
//! touch the product's code or anything outside the scratch folder and the
//! report's folder.

mod ctx;
mod files;
mod machine;
mod peers;
mod proc;
mod report;
mod roles;
mod services;
mod stats;
mod svg;
mod wasm_baseline;
mod workloads;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::ctx::{Bins, Ctx};
use crate::report::Section;
use crate::services::{PostgresServer, RedisServer, TempDir};

/// The workloads, in report order.
const WORKLOADS: [&str; 5] = ["send", "claim", "wake", "roundtrip", "query"];

const USAGE: &str = "\
usage: inbox-bench [all | send | claim | wake | roundtrip | query]... [--quick] [--out DIR] [--no-build]
       inbox-bench wasm-baseline [--ops N] [--warmup N] [--rounds N]

  all         every workload (the default)
  --quick     small sizes and few iterations (a smoke run of about 3 minutes);
              the report goes to target/bench-quick/ unless --out is given
  --out DIR   write BENCHMARKS.md to DIR and plots to DIR/bench (default: docs/)
  --no-build  do not run `cargo build --release -p inbox-cli -p inbox-bench` first

  wasm-baseline  only the native in-process figures the wasm benchmark
              (host-wasm/js/bench/run.mjs) compares against, as JSON on stdout;
              builds nothing and starts no server

Needs redis-server and PostgreSQL (initdb/postgres); scripts/bench installs them.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if roles::dispatch(&args) {
        return ExitCode::SUCCESS;
    }
    match run(&args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

struct Options {
    workloads: Vec<&'static str>,
    quick: bool,
    out: Option<PathBuf>,
    build: bool,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut options = Options {
        workloads: Vec::new(),
        quick: false,
        out: None,
        build: true,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--no-build" => options.build = false,
            "--out" => {
                let Some(dir) = args.next() else {
                    bail!("--out needs a folder\n\n{USAGE}");
                };
                options.out = Some(PathBuf::from(dir));
            }
            "all" => options.workloads.extend(WORKLOADS),
            "-h" | "--help" | "help" => {
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                std::process::exit(0);
            }
            other => match WORKLOADS.iter().find(|w| **w == other) {
                Some(w) => options.workloads.push(w),
                None => bail!("unknown workload or flag `{other}`\n\n{USAGE}"),
            },
        }
    }
    if options.workloads.is_empty() {
        options.workloads.extend(WORKLOADS);
    }
    options.workloads.dedup();
    Ok(options)
}

/// The workspace root (this crate's parent folder).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn run(args: &[String]) -> Result<()> {
    if args.first().is_some_and(|a| a == "wasm-baseline") {
        return wasm_baseline::run(&args[1..]);
    }
    let options = parse(args)?;
    let started = Instant::now();
    let root = workspace_root();
    if options.build {
        // Measure the binary of the commit being benchmarked, not a stale one.
        eprintln!("building inbox and the harness (release)");
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(&root)
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "inbox-cli",
                "-p",
                "inbox-bench",
                "--bins",
            ])
            .status()
            .context("cannot run cargo (pass --no-build to use the binaries already built)")?;
        if !status.success() {
            bail!("cargo build failed");
        }
    }
    let bins = Bins::locate()?;
    let out = options.out.clone().unwrap_or_else(|| {
        if options.quick {
            root.join("target").join("bench-quick")
        } else {
            root.join("docs")
        }
    });
    let out_dir = out.join("bench");
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;

    eprintln!("starting redis-server (x2) and PostgreSQL on 127.0.0.1");
    let tmp = TempDir::new()?;
    let ctx = Ctx {
        quick: options.quick,
        redis_normal: RedisServer::start(tmp.path(), false)?,
        redis_full: RedisServer::start(tmp.path(), true)?,
        pg: PostgresServer::start(tmp.path())?,
        bins,
        out_dir: out_dir.clone(),
        tmp,
    };
    let env = machine::environment(&ctx, &root);
    let stamp = format!(
        "{} on commit {}",
        &env.date[..16.min(env.date.len())],
        env.commit
    );

    let mut fresh = Vec::new();
    for workload in &options.workloads {
        eprintln!("== {workload}");
        let load_before = machine::load();
        let mut section = match *workload {
            "send" => workloads::send::run(&ctx),
            "claim" => workloads::claim::run(&ctx),
            "wake" => workloads::wake::run(&ctx),
            "roundtrip" => workloads::roundtrip::run(&ctx),
            _ => workloads::query::run(&ctx),
        }
        .with_context(|| format!("workload `{workload}` failed"))?;
        section.measured = format!(
            "{stamp}{}; machine load before / after: {load_before} / {}",
            if options.quick { ", `--quick`" } else { "" },
            machine::load()
        );
        section.save(&out_dir)?;
        fresh.push(section);
    }
    drop(ctx);

    // This run's sections, and earlier runs' for workloads not run now.
    let sections: Vec<Section> = WORKLOADS
        .iter()
        .filter_map(|key| {
            fresh
                .iter()
                .find(|s| s.key == *key)
                .cloned()
                .or_else(|| Section::load(&out_dir, key))
        })
        .collect();
    let total = fresh.iter().map(|s| s.seconds).sum();
    let markdown = report::render(&env, &sections, total);
    let path = out.join("BENCHMARKS.md");
    std::fs::write(&path, markdown).with_context(|| format!("cannot write {}", path.display()))?;

    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "\nwrote {} in {:.0} s",
        path.display(),
        started.elapsed().as_secs_f64()
    )?;
    for section in &fresh {
        for line in &section.headlines {
            writeln!(stdout, "{}: {line}", section.title)?;
        }
    }
    for section in &fresh {
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
