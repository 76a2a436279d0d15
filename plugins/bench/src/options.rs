//! The command line: a full run (the published report) or `--quick` (a CI
//! smoke run), the sizes each implies, and overrides. It must never decide
//! where output goes; `main` does, from the mode and the build profile.

use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

use crate::cli::CliSizes;
use inbox_bench_kit::rates::Sizes as RateSizes;

/// Measures the engine component in wasmtime against the built-in engine,
/// in one run, and writes docs/plugin-benchmarks.md (raw figures:
/// target/plugin-bench/results.json).
#[derive(Parser, Debug)]
#[command(
    name = "inbox-plugin-bench",
    override_usage = "cargo run --release --locked -p inbox-plugin-bench [-- OPTIONS]",
    after_help = "A debug build never writes docs/: its figures are not representative."
)]
struct Args {
    /// Smoke run for CI (small sizes, well under a minute even in a debug
    /// build); writes target/plugin-bench-quick/ only
    #[arg(long)]
    quick: bool,
    /// Rounds of the command workloads (default 7, quick 2)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rounds: Option<u64>,
    /// Timed operations per round and series (default 2000, quick 50)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    ops: Option<u64>,
    /// Untimed operations before them (default 200, quick 5)
    #[arg(long, value_name = "N")]
    warmup: Option<u64>,
    /// The `inbox` binary for the per-process section; it needs the
    /// `plugin` feature (default target/release/inbox; the section is
    /// skipped, with a note, when it is missing or lacks it)
    #[arg(long, value_name = "PATH", conflicts_with = "no_cli")]
    cli: Option<PathBuf>,
    /// Skip the per-process section
    #[arg(long)]
    no_cli: bool,
}

/// Which `inbox` binary the per-process section runs.
#[derive(Clone, Debug)]
pub(crate) enum CliChoice {
    /// `target/release/inbox`, if it is there.
    Default,
    /// The one given with `--cli`.
    Path(PathBuf),
    /// `--no-cli`.
    Off,
}

/// The parsed options.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// `--quick`.
    pub(crate) quick: bool,
    /// The sizes, defaults and overrides applied.
    pub(crate) sizes: Sizes,
    /// The CLI binary.
    pub(crate) cli: CliChoice,
}

/// Every size of a run.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Sizes {
    /// The command workloads.
    pub(crate) rates: RateSizes,
    /// Loads of the component each way.
    pub(crate) compile_rounds: u64,
    /// Instantiations each way.
    pub(crate) instances: u64,
    /// Instances held alive at once for the memory figure.
    pub(crate) held_instances: u64,
    /// Threads in the fuel sequence's large `list` (at most 1000, the
    /// largest `limit` a request may give).
    pub(crate) list_threads: u64,
    /// The per-process section.
    pub(crate) cli: CliSizes,
}

impl Sizes {
    /// The published report's sizes: about two minutes on a 2-CPU machine.
    pub(crate) const FULL: Sizes = Sizes {
        rates: RateSizes {
            ops: 2000,
            warmup: 200,
            rounds: 7,
        },
        compile_rounds: 3,
        instances: 200,
        held_instances: 32,
        list_threads: 1000,
        cli: CliSizes {
            runs: 30,
            cold_runs: 3,
            threads: 20,
        },
    };

    /// A smoke run: every code path once or twice, well under a minute in
    /// a debug build.
    pub(crate) const QUICK: Sizes = Sizes {
        rates: RateSizes {
            ops: 50,
            warmup: 5,
            rounds: 2,
        },
        compile_rounds: 1,
        instances: 10,
        held_instances: 4,
        list_threads: 100,
        cli: CliSizes {
            runs: 2,
            cold_runs: 1,
            threads: 5,
        },
    };
}

/// Parses the command line; on a usage error or `--help`, clap prints
/// and exits.
pub(crate) fn parse() -> Options {
    options(Args::parse())
}

fn options(args: Args) -> Options {
    let mut sizes = if args.quick {
        Sizes::QUICK
    } else {
        Sizes::FULL
    };
    sizes.rates.rounds = args.rounds.unwrap_or(sizes.rates.rounds);
    sizes.rates.ops = args.ops.unwrap_or(sizes.rates.ops);
    sizes.rates.warmup = args.warmup.unwrap_or(sizes.rates.warmup);
    let cli = match (args.cli, args.no_cli) {
        (_, true) => CliChoice::Off,
        (Some(path), false) => CliChoice::Path(path),
        (None, false) => CliChoice::Default,
    };
    Options {
        quick: args.quick,
        sizes,
        cli,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    fn parse(args: &[&str]) -> Result<Options, clap::Error> {
        Args::try_parse_from(std::iter::once("inbox-plugin-bench").chain(args.iter().copied()))
            .map(options)
    }

    fn run(args: &[&str]) -> Options {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn quick_takes_the_small_sizes_and_overrides_apply() {
        let full = run(&[]);
        assert!(!full.quick);
        assert_eq!(full.sizes.rates.ops, Sizes::FULL.rates.ops);
        let quick = run(&["--quick", "--rounds", "1"]);
        assert!(quick.quick);
        assert_eq!(quick.sizes.rates.rounds, 1);
        assert_eq!(quick.sizes.rates.ops, Sizes::QUICK.rates.ops);
        assert!(matches!(run(&["--no-cli"]).cli, CliChoice::Off));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        for args in [
            &["--ops"][..],
            &["--ops", "x"],
            &["--rounds", "0"],
            &["--bogus"],
            &["--cli", "x", "--no-cli"],
        ] {
            assert!(parse(args).is_err(), "{args:?}");
        }
    }
}
