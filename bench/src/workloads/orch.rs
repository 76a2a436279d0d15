//! Workload 7: orch, the leader's control plane, measured as a leader uses
//! it. Three figures, each with an inbox baseline measured in the same run:
//!
//! - `orch ready` and `orch status` on a run of ten thousand tasks, in
//!   process over a SQLite file (baseline: inbox's `fetch` on the same
//!   store: the worker's read of its queue);
//! - `orch dispatch --all-ready` of a thousand ready tasks, in process, one
//!   command (baseline: the same thousand threads opened by `send`, one
//!   transaction each);
//! - `orch wait` woken across processes by a worker's `inbox done` (the
//!   task goes to review), an `orch wait` CLI process per wake (baseline:
//!   an `inbox watch` CLI process woken the same way, same method as
//!   workload 3);
//! - eight workers' claims while the leader dispatches worktree tasks in a
//!   repository of twenty thousand files (baseline: the same workers'
//!   claims just before, with no dispatch): [`super::orch_git`].
//!
//! This module must never start a wake's clock before its waiter has had
//! time to block, and never compare figures from different runs.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};
use inbox_bench_kit::stores::StoreKind;
use inbox_engine::{Executor, Request, Response};
use serde_json::{Value, json};

use super::{check, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::proc::{ChildGuard, us_between};
use crate::report::Section;

/// How long a per-wake CLI waiter is given to start and block.
const SETTLE: Duration = Duration::from_millis(60);

pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("orch", "7. orch: the leader's reads, dispatch and wake");
    section.intro.push(
        "The leader's side of the same database (`docs/orch.md`): the reads it runs in its \
         loop on a large run, a dispatch of a whole ready queue, how soon its `orch wait` \
         learns that a worker finished, and what its worktree dispatches cost the workers. \
         Each figure has a baseline from this run."
            .into(),
    );
    reads(ctx, &mut section)?;
    dispatch(ctx, &mut section)?;
    wake(ctx, &mut section)?;
    super::orch_git::run(ctx, &mut section)?;
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Executes a JSON request; fails on an error response.
fn exec(engine: &mut dyn Executor, request: Value) -> Result<Value> {
    let request =
        Request::from_json(&request.to_string()).map_err(|r| anyhow::anyhow!(r.to_json()))?;
    let response = engine.execute(request);
    if let Response::Failure { .. } = &response {
        bail!("{}", response.to_json());
    }
    Ok(serde_json::from_str(&response.to_json())?)
}

/// Microseconds each of `n` runs of `request` took: the command and its
/// JSON answer, as a host runs and prints it. Decoding the request and
/// reading the answer back are the harness's work, so they stay outside
/// the clock.
fn time(engine: &mut dyn Executor, request: &Value, n: usize) -> Result<Vec<f64>> {
    let request =
        Request::from_json(&request.to_string()).map_err(|r| anyhow::anyhow!(r.to_json()))?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let response = engine.execute(request.clone());
        let json = response.to_json();
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
        if !response.is_ok() {
            bail!("{json}");
        }
    }
    Ok(samples)
}

/// A plan of `n` tasks for workers `w1`..`w4`: task `i` needs task
/// `i - width`, so `width` tasks are ready at first and the rest wait.
fn plan(n: usize, width: usize, review: bool) -> Value {
    let tasks: Vec<Value> = (0..n)
        .map(|i| {
            let needs: Vec<String> = if i >= width {
                vec![format!("t{}", i - width)]
            } else {
                Vec::new()
            };
            json!({"task_id": format!("t{i}"), "title": format!("Task {i}"),
                   "assignee": format!("w{}", i % 4 + 1), "needs": needs, "review": review})
        })
        .collect();
    json!({"command": "orch-plan", "agent": "lead", "run_id": "r", "tasks": tasks})
}

fn new_run(dir: &Path, name: &str) -> Result<Box<dyn Executor>> {
    let mut engine = StoreKind::SqliteFile.open(dir, name)?.engine();
    exec(
        engine.as_mut(),
        json!({"command": "orch-run-create", "agent": "lead", "run_id": "r", "goal": "bench"}),
    )?;
    Ok(engine)
}

fn reads(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let tasks = ctx.size(10_000, 1_000);
    let n = ctx.size(300, 30);
    progress(&format!("orch reads on a run of {tasks} tasks"));
    let dir = ctx.tmp.path().join("orch-reads");
    std::fs::create_dir_all(&dir)?;
    let mut engine = new_run(&dir, "reads")?;
    exec(engine.as_mut(), plan(tasks, 100, false))?;
    // Some work in flight, as in a real run: 50 dispatched, 20 of them claimed.
    exec(
        engine.as_mut(),
        json!({"command": "orch-dispatch", "agent": "lead", "all_ready": true, "limit": 50}),
    )?;
    for w in 1..=4 {
        for _ in 0..5 {
            exec(
                engine.as_mut(),
                json!({"command": "claim", "agent": format!("w{w}"), "next": true}),
            )?;
        }
    }
    // A leader in its loop keeps the run reconciled (its orch wait does).
    exec(engine.as_mut(), json!({"command": "orch-reconcile"}))?;
    let ready = Summary::of(&time(
        engine.as_mut(),
        &json!({"command": "orch-ready"}),
        n,
    )?);
    let status = Summary::of(&time(
        engine.as_mut(),
        &json!({"command": "orch-status"}),
        n,
    )?);
    let fetch = Summary::of(&time(
        engine.as_mut(),
        &json!({"command": "fetch", "agent": "w1"}),
        n,
    )?);
    let mut table = Table::new(
        format!(
            "**The leader's reads on a run of {tasks} tasks**, in process over a SQLite file \
             (normal durability), {n} runs each; 50 ready listed, 50 in flight. Last column: p50 \
             as a multiple of inbox `fetch` on the same store."
        ),
        ["read", "p50", "p99", "max", "× fetch"],
    );
    for (label, s) in [
        ("`orch ready`", &ready),
        ("`orch status`", &status),
        ("inbox `fetch` (baseline)", &fetch),
    ] {
        let mut cells = vec![label.to_owned()];
        cells.extend(latency_cells(s));
        cells.push(fmt_ratio(ratio(s.p50, fetch.p50)));
        table.row(cells);
    }
    section.tables.push(table);
    for (name, s) in [("orch ready", &ready), ("orch status", &status)] {
        section.checks.push(check(
            &format!("`{name}` at {tasks} tasks: p50 ≤ 1 ms in process"),
            fmt_us(s.p50),
            s.p50 <= 1000.0,
            format!("{} over", fmt_us(s.p50 - 1000.0)),
        ));
    }
    section.headlines.push(format!(
        "orch ready / status at {tasks} tasks: p50 {} / {} in process ({} / {} inbox fetch)",
        fmt_us(ready.p50),
        fmt_us(status.p50),
        fmt_ratio(ratio(ready.p50, fetch.p50)),
        fmt_ratio(ratio(status.p50, fetch.p50))
    ));
    Ok(())
}

fn dispatch(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let tasks = ctx.size(1_000, 200);
    let rounds = ctx.size(5, 2);
    progress(&format!("orch dispatch --all-ready of {tasks} tasks"));
    let dir = ctx.tmp.path().join("orch-dispatch");
    std::fs::create_dir_all(&dir)?;
    let (mut dispatches, mut sends) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut engine = new_run(&dir, &format!("dispatch-{round}"))?;
        exec(engine.as_mut(), plan(tasks, tasks, false))?;
        let t0 = Instant::now();
        let out = exec(
            engine.as_mut(),
            json!({"command": "orch-dispatch", "agent": "lead", "all_ready": true}),
        )?;
        dispatches.push(t0.elapsed().as_secs_f64() * 1e6);
        if out["dispatched"].as_array().map_or(0, Vec::len) != tasks {
            bail!(
                "the dispatch started {} attempts, not {tasks}",
                out["dispatched"]
            );
        }
        let mut engine = StoreKind::SqliteFile
            .open(&dir, &format!("send-{round}"))?
            .engine();
        let t0 = Instant::now();
        for i in 0..tasks {
            exec(
                engine.as_mut(),
                json!({"command": "send", "from_agent": "lead", "to_agent": "w1", "subject": format!("Task {i}")}),
            )?;
        }
        sends.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    let d = Summary::of(&dispatches);
    let s = Summary::of(&sends);
    let mut table = Table::new(
        format!(
            "**Dispatching {tasks} ready tasks**, in process over a SQLite file, {rounds} rounds \
             on fresh stores. Baseline: the same number of threads opened by `send`, one \
             transaction each. Last column: p50 as a multiple of the baseline."
        ),
        ["how", "p50", "per task", "× sends"],
    );
    table.row(vec![
        "`orch dispatch --all-ready` (one command)".into(),
        fmt_us(d.p50),
        fmt_us(d.p50 / tasks as f64),
        fmt_ratio(ratio(d.p50, s.p50)),
    ]);
    table.row(vec![
        format!("{tasks} × `send` (baseline)"),
        fmt_us(s.p50),
        fmt_us(s.p50 / tasks as f64),
        "1.00×".into(),
    ]);
    section.tables.push(table);
    section.checks.push(check(
        &format!("`orch dispatch --all-ready` of {tasks} tasks ≤ 1 s"),
        fmt_us(d.p50),
        d.p50 <= 1e6,
        format!("{} over", fmt_us(d.p50 - 1e6)),
    ));
    section.headlines.push(format!(
        "orch dispatch of {tasks} ready tasks: {} in one command ({} {tasks} separate sends)",
        fmt_us(d.p50),
        fmt_ratio(ratio(d.p50, s.p50))
    ));
    Ok(())
}

/// One wake: a waiter CLI process started with `args`, given time to block;
/// then `commit` runs; returns µs from the commit's return to the waiter's
/// line.
fn one_wake(
    ctx: &Ctx,
    db: &Path,
    orch: bool,
    args: &[String],
    commit: impl FnOnce() -> Result<()>,
) -> Result<f64> {
    let mut cmd = if orch { ctx.orch(db) } else { ctx.inbox(db) };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let label = if orch { "orch wait" } else { "inbox watch" };
    let mut child = ChildGuard::spawn(&mut cmd, label)?;
    let lines = child.lines()?;
    std::thread::sleep(SETTLE);
    commit()?;
    let committed = Instant::now();
    let (at, line) = lines.next(Duration::from_secs(30))?;
    let code = child.wait_code()?;
    if code != 0 {
        bail!("{label} exited with {code}: {line}");
    }
    Ok(us_between(committed, at))
}

fn wake(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let n = ctx.size(40, 8);
    progress(&format!("orch wait woken by inbox done, {n} wakes"));
    let (orch_wakes, watch_wakes) = measure_wakes(ctx, n)?;
    report_wakes(section, n, &orch_wakes, &watch_wakes);
    Ok(())
}

/// `n` wakes (after 3 warm-up) of an `orch wait` process by a worker's
/// `done`, each followed by the baseline: an `inbox watch` process woken by
/// a message. Microseconds from each commit to the waiter's line.
fn measure_wakes(ctx: &Ctx, n: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let dir = ctx.tmp.path().join("orch-wake");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("wake.db");
    let mut engine = new_run(&dir, "wake")?;
    exec(engine.as_mut(), plan(n + 5, n + 5, true))?;
    let mut orch_wakes = Vec::new();
    let mut watch_wakes = Vec::new();
    for i in 0..n + 3 {
        // The worker holds a task (an attempt in flight); the leader's wait
        // starts after everything so far.
        exec(
            engine.as_mut(),
            json!({"command": "orch-dispatch", "agent": "lead", "task_id": format!("t{i}")}),
        )?;
        let agent = format!("w{}", i % 4 + 1);
        let claim = exec(
            engine.as_mut(),
            json!({"command": "claim", "agent": agent, "next": true}),
        )?;
        let thread = claim["lease"]["thread_id"]
            .as_str()
            .context("no thread claimed")?
            .to_owned();
        exec(engine.as_mut(), json!({"command": "orch-reconcile"}))?;
        let cursor = exec(
            engine.as_mut(),
            json!({"command": "watch", "timeout_seconds": 0}),
        )?["next_event_id"]
            .to_string();
        let args: Vec<String> = [
            "wait",
            "--after-event",
            &cursor,
            "--timeout-seconds",
            "30",
            "--json",
        ]
        .map(str::to_owned)
        .to_vec();
        let us = one_wake(ctx, &db, true, &args, || {
            exec(
                engine.as_mut(),
                json!({"command": "done", "agent": agent, "thread_id": thread, "summary": "ok"}),
            )
            .map(drop)
        })?;
        // The baseline: inbox watch for the lead, woken by a message.
        let cursor = exec(
            engine.as_mut(),
            json!({"command": "watch", "timeout_seconds": 0}),
        )?["next_event_id"]
            .to_string();
        let args: Vec<String> = [
            "watch",
            "--agent",
            "lead",
            "--after-event",
            &cursor,
            "--timeout-seconds",
            "30",
            "--json",
        ]
        .map(str::to_owned)
        .to_vec();
        let base = one_wake(ctx, &db, false, &args, || {
            exec(engine.as_mut(), json!({"command": "send", "from_agent": "w1", "to_agent": "lead", "subject": "note"})).map(drop)
        })?;
        exec(
            engine.as_mut(),
            json!({"command": "orch-accept", "agent": "lead", "task_id": format!("t{i}")}),
        )?;
        if i >= 3 {
            orch_wakes.push(us);
            watch_wakes.push(base);
        }
    }
    Ok((orch_wakes, watch_wakes))
}

/// The wake table, the note on why orch wait costs a write more, the
/// target check and the headline.
fn report_wakes(section: &mut Section, n: usize, orch_wakes: &[f64], watch_wakes: &[f64]) {
    let o = Summary::of(orch_wakes);
    let w = Summary::of(watch_wakes);
    let mut table = Table::new(
        format!(
            "**`orch wait` woken by a worker's `done`**, across processes: an `orch wait` CLI \
             process per wake, given {} to block; the worker's `done` (in process) moves the \
             task to review. Figures from the commit's return to the waiter's JSON line; {n} \
             wakes after 3 warm-up. Baseline: an `inbox watch` CLI process woken by a \
             message, the same way, in this run.",
            fmt_us(SETTLE.as_secs_f64() * 1e6)
        ),
        ["waiter", "p50", "p99", "max", "× inbox watch"],
    );
    for (label, s) in [
        ("`orch wait` CLI process", &o),
        ("`inbox watch` CLI process (baseline)", &w),
    ] {
        let mut cells = vec![label.to_owned()];
        cells.extend(latency_cells(s));
        cells.push(fmt_ratio(ratio(s.p50, w.p50)));
        table.row(cells);
    }
    section.tables.push(table);
    section.notes.push(
        "`orch wait` records what the worker did before it looks, in the same transaction \
         (a write: the run is reconciled with its threads), so its wake costs a short write \
         more than `inbox watch`'s; the statements that write are prepared while it sleeps."
            .into(),
    );
    section.checks.push(check(
        "`orch wait` wake after `inbox done`, across processes: p50 ≤ 1 ms",
        fmt_us(o.p50),
        o.p50 <= 1000.0,
        format!("{} over", fmt_us(o.p50 - 1000.0)),
    ));
    section.headlines.push(format!(
        "orch wait wake after a worker's done: p50 {} across processes ({} inbox watch)",
        fmt_us(o.p50),
        fmt_ratio(ratio(o.p50, w.p50))
    ));
}
