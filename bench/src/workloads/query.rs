//! Workload 5: what reads cost as the store grows: `fetch`, `fetch
//! --unread`, `list` and `show` at 10k, 100k and 1M messages, in process
//! (one engine, warm) and as one CLI process per query, next to the JSONL
//! peer's reads of a member inbox of the same share of messages.
//!
//! One inbox database grows through the engine itself (every message is a
//! real `send`, every finished thread a real `claim` and `done`), so the
//! store holds what a long-running team leaves behind. `list`'s own
//! statement, taken from a trace of the engine, is also run bare on the
//! same connection: the floor SQLite sets under `list`. Reads never fsync,
//! so this workload runs under normal durability only. This module must
//! never write into the database behind the engine's back.

use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};
use inbox_engine::wire::{
    ClaimRequest, FetchRequest, FinishRequest, ListRequest, SendRequest, ShowRequest,
};
use inbox_engine::{Output, Request, Status};
use inbox_host_native::NativeEngine;
use rusqlite::trace::{TraceEvent, TraceEventCodes};

use super::{check, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::peers::{Durability, System, inbox};
use crate::proc::{Rng, run_checked, us_since};
use crate::report::Section;
use crate::svg::{LineChart, Series};

/// Worker agents the threads are spread over.
const AGENTS: u64 = 16;
/// The agent whose queries are measured.
const READER: &str = "w03";
/// Messages per thread.
const PER_THREAD: u64 = 10;

const QUERIES: [&str; 4] = ["fetch", "fetch --unread", "list", "show"];

/// `list`s with status filters, measured in process beside [`QUERIES`]:
/// each must stay a few limited index scans as the store grows (one `IN`
/// over the status index once read every thread of its statuses, and a
/// status beside an agent walked every thread of that status).
const FILTERED: [&str; 3] = [
    "list --status pending,claimed",
    "list --agent w03 --status pending",
    "list --agent w03 --status done",
];

/// Grows the store one thread (ten messages) at a time.
struct Grower {
    engine: NativeEngine,
    threads: u64,
    /// The reader's threads (for `show`).
    reader_threads: Vec<String>,
}

impl Grower {
    /// An engine on the (prepared) database at `path`.
    fn open(path: &Path) -> Result<Grower> {
        let grower = Grower {
            engine: inbox::engine(path)?,
            threads: 0,
            reader_threads: Vec::new(),
        };
        // Growing a million messages one transaction at a time would spend
        // most of its time in the checkpoints' fsyncs; the growing connection
        // skips them. What is stored is the same; the measured reads use
        // fresh connections (the CLI) or this one after growth, and reads
        // never fsync.
        grower
            .engine
            .store()
            .connection()
            .pragma_update(None, "synchronous", "OFF")
            .context("cannot set synchronous=OFF on the growing connection")?;
        Ok(grower)
    }

    /// Adds threads until the store holds `size` messages; returns the
    /// seconds it took.
    fn grow_to(&mut self, size: u64) -> Result<f64> {
        progress(&format!("query: growing the store to {size} messages"));
        let t0 = Instant::now();
        while self.threads * PER_THREAD < size {
            self.add_thread()?;
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    fn agent(k: u64) -> String {
        format!("w{:02}", k % AGENTS)
    }

    /// A random thread of the reader's.
    fn pick(&self, rng: &mut Rng) -> String {
        let n = self.reader_threads.len().max(1) as u64;
        self.reader_threads
            .get((rng.next_u64() % n) as usize)
            .cloned()
            .unwrap_or_default()
    }

    /// Adds thread `k`: a task and eight more messages from the lead; three
    /// threads in four are then claimed and finished (a result message), the
    /// fourth gets a ninth message and stays pending. The reader marks half
    /// of its pending threads read.
    fn add_thread(&mut self) -> Result<()> {
        let k = self.threads;
        let agent = Grower::agent(k);
        let round = k / AGENTS;
        let pending = round.is_multiple_of(4);
        let appends = if pending {
            PER_THREAD - 1
        } else {
            PER_THREAD - 2
        };
        let thread = self.send_thread(k, &agent, appends)?;
        if !pending {
            self.finish(k, &agent, &thread)?;
        }
        if agent == READER {
            if pending && round.is_multiple_of(8) {
                inbox::run(
                    &mut self.engine,
                    Request::Show(ShowRequest {
                        thread_id: Some(thread.clone()),
                        agent: Some(READER.into()),
                        mark_read: true,
                        ..ShowRequest::default()
                    }),
                )?;
            }
            self.reader_threads.push(thread);
        }
        self.threads += 1;
        Ok(())
    }

    /// The task of thread `k` for `agent` and `appends` notes in it; returns
    /// the thread's id.
    fn send_thread(&mut self, k: u64, agent: &str, appends: u64) -> Result<String> {
        let out = inbox::run(
            &mut self.engine,
            Request::Send(SendRequest {
                from_agent: Some("lead".into()),
                to_agent: Some(agent.into()),
                subject: Some(format!("Task {k}: implement part {k} of the feature")),
                task_id: Some(format!("T{k}")),
                body: Some("Details of the task, as a lead would write them for a worker.".into()),
                ..SendRequest::default()
            }),
        )?;
        let Output::Send(out) = out else {
            bail!("send answered with another command")
        };
        let thread = out.thread.thread.thread_id;
        for j in 0..appends {
            inbox::run(
                &mut self.engine,
                Request::Send(SendRequest {
                    from_agent: Some("lead".into()),
                    thread_id: Some(thread.clone()),
                    summary: Some(format!(
                        "Note {j} on task {k}: one more constraint to respect."
                    )),
                    ..SendRequest::default()
                }),
            )?;
        }
        Ok(thread)
    }

    /// `agent` claims `thread` and finishes it.
    fn finish(&mut self, k: u64, agent: &str, thread: &str) -> Result<()> {
        let out = inbox::run(
            &mut self.engine,
            Request::Claim(ClaimRequest {
                next: false,
                agent: Some(agent.into()),
                thread_id: Some(thread.into()),
                lease_seconds: Some(900),
            }),
        )?;
        let Output::Claim(out) = out else {
            bail!("claim answered with another command")
        };
        inbox::run(
            &mut self.engine,
            Request::Done(FinishRequest {
                agent: Some(agent.into()),
                thread_id: Some(thread.into()),
                lease_token: out.claimed.map(|c| c.lease.lease_token),
                summary: Some(format!("Task {k} done.")),
                ..FinishRequest::default()
            }),
        )?;
        Ok(())
    }
}

fn request(query: &str, thread: &str) -> Request {
    match query {
        "fetch" | "fetch --unread" => Request::Fetch(FetchRequest {
            agent: Some(READER.into()),
            limit: Some(20),
            unread: query.ends_with("unread"),
            ..FetchRequest::default()
        }),
        "list" => Request::List(ListRequest {
            limit: Some(50),
            ..ListRequest::default()
        }),
        "list --status pending,claimed" => Request::List(ListRequest {
            limit: Some(50),
            status: vec![Status::Pending, Status::Claimed],
            ..ListRequest::default()
        }),
        "list --agent w03 --status pending" | "list --agent w03 --status done" => {
            Request::List(ListRequest {
                limit: Some(50),
                agent: Some(READER.into()),
                status: vec![if query.ends_with("done") {
                    Status::Done
                } else {
                    Status::Pending
                }],
                ..ListRequest::default()
            })
        }
        _ => Request::Show(ShowRequest {
            thread_id: Some(thread.into()),
            ..ShowRequest::default()
        }),
    }
}

fn cli_args(query: &str, thread: &str) -> Vec<String> {
    let mut args: Vec<String> = match query {
        "fetch" => vec!["fetch".into(), "--agent".into(), READER.into()],
        "fetch --unread" => vec![
            "fetch".into(),
            "--agent".into(),
            READER.into(),
            "--unread".into(),
        ],
        "list" => vec!["list".into()],
        _ => vec!["show".into(), "--thread".into(), thread.into()],
    };
    args.push("--json".into());
    args
}

/// What one query of the workload returns, for the report.
fn rows_returned(query: &str) -> &'static str {
    match query {
        "list" => "50 threads",
        "show" => "10 messages",
        _ => "20 threads",
    }
}

/// How many rows [`rows_returned`] names.
fn rows_count(query: &str) -> f64 {
    match query {
        "list" => 50.0,
        "show" => 10.0,
        _ => 20.0,
    }
}

/// One query's figures at one size: in process, as CLI processes, and the
/// JSONL peer's version of it.
#[derive(Clone, Copy)]
struct Figures {
    inproc: Summary,
    cli: Summary,
    jsonl: Option<Summary>,
}

/// Per size: the size, and each query's figures (in [`QUERIES`] order).
type Measured = Vec<(u64, Vec<Figures>)>;

/// How many times each query runs.
#[derive(Clone, Copy)]
struct Reps {
    /// In process.
    inproc: usize,
    /// As a CLI process.
    cli: usize,
}

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let sizes: Vec<u64> = ctx.size(vec![10_000, 100_000, 1_000_000], vec![1_000, 10_000]);
    let reps = Reps {
        inproc: ctx.size(2000, 200),
        cli: ctx.size(40, 10),
    };
    let mut section = Section::new("query", "5. Read cost as the store grows");
    let target = ctx.target(System::Inbox, Durability::Normal);
    target.prepare()?;
    let mut grower = Grower::open(&target.path)?;
    let floor = Summary::of(
        &(0..reps.cli * 2)
            .map(|_| {
                run_checked(&mut std::process::Command::new(&ctx.bins.noop), &[]).map(|(us, _)| us)
            })
            .collect::<Result<Vec<_>>>()?,
    );
    let mut measured: Measured = Vec::new();
    let mut filtered = Vec::new();
    let mut grow_seconds = 0.0;
    let mut rng = Rng::new(7);
    for &size in &sizes {
        grow_seconds += grower.grow_to(size)?;
        let row = measure_size(ctx, &target.path, &mut grower, size, reps, &mut rng)?;
        measured.push((size, row));
        filtered.push(measure_filtered(&mut grower, size, reps.inproc)?);
    }
    let bare = list_statement_alone(&mut grower, reps.inproc)?;
    section.intro.push(intro(&sizes, grow_seconds, reps));
    let worst = tables(ctx, &mut section, &sizes, &measured, floor)?;
    section.tables.push(filtered_table(&sizes, &filtered));
    let label = size_label(sizes.last().copied().unwrap_or(0));
    let list = measured
        .last()
        .map_or(f64::NAN, |(_, row)| row[2].inproc.p50);
    let bare_note = format!(
        "`list`'s own statement, as the engine ran it at {label} messages, run bare on the same \
         warm connection (every row stepped, every column read and its text copied, no engine): \
         p50 {}, {} `list`'s {}. The rest is the engine's: the read transaction and each \
         thread's fields decoded, its status judged and its view built.",
        fmt_us(bare.p50),
        fmt_ratio(ratio(bare.p50, list)),
        fmt_us(list)
    );
    section.notes.push(bare_note);
    checks(&mut section, &sizes, &worst, bare.p50);
    if let Some((_, row)) = measured.last() {
        section.headlines.push(format!(
            "at {label} messages, in process: fetch {}, fetch --unread {}, list {}, show {} (p50); \
             as CLI processes {} to {}",
            fmt_us(row[0].inproc.p50),
            fmt_us(row[1].inproc.p50),
            fmt_us(row[2].inproc.p50),
            fmt_us(row[3].inproc.p50),
            fmt_us(row.iter().map(|r| r.cli.p50).fold(f64::INFINITY, f64::min)),
            fmt_us(row.iter().map(|r| r.cli.p50).fold(0.0, f64::max)),
        ));
    }
    let db_size = std::fs::metadata(&target.path).map_or(0, |m| m.len());
    section.notes.push(format!(
        "The database held {} MB at {label} messages ({} threads).",
        db_size / 1_000_000,
        grower.threads
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Every query at one size: in process on the grower's warm engine, as CLI
/// processes on the database at `db`, and the JSONL peer's version.
fn measure_size(
    ctx: &Ctx,
    db: &Path,
    grower: &mut Grower,
    size: u64,
    reps: Reps,
    rng: &mut Rng,
) -> Result<Vec<Figures>> {
    let jsonl_dir = ctx.tmp.fresh("query-jsonl")?;
    let jsonl_inbox = write_jsonl(&jsonl_dir, size / AGENTS)?;
    let mut row = Vec::new();
    for query in QUERIES {
        progress(&format!("query: {query} at {size} messages"));
        let inproc = after_warm_up(reps.inproc, || {
            let thread = grower.pick(rng);
            let t0 = Instant::now();
            inbox::run(&mut grower.engine, request(query, &thread))?;
            Ok(us_since(t0))
        })?;
        let mut cli = Vec::with_capacity(reps.cli);
        for _ in 0..reps.cli {
            let mut cmd = ctx.inbox(db);
            cmd.args(cli_args(query, &grower.pick(rng)));
            let (us, _) = run_checked(&mut cmd, &[10])?;
            cli.push(us);
        }
        let jsonl = jsonl_query(
            query,
            &jsonl_inbox,
            size / AGENTS,
            reps.inproc.min(200),
            rng,
        )?;
        row.push(Figures {
            inproc,
            cli: Summary::of(&cli),
            jsonl,
        });
    }
    Ok(row)
}

/// Each of [`FILTERED`], `reps` times in process on the warm engine.
fn measure_filtered(grower: &mut Grower, size: u64, reps: usize) -> Result<Vec<Summary>> {
    let mut row = Vec::new();
    for query in FILTERED {
        progress(&format!("query: {query} at {size} messages"));
        row.push(after_warm_up(reps, || {
            let t0 = Instant::now();
            inbox::run(&mut grower.engine, request(query, ""))?;
            Ok(us_since(t0))
        })?);
    }
    Ok(row)
}

/// Untimed runs before the timed ones, so that caches are warm.
const WARM_UP: usize = 20;

/// `reps` samples of `timed` (each run times itself, in µs), after
/// [`WARM_UP`] runs whose times are dropped.
fn after_warm_up(reps: usize, mut timed: impl FnMut() -> Result<f64>) -> Result<Summary> {
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps + WARM_UP {
        let us = timed()?;
        if i >= WARM_UP {
            samples.push(us);
        }
    }
    Ok(Summary::of(&samples))
}

/// [`FILTERED`]'s figures: p50 at each size, p99 at the largest, growth.
fn filtered_table(sizes: &[u64], filtered: &[Vec<Summary>]) -> Table {
    let first = size_label(sizes.first().copied().unwrap_or(0));
    let last = size_label(sizes.last().copied().unwrap_or(0));
    let mut header = vec!["list with a status filter (in process)".to_owned()];
    header.extend(sizes.iter().map(|s| format!("p50 @ {}", size_label(*s))));
    header.push(format!("p99 @ {last}"));
    header.push(format!("p50 {last} ÷ {first}"));
    let mut table = Table::new(
        format!(
            "**Lists with a status filter**, 50 threads at most, in process on the same warm \
             engine: several statuses (the store holds no claimed thread, so half the merge \
             finds nothing), and one status beside the reader as creator or assignee (it \
             created none; a quarter of its threads are pending, the rest done). At 10k \
             messages the reader has fewer than 50 pending threads, so that list returns \
             fewer rows there than at the larger sizes. Last column: the p50 at {last} as a \
             multiple of the p50 at {first}."
        ),
        header,
    );
    for (q, query) in FILTERED.iter().enumerate() {
        let p50s: Vec<f64> = filtered.iter().map(|row| row[q].p50).collect();
        let mut cells = vec![format!("`{query}`")];
        cells.extend(p50s.iter().map(|p| fmt_us(*p)));
        cells.push(
            filtered
                .last()
                .map_or("n/a".into(), |row| fmt_us(row[q].p99)),
        );
        let growth = match (p50s.first(), p50s.last()) {
            (Some(a), Some(b)) => ratio(*b, *a),
            _ => None,
        };
        cells.push(fmt_ratio(growth));
        table.row(cells);
    }
    table
}

fn intro(sizes: &[u64], grow_seconds: f64, reps: Reps) -> String {
    format!(
        "One inbox database grows through the engine to {} messages: threads of {PER_THREAD} \
         messages (a task and notes from the lead; three in four then claimed and finished, \
         the fourth left pending) spread over {AGENTS} worker agents; the reader `{READER}` marks \
         half of its pending threads read. Growing took {grow_seconds:.0} s (with \
         `synchronous=OFF` on the growing connection only, to skip the fsyncs of a million \
         commits). At each size: \
         `fetch --agent {READER} --limit 20`, the same with `--unread`, `list --limit 50` (all \
         threads, newest first) and `show` of a random thread of the reader's (10 \
         messages), {} times in process on a warm engine and {} times as a CLI \
         process. The JSONL peer is read the seed's way from a member inbox holding the \
         reader's share of the messages (1/{AGENTS}): new lines since a line cursor (read the \
         whole file, count lines), one task's messages (scan every line), the last 50 lines \
         (`tail`). Reads never fsync, so this runs under normal durability only.",
        sizes.last().copied().unwrap_or(0),
        reps.inproc,
        reps.cli
    )
}

/// `10k`, `1M`.
fn size_label(s: u64) -> String {
    if s >= 1_000_000 {
        format!("{}M", s / 1_000_000)
    } else {
        format!("{}k", s / 1_000)
    }
}

/// The slowest query at the largest size and the one that grew most
/// (`fetch --unread` left out: see the checks).
#[derive(Default)]
struct Worst {
    /// The largest p50 at the largest size, its query, and how it grew.
    p50: (f64, &'static str, Option<f64>),
    /// The largest growth from the first size to the last, and its query.
    growth: (f64, &'static str),
}

impl Worst {
    /// Takes `query`'s p50 at the largest size and its growth into account
    /// (a missing figure counts as the worst).
    fn update(&mut self, query: &'static str, p50: Option<f64>, growth: Option<f64>) {
        let p50 = p50.unwrap_or(f64::INFINITY);
        if p50 > self.p50.0 {
            self.p50 = (p50, query, growth);
        }
        let g = growth.unwrap_or(f64::INFINITY);
        if g > self.growth.0 {
            self.growth = (g, query);
        }
    }
}

/// The three tables (inbox in process, inbox as CLI processes, JSONL) and
/// the plot; returns the worst figures.
fn tables(
    ctx: &Ctx,
    section: &mut Section,
    sizes: &[u64],
    measured: &Measured,
    floor: Summary,
) -> Result<Worst> {
    let (first, last) = (
        size_label(sizes.first().copied().unwrap_or(0)),
        size_label(sizes.last().copied().unwrap_or(0)),
    );
    let mut tables = empty_tables(sizes, &first, &last, floor);
    let mut series = Vec::new();
    let mut worst = Worst::default();
    for (q, query) in QUERIES.iter().enumerate() {
        let at = |i: usize| measured.get(i).map(|(_, row)| row[q]);
        let (first_row, last_row) = (at(0), at(measured.len().saturating_sub(1)));
        let growth = match (first_row, last_row) {
            (Some(a), Some(b)) => ratio(b.inproc.p50, a.inproc.p50),
            _ => None,
        };
        let mut cells = [
            vec![format!("`{query}`")],
            vec![format!("`inbox {query}`")],
            vec![jsonl_label(query).to_owned()],
        ];
        for (_, row) in measured {
            let f = &row[q];
            cells[0].push(fmt_us(f.inproc.p50));
            cells[0].push(fmt_us(f.inproc.p99));
            cells[1].push(fmt_us(f.cli.p50));
            cells[2].push(f.jsonl.map_or("n/a".into(), |s| fmt_us(s.p50)));
        }
        cells[0].push(fmt_ratio(growth));
        cells[1].push(fmt_ratio(
            last_row.and_then(|r| ratio(r.cli.p50, floor.p50)),
        ));
        cells[2].push(fmt_ratio(
            last_row.and_then(|r| ratio(r.jsonl?.p50, r.inproc.p50)),
        ));
        for (table, cells) in tables.iter_mut().zip(cells) {
            table.row(cells);
        }
        series.push(Series {
            name: format!("inbox {query}"),
            values: measured
                .iter()
                .map(|(_, row)| Some(row[q].inproc.p50))
                .collect(),
        });
        if *query != "fetch --unread" {
            worst.update(query, last_row.map(|r| r.inproc.p50), growth);
        }
    }
    series.push(Series {
        name: "JSONL new lines since cursor".into(),
        values: measured
            .iter()
            .map(|(_, row)| row[1].jsonl.map(|s| s.p50))
            .collect(),
    });
    section.tables.extend(tables);
    plot(ctx, section, sizes, &series)?;
    Ok(worst)
}

/// The three tables' captions and headers.
fn empty_tables(sizes: &[u64], first: &str, last: &str, floor: Summary) -> [Table; 3] {
    let mut inproc = vec!["query (in process)".to_owned()];
    for s in sizes {
        inproc.push(format!("p50 @ {}", size_label(*s)));
        inproc.push(format!("p99 @ {}", size_label(*s)));
    }
    inproc.push(format!("p50 {last} ÷ {first}"));
    let p50s = |name: &str, last_column: String| {
        let mut h = vec![name.to_owned()];
        h.extend(sizes.iter().map(|s| format!("p50 @ {}", size_label(*s))));
        h.push(last_column);
        h
    };
    [
        Table::new(
            format!(
                "**inbox in process**: one warm engine. Last column: the p50 at {last} messages as a \
                 multiple of the p50 at {first}."
            ),
            inproc,
        ),
        Table::new(
            format!(
                "**inbox, one CLI process per query**: median wall time, and at {last} as a multiple of \
                 the process-spawn floor ({} measured in this workload).",
                fmt_us(floor.p50)
            ),
            p50s("query (CLI)", format!("÷ floor @ {last}")),
        ),
        Table::new(
            format!(
                "**JSONL peer**: the same questions asked of a member inbox file the seed's way, \
                 median. Last column: JSONL's p50 at {last} as a multiple of inbox's in-process p50."
            ),
            p50s("query (JSONL)", format!("÷ inbox @ {last}")),
        ),
    ]
}

fn plot(ctx: &Ctx, section: &mut Section, sizes: &[u64], series: &[Series]) -> Result<()> {
    LineChart {
        title: "Read cost against store size (median, in process)",
        x_label: "messages in the store",
        y_label: "median per query",
        xs: &sizes.iter().map(|s| *s as f64).collect::<Vec<_>>(),
        series,
        log_y: true,
        y_us: true,
    }
    .write(&ctx.out_dir.join("query.svg"))?;
    section.plots.push((
        "query.svg".into(),
        "Median cost of each read against the number of messages (log scale), inbox in process and the JSONL peer".into(),
    ));
    Ok(())
}

/// The statements the connection ran while [`traced_statements`] listened.
static TRACED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Stmt(_, sql) = event
        && let Ok(mut traced) = TRACED.lock()
    {
        traced.push(sql.to_owned());
    }
}

/// The SQL of every statement `request` ran on the grower's connection.
fn traced_statements(grower: &mut Grower, request: Request) -> Result<Vec<String>> {
    let conn = grower.engine.store_mut().connection_mut();
    conn.trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(record))
        .context("cannot trace the connection's statements")?;
    let ran = inbox::run(&mut grower.engine, request);
    let conn = grower.engine.store_mut().connection_mut();
    conn.trace_v2(TraceEventCodes::empty(), None::<fn(TraceEvent<'_>)>)
        .context("cannot stop tracing the connection's statements")?;
    ran?;
    let mut traced = TRACED
        .lock()
        .map_err(|_| anyhow::anyhow!("trace poisoned"))?;
    Ok(std::mem::take(&mut *traced))
}

/// What `list` cannot go below on SQLite through rusqlite: its threads
/// statement, taken from a trace of the engine running `list` (so it is the
/// engine's own), run bare on the same warm connection, each row stepped,
/// each column read and its text copied.
fn list_statement_alone(grower: &mut Grower, reps: usize) -> Result<Summary> {
    let statements = traced_statements(grower, request("list", ""))?;
    let sql = statements
        .into_iter()
        .find(|sql| sql.contains("FROM threads t") && !sql.contains('?'))
        .context("the trace of `list` holds no threads statement")?;
    let conn = grower.engine.store().connection();
    let mut statement = conn.prepare(&sql)?;
    after_warm_up(reps, || {
        let t0 = Instant::now();
        let mut rows = statement.query([])?;
        let mut read = 0;
        while let Some(row) = rows.next()? {
            for column in 0..row.as_ref().column_count() {
                let value = row.get_ref(column)?;
                match value.as_str() {
                    Ok(text) => drop(std::hint::black_box(text.to_owned())),
                    Err(_) => drop(std::hint::black_box(value.as_i64_or_null())),
                }
            }
            read += 1;
        }
        if read != rows_count("list") as usize {
            bail!("`list`'s statement read {read} rows");
        }
        Ok(us_since(t0))
    })
}

/// The two targets: a fast read at the largest size, and reads that do not
/// grow with the store. `bare`: the p50 of `list`'s statement alone.
fn checks(section: &mut Section, sizes: &[u64], worst: &Worst, bare: f64) {
    let first = size_label(sizes.first().copied().unwrap_or(0));
    let label = size_label(sizes.last().copied().unwrap_or(0));
    let (p50, query, growth) = worst.p50;
    let floor = if query == "list" {
        format!(
            ". Its own statement alone, each column read and copied, takes {}",
            fmt_us(bare)
        )
    } else {
        String::new()
    };
    section.checks.push(check(
        &format!("fetch/list/show at {label} messages: p50 ≤ 50 µs in process"),
        format!("worst: `{query}` {}", fmt_us(p50)),
        p50 <= 50.0,
        format!(
            "`{query}` is {} over ({:.1}× the target), and {} its {first} figure: its cost is the {} it \
             returns, about {} each to read from SQLite and build, not the size of the \
             store{floor}",
            fmt_us(p50 - 50.0),
            p50 / 50.0,
            fmt_ratio(growth),
            rows_returned(query),
            fmt_us(p50 / rows_count(query)),
        ),
    ));
    let (g, query) = worst.growth;
    section.checks.push(check(
        &format!("fetch/list/show at {label}: within 2× of the {first} figure"),
        format!("worst: `{query}` {}", fmt_ratio(Some(g))),
        g <= 2.0,
        format!(
            "`{query}` grows {} from {first} to {label} messages",
            fmt_ratio(Some(g))
        ),
    ));
}

fn jsonl_label(query: &str) -> &'static str {
    match query {
        "fetch" => "next unprocessed line (line cursor)",
        "fetch --unread" => "all new lines since the cursor",
        "list" => "last 50 lines (`tail -n 50`)",
        _ => "one task's messages (scan every line)",
    }
}

/// Writes a member inbox of `lines` task lines (ten per task).
fn write_jsonl(dir: &std::path::Path, lines: u64) -> Result<std::path::PathBuf> {
    let path = dir.join("inbox");
    let mut out = BufWriter::new(std::fs::File::create(&path)?);
    for i in 0..lines {
        let line = inbox_bench::files::task_line(
            "lead",
            READER,
            (i / PER_THREAD) as usize,
            i % PER_THREAD,
        );
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(path)
}

/// The JSONL peer's version of `query`, `reps` times; median etc.
fn jsonl_query(
    query: &str,
    inbox: &std::path::Path,
    lines: u64,
    reps: usize,
    rng: &mut Rng,
) -> Result<Option<Summary>> {
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        match query {
            // The seed's loop: read every line, counting, until past the cursor.
            "fetch" | "fetch --unread" => {
                let cursor = lines.saturating_sub(if query == "fetch" { 1 } else { 10 }) as usize;
                let text = std::fs::read_to_string(inbox)?;
                let new: Vec<&str> = text.lines().skip(cursor).collect();
                std::hint::black_box(new);
            }
            "list" => {
                let mut file = std::fs::File::open(inbox)?;
                let len = file.metadata()?.len();
                file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
                let mut tail = String::new();
                file.read_to_string(&mut tail)
                    .context("cannot read the tail")?;
                let last: Vec<&str> = tail.lines().rev().take(50).collect();
                std::hint::black_box(last);
            }
            _ => {
                let task = format!("\"t-{}-", rng.next_u64() % (lines / PER_THREAD).max(1));
                let text = std::fs::read_to_string(inbox)?;
                let hits: Vec<&str> = text.lines().filter(|l| l.contains(&task)).collect();
                std::hint::black_box(hits);
            }
        }
        samples.push(us_since(t0));
    }
    Ok(Some(Summary::of(&samples)))
}
