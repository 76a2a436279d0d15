//! `inbox-plugin-bench`: what running the inbox engine as a WebAssembly
//! component in wasmtime costs next to the engine built into the host,
//! measured in one run on this machine and written up as
//! `docs/plugin-benchmarks.md` (raw figures in
//! `target/plugin-bench/results.json`).
//!
//! It owns the measurements (commands per second through the JSON wire
//! format for both engines over the same kinds of store; compiling,
//! loading from cache and instantiating the component; an instance's
//! memory; fuel per command; the component's size; whole `inbox` processes
//! with and without `--engine`) and the report. It builds the component
//! from source with `inbox-plugin-build`, so a fresh clone needs no
//! prebuilt file. It must never change the engine, the host or a store
//! behind an engine's back (every change to a store is a request through
//! the engine being measured), must never publish figures from a debug
//! build or a `--quick` run into `docs/`, and writes nothing but its
//! reports, its raw results and temporary folders it removes.
//!
//! - [`options`]: the command line and the sizes of a run;
//! - [`engines`]: the two engines, each behind the kit's JSON caller;
//! - [`rates`]: the kit's `send` and `claim`+`done` workloads, in rounds;
//! - [`costs`]: compiling, instantiating, memory, fuel;
//! - [`component`]: the component file's size and declared memory;
//! - [`cli`]: whole `inbox` processes;
//! - [`machine`]: the machine and versions;
//! - [`report`]: the raw results and the Markdown report;
//! - [`fmt`]: the report's number formats.
//!
//! Statistics, stores, the workloads' loops, the machine's facts and the
//! Markdown writer come from `inbox-bench-kit`, shared with `inbox-bench`.

// This binary's job is to print progress and its headline figures to the
// person who ran it; stdout is its interface.
#![allow(clippy::print_stdout)]

mod cli;
mod component;
mod costs;
mod engines;
mod fmt;
mod machine;
mod options;
mod rates;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use inbox_bench_kit::machine::load;
use inbox_plugin_build::Guest;
use inbox_plugin_host::{Limits, Plugin};

use crate::cli::CliSection;
use crate::options::{CliChoice, Options};
use crate::report::Results;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where a run writes.
struct Outputs {
    /// The Markdown report.
    report: PathBuf,
    /// The raw results.
    results: PathBuf,
}

impl Outputs {
    /// A full release run publishes to docs/; anything else stays under
    /// target/, in a folder of its own so that it never overwrites the
    /// raw figures behind the published report.
    fn for_run(root: &Path, target: &Path, quick: bool, release: bool) -> Outputs {
        let (folder, report) = match (quick, release) {
            (false, true) => (
                target.join("plugin-bench"),
                root.join("docs").join("plugin-benchmarks.md"),
            ),
            (true, _) => {
                let folder = target.join("plugin-bench-quick");
                let report = folder.join("plugin-benchmarks.md");
                (folder, report)
            }
            (false, false) => {
                let folder = target.join("plugin-bench-debug");
                let report = folder.join("plugin-benchmarks.md");
                (folder, report)
            }
        };
        Outputs {
            report,
            results: folder.join("results.json"),
        }
    }
}

fn run() -> Result<()> {
    let options = options::parse();
    let release = !cfg!(debug_assertions);
    if !release {
        eprintln!(
            "warning: this is a debug build; its figures are not representative, and it writes only under target/ (use `cargo run --release -p inbox-plugin-bench` for the report)"
        );
    }
    let started = Instant::now();
    let load_start = load();
    let root = inbox_plugin_build::workspace_root();
    // The build crate's components go to <target>/plugins; the reports go
    // next to them, in the same target folder.
    let plugins_out = inbox_plugin_build::out_dir();
    let target = plugins_out
        .parent()
        .map_or_else(|| root.join("target"), Path::to_path_buf);
    let outputs = Outputs::for_run(&root, &target, options.quick, release);

    eprintln!("building the engine component (inbox_plugin_build::build)");
    let component_path =
        inbox_plugin_build::build(Guest::Engine).context("cannot build the engine component")?;
    let results = measure(
        &options,
        &root,
        &target,
        &component_path,
        started,
        load_start,
    )?;

    let report = report::render(&results, &shown(&root, &outputs.results));
    write(
        &outputs.results,
        &(serde_json::to_string_pretty(&results)? + "\n"),
    )?;
    write(&outputs.report, &report.markdown)?;
    println!(
        "wrote {} (raw figures: {}) in {:.0} s",
        shown(&root, &outputs.report),
        shown(&root, &outputs.results),
        results.seconds
    );
    for line in report.headlines {
        println!("  {line}");
    }
    if !release {
        println!("(debug build: not representative)");
    }
    Ok(())
}

/// Runs every measurement.
fn measure(
    options: &Options,
    root: &Path,
    target: &Path,
    component_path: &Path,
    started: Instant,
    load_start: String,
) -> Result<Results> {
    let sizes = options.sizes;
    let tmp = tempfile::Builder::new()
        .prefix("inbox-plugin-bench-")
        .tempdir()
        .context("cannot create a temporary folder")?;
    let component = component::measure(component_path)?;

    eprintln!(
        "loading the component ({} rounds each way)",
        sizes.compile_rounds
    );
    let compile = costs::compile(component_path, sizes.compile_rounds, tmp.path())?;
    let plugin = Plugin::from_file(component_path, Limits::default())?;

    eprintln!("instantiating ({} instances each way)", sizes.instances);
    let instantiate = costs::instantiate(&plugin, sizes.instances)?;
    let instance_memory =
        costs::instance_memory(&plugin, sizes.held_instances).map_err(|e| format!("{e:#}"));

    eprintln!("fuel per command");
    let fuel = costs::fuel(&plugin, tmp.path(), sizes.list_threads)?;

    eprintln!(
        "commands per second ({} rounds of {} + {} operations per series)",
        sizes.rates.rounds, sizes.rates.warmup, sizes.rates.ops
    );
    let rates = rates::measure(&plugin, tmp.path(), sizes.rates)?;

    let cli = match &options.cli {
        CliChoice::Off => CliSection::Skipped {
            reason: "`--no-cli` was given".into(),
        },
        choice => {
            let binary = match choice {
                CliChoice::Path(path) => path.clone(),
                _ => cli::default_binary(target),
            };
            eprintln!("whole processes: {}", binary.display());
            cli::measure(&binary, component_path, tmp.path(), sizes.cli)?
        }
    };

    let environment = machine::environment(root, tmp.path());
    Ok(Results {
        quick: options.quick,
        sizes,
        environment,
        load_start,
        load_end: load(),
        component,
        compile,
        instantiate,
        instance_memory,
        fuel,
        rates,
        cli,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes `text` to `path`, creating its folder.
fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// `path` relative to the workspace when it is inside it.
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}
