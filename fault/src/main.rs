//! `inbox-fault`: runs the fault checks against an `inbox` binary and says
//! what each found. `inbox-fault all` runs them all (the short mode CI runs;
//! `--long` for the soak); each check also runs alone. Prints the seed, so
//! that a failing run can be replayed with `--seed`, and exits 1 on any
//! violation, naming the invariant and the database file it broke on (kept).
//! This binary must never hide a violation behind a retry.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use inbox_fault::crash::CrashConfig;
use inbox_fault::load::LoadConfig;
use inbox_fault::stop::StopConfig;
use inbox_fault::{Failure, crash, load, locate_inbox, rng, stop};

/// Fault and abuse harness for inbox: kills, stops and load against the real
/// binary, with an audit of the database after each.
#[derive(Debug, Parser)]
#[command(name = "inbox-fault", version)]
struct Cli {
    #[command(subcommand)]
    check: Check,
}

#[derive(Debug, Subcommand)]
enum Check {
    /// Concurrent mixed workloads, SIGKILLed at random moments; audit after each iteration
    Crash(Common),
    /// Workers SIGSTOPped past their lease; attempt exhaustion; a stuck writer
    Stop(Common),
    /// 32 worker processes draining a queue for a while
    Load(Common),
    /// Every check above, one after the other
    All(Common),
}

#[derive(Debug, Args)]
struct Common {
    /// The inbox binary under test [default: target/<profile>/inbox, built if missing]
    #[arg(long, value_name = "PATH")]
    inbox: Option<PathBuf>,
    /// Seed of every pseudo-random choice [default: a fresh one, printed]
    #[arg(long)]
    seed: Option<u64>,
    /// The long mode: thousands of kill iterations, 10 stop rounds, 5 minutes of load
    #[arg(long)]
    long: bool,
    /// crash: iterations; stop: rounds [default: by mode]
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// load: how long to apply load; crash: stop after this long [default: by mode]
    #[arg(long, value_name = "N")]
    seconds: Option<u64>,
    /// load: worker processes at once [default: 32]
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Where to make scratch folders (a failing run's folder is kept) [default: the temporary folder]
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (names, common): (&[&str], &Common) = match &cli.check {
        Check::Crash(c) => (&["crash"], c),
        Check::Stop(c) => (&["stop"], c),
        Check::Load(c) => (&["load"], c),
        Check::All(c) => (&["crash", "stop", "load"], c),
    };
    // Inside a cargo target folder, `cargo build -p inbox-cli` first (a
    // no-op when up to date), so a run never attacks a stale binary.
    let inbox = match locate_inbox(common.inbox.as_deref(), true) {
        Ok(inbox) => inbox,
        Err(e) => {
            eprintln!("inbox-fault: {e}");
            return ExitCode::from(2);
        }
    };
    let seed = common.seed.unwrap_or_else(rng::fresh_seed);
    say(&format!(
        "inbox-fault: seed {seed} (replay with --seed {seed}), {} mode, binary {}",
        if common.long { "long" } else { "short" },
        inbox.bin().display()
    ));
    let mut failed = false;
    for name in names {
        let result = run_one(name, &inbox, common, seed);
        match result {
            Ok(summary) => say(&summary),
            Err(failure) => {
                failed = true;
                say(&failure.to_string());
                say(&format!(
                    "replay: inbox-fault {name} --seed {seed}{}",
                    if common.long { " --long" } else { "" }
                ));
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn run_one(
    name: &str,
    inbox: &inbox_fault::Inbox,
    common: &Common,
    seed: u64,
) -> Result<String, Failure> {
    match name {
        "crash" => {
            let mut config = if common.long {
                CrashConfig::long(seed)
            } else {
                CrashConfig::short(seed)
            };
            if let Some(n) = common.iterations {
                config.iterations = n;
            }
            if let Some(s) = common.seconds {
                config.max_duration = Some(Duration::from_secs(s));
                if common.iterations.is_none() {
                    config.iterations = usize::MAX;
                }
            }
            config.work_dir.clone_from(&common.work_dir);
            crash::run(inbox, &config).map(|r| r.to_string())
        }
        "stop" => {
            let mut config = if common.long {
                StopConfig::long(seed)
            } else {
                StopConfig::short(seed)
            };
            if let Some(n) = common.iterations {
                config.rounds = n;
            }
            config.work_dir.clone_from(&common.work_dir);
            stop::run(inbox, &config).map(|r| r.to_string())
        }
        _ => {
            let mut config = if common.long {
                LoadConfig::long(seed)
            } else {
                LoadConfig::short(seed)
            };
            if let Some(s) = common.seconds {
                config.duration = Duration::from_secs(s);
            }
            if let Some(w) = common.workers {
                config.workers = w;
            }
            config.work_dir.clone_from(&common.work_dir);
            load::run(inbox, &config).map(|r| r.to_string())
        }
    }
}
