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

use super::{check, durability_caption, latency_cells, progress};
use crate::ctx::Ctx;
use crate::peers::{Durability, Role, System, Target};
use crate::proc::{ChildGuard, run_checked, us_since};
use crate::report::{Section, Table};
use crate::roles::AgentConfig;
use crate::stats::{Summary, fmt_ratio, fmt_us, ratio};
use crate::svg::{Bar, bar_chart};

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let fast_n: usize = ctx.size(300, 40);
    let cli_n: usize = ctx.size(150, 20);
    let poll_n: usize = ctx.size(8, 2);
    let mut section = Section {
        key: "roundtrip".into(),
        title: "4. Request/answer round trip".into(),
        command: "cargo run -p inbox-bench --release -- roundtrip".into(),
        ..Section::default()
    };
    section.intro.push(format!(
        "Two agents, each blocked in a wait in its own process. The worker posts a question \
         (inbox: `update --status blocked`) and waits (`wait-reply`); the lead, blocked in \
         `watch --status blocked`, wakes and answers (`reply --kind answer`); the worker wakes. \
         The figure is the worker's time from posting to holding the answer: two writes and \
         two cross-process wakes. {fast_n} round trips per long-lived pair, {cli_n} with CLI \
         processes (four processes per round trip), {poll_n} for the polling peers. Baseline: \
         Redis lists (LPUSH + BLPOP both ways) in the same run."
    ));
    let mut bars = Vec::new();
    let mut headline = (Summary::default(), Summary::default(), 0.0);
    for durability in Ctx::DURABILITIES {
        let mut table = Table::new(
            format!(
                "**Round trip, {}**. Last column: p50 as a multiple of the Redis list pair's p50 in this table.",
                durability_caption(durability)
            ),
            &[
                "agents",
                "round trips",
                "p50",
                "p99",
                "max",
                "p50 ÷ Redis lists",
            ],
        );
        let mut baseline = 0.0;
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
            let n = if system.polls() { poll_n } else { fast_n };
            progress(&format!(
                "round trip: {} ({}), {n}",
                system.label(),
                durability.as_str()
            ));
            let s = Summary::of(&long_lived(ctx, &ctx.target(system, durability), n)?);
            if system == System::RedisList {
                baseline = s.p50;
            }
            rows.push((
                format!("{} (long-lived processes)", system.label()),
                s,
                system == System::RedisList,
            ));
            if system == System::Inbox {
                progress(&format!(
                    "round trip: inbox CLI processes ({}), {cli_n}",
                    durability.as_str()
                ));
                let cli = Summary::of(&with_cli(
                    ctx,
                    &ctx.target(System::Inbox, durability),
                    cli_n,
                )?);
                rows.push(("inbox (a CLI process per step)".into(), cli, false));
                if durability == Durability::Normal {
                    headline = (s, cli, 0.0);
                }
            }
        }
        if durability == Durability::Normal {
            headline.2 = baseline;
        }
        for (label, s, is_baseline) in rows {
            let mut cells = vec![label.clone(), s.n.to_string()];
            cells.extend(latency_cells(&s));
            cells.push(fmt_ratio(ratio(s.p50, baseline)));
            table.row(cells);
            bars.push(Bar {
                label: format!("{label} [{}]", durability.as_str()),
                p50: s.p50,
                p99: s.p99,
                baseline: is_baseline,
            });
        }
        section.tables.push(table);
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
    let (long, cli, baseline) = headline;
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
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
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
    let warmup = 3;
    std::thread::scope(|scope| {
        let lead = scope.spawn(|| -> Result<()> {
            let mut cursor = start_cursor;
            for _ in 0..n + warmup {
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
                    .args([
                        "reply",
                        "--from",
                        "lead",
                        "--kind",
                        "answer",
                        "--summary",
                        "Use the first option.",
                        "--json",
                    ])
                    .arg("--thread")
                    .arg(&thread);
                let (_, out) = run_checked(&mut reply, &[])?;
                // The lead's own events are skipped by its watch; move past them.
                cursor = cursor.max(json(&out)?["event_id"].as_u64().unwrap_or(0));
            }
            Ok(())
        });
        let worker = scope.spawn(|| -> Result<Vec<f64>> {
            let mut samples = Vec::with_capacity(n);
            for i in 0..n + warmup {
                let t0 = Instant::now();
                let mut update = ctx.inbox(&target.path);
                update
                    .args([
                        "update", "--agent", "worker", "--status", "blocked", "--json",
                    ])
                    .arg("--summary")
                    .arg(format!("Question {i}: which option?"))
                    .arg("--thread")
                    .arg(&thread);
                run_checked(&mut update, &[])?;
                let mut wait = ctx.inbox(&target.path);
                wait.args([
                    "wait-reply",
                    "--agent",
                    "worker",
                    "--timeout-seconds",
                    "30",
                    "--json",
                ])
                .arg("--thread")
                .arg(&thread);
                let (_, out) = run_checked(&mut wait, &[])?;
                if json(&out)?["woke"] != serde_json::Value::Bool(true) {
                    bail!("wait-reply did not wake");
                }
                if i >= warmup {
                    samples.push(us_since(t0));
                }
            }
            Ok(samples)
        });
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
