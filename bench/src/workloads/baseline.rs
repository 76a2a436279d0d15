//! Workload 8: a CLI command's cost against a baseline build, in the same
//! run. `inbox send` and `inbox claim --next` of this build and of a
//! baseline build (an `inbox` binary built from another commit, named by
//! `$INBOX_BENCH_BASELINE`; `scripts/bench-baseline REV` builds one and runs
//! this), sampled round-robin with the process-spawn floor, one process per
//! command, each build on a database of its own. This is how a change shows
//! that it did not make the plain commands slower: the before and the after
//! are measured in the same minutes, so the machine's noise falls on both.
//! Without a baseline build the section says how to get one. It must never
//! run the two builds on one database: a newer schema is refused by an
//! older binary, and that refusal is not a cost.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};

use super::progress;
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::proc::run_checked;
use crate::report::Section;

/// The environment variable naming the baseline build's `inbox`.
pub(crate) const BASELINE_ENV: &str = "INBOX_BENCH_BASELINE";

/// Processes of each command started before the clock starts.
const WARMUP: u64 = 3;

/// A row's command for sample `seq`.
type MakeCommand<'a> = Box<dyn Fn(u64) -> Command + 'a>;

/// One build's `inbox` and the two databases its commands run on.
struct Build {
    label: &'static str,
    inbox: PathBuf,
    send_db: PathBuf,
    claim_db: PathBuf,
}

impl Build {
    /// A build measured from a fresh copy of its binary: how long a
    /// binary's file has sat in the page cache moved a process's time here
    /// by more than the differences this workload looks for (the same
    /// bytes ran 15% faster from a file just written), so both builds, and
    /// the floor, run from copies made in the same minute.
    fn new(ctx: &Ctx, label: &'static str, inbox: &Path) -> Result<Build> {
        let dir = ctx.tmp.path();
        let slug = label.replace(' ', "-");
        Ok(Build {
            send_db: dir.join(format!("baseline-{slug}-send.db")),
            claim_db: dir.join(format!("baseline-{slug}-claim.db")),
            label,
            inbox: fresh_copy(inbox, &dir.join(format!("baseline-{slug}-inbox")))?,
        })
    }

    /// `inbox ARGS` on `db`, with nothing inherited that would change it.
    fn command(&self, db: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.inbox);
        cmd.env("INBOX_DB", db)
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_NOW")
            .args(args);
        cmd
    }

    /// Both databases created by this build; the claim queue filled with
    /// `tasks` threads, sent by this build.
    fn prepare(&self, tasks: u64) -> Result<()> {
        for db in [&self.send_db, &self.claim_db] {
            run_checked(&mut self.command(db, &["init"]), &[])?;
        }
        for i in 0..tasks {
            let subject = format!("Benchmark task {i}");
            let args = [
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                &subject,
            ];
            run_checked(&mut self.command(&self.claim_db, &args), &[])?;
        }
        Ok(())
    }

    fn send(&self, seq: u64) -> Command {
        let subject = format!("Implement benchmark task {seq}");
        let body =
            format!("Benchmark task {seq}: a task assignment of about the size the peers send.");
        let args = [
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--json",
            "--subject",
            &subject,
            "--body",
            &body,
        ];
        self.command(&self.send_db, &args)
    }

    fn claim(&self) -> Command {
        self.command(
            &self.claim_db,
            &["claim", "--agent", "worker", "--next", "--json"],
        )
    }
}

/// The seed of the rows' order: fixed, so that two runs sample alike.
const ORDER_SEED: u64 = 8;

/// The order of one round's `rows`: shuffled afresh, so that every row
/// takes every place in a round and follows every other row alike, and
/// never opening with `closed_last`, the row that closed the round before.
/// Where a process falls in a round changes its time by several per cent
/// on this machine (the same binary took 2.81 ms first in a round and
/// 3.00 ms fourth), and a command that runs twice in a row is faster the
/// second time: when every other round ran in reverse, the last row (the
/// baseline's `claim --next`) ran twice in a row every other round, and a
/// baseline that was this very build measured 4 and 6 % faster than it.
fn round_order(rng: &mut fastrand::Rng, rows: usize, closed_last: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows).collect();
    rng.shuffle(&mut order);
    if rows > 1 && order.first().copied() == closed_last {
        order.swap(0, rows - 1);
    }
    order
}

/// Copies `binary` to `to` (executable), for [`Build::new`].
fn fresh_copy(binary: &Path, to: &Path) -> Result<PathBuf> {
    std::fs::copy(binary, to)
        .with_context(|| format!("cannot copy {} to {}", binary.display(), to.display()))?;
    Ok(to.to_owned())
}

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("baseline", "8. A command's cost against a baseline build");
    section.command = format!(
        "{BASELINE_ENV}=PATH/TO/OLD/inbox cargo run -p inbox-bench --release -- baseline (or scripts/bench-baseline REV)"
    );
    let Some(baseline) = std::env::var_os(BASELINE_ENV).map(PathBuf::from) else {
        section.intro.push(format!(
            "Not measured in this run: no baseline build was named. Set `{BASELINE_ENV}` to an \
             `inbox` binary built from the commit to compare with (`scripts/bench-baseline REV` \
             builds one from REV in a scratch worktree and runs this workload)."
        ));
        section.seconds = started.elapsed().as_secs_f64();
        return Ok(section);
    };
    let total: u64 = ctx.size(400, 30);
    let version = |inbox: &Path| -> Result<String> {
        let (_, out) = run_checked(Command::new(inbox).arg("--version"), &[])
            .with_context(|| format!("{BASELINE_ENV}={}", inbox.display()))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    section.intro.push(format!(
        "**One process per command, this build against a baseline build, in the same run**: \
         {total} processes of each, sampled round-robin (one of each in turn, so the load of \
         the machine falls on all alike, each round in a shuffled order that never opens with \
         the command that closed the round before, so that no command always runs in the same \
         place of a round or twice in a row) with the process-spawn floor \
         (`inbox-bench-noop`). \
         This build is `{}` ({}); the baseline is `{}` ({}); each runs from a copy of its \
         binary made at the start of the run, as does the floor (how long a binary's file \
         has sat in the page cache moved a process's time by up to 15% here). Each build \
         runs on databases it created itself; `claim --next` drains a queue of {} threads \
         its own build sent.",
        ctx.bins.inbox.display(),
        version(&ctx.bins.inbox)?,
        baseline.display(),
        version(&baseline)?,
        total + WARMUP,
    ));
    let after = Build::new(ctx, "this build", &ctx.bins.inbox)?;
    let before = Build::new(ctx, "baseline", &baseline)?;
    for build in [&after, &before] {
        progress(&format!("baseline: preparing {}", build.label));
        build.prepare(total + WARMUP)?;
    }
    let noop = fresh_copy(&ctx.bins.noop, &ctx.tmp.path().join("baseline-noop"))?;
    let rows: Vec<(String, MakeCommand<'_>)> = vec![
        (
            "floor: inbox-bench-noop".into(),
            Box::new(move |_| Command::new(&noop)),
        ),
        ("inbox send, this build".into(), Box::new(|s| after.send(s))),
        ("inbox send, baseline".into(), Box::new(|s| before.send(s))),
        (
            "inbox claim --next, this build".into(),
            Box::new(|_| after.claim()),
        ),
        (
            "inbox claim --next, baseline".into(),
            Box::new(|_| before.claim()),
        ),
    ];
    for (_, make) in &rows {
        for i in 0..WARMUP {
            run_checked(&mut make(1_000_000 + i), &[])?;
        }
    }
    progress(&format!(
        "baseline: {} commands interleaved, {total} each",
        rows.len()
    ));
    let mut samples = vec![Vec::with_capacity(total as usize); rows.len()];
    let mut rng = fastrand::Rng::with_seed(ORDER_SEED);
    let mut closed_last = None;
    for seq in 0..total {
        let order = round_order(&mut rng, rows.len(), closed_last);
        closed_last = order.last().copied();
        for i in order {
            let (us, _) = run_checked(&mut (rows[i].1)(seq), &[])?;
            samples[i].push(us);
        }
    }
    let summaries: Vec<Summary> = samples.iter().map(|s| Summary::of(s)).collect();
    let floor = summaries[0].p50;
    let mut table = Table::new(
        "**One process per command, normal durability**: wall time per process (spawn to \
         exit), as a multiple of the floor's median, and this build's median against the \
         baseline's.",
        vec![
            "command",
            "p50",
            "p99",
            "p50 ÷ floor",
            "this build ÷ baseline",
        ],
    );
    for (i, ((label, _), s)) in rows.iter().zip(&summaries).enumerate() {
        // Rows 1 and 3 are this build's; the baseline's follows each.
        let against = match i {
            1 | 3 => fmt_ratio(ratio(s.p50, summaries[i + 1].p50)),
            _ => String::new(),
        };
        table.row(vec![
            label.clone(),
            fmt_us(s.p50),
            fmt_us(s.p99),
            fmt_ratio(ratio(s.p50, floor)),
            against,
        ]);
    }
    section.tables.push(table);
    for (name, i) in [("send", 1), ("claim --next", 3)] {
        section.headlines.push(format!(
            "`inbox {name}`: {} this build, {} the baseline ({} and {} the spawn floor)",
            fmt_us(summaries[i].p50),
            fmt_us(summaries[i + 1].p50),
            fmt_ratio(ratio(summaries[i].p50, floor)),
            fmt_ratio(ratio(summaries[i + 1].p50, floor)),
        ));
    }
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::round_order;

    /// Over many rounds, every row takes every place of a round, and no
    /// row runs twice in a row across the rounds' boundaries.
    #[test]
    fn rounds_are_shuffled_and_never_repeat_a_row_across_a_boundary() {
        let rows = 5;
        let mut rng = fastrand::Rng::with_seed(super::ORDER_SEED);
        let mut places = vec![vec![0_u32; rows]; rows];
        let mut closed_last = None;
        for _ in 0..400 {
            let order = round_order(&mut rng, rows, closed_last);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..rows).collect::<Vec<_>>(), "{order:?}");
            assert_ne!(order.first().copied(), closed_last, "{order:?}");
            for (place, &row) in order.iter().enumerate() {
                places[row][place] += 1;
            }
            closed_last = order.last().copied();
        }
        for (row, counts) in places.iter().enumerate() {
            assert!(counts.iter().all(|&n| n >= 40), "row {row}: {counts:?}");
        }
    }
}
