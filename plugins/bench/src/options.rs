//! The command line: a full run (the published report) or `--quick` (a CI
//! smoke run), the sizes each implies, and overrides. It must never decide
//! where output goes; `main` does, from the mode and the build profile.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::cli::CliSizes;
use crate::rates::RateSizes;

/// The help text.
pub(crate) const USAGE: &str = "\
usage: cargo run --release --locked -p inbox-plugin-bench [-- OPTIONS]

Measures the engine component in wasmtime against the built-in engine, in
one run, and writes docs/plugin-benchmarks.md (raw figures:
target/plugin-bench/results.json).

  --quick       smoke run for CI (small sizes, about half a minute even in a
                debug build); writes target/plugin-bench-quick/ only
  --rounds N    rounds of the command workloads (default 7, quick 2)
  --ops N       timed operations per round and series (default 2000, quick 50)
  --warmup N    untimed operations before them (default 200, quick 5)
  --cli PATH    the `inbox` binary for the per-process section; it needs the
                `plugin` feature (default target/release/inbox; the section
                is skipped, with a note, when it is missing or lacks it)
  --no-cli      skip the per-process section

A debug build never writes docs/: its figures are not representative.";

/// What the command line asked for.
pub(crate) enum Parsed {
    /// Print the help and stop.
    Help,
    /// Measure.
    Run(Options),
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

/// Parses the arguments after the program name.
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Parsed> {
    let mut quick = false;
    let mut rounds = None;
    let mut ops = None;
    let mut warmup = None;
    let mut cli = CliChoice::Default;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut number = |flag: &str| -> Result<u64> {
            let Some(value) = args.next() else {
                bail!("{flag} needs a number\n\n{USAGE}");
            };
            value
                .parse()
                .with_context(|| format!("{flag} needs a whole number, not `{value}`"))
        };
        match arg.as_str() {
            "--quick" => quick = true,
            "--rounds" => rounds = Some(number("--rounds")?),
            "--ops" => ops = Some(number("--ops")?),
            "--warmup" => warmup = Some(number("--warmup")?),
            "--no-cli" => cli = CliChoice::Off,
            "--cli" => {
                let Some(path) = args.next() else {
                    bail!("--cli needs the path of an inbox binary\n\n{USAGE}");
                };
                cli = CliChoice::Path(PathBuf::from(path));
            }
            "-h" | "--help" => return Ok(Parsed::Help),
            other => bail!("unknown option `{other}`\n\n{USAGE}"),
        }
    }
    let mut sizes = if quick { Sizes::QUICK } else { Sizes::FULL };
    sizes.rates.rounds = rounds.unwrap_or(sizes.rates.rounds);
    sizes.rates.ops = ops.unwrap_or(sizes.rates.ops);
    sizes.rates.warmup = warmup.unwrap_or(sizes.rates.warmup);
    if sizes.rates.rounds == 0 || sizes.rates.ops == 0 {
        bail!("--rounds and --ops must be at least 1\n\n{USAGE}");
    }
    Ok(Parsed::Run(Options { quick, sizes, cli }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().map(|s| (*s).to_owned())) {
            Ok(Parsed::Run(options)) => options,
            Ok(Parsed::Help) => panic!("help for {args:?}"),
            Err(e) => panic!("{args:?}: {e}"),
        }
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
        assert!(parse(["--ops".to_owned()]).is_err());
        assert!(parse(["--ops".to_owned(), "x".to_owned()]).is_err());
        assert!(parse(["--rounds".to_owned(), "0".to_owned()]).is_err());
        assert!(parse(["--bogus".to_owned()]).is_err());
        assert!(matches!(parse(["--help".to_owned()]), Ok(Parsed::Help)));
    }
}
