//! Workload 1: send throughput. Producers send task messages to one
//! recipient, in process (1 to 16 producer threads, each with its own
//! connection or engine on the same store) and as one CLI process per
//! message (1 to 16 producer threads each starting processes back to back),
//! against a fresh store per configuration.
//!
//! The CLI half is read against the process-spawn floor (a Rust `fn main()
//! {}` in inbox's release profile, dynamically linked as cargo links by
//! default, started the same way in the same run). This module
//! must never reuse a store between configurations: every figure starts
//! from an empty store.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{Result, anyhow};
use inbox_bench::files::{jsonl::Jsonl, task_id, task_line};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};
use inbox_sqlite::open::CHECKPOINT_FRAMES;

use super::{check, durability_caption, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_rate, fmt_ratio, fmt_us};
use crate::peers::{Durability, System, Target, inbox};
use crate::proc::{run_checked, us_since};
use crate::report::Section;
use crate::svg::{Bar, LineChart, Series, bar_chart};

/// The row of the per-process table that starts the inbox binary alone.
const VERSION_LABEL: &str = "inbox --version (no database)";

/// The row of the per-process table that commits one row to SQLite from a
/// fresh process, with none of inbox's code.
const SQLITE_FLOOR_LABEL: &str = "SQLite floor: inbox-bench-sqlite-floor";

/// The same, in a file that also holds inbox's schema (never touched by
/// the write): what a schema that size costs a fresh connection.
const SCHEMA_FLOOR_LABEL: &str = "SQLite floor, inbox's schema in the file";

/// The row of the per-process table whose `inbox send` runs alone.
const INBOX_LABEL: &str = "inbox send";

/// The row of the per-process table whose `inbox send` hands its call to
/// `inbox daemon`.
const DAEMON_LABEL: &str = "inbox send, to `inbox daemon`";

/// Sends made by each producer before the clock starts.
const WARMUP: u64 = 3;

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("send", "1. Send throughput");
    let inbox = in_process_tables(ctx, &mut section)?;
    let cli = per_process_tables(ctx, &mut section)?;
    conclusions(ctx, &mut section, &inbox, &cli)?;
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// One system's in-process figures: the rate for each number of producers,
/// and the latencies with one producer.
struct InProcess {
    system: System,
    rates: Vec<f64>,
    one_producer: Summary,
}

/// The in-process half: a table and a plot per durability. Returns inbox's
/// figures.
fn in_process_tables(ctx: &Ctx, section: &mut Section) -> Result<HashMap<Durability, InProcess>> {
    let producers: Vec<usize> = ctx.size(vec![1, 2, 4, 8, 16], vec![1, 4]);
    let total: u64 = ctx.size(2000, 240);
    // An fsync per message costs milliseconds here: fewer messages keep the
    // full-durability half within the run's budget.
    let total_full: u64 = ctx.size(400, 60);
    section.intro.push(format!(
        "Producers send {total} task messages ({total_full} with an fsync per commit; about \
         200 bytes each) to one recipient, \
         split evenly among 1 to {} producers, into a fresh store. **In process**, each \
         producer is a thread with its own connection (inbox: its own engine and SQLite \
         connection on the shared file). Rates are messages per second of wall time from \
         the moment all producers start; latencies are per send with one producer.",
        producers.iter().max().copied().unwrap_or(1)
    ));
    let mut inbox = HashMap::new();
    for durability in Ctx::DURABILITIES {
        let n = match durability {
            Durability::Normal => total,
            Durability::Full => total_full,
        };
        let mut rows = Vec::new();
        for system in System::ALL {
            rows.push(in_process_row(ctx, system, durability, &producers, n)?);
        }
        section
            .tables
            .push(in_process_table(durability, &producers, &rows));
        section
            .plots
            .push(in_process_plot(ctx, durability, &producers, &rows)?);
        if let Some(row) = rows.into_iter().find(|r| r.system == System::Inbox) {
            inbox.insert(durability, row);
        }
    }
    Ok(inbox)
}

/// `n` sends into `system` with each number of producers.
fn in_process_row(
    ctx: &Ctx,
    system: System,
    durability: Durability,
    producers: &[usize],
    n: u64,
) -> Result<InProcess> {
    let target = ctx.target(system, durability);
    let mut row = InProcess {
        system,
        rates: Vec::new(),
        one_producer: Summary::default(),
    };
    for &p in producers {
        progress(&format!(
            "send in process: {} ({}), {p} producers",
            system.label(),
            durability.as_str()
        ));
        let (rate, latencies) = in_process(&target, p, n)?;
        if p == 1 {
            row.one_producer = Summary::of(&latencies);
        }
        row.rates.push(rate);
    }
    Ok(row)
}

/// Messages per second by producers, and the one-producer latencies.
fn in_process_table(durability: Durability, producers: &[usize], rows: &[InProcess]) -> Table {
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
    let mut table = Table::new(
        format!(
            "**In process, {}**: messages per second by number of producers. \
             Last column: inbox's one-producer rate divided by the system's (above 1: inbox is faster).",
            durability_caption(durability)
        ),
        header,
    );
    let first_rate = |row: &InProcess| row.rates.first().copied().unwrap_or(0.0);
    let inbox_rate = rows
        .iter()
        .find(|r| r.system == System::Inbox)
        .map_or(0.0, first_rate);
    for row in rows {
        let mut cells = vec![row.system.label().to_owned()];
        cells.extend(row.rates.iter().map(|r| fmt_rate(*r)));
        cells.push(fmt_us(row.one_producer.p50));
        cells.push(fmt_us(row.one_producer.p99));
        cells.push(fmt_ratio(ratio(inbox_rate, first_rate(row))));
        table.row(cells);
    }
    table
}

/// The line chart of the rates; returns its file and caption.
fn in_process_plot(
    ctx: &Ctx,
    durability: Durability,
    producers: &[usize],
    rows: &[InProcess],
) -> Result<(String, String)> {
    let file = format!("send-inproc-{}.svg", durability.as_str());
    let series: Vec<Series> = rows
        .iter()
        .map(|row| Series {
            name: row.system.label().into(),
            values: row.rates.iter().map(|r| Some(*r)).collect(),
        })
        .collect();
    LineChart {
        title: &format!(
            "Send throughput in process, {} durability",
            durability.as_str()
        ),
        x_label: "producers",
        y_label: "messages per second",
        xs: &producers.iter().map(|p| *p as f64).collect::<Vec<_>>(),
        series: &series,
        log_y: true,
        y_us: false,
    }
    .write(&ctx.out_dir.join(&file))?;
    let caption = format!(
        "Messages per second against producers, in process, {} durability (log scale)",
        durability.as_str()
    );
    Ok((file, caption))
}

/// The medians the conclusions are drawn from (normal durability, one
/// producer).
#[derive(Default)]
struct CliFigures {
    /// The process-spawn floor.
    floor: f64,
    /// `inbox send`.
    inbox: f64,
    /// `inbox --version`.
    version: f64,
    /// One row committed to SQLite by `inbox-bench-sqlite-floor`.
    sqlite: f64,
    /// The same row, in a file with inbox's schema.
    sqlite_schema: f64,
    /// `inbox send` handing its call to `inbox daemon`.
    daemon: f64,
}

/// The per-process half: a table per durability and one bar chart.
fn per_process_tables(ctx: &Ctx, section: &mut Section) -> Result<CliFigures> {
    let producers: Vec<usize> = ctx.size(vec![1, 4, 16], vec![1, 4]);
    let total: u64 = ctx.size(300, 60);
    section.intro.push(format!(
        "**One process per message**: {total} messages per configuration, each sent by \
         starting a process, from 1 to {} producer threads starting processes back to back. \
         The baseline is the **process-spawn floor**: `inbox-bench-noop`, a Rust `fn main() {{}}` \
         in `inbox`'s release profile, dynamically linked as cargo links by default (`inbox` \
         is measured as `cargo install --path cli` installs it, linked the same way), \
         started the same way in the same run. The JSONL peer is measured \
         twice: with the seed's own `sh -c 'echo \"$MESSAGE\" >> inbox'` and with \
         `inbox-bench-peer`, a small Rust helper in this crate that does the same append \
         (the helper also serves the JSON-array and file-drop peers, and is the only way to \
         fsync). `inbox send, to inbox daemon` is the same send with `inbox daemon` serving \
         its database (a store of its own, kept between configurations: the daemon holds it \
         open), so the command hands its call over instead of opening the file. Redis uses \
         `redis-cli LPUSH`, PostgreSQL `psql -c 'INSERT ...'`. The \
         one-producer figures are sampled round-robin (one process of each command in turn) \
         so that load from other work on the machine affects every command alike; the \
         one-producer rate is the reciprocal of the mean.",
        producers.iter().max().copied().unwrap_or(1)
    ));
    let mut bars = Vec::new();
    let mut figures = CliFigures::default();
    for durability in Ctx::DURABILITIES {
        let commands = cli_commands(ctx, durability)?;
        let samples = one_producer_samples(ctx, durability, &commands, total)?;
        let floor = Summary::of(&samples[0]).p50;
        let mut table = per_process_table(durability, &producers);
        for (command, samples) in commands.iter().zip(&samples) {
            let p1 = Summary::of(samples);
            let mut rates = vec![samples.len() as f64 * 1e6 / samples.iter().sum::<f64>().max(1.0)];
            for &p in producers.iter().filter(|p| **p > 1) {
                rates.push(many_producers_rate(ctx, durability, command, p, total)?);
            }
            if command.label == INBOX_LABEL && durability == Durability::Normal {
                figures.inbox = p1.p50;
                figures.floor = floor;
            }
            if command.label == DAEMON_LABEL && durability == Durability::Normal {
                figures.daemon = p1.p50;
            }
            if command.label == VERSION_LABEL {
                figures.version = p1.p50;
            }
            if command.label == SQLITE_FLOOR_LABEL && durability == Durability::Normal {
                figures.sqlite = p1.p50;
            }
            if command.label == SCHEMA_FLOOR_LABEL && durability == Durability::Normal {
                figures.sqlite_schema = p1.p50;
            }
            let mut cells = vec![
                command.label.clone(),
                fmt_us(p1.p50),
                fmt_us(p1.p99),
                fmt_ratio(ratio(p1.p50, floor)),
            ];
            cells.extend(rates.iter().map(|r| fmt_rate(*r)));
            table.row(cells);
            bars.push(Bar {
                label: format!("{} [{}]", command.label, durability.as_str()),
                p50: p1.p50,
                p99: p1.p99,
                baseline: command.label.starts_with("floor"),
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
    Ok(figures)
}

/// The per-process table's header and caption.
fn per_process_table(durability: Durability, producers: &[usize]) -> Table {
    let mut header = vec![
        "command".to_owned(),
        "p50 (1 prod.)".into(),
        "p99 (1 prod.)".into(),
        "p50 ÷ floor".into(),
    ];
    header.extend(producers.iter().map(|p| format!("msg/s, {p} prod.")));
    Table::new(
        format!(
            "**One process per message, {}**: wall time per process (spawn to exit) with \
             one producer, as a multiple of the process-spawn floor's median, and messages \
             per second by producers.",
            durability_caption(durability)
        ),
        header,
    )
}

/// `total` processes of each command with one producer. Every command's
/// samples are taken round-robin, one process of each in turn, so that the
/// other load on this shared machine drifts over all of them alike and the
/// ratios to the floor stay fair.
fn one_producer_samples(
    ctx: &Ctx,
    durability: Durability,
    commands: &[CliCommand],
    total: u64,
) -> Result<Vec<Vec<f64>>> {
    for command in commands {
        if let Some(system) = command.system {
            ctx.target(system, durability).prepare()?;
        }
        for i in 0..WARMUP {
            run_checked(&mut (command.make)(0, 1_000_000 + i), &[])?;
        }
    }
    progress(&format!(
        "send per process: {} commands interleaved, {total} each ({})",
        commands.len(),
        durability.as_str()
    ));
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(total as usize); commands.len()];
    for seq in 0..total {
        for (command, samples) in commands.iter().zip(samples.iter_mut()) {
            let (us, _) = run_checked(&mut (command.make)(0, seq), &[])?;
            samples.push(us);
        }
    }
    Ok(samples)
}

/// Messages per second of `command` started by `producers` threads, into a
/// fresh store.
fn many_producers_rate(
    ctx: &Ctx,
    durability: Durability,
    command: &CliCommand,
    producers: usize,
    total: u64,
) -> Result<f64> {
    progress(&format!(
        "send per process: {} ({}), {producers} producers",
        command.label,
        durability.as_str()
    ));
    if let Some(system) = command.system {
        ctx.target(system, durability).prepare()?;
    }
    let (rate, _) = per_process(&*command.make, producers, total)?;
    Ok(rate)
}

/// Where an inbox CLI send's time goes, the targets and the headline.
fn conclusions(
    ctx: &Ctx,
    section: &mut Section,
    inbox: &HashMap<Durability, InProcess>,
    cli: &CliFigures,
) -> Result<()> {
    let normal = inbox.get(&Durability::Normal);
    let inproc_send = normal.map_or(0.0, |r| r.one_producer.p50);
    let why = where_time_goes(ctx, cli, inproc_send)?;
    section.notes.push(format!(
        "Where an `inbox send` process's time goes (normal durability): {why}"
    ));
    let cli_ratio = super::cli_cost_check(
        &mut section.checks,
        "send",
        cli.inbox,
        cli.floor,
        super::CLI_BOUND,
        &why,
    );
    let daemon_why = format!(
        "A send handed to the daemon still starts the inbox binary and parses its arguments \
         (`inbox --version`, no database: {}), then makes one round trip to \
         the daemon, which runs the call on its warm connection (an in-process send takes {}); \
         the rest is the command's own reading of its arguments, the JSON and exiting",
        against_floor(cli),
        fmt_us(inproc_send)
    );
    let daemon_ratio = super::cli_cost_check(
        &mut section.checks,
        "send` to `inbox daemon",
        cli.daemon,
        cli.floor,
        super::DAEMON_BOUND,
        &daemon_why,
    );
    let rates = normal.map_or(&[][..], |r| r.rates.as_slice());
    let one = rates.first().copied().unwrap_or(0.0);
    let best = rates.iter().copied().fold(0.0, f64::max);
    section.checks.push(check(
        "in process: ≥ 10k sends/s (one producer)",
        format!(
            "{} with one producer; best aggregate {}",
            fmt_rate(one),
            fmt_rate(best)
        ),
        one >= 10_000.0,
        format!(
            "{:.0}% of the target. Each send is one write transaction (BEGIN IMMEDIATE, a dozen or \
             so 2 KiB pages gathered and written to the WAL in one write, commit) at {} per send on average and {} at the \
             median: the mean also carries the sends that waited on a checkpoint (the \
             thread's restart holds writers back while it copies, and a writer that outruns the \
             thread waits for it once the WAL passes 8000 frames; both keep the WAL bounded). \
             Writers serialize on SQLite's one write lock, so more \
             producers do not add throughput",
            one / 100.0,
            fmt_us(1e6 / one.max(1.0)),
            fmt_us(inproc_send)
        ),
    ));
    let full_one = inbox
        .get(&Durability::Full)
        .and_then(|r| r.rates.first().copied())
        .unwrap_or(0.0);
    section.headlines.push(format!(
        "in process, one producer: inbox {} ({} with fsync per commit); \
         a CLI `send` process takes {} = {} the spawn floor ({} = {} with `inbox daemon` \
         running)",
        fmt_rate(one),
        fmt_rate(full_one),
        fmt_us(cli.inbox),
        fmt_ratio(Some(cli_ratio)),
        fmt_us(cli.daemon),
        fmt_ratio(Some(daemon_ratio))
    ));
    Ok(())
}

/// What starting the inbox binary (`inbox --version`) costs against the
/// floor.
fn against_floor(cli: &CliFigures) -> String {
    let over = cli.version - cli.floor;
    if over >= 0.0 {
        format!("adds {} to the floor", fmt_us(over))
    } else {
        format!("takes {} less than the floor", fmt_us(-over))
    }
}

/// Where an inbox CLI send's time goes, from parts measured apart.
fn where_time_goes(ctx: &Ctx, cli: &CliFigures, inproc_send: f64) -> Result<String> {
    let db = ctx.target(System::Inbox, Durability::Normal);
    let (open_us, one_shot_us) = one_shot_cost(&db, ctx.size(300, 60))?;
    let megabytes = std::fs::metadata(&ctx.bins.inbox).map_or(0.0, |m| m.len() as f64 / 1e6);
    Ok(format!(
        "Of the {} median, the spawn floor is {}; starting the inbox binary (`inbox --version`, \
         no database: loading a {megabytes:.1} MB executable and building the argument parser) \
         {}. \
         The database work of one command, done in process the way a CLI process does it \
         (open the file, recover the WAL, read the schema, prepare each statement afresh, the \
         write transaction, the truncating checkpoint every {CHECKPOINT_FRAMES} WAL frames, close), takes {} at \
         the median, of which opening is {}; a long-lived connection does the same send in {}. \
         That leaves {} that only a fresh process pays: first-touch page faults on code and \
         heap, cold caches (measured in process, the first open and send run slower than the \
         ones after), parsing the arguments, printing the JSON and exiting. {}",
        fmt_us(cli.inbox),
        fmt_us(cli.floor),
        against_floor(cli),
        fmt_us(one_shot_us),
        fmt_us(open_us),
        fmt_us(inproc_send),
        fmt_us(cli.inbox - cli.version - one_shot_us),
        sqlite_floor_verdict(ctx, cli)?
    ))
}

/// What the SQLite floors say of the CLI targets: whether a process that
/// does nothing but commit one row to SQLite, in a file of its own or in
/// one with inbox's schema, already misses them.
fn sqlite_floor_verdict(ctx: &Ctx, cli: &CliFigures) -> Result<String> {
    let plain = ratio(cli.sqlite, cli.floor).unwrap_or(f64::INFINITY);
    let schema = ratio(cli.sqlite_schema, cli.floor).unwrap_or(f64::INFINITY);
    let measured = format!(
        "The SQLite floor, a process that commits one 200-byte row and exits \
         (`inbox-bench-sqlite-floor`, {}: the same SQLite, WAL and checkpoint settings, none \
         of inbox's code), takes {} = {} the spawn floor. In a file that also holds inbox's \
         schema ({} tables and indexes, which the write never touches, but SQLite reads and \
         parses every one before a fresh connection's first statement), the same row takes \
         {} = {} ({} more).",
        crate::machine::linking(&ctx.bins.sqlite_floor),
        fmt_us(cli.sqlite),
        fmt_ratio(Some(plain)),
        inbox_schema_objects()?,
        fmt_us(cli.sqlite_schema),
        fmt_ratio(Some(schema)),
        fmt_us(cli.sqlite_schema - cli.sqlite)
    );
    let verdict = match (bounds_over(plain), bounds_over(schema)) {
        (Some((beyond, it)), _) => format!(
            "The first is already over the {beyond} by itself: no command that opens an SQLite \
             database in a process of its own, as a CLI command does, can meet {it} on this \
             machine. `inbox send` is {} that floor ({} more).",
            fmt_ratio(ratio(cli.inbox, cli.sqlite)),
            fmt_us(cli.inbox - cli.sqlite)
        ),
        (None, Some((beyond, it))) => format!(
            "The second is over the {beyond} by itself: no command that opens a database with \
             inbox's schema in a process of its own can meet {it} on this machine; what `inbox \
             send` adds above it ({}) is inbox's own statements and code.",
            fmt_us(cli.inbox - cli.sqlite_schema)
        ),
        (None, None) => format!(
            "Both are within the targets, so what `inbox send` adds above the second ({}) is \
             inbox's own statements and code.",
            fmt_us(cli.inbox - cli.sqlite_schema)
        ),
    };
    Ok(format!("{measured} {verdict}"))
}

/// The CLI target `ratio` misses, named ("2× target"), with the pronoun
/// that stands for it.
fn bounds_over(ratio: f64) -> Option<(String, &'static str)> {
    (ratio > super::CLI_BOUND).then(|| (format!("{}× target", super::CLI_BOUND), "it"))
}

/// How many tables and indexes inbox's schema has: what every connection
/// to an inbox database parses before its first statement.
fn inbox_schema_objects() -> Result<i64> {
    let conn = rusqlite::Connection::open_in_memory()?;
    inbox_sqlite::schema::migrate(&conn, ":memory:")
        .map_err(|e| anyhow!("cannot create inbox's schema in memory: {e}"))?;
    Ok(conn.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE sql IS NOT NULL",
        [],
        |row| row.get(0),
    )?)
}

/// `total` sends from `producers` threads into a fresh store; returns the
/// rate and the per-send latencies (µs).
pub(crate) fn in_process(target: &Target, producers: usize, total: u64) -> Result<(f64, Vec<f64>)> {
    target.prepare()?;
    race(
        producers,
        total,
        |p| {
            let mut queue = target.queue(p)?;
            for i in 0..WARMUP {
                queue.send(p, 1_000_000 + i)?;
            }
            Ok(queue)
        },
        |queue, p, seq| {
            let t0 = Instant::now();
            queue.send(p, seq)?;
            Ok(us_since(t0))
        },
    )
}

/// `total` steps split among `producers` threads, each prepared by `setup`
/// (connecting, warming up) before a common start line; returns the rate
/// and each step's result (µs).
///
/// The rate's clock runs from the first producer's start to the last one's
/// end, as each producer reads it: a clock read by the thread that starts
/// them could begin after fast producers had finished (16 threads on 2
/// cores once made the JSONL peer 466 million sends/s).
fn race<S>(
    producers: usize,
    total: u64,
    setup: impl Fn(usize) -> Result<S> + Sync,
    step: impl Fn(&mut S, usize, u64) -> Result<f64> + Sync,
) -> Result<(f64, Vec<f64>)> {
    let per = (total / producers as u64).max(1);
    let barrier = Barrier::new(producers);
    let results: Vec<Result<(Instant, Instant, Vec<f64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let (barrier, setup, step) = (&barrier, &setup, &step);
                scope.spawn(move || {
                    // Always reach the start line, even on error, so that the
                    // others are not stuck.
                    let state = setup(p);
                    barrier.wait();
                    let mut state = state?;
                    let started = Instant::now();
                    let mut latencies = Vec::with_capacity(per as usize);
                    for seq in 0..per {
                        latencies.push(step(&mut state, p, seq)?);
                    }
                    Ok((started, Instant::now(), latencies))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))?
            })
            .collect()
    });
    let (mut first, mut last, mut latencies) = (None::<Instant>, None::<Instant>, Vec::new());
    for result in results {
        let (started, ended, steps) = result?;
        first = Some(first.map_or(started, |f| f.min(started)));
        last = Some(last.map_or(ended, |l| l.max(ended)));
        latencies.extend(steps);
    }
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first),
        _ => return Err(anyhow!("no producers")),
    };
    Ok((latencies.len() as f64 / elapsed.as_secs_f64(), latencies))
}

type MakeCommand = dyn Fn(usize, u64) -> Command + Sync;

/// One per-process send command.
struct CliCommand {
    /// The row's label.
    label: String,
    /// The store to prepare before it runs, if any.
    system: Option<System>,
    /// The command for (producer, seq).
    make: Box<MakeCommand>,
}

impl CliCommand {
    fn new(
        label: impl Into<String>,
        system: Option<System>,
        make: impl Fn(usize, u64) -> Command + Sync + 'static,
    ) -> CliCommand {
        CliCommand {
            label: label.into(),
            system,
            make: Box::new(make),
        }
    }
}

/// The per-process send commands for `durability`, in table order; the
/// first is the floor.
fn cli_commands(ctx: &Ctx, durability: Durability) -> Result<Vec<CliCommand>> {
    let mut list = baseline_commands(ctx, durability);
    list.push(sqlite_floor_command(ctx, durability, false)?);
    list.push(sqlite_floor_command(ctx, durability, true)?);
    list.push(inbox_command(ctx, durability));
    list.push(daemon_command(ctx, durability)?);
    list.extend(file_commands(ctx, durability));
    list.extend(server_commands(ctx, durability));
    Ok(list)
}

/// `inbox-bench-sqlite-floor`, writing to a database of its own that this
/// creates (with inbox's schema in it too, if `inbox_schema`).
fn sqlite_floor_command(
    ctx: &Ctx,
    durability: Durability,
    inbox_schema: bool,
) -> Result<CliCommand> {
    let program = ctx.bins.sqlite_floor.clone();
    let (label, file, init) = if inbox_schema {
        (
            SCHEMA_FLOOR_LABEL,
            "sqlite-floor-schema",
            "init-inbox-schema",
        )
    } else {
        (SQLITE_FLOOR_LABEL, "sqlite-floor", "init")
    };
    let db = ctx
        .tmp
        .path()
        .join(format!("{file}-{}.db", durability.as_str()));
    run_checked(Command::new(&program).arg(&db).arg(init), &[])?;
    Ok(CliCommand::new(label, None, move |_, _| {
        let mut cmd = Command::new(&program);
        cmd.arg(&db).arg(durability.as_str());
        cmd
    }))
}

/// The floor; with normal durability also `/bin/true` and the inbox binary
/// started alone.
fn baseline_commands(ctx: &Ctx, durability: Durability) -> Vec<CliCommand> {
    let noop = ctx.bins.noop.clone();
    let mut list = vec![CliCommand::new(
        "floor: inbox-bench-noop",
        None,
        move |_, _| Command::new(&noop),
    )];
    if durability == Durability::Normal {
        list.push(CliCommand::new("/bin/true", None, |_, _| {
            Command::new("/bin/true")
        }));
        // Starting the inbox binary itself, no database: what its size and
        // argument parser add to the floor.
        let program = ctx.bins.inbox.clone();
        list.push(CliCommand::new(VERSION_LABEL, None, move |_, _| {
            let mut cmd = Command::new(&program);
            cmd.arg("--version");
            cmd
        }));
    }
    list
}

/// `inbox send`.
fn inbox_command(ctx: &Ctx, durability: Durability) -> CliCommand {
    let db = ctx.target(System::Inbox, durability).path;
    CliCommand::new(INBOX_LABEL, Some(System::Inbox), send_command(ctx, db))
}

/// `inbox send` to a database of its own that `inbox daemon` serves for as
/// long as the command is kept. Its store is not made afresh between
/// configurations: the daemon keeps it open.
fn daemon_command(ctx: &Ctx, durability: Durability) -> Result<CliCommand> {
    let db = ctx
        .tmp
        .path()
        .join(format!("daemon-{}.db", durability.as_str()));
    inbox::create(&db, durability)?;
    let daemon = inbox::Daemon::serve(&ctx.bins.inbox, &db)?;
    let send = send_command(ctx, db);
    Ok(CliCommand::new(DAEMON_LABEL, None, move |p, s| {
        let _serving = &daemon;
        send(p, s)
    }))
}

/// `inbox send` of producer `p`'s message `s` to the database at `db`.
fn send_command(
    ctx: &Ctx,
    db: std::path::PathBuf,
) -> impl Fn(usize, u64) -> Command + Sync + 'static {
    let program = ctx.bins.inbox.clone();
    move |p, s| {
        let mut cmd = Command::new(&program);
        cmd.env("INBOX_DB", &db)
            .env_remove("INBOX_AGENT")
            .env_remove("INBOX_NOW")
            .args(["send", "--from", "lead", "--to", "worker", "--json"])
            .arg("--subject")
            .arg(format!("Implement benchmark task {p}-{s}"))
            .arg("--task")
            .arg(task_id(p, s))
            .arg("--body")
            .arg(format!(
                "Benchmark task {p}-{s}: a task assignment of about the size the peers send."
            ));
        cmd
    }
}

/// The file peers: the seed's own shell append (normal durability), and
/// `inbox-bench-peer` for each.
fn file_commands(ctx: &Ctx, durability: Durability) -> Vec<CliCommand> {
    let mut list = Vec::new();
    if durability == Durability::Normal {
        let inbox = Jsonl::worker_inbox(&ctx.target(System::Jsonl, durability).path);
        list.push(CliCommand::new(
            "JSONL: sh -c 'echo >> inbox'",
            Some(System::Jsonl),
            move |p, s| {
                let mut cmd = Command::new("sh");
                cmd.arg("-c")
                    .arg(r#"echo "$0" >> "$1""#)
                    .arg(Jsonl::line(p, s))
                    .arg(&inbox);
                cmd
            },
        ));
    }
    for system in [System::Jsonl, System::JsonArray, System::FileDrop] {
        let base = ctx.peer(&ctx.target(system, durability), "send");
        let (program, args) = program_and_args(&base);
        list.push(CliCommand::new(
            format!("{}: inbox-bench-peer", system.label()),
            Some(system),
            move |p, s| {
                let mut cmd = Command::new(&program);
                cmd.args(&args).arg(p.to_string()).arg(s.to_string());
                cmd
            },
        ));
    }
    list
}

/// `redis-cli LPUSH` and `psql -c INSERT`.
fn server_commands(ctx: &Ctx, durability: Durability) -> [CliCommand; 2] {
    let (redis, redis_args) = program_and_args(&ctx.redis_cli(durability));
    let psql_cmd = ctx.psql(durability);
    let (psql, psql_args) = program_and_args(&psql_cmd);
    let options = psql_cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect::<Vec<_>>();
    [
        CliCommand::new(
            "Redis: redis-cli LPUSH",
            Some(System::RedisList),
            move |p, s| {
                let mut cmd = Command::new(&redis);
                cmd.args(&redis_args)
                    .arg("LPUSH")
                    .arg("tasks")
                    .arg(task_line("lead", "worker", p, s));
                cmd
            },
        ),
        CliCommand::new(
            "PostgreSQL: psql -c INSERT",
            Some(System::Postgres),
            move |p, s| {
                let mut cmd = Command::new(&psql);
                cmd.args(&psql_args)
                    .envs(options.iter().map(|(k, v)| (k, v)))
                    .arg("-c")
                    .arg(format!(
                        "WITH t AS (INSERT INTO tasks (task_id, body) VALUES ('{}', '{}') RETURNING id) \
                         SELECT pg_notify('tasks', id::text) FROM t",
                        task_id(p, s),
                        task_line("lead", "worker", p, s)
                    ));
                cmd
            },
        ),
    ]
}

/// A command's program and arguments, to build it again per process.
fn program_and_args(cmd: &Command) -> (std::ffi::OsString, Vec<std::ffi::OsString>) {
    (
        cmd.get_program().to_owned(),
        cmd.get_args().map(ToOwned::to_owned).collect(),
    )
}

/// `total` processes from `producers` threads; returns the rate and the
/// per-process wall times.
fn per_process(make: &MakeCommand, producers: usize, total: u64) -> Result<(f64, Vec<f64>)> {
    race(
        producers,
        total,
        |p| (0..WARMUP).try_for_each(|i| run_checked(&mut make(p, 1_000_000 + i), &[]).map(drop)),
        |(), p, seq| run_checked(&mut make(p, seq), &[]).map(|(us, _)| us),
    )
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
