//! Workload 4: a full request/answer round trip between two agents that
//! block in waits. The worker posts a question and blocks; the lead, blocked
//! in its own wait, wakes, answers, and blocks again; the round trip is the
//! worker's time from posting to holding the answer.
//!
//! inbox runs it twice: as two long-lived processes (the harness is the
//! worker, a `__responder` child the lead), and as two agents that start a
//! CLI process per step (`inbox update --status blocked`, `inbox
//! wait-reply`; `inbox watch --status blocked`, `inbox reply --kind
//! answer`), four processes per round trip. The peers run as two long-lived
//! processes. This module must never let the two sides share a process.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};

use super::{check, durability_caption, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::peers::{Durability, Endpoint, Role, System, Target, inbox::InboxEndpoint};
use crate::proc::{ChildGuard, run_checked, us_since};
use crate::report::Section;
use crate::roles::AgentConfig;
use crate::svg::{Bar, bar_chart};

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let sizes = Sizes {
        fast: ctx.size(300, 40),
        cli: ctx.size(150, 20),
        poll: ctx.size(8, 2),
    };
    let mut section = Section::new("roundtrip", "4. Request/answer round trip");
    section.intro.push(format!(
        "Two agents, each blocked in a wait in its own process. The worker posts a question \
         (inbox: `update --status blocked`) and waits (`wait-reply`); the lead, blocked in \
         `watch --status blocked`, wakes and answers (`reply --kind answer`); the worker wakes. \
         The figure is the worker's time from posting to holding the answer: two writes and \
         two cross-process wakes. {} round trips per long-lived pair, {} with CLI \
         processes (four processes per round trip), {} for the polling peers. Baseline: \
         Redis lists (LPUSH + BLPOP both ways) in the same run.",
        sizes.fast, sizes.cli, sizes.poll
    ));
    let mut bars = Vec::new();
    let mut rows_normal = Vec::new();
    for durability in Ctx::DURABILITIES {
        let rows = measure_pairs(ctx, durability, sizes)?;
        let baseline = rows.iter().find(|r| r.baseline).map_or(0.0, |r| r.s.p50);
        let mut table = Table::new(
            format!(
                "**Round trip, {}**. Last column: p50 as a multiple of the Redis list pair's p50 in this table.",
                durability_caption(durability)
            ),
            [
                "agents",
                "round trips",
                "p50",
                "p99",
                "max",
                "p50 ÷ Redis lists",
            ],
        );
        for row in &rows {
            let mut cells = vec![row.label.clone(), row.s.n.to_string()];
            cells.extend(latency_cells(&row.s));
            cells.push(fmt_ratio(ratio(row.s.p50, baseline)));
            table.row(cells);
            bars.push(Bar {
                label: format!("{} [{}]", row.label, durability.as_str()),
                p50: row.s.p50,
                p99: row.s.p99,
                baseline: row.baseline,
            });
        }
        section.tables.push(table);
        if durability == Durability::Normal {
            rows_normal = rows;
        }
    }
    bar_chart(
        &ctx.out_dir.join("roundtrip.svg"),
        "Request/answer round trip between two blocked agents (median, p99 whisker)",
        "round trip (log scale)",
        &bars,
    )?;
    section.plots.push((
        "roundtrip.svg".into(),
        "Round trip per pair of agents and durability, median with p99 whisker; grey is the Redis list baseline".into(),
    ));
    headline(&mut section, &rows_normal);
    long_conversation(ctx, &mut section)?;
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// How many round trips: per long-lived pair, with CLI processes, for the
/// polling peers.
#[derive(Clone, Copy)]
struct Sizes {
    fast: usize,
    cli: usize,
    poll: usize,
}

/// One pair of agents' round trips.
struct Row {
    label: String,
    s: Summary,
    /// The Redis list pair, the table's baseline.
    baseline: bool,
    /// inbox as a CLI process per step.
    cli: bool,
}

/// Every pair under `durability`, in table order: each system as two
/// long-lived processes, and inbox also as a CLI process per step.
fn measure_pairs(ctx: &Ctx, durability: Durability, sizes: Sizes) -> Result<Vec<Row>> {
    let systems = [
        System::RedisList,
        System::Inbox,
        System::RedisStream,
        System::Postgres,
        System::Jsonl,
        System::FileDrop,
    ];
    let mut rows = Vec::new();
    for system in systems {
        let n = if system.polls() {
            sizes.poll
        } else {
            sizes.fast
        };
        progress(&format!(
            "round trip: {} ({}), {n}",
            system.label(),
            durability.as_str()
        ));
        rows.push(Row {
            label: format!("{} (long-lived processes)", system.label()),
            s: Summary::of(&long_lived(ctx, &ctx.target(system, durability), n)?),
            baseline: system == System::RedisList,
            cli: false,
        });
        if system == System::Inbox {
            progress(&format!(
                "round trip: inbox CLI processes ({}), {}",
                durability.as_str(),
                sizes.cli
            ));
            let target = ctx.target(System::Inbox, durability);
            rows.push(Row {
                label: "inbox (a CLI process per step)".into(),
                s: Summary::of(&with_cli(ctx, &target, sizes.cli)?),
                baseline: false,
                cli: true,
            });
        }
    }
    Ok(rows)
}

/// The headline and the (reference-only) target, from the normal
/// durability's rows.
fn headline(section: &mut Section, rows: &[Row]) {
    let find = |pick: fn(&Row) -> bool| rows.iter().find(|r| pick(r)).map(|r| r.s);
    let long = find(|r| r.label.starts_with("inbox (long-lived")).unwrap_or_default();
    let cli = find(|r| r.cli).unwrap_or_default();
    let baseline = find(|r| r.baseline).map_or(0.0, |s| s.p50);
    section.headlines.push(format!(
        "question → answer between two blocked agents: inbox p50 {} (long-lived), {} with a \
         CLI process per step, Redis lists {} ({})",
        fmt_us(long.p50),
        fmt_us(cli.p50),
        fmt_us(baseline),
        fmt_ratio(ratio(long.p50, baseline))
    ));
    section.checks.push(check(
        "round trip (no numeric target): reported for reference",
        format!("inbox p50 {} / p99 {}", fmt_us(long.p50), fmt_us(long.p99)),
        true,
        String::new(),
    ));
}

/// The first and the last this many steps of a long conversation are
/// compared.
const CONVERSATION_WINDOW: usize = 200;

/// How much dearer a step may be at the end of a long conversation than at
/// its start: a step must not read the conversation it adds to.
const CONVERSATION_GROWTH: f64 = 1.5;

/// A long conversation in one thread, in process: the worker blocks on a
/// question (`update --status blocked`) and the lead answers (`reply
/// --kind answer`), back to back. Each step must cost the same after
/// thousands of events as in a new thread.
fn long_conversation(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let rounds = ctx.size(5_000, 1_000);
    progress(&format!(
        "round trip: a conversation of {rounds} questions and answers"
    ));
    let target = ctx
        .target(System::Inbox, Durability::Normal)
        .prepare_channel()?;
    let thread = target.thread.clone().unwrap_or_default();
    let mut worker = InboxEndpoint::open(&target.path, &thread, Role::Worker)?;
    let mut lead = InboxEndpoint::open(&target.path, &thread, Role::Lead)?;
    let (mut questions, mut answers) = (Vec::new(), Vec::new());
    for i in 0..rounds as u64 {
        let t0 = Instant::now();
        worker.post(i)?;
        questions.push(us_since(t0));
        let t0 = Instant::now();
        lead.post(i)?;
        answers.push(us_since(t0));
    }
    let mut table = Table::new(
        format!(
            "**One long conversation, in process** (normal durability): {rounds} questions \
             and answers in one thread, each step on its own connection, back to back. p50 \
             of the first and of the last {CONVERSATION_WINDOW} of each step; last column: \
             the last as a multiple of the first."
        ),
        ["step", "p50, first", "p50, last", "last ÷ first"],
    );
    let mut worst = 0.0f64;
    for (label, samples) in [
        (
            "the worker's question (`update --status blocked`)",
            &questions,
        ),
        ("the lead's answer (`reply --kind answer`)", &answers),
    ] {
        let window = CONVERSATION_WINDOW.min(samples.len());
        let first = Summary::of(&samples[..window]).p50;
        let last = Summary::of(&samples[samples.len() - window..]).p50;
        let growth = ratio(last, first);
        // A first window measured as nothing cannot be compared: a miss.
        worst = worst.max(growth.unwrap_or(f64::INFINITY));
        table.row(vec![
            label.to_owned(),
            fmt_us(first),
            fmt_us(last),
            fmt_ratio(growth),
        ]);
    }
    section.tables.push(table);
    section.checks.push(check(
        &format!(
            "a step of a conversation costs the same at its end: p50 of the last {CONVERSATION_WINDOW} ≤ {CONVERSATION_GROWTH}× the first, after {rounds} questions and answers"
        ),
        format!("worst {}", fmt_ratio(Some(worst))),
        worst <= CONVERSATION_GROWTH,
        format!(
            "a step read more of the thread as it grew ({}); see the table",
            fmt_ratio(Some(worst))
        ),
    ));
    Ok(())
}

/// The harness as the worker, a `__responder` child as the lead.
fn long_lived(ctx: &Ctx, target: &Target, n: usize) -> Result<Vec<f64>> {
    let target = target.prepare_channel()?;
    let config = serde_json::to_string(&AgentConfig {
        target: target.clone(),
        role: Role::Lead,
    })?;
    let mut cmd = Command::new(&ctx.bins.me);
    cmd.arg("__responder")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = ChildGuard::spawn(&mut cmd, &format!("{} responder", target.system.label()))?;
    let lines = child.lines()?;
    lines.expect("ready", Duration::from_secs(30))?;
    let mut worker = target.endpoint(Role::Worker)?;
    let warmup = if target.system.polls() { 0 } else { 5 };
    let timeout = Duration::from_secs(30);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + warmup {
        let t0 = Instant::now();
        worker.post(i as u64)?;
        if !worker.wait(timeout)? {
            // The responder may have died: say so if it printed why.
            if let Ok((_, line)) = lines.next(Duration::from_millis(10)) {
                bail!("{} responder: {line}", target.system.label());
            }
            bail!("{}: no answer within {timeout:?}", target.system.label());
        }
        if i >= warmup {
            samples.push(us_since(t0));
        }
    }
    Ok(samples)
}

fn json(out: &std::process::Output) -> Result<serde_json::Value> {
    serde_json::from_slice(&out.stdout).context("inbox printed something that is not JSON")
}

/// Both agents start one `inbox` process per step.
fn with_cli(ctx: &Ctx, target: &Target, n: usize) -> Result<Vec<f64>> {
    let target = target.prepare_channel()?;
    let thread = target
        .thread
        .clone()
        .ok_or_else(|| anyhow!("no channel thread"))?;
    let start_cursor =
        crate::peers::inbox::InboxEndpoint::open(&target.path, &thread, Role::Lead)?.cursor();
    let rounds = n + CLI_WARMUP;
    std::thread::scope(|scope| {
        let lead = scope.spawn(|| cli_lead(ctx, &target, &thread, start_cursor, rounds));
        let worker = scope.spawn(|| cli_worker(ctx, &target, &thread, n));
        let samples = worker
            .join()
            .map_err(|_| anyhow!("the worker thread panicked"))?;
        let lead = lead
            .join()
            .map_err(|_| anyhow!("the lead thread panicked"))?;
        lead?;
        samples
    })
}

/// Round trips of the CLI pair run untimed first.
const CLI_WARMUP: usize = 3;

/// The lead: `inbox watch --status blocked`, then `inbox reply --kind
/// answer`, `rounds` times.
fn cli_lead(ctx: &Ctx, target: &Target, thread: &str, start: u64, rounds: usize) -> Result<()> {
    let mut cursor = start;
    for _ in 0..rounds {
        let mut watch = ctx.inbox(&target.path);
        watch
            .args(["watch", "--agent", "lead", "--status", "blocked"])
            .args(["--timeout-seconds", "30", "--json", "--after-event"])
            .arg(cursor.to_string());
        let (_, out) = run_checked(&mut watch, &[])?;
        cursor = json(&out)?["next_event_id"]
            .as_u64()
            .ok_or_else(|| anyhow!("watch printed no next_event_id"))?;
        let mut reply = ctx.inbox(&target.path);
        reply
            .args(["reply", "--from", "lead", "--kind", "answer"])
            .args(["--summary", "Use the first option.", "--json"])
            .arg("--thread")
            .arg(thread);
        let (_, out) = run_checked(&mut reply, &[])?;
        // The lead's own events are skipped by its watch; move past them.
        cursor = cursor.max(json(&out)?["event_id"].as_u64().unwrap_or(0));
    }
    Ok(())
}

/// The worker: `inbox update --status blocked`, then `inbox wait-reply`;
/// the round trip is the two processes' time, `n` times after the warm-up.
fn cli_worker(ctx: &Ctx, target: &Target, thread: &str, n: usize) -> Result<Vec<f64>> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + CLI_WARMUP {
        let t0 = Instant::now();
        let mut update = ctx.inbox(&target.path);
        update
            .args([
                "update", "--agent", "worker", "--status", "blocked", "--json",
            ])
            .arg("--summary")
            .arg(format!("Question {i}: which option?"))
            .arg("--thread")
            .arg(thread);
        run_checked(&mut update, &[])?;
        let mut wait = ctx.inbox(&target.path);
        wait.args(["wait-reply", "--agent", "worker"])
            .args(["--timeout-seconds", "30", "--json"])
            .arg("--thread")
            .arg(thread);
        let (_, out) = run_checked(&mut wait, &[])?;
        if json(&out)?["woke"] != serde_json::Value::Bool(true) {
            bail!("wait-reply did not wake");
        }
        if i >= CLI_WARMUP {
            samples.push(us_since(t0));
        }
    }
    Ok(samples)
}
