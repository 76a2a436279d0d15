//! Workload 1: send throughput. Producers send task messages to one
//! recipient, in process (1 to 16 producer threads, each with its own
//! connection or engine on the same store) and as one CLI process per
//! message (1 to 16 producer threads each starting processes back to back),
//! against a fresh store per configuration.
//!
//! The CLI half is read against the process-spawn floor (a Rust `fn main()
//! {}` built like inbox, started the same way in the same run). This module
//! must never reuse a store between configurations: every figure starts
//! from an empty store.

use std::process::Command;
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{Result, anyhow};

use super::{check, durability_caption, progress};
use crate::ctx::Ctx;
use crate::files::jsonl::Jsonl;
use crate::peers::{Durability, System, Target, inbox};
use crate::proc::{run_checked, us_since};
use crate::report::{Section, Table};
use crate::stats::{Summary, fmt_rate, fmt_ratio, fmt_us, ratio};
use crate::svg::{Bar, Series, bar_chart, line_chart};

/// The row of the per-process table that starts the inbox binary alone.
const VERSION_LABEL: &str = "inbox --version (no database)";

/// Sends made by each producer before the clock starts.
const WARMUP: u64 = 3;

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let producers: Vec<usize> = ctx.size(vec![1, 2, 4, 8, 16], vec![1, 4]);
    let total: u64 = ctx.size(2000, 240);
    // An fsync per message costs milliseconds here: fewer messages keep the
    // full-durability half within the run's budget.
    let total_full: u64 = ctx.size(400, 60);
    let mut section = Section {
        key: "send".into(),
        title: "1. Send throughput".into(),
        command: "cargo run -p inbox-bench --release -- send".into(),
        ..Section::default()
    };
    section.intro.push(format!(
        "Producers send {total} task messages ({total_full} with an fsync per commit; about \
         200 bytes each) to one recipient, \
         split evenly among 1 to {} producers, into a fresh store. **In process**, each \
         producer is a thread with its own connection (inbox: its own engine and SQLite \
         connection on the shared file). Rates are messages per second of wall time from \
         the moment all producers start; latencies are per send with one producer.",
        producers.iter().max().copied().unwrap_or(1)
    ));

    // In process.
    let mut inproc_p1 = std::collections::HashMap::new();
    for durability in Ctx::DURABILITIES {
        let mut header = vec!["system".to_owned()];
        header.extend(producers.iter().map(|p| format!("{p} prod.")));
        header.extend(
            [
                "p50 send (1 prod.)",
                "p99 send (1 prod.)",
                "inbox ÷ system (1 prod.)",
            ]
            .map(String::from),
        );
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut table = Table::new(
            format!(
                "**In process, {}**: messages per second by number of producers. \
                 Last column: inbox's one-producer rate divided by the system's (above 1: inbox is faster).",
                durability_caption(durability)
            ),
            &header,
        );
        let mut series = Vec::new();
        let mut rows = Vec::new();
        for system in System::ALL {
            let target = ctx.target(system, durability);
            let mut rates = Vec::new();
            let mut p1 = Summary::default();
            for &p in &producers {
                progress(&format!(
                    "send in process: {} ({}), {p} producers",
                    system.label(),
                    durability.as_str()
                ));
                let n = if durability == Durability::Full {
                    total_full
                } else {
                    total
                };
                let (rate, latencies) = in_process(&target, p, n)?;
                if p == 1 {
                    p1 = Summary::of(&latencies);
                }
                rates.push(rate);
            }
            rows.push((system, rates.clone(), p1));
            series.push(Series {
                name: system.label().into(),
                values: rates.iter().map(|r| Some(*r)).collect(),
            });
        }
        let inbox_rate = rows
            .first()
            .map_or(0.0, |r| r.1.first().copied().unwrap_or(0.0));
        for (system, rates, p1) in &rows {
            let mut cells = vec![system.label().to_owned()];
            cells.extend(rates.iter().map(|r| fmt_rate(*r)));
            cells.push(fmt_us(p1.p50));
            cells.push(fmt_us(p1.p99));
            cells.push(fmt_ratio(ratio(
                inbox_rate,
                rates.first().copied().unwrap_or(0.0),
            )));
            table.row(cells);
            inproc_p1.insert((*system, durability), (rates.clone(), *p1));
        }
        section.tables.push(table);
        let file = format!("send-inproc-{}.svg", durability.as_str());
        line_chart(
            &ctx.out_dir.join(&file),
            &format!(
                "Send throughput in process, {} durability",
                durability.as_str()
            ),
            "producers",
            "messages per second",
            &producers.iter().map(|p| *p as f64).collect::<Vec<_>>(),
            &series,
            true,
            false,
        )?;
        section.plots.push((
            file,
            format!(
                "Messages per second against producers, in process, {} durability (log scale)",
                durability.as_str()
            ),
        ));
    }

    // One CLI process per message.
    let cli_producers: Vec<usize> = ctx.size(vec![1, 4, 16], vec![1, 4]);
    let cli_total: u64 = ctx.size(300, 60);
    section.intro.push(format!(
        "**One process per message**: {cli_total} messages per configuration, each sent by \
         starting a process, from 1 to {} producer threads starting processes back to back. \
         The baseline is the **process-spawn floor**: `inbox-bench-noop`, a Rust `fn main() {{}}` \
         built like `inbox`, started the same way in the same run. The JSONL peer is measured \
         twice: with the seed's own `sh -c 'echo \"$MESSAGE\" >> inbox'` and with \
         `inbox-bench-peer`, a small Rust helper in this crate that does the same append \
         (the helper also serves the JSON-array and file-drop peers, and is the only way to \
         fsync). Redis uses `redis-cli LPUSH`, PostgreSQL `psql -c 'INSERT ...'`. The \
         one-producer figures are sampled round-robin (one process of each command in turn) \
         so that load from other work on the machine affects every command alike; the \
         one-producer rate is the reciprocal of the mean.",
        cli_producers.iter().max().copied().unwrap_or(1)
    ));
    let mut bars = Vec::new();
    let mut floor_p50 = 0.0;
    let mut inbox_cli_p50 = 0.0;
    let mut version_p50 = 0.0;
    for durability in Ctx::DURABILITIES {
        let mut header = vec![
            "command".to_owned(),
            "p50 (1 prod.)".into(),
            "p99 (1 prod.)".into(),
            "p50 ÷ floor".into(),
        ];
        header.extend(cli_producers.iter().map(|p| format!("msg/s, {p} prod.")));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut table = Table::new(
            format!(
                "**One process per message, {}**: wall time per process (spawn to exit) with \
                 one producer, as a multiple of the process-spawn floor's median, and messages \
                 per second by producers.",
                durability_caption(durability)
            ),
            &header,
        );
        let commands = cli_commands(ctx, durability);
        // One producer: every command's samples are taken round-robin, one
        // process of each in turn, so that the other load on this shared
        // machine drifts over all of them alike and the ratios to the floor
        // stay fair.
        for (_, system, make) in &commands {
            if let Some(system) = system {
                ctx.target(*system, durability).prepare()?;
            }
            for i in 0..WARMUP {
                run_checked(&mut make(0, 1_000_000 + i), &[])?;
            }
        }
        progress(&format!(
            "send per process: {} commands interleaved, {cli_total} each ({})",
            commands.len(),
            durability.as_str()
        ));
        let mut samples: Vec<Vec<f64>> =
            vec![Vec::with_capacity(cli_total as usize); commands.len()];
        for seq in 0..cli_total {
            for (i, (_, _, make)) in commands.iter().enumerate() {
                let (us, _) = run_checked(&mut make(0, seq), &[])?;
                samples[i].push(us);
            }
        }
        let floor = Summary::of(&samples[0]).p50;
        for ((label, system, make), samples) in commands.iter().zip(&samples) {
            let p1 = Summary::of(samples);
            let mut rates = vec![samples.len() as f64 * 1e6 / samples.iter().sum::<f64>().max(1.0)];
            for &p in cli_producers.iter().filter(|p| **p > 1) {
                progress(&format!(
                    "send per process: {label} ({}), {p} producers",
                    durability.as_str()
                ));
                let target = system.map(|s| ctx.target(s, durability));
                if let Some(target) = &target {
                    target.prepare()?;
                }
                let (rate, _) = per_process(&**make, target.as_ref(), p, cli_total)?;
                rates.push(rate);
            }
            if label.starts_with("inbox send") && durability == Durability::Normal {
                inbox_cli_p50 = p1.p50;
                floor_p50 = floor;
            }
            if label == VERSION_LABEL {
                version_p50 = p1.p50;
            }
            let mut cells = vec![
                label.clone(),
                fmt_us(p1.p50),
                fmt_us(p1.p99),
                fmt_ratio(ratio(p1.p50, floor)),
            ];
            cells.extend(rates.iter().map(|r| fmt_rate(*r)));
            table.row(cells);
            bars.push(Bar {
                label: format!("{label} [{}]", durability.as_str()),
                p50: p1.p50,
                p99: p1.p99,
                baseline: label.starts_with("floor"),
            });
        }
        section.tables.push(table);
    }
    bar_chart(
        &ctx.out_dir.join("send-cli.svg"),
        "One process per message: wall time per process (median, p99 whisker)",
        "wall time per process, one producer (log scale)",
        &bars,
    )?;
    section.plots.push((
        "send-cli.svg".into(),
        "Per-process wall time of a send, median with p99 whisker, against the process-spawn floor (grey)".into(),
    ));

    // Where an inbox CLI send's time goes, from parts measured apart.
    let db = ctx.target(System::Inbox, Durability::Normal);
    let (open_us, one_shot_us) = one_shot_cost(&db, ctx.size(300, 60))?;
    let inproc_send = inproc_p1
        .get(&(System::Inbox, Durability::Normal))
        .map_or(0.0, |(_, s)| s.p50);
    let cli_ratio = ratio(inbox_cli_p50, floor_p50).unwrap_or(f64::INFINITY);
    let why = format!(
        "Of the {} median, the spawn floor is {}; starting the inbox binary (`inbox --version`, \
         no database: loading a 5 MB executable and building the argument parser) adds {}. \
         The database work of one command, done in process the way a CLI process does it \
         (open the file, recover the WAL, read the schema, prepare each statement afresh, the \
         write transaction, the truncating checkpoint every 64 WAL frames, close), takes {} at \
         the median, of which opening is {}; a long-lived connection does the same send in {}. \
         That leaves {} that only a fresh process pays: first-touch page faults on code and \
         heap, cold caches (measured in process, the first open and send run slower than the \
         ones after), parsing the arguments, printing the JSON and exiting.",
        fmt_us(inbox_cli_p50),
        fmt_us(floor_p50),
        fmt_us(version_p50 - floor_p50),
        fmt_us(one_shot_us),
        fmt_us(open_us),
        fmt_us(inproc_send),
        fmt_us(inbox_cli_p50 - version_p50 - one_shot_us)
    );
    section.notes.push(format!(
        "Where an `inbox send` process's time goes (normal durability): {why}"
    ));
    section.checks.push(check(
        "CLI `send` median ≤ 1.5× the process-spawn floor",
        format!(
            "{} vs floor {} = {}",
            fmt_us(inbox_cli_p50),
            fmt_us(floor_p50),
            fmt_ratio(Some(cli_ratio))
        ),
        cli_ratio <= 1.5,
        format!(
            "{} over the 1.5× target ({} too slow). {why}",
            fmt_ratio(Some(cli_ratio / 1.5)),
            fmt_us(inbox_cli_p50 - 1.5 * floor_p50)
        ),
    ));
    let (rates, _) = inproc_p1
        .get(&(System::Inbox, Durability::Normal))
        .cloned()
        .unwrap_or_default();
    let one = rates.first().copied().unwrap_or(0.0);
    let best = rates.iter().copied().fold(0.0, f64::max);
    section.checks.push(check(
        "in process: ≥ 10k sends/s (one producer)",
        format!("{} with one producer; best aggregate {}", fmt_rate(one), fmt_rate(best)),
        one >= 10_000.0,
        format!(
            "{:.0}% of the target. Each send is one write transaction (BEGIN IMMEDIATE, a dozen or so \
             2 KiB page writes to the WAL, commit) at {} per send, and writers serialize on SQLite's one write lock, so more \
             producers do not add throughput",
            one / 100.0,
            fmt_us(1e6 / one.max(1.0))
        ),
    ));
    let full_one = inproc_p1
        .get(&(System::Inbox, Durability::Full))
        .and_then(|(r, _)| r.first().copied())
        .unwrap_or(0.0);
    section.headlines.push(format!(
        "in process, one producer: inbox {} ({} with fsync per commit); \
         a CLI `send` process takes {} = {} the spawn floor",
        fmt_rate(one),
        fmt_rate(full_one),
        fmt_us(inbox_cli_p50),
        fmt_ratio(Some(cli_ratio))
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// `total` sends from `producers` threads into a fresh store; returns the
/// rate and the per-send latencies (µs).
pub(crate) fn in_process(target: &Target, producers: usize, total: u64) -> Result<(f64, Vec<f64>)> {
    target.prepare()?;
    let per = (total / producers as u64).max(1);
    let barrier = Barrier::new(producers + 1);
    let (elapsed, results) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<Vec<f64>> {
                    // Connect and warm up before the start line; always reach
                    // the barrier, even on error, so the others are not stuck.
                    let queue = target.queue(p).and_then(|mut q| {
                        for i in 0..WARMUP {
                            q.send(p, 1_000_000 + i)?;
                        }
                        Ok(q)
                    });
                    barrier.wait();
                    let mut queue = queue?;
                    let mut latencies = Vec::with_capacity(per as usize);
                    for seq in 0..per {
                        let t0 = Instant::now();
                        queue.send(p, seq)?;
                        latencies.push(us_since(t0));
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<Vec<f64>>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))?
            })
            .collect();
        (start.elapsed(), results)
    });
    let mut latencies = Vec::new();
    for result in results {
        latencies.extend(result?);
    }
    let rate = latencies.len() as f64 / elapsed.as_secs_f64();
    Ok((rate, latencies))
}

type MakeCommand = dyn Fn(usize, u64) -> Command + Sync;

/// The per-process send commands for `durability`: (label, store to
/// prepare, command for (producer, seq)).
fn cli_commands(
    ctx: &Ctx,
    durability: Durability,
) -> Vec<(String, Option<System>, Box<MakeCommand>)> {
    let mut list: Vec<(String, Option<System>, Box<MakeCommand>)> = Vec::new();
    let noop = ctx.bins.noop.clone();
    list.push((
        "floor: inbox-bench-noop".into(),
        None,
        Box::new(move |_, _| Command::new(&noop)),
    ));
    if durability == Durability::Normal {
        list.push((
            "/bin/true".into(),
            None,
            Box::new(|_, _| Command::new("/bin/true")),
        ));
        // Starting the inbox binary itself, no database: what its size and
        // argument parser add to the floor.
        let program = ctx.bins.inbox.clone();
        list.push((
            VERSION_LABEL.into(),
            None,
            Box::new(move |_, _| {
                let mut cmd = Command::new(&program);
                cmd.arg("--version");
                cmd
            }),
        ));
    }
    let inbox_target = ctx.target(System::Inbox, durability);
    let inbox_cmd = {
        let program = ctx.bins.inbox.clone();
        let db = inbox_target.path.clone();
        move |p: usize, s: u64| {
            let mut cmd = Command::new(&program);
            cmd.env("INBOX_DB", &db)
                .env_remove("INBOX_AGENT")
                .env_remove("INBOX_NOW")
                .args(["send", "--from", "lead", "--to", "worker", "--json"])
                .arg("--subject")
                .arg(format!("Implement benchmark task {p}-{s}"))
                .arg("--task")
                .arg(crate::files::task_id(p, s))
                .arg("--body")
                .arg(format!(
                    "Benchmark task {p}-{s}: a task assignment of about the size the peers send."
                ));
            cmd
        }
    };
    list.push((
        "inbox send".into(),
        Some(System::Inbox),
        Box::new(inbox_cmd),
    ));
    if durability == Durability::Normal {
        let inbox = Jsonl::worker_inbox(&ctx.target(System::Jsonl, durability).path);
        list.push((
            "JSONL: sh -c 'echo >> inbox'".into(),
            Some(System::Jsonl),
            Box::new(move |p, s| {
                let mut cmd = Command::new("sh");
                cmd.arg("-c")
                    .arg(r#"echo "$0" >> "$1""#)
                    .arg(Jsonl::line(p, s))
                    .arg(&inbox);
                cmd
            }),
        ));
    }
    for system in [System::Jsonl, System::JsonArray, System::FileDrop] {
        let target = ctx.target(system, durability);
        let base = ctx.peer(&target, "send");
        let program = base.get_program().to_owned();
        let args: Vec<_> = base.get_args().map(ToOwned::to_owned).collect();
        list.push((
            format!("{}: inbox-bench-peer", system.label()),
            Some(system),
            Box::new(move |p, s| {
                let mut cmd = Command::new(&program);
                cmd.args(&args).arg(p.to_string()).arg(s.to_string());
                cmd
            }),
        ));
    }
    let redis = ctx.redis_cli(durability);
    let (program, args): (_, Vec<_>) = (
        redis.get_program().to_owned(),
        redis.get_args().map(ToOwned::to_owned).collect(),
    );
    list.push((
        "Redis: redis-cli LPUSH".into(),
        Some(System::RedisList),
        Box::new(move |p, s| {
            let mut cmd = Command::new(&program);
            cmd.args(&args)
                .arg("LPUSH")
                .arg("tasks")
                .arg(crate::files::task_line("lead", "worker", p, s));
            cmd
        }),
    ));
    let psql = ctx.psql(durability);
    let (program, args): (_, Vec<_>) = (
        psql.get_program().to_owned(),
        psql.get_args().map(ToOwned::to_owned).collect(),
    );
    let options = psql
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect::<Vec<_>>();
    list.push((
        "PostgreSQL: psql -c INSERT".into(),
        Some(System::Postgres),
        Box::new(move |p, s| {
            let mut cmd = Command::new(&program);
            cmd.args(&args).envs(options.iter().map(|(k, v)| (k, v))).arg("-c").arg(format!(
                "WITH t AS (INSERT INTO tasks (task_id, body) VALUES ('{}', '{}') RETURNING id) \
                 SELECT pg_notify('tasks', id::text) FROM t",
                crate::files::task_id(p, s),
                crate::files::task_line("lead", "worker", p, s)
            ));
            cmd
        }),
    ));
    list
}

/// `total` processes from `producers` threads; returns the rate and the
/// per-process wall times.
fn per_process(
    make: &MakeCommand,
    _target: Option<&Target>,
    producers: usize,
    total: u64,
) -> Result<(f64, Vec<f64>)> {
    let per = (total / producers as u64).max(1);
    let barrier = Barrier::new(producers + 1);
    let (elapsed, results) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<Vec<f64>> {
                    let warm: Result<()> = (0..WARMUP)
                        .try_for_each(|i| run_checked(&mut make(p, 1_000_000 + i), &[]).map(drop));
                    barrier.wait();
                    warm?;
                    let mut latencies = Vec::with_capacity(per as usize);
                    for seq in 0..per {
                        let (us, _) = run_checked(&mut make(p, seq), &[])?;
                        latencies.push(us);
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<Result<Vec<f64>>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))?
            })
            .collect();
        (start.elapsed(), results)
    });
    let mut latencies = Vec::new();
    for result in results {
        latencies.extend(result?);
    }
    Ok((latencies.len() as f64 / elapsed.as_secs_f64(), latencies))
}

/// What a CLI `send` process does with the database, done `n` times in
/// process: open an engine with the one-command settings, send, close.
/// Returns the medians (µs) of the open alone and of the whole.
fn one_shot_cost(target: &Target, n: usize) -> Result<(f64, f64)> {
    target.prepare()?;
    let mut open = Vec::with_capacity(n);
    let mut whole = Vec::with_capacity(n);
    for seq in 0..n as u64 {
        let t0 = Instant::now();
        let mut engine = inbox::one_shot_engine(&target.path)?;
        open.push(us_since(t0));
        inbox::run(&mut engine, inbox::send_request(0, seq))?;
        drop(engine);
        whole.push(us_since(t0));
    }
    Ok((Summary::of(&open).p50, Summary::of(&whole).p50))
}
