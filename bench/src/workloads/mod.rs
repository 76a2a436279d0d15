//! The five workloads of issue 4, each in its own module, each returning a
//! report [`Section`](crate::report::Section) with its tables, plots and
//! target checks: [`send`] (1), [`claim`] (2), [`wake`] (3), [`roundtrip`]
//! (4) and [`query`] (5); workload 6 (fsync-per-commit durability) runs
//! inside each of them; [`orch`] (7) measures the leader's control plane;
//! [`baseline`] (8) compares a CLI command's cost with a baseline build's;
//! [`retention`] (9) follows the file's size with retention off and on;
//! [`bridge`] (10) times a dropped descriptor to its thread;
//! [`import`] (11) times the import of a seed 004 mailbox log;
//! [`postgres`] (12) compares inbox on PostgreSQL with inbox on SQLite and
//! the raw PostgreSQL peer; [`board`] (13) times the live board's commit to
//! visible and its idle cost.
//! Shared helpers live here. A workload must never
//! compare systems across durabilities: a table holds one durability, and a
//! ratio's baseline is measured in the same run and the same table.

pub(crate) mod baseline;
pub(crate) mod board;
pub(crate) mod bridge;
pub(crate) mod claim;
pub(crate) mod import;
pub(crate) mod orch;
pub(crate) mod orch_git;
pub(crate) mod postgres;
pub(crate) mod query;
pub(crate) mod retention;
pub(crate) mod roundtrip;
pub(crate) mod send;
pub(crate) mod wake;

use inbox_bench_kit::stats::Summary;

use crate::fmt::fmt_us;
use crate::peers::Durability;
use crate::report::Check;

/// A target check.
pub(crate) fn check(target: &str, measured: String, pass: bool, shortfall: String) -> Check {
    Check {
        target: target.to_owned(),
        measured,
        pass,
        shortfall: if pass { String::new() } else { shortfall },
    }
}

/// The CLI-cost target of a command run by a process of its own, as a
/// multiple of the process-spawn floor (issue 61's, for the build `cargo
/// install` makes).
pub(crate) const CLI_BOUND: f64 = 2.0;

/// The same target for a command handed to `inbox daemon`.
pub(crate) const DAEMON_BOUND: f64 = 1.0;

/// The CLI-cost target of one command: its process's median within
/// `bound` times the process-spawn floor. `why` says where the time goes.
/// Returns the ratio.
pub(crate) fn cli_cost_check(
    checks: &mut Vec<Check>,
    command: &str,
    median: f64,
    floor: f64,
    bound: f64,
    why: &str,
) -> f64 {
    let cli_ratio = inbox_bench_kit::stats::ratio(median, floor).unwrap_or(f64::INFINITY);
    checks.push(check(
        &format!("CLI `{command}` median ≤ {bound}× the process-spawn floor"),
        format!(
            "{} vs floor {} = {}",
            fmt_us(median),
            fmt_us(floor),
            crate::fmt::fmt_ratio(Some(cli_ratio))
        ),
        cli_ratio <= bound,
        format!(
            "{} over the {bound}× target ({} too slow). {why}",
            crate::fmt::fmt_ratio(Some(cli_ratio / bound)),
            fmt_us(median - bound * floor)
        ),
    ));
    cli_ratio
}

/// "normal" / "full (fsync per commit)" for captions.
pub(crate) fn durability_caption(d: Durability) -> &'static str {
    match d {
        Durability::Normal => "normal durability (no fsync per commit)",
        Durability::Full => "full durability (fsync per commit, only equally durable peers)",
    }
}

/// `p50 / p99 / max` cells.
pub(crate) fn latency_cells(s: &Summary) -> Vec<String> {
    if s.is_empty() {
        return vec!["n/a".into(); 3];
    }
    vec![fmt_us(s.p50), fmt_us(s.p99), fmt_us(s.max)]
}

/// Logs progress to stderr (the report is the output; this is for people
/// watching a long run).
pub(crate) fn progress(text: &str) {
    eprintln!("  {text}");
}
