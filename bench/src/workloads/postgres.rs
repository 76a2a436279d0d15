//! Workload 12: inbox on PostgreSQL (issue 18). inbox's engine over its
//! PostgreSQL store against inbox on SQLite and the raw `FOR UPDATE SKIP
//! LOCKED` peer, in the same run and on the same cluster: send throughput
//! (in-process producers), claim + done (worker processes, 1 to 16), wake
//! latency (long-lived waiters), and the cost of the store's levers: the
//! store talking one statement per round trip as the first cut did, and
//! without its NOTIFY at commit.
//!
//! It reuses the send, claim and wake workloads' measuring code, so every
//! figure is taken exactly as the other sections take theirs. It must never
//! compare across durabilities, and never judge a target on a figure from
//! another run.

use std::time::Instant;

use anyhow::Result;
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};

use super::claim::Outcome;
use super::{check, durability_caption, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_rate, fmt_ratio, fmt_us};
use crate::peers::{Durability, Role, System};
use crate::report::Section;

/// The systems of the send and claim tables, in row order; the raw peer
/// last, as the baseline the ratios are read against.
const SYSTEMS: [System; 8] = [
    System::InboxPg,
    System::InboxPgOneByOne,
    System::InboxPgNoNotify,
    System::InboxPgNoCommandReads,
    System::Inbox,
    System::PostgresOrdered,
    System::PostgresOrderedInServer,
    System::Postgres,
];

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("postgres", "12. inbox on PostgreSQL");
    section.intro.push(
        "inbox's engine over its PostgreSQL store (`stores/postgres/src/`, docs/postgres.md), \
         in process, against inbox on SQLite and the raw PostgreSQL peer of sections 1 to 3 \
         (a `FOR UPDATE SKIP LOCKED` queue with `pg_notify`), all on the harness's cluster \
         over TCP on 127.0.0.1, one connection per producer, worker or waiter. inbox on \
         PostgreSQL keeps each durability's bus in a schema of its own; its sessions set \
         `synchronous_commit` as the raw peer's do (off for normal, on for full). Three more \
         rows each switch one of the store's levers off, in the same run: **one statement per \
         round trip** talks to the server as the first cut did (every statement waits for \
         its reply; no write queued, nothing read ahead at `BEGIN`), **command's reads not \
         at BEGIN** reads the command's thread (or queue head) in a round trip of its own \
         (claim tables only), **no NOTIFY** commits \
         without the `NOTIFY inbox_events` that wakes waiters in other processes. Two rows of \
         the claim tables give the raw peer an event log whose ids become visible in \
         increasing order, as inbox's must, and nothing else: **ids read by the client** \
         (`BEGIN`, the claim or done and the log's counter row locked and read in one round \
         trip; the event and `COMMIT` in a second: the least any design pays that, like \
         inbox's engine, knows an event's id before its commit) and **ids given in the \
         server** (the counter, the event and the claim or done in one statement)."
            .into(),
    );
    send_table(ctx, &mut section)?;
    let claim = claim_tables(ctx, &mut section)?;
    claim_checks(&mut section, &claim);
    wake_table(ctx, &mut section)?;
    cli_table(ctx, &mut section)?;
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Send throughput by producers, per durability, the median of
/// interleaved rounds.
fn send_table(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let producers: Vec<usize> = ctx.size(vec![1, 2, 4, 8, 16], vec![1, 2]);
    let total: u64 = ctx.size(1200, 60);
    let total_full: u64 = ctx.size(200, 30);
    let rounds = rounds(ctx);
    section.intro.push(format!(
        "**Send**: {total} messages ({total_full} with an fsync per commit) from 1 to {} \
         producer threads into a fresh store, as in section 1.",
        producers.iter().max().copied().unwrap_or(1)
    ));
    for durability in Ctx::DURABILITIES {
        let n = match durability {
            Durability::Normal => total,
            Durability::Full => total_full,
        };
        let systems: Vec<System> = systems(ctx)
            .into_iter()
            .filter(|s| !s.claims_only())
            .collect();
        let mut runs: Vec<(System, usize, Vec<SendRun>)> = Vec::new();
        for round in 0..rounds {
            for &system in &systems {
                let target = ctx.target(system, durability);
                for &p in &producers {
                    progress(&format!(
                        "postgres send, round {}: {} ({}), {p} producers",
                        round + 1,
                        system.label(),
                        durability.as_str()
                    ));
                    let run = super::send::in_process(&target, p, n)?;
                    match runs.iter_mut().find(|(s, q, _)| *s == system && *q == p) {
                        Some((_, _, all)) => all.push(run),
                        None => runs.push((system, p, vec![run])),
                    }
                }
            }
        }
        let mut header = vec!["system".to_owned()];
        header.extend(producers.iter().map(|p| format!("{p} prod.")));
        header.extend(["p50 send (1 prod.)", "p99 send (1 prod.)"].map(String::from));
        let mut table = Table::new(
            format!(
                "**Send, in process, {}**: messages per second by number of producers \
                 (median of {rounds} interleaved rounds).",
                durability_caption(durability)
            ),
            header,
        );
        for &system in &systems {
            let mut cells = vec![system.label().to_owned()];
            let mut one = Summary::default();
            for &p in &producers {
                let Some((_, _, all)) = runs.iter().find(|(s, q, _)| *s == system && *q == p)
                else {
                    continue;
                };
                let (rate, latencies) = median_run(all, |r| r.0);
                if p == 1 {
                    one = Summary::of(&latencies.1);
                }
                cells.push(fmt_rate(rate));
            }
            cells.push(fmt_us(one.p50));
            cells.push(fmt_us(one.p99));
            table.row(cells);
        }
        section.tables.push(table);
    }
    Ok(())
}

/// One round of sends: the rate, and each send's latency in µs.
type SendRun = (f64, Vec<f64>);

/// How many interleaved rounds each figure is the median of: this
/// machine's load comes and goes, and interleaving spreads it over every
/// system alike.
fn rounds(ctx: &Ctx) -> usize {
    ctx.size(3, 1)
}

/// The systems measured: the store's lever variants only in a full run
/// (the smoke run keeps to seconds).
fn systems(ctx: &Ctx) -> Vec<System> {
    ctx.size(
        SYSTEMS.to_vec(),
        vec![System::InboxPg, System::Inbox, System::Postgres],
    )
}

/// The median of `runs` by `key`, and that run.
fn median_run<T>(runs: &[T], key: impl Fn(&T) -> f64) -> (f64, &T) {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| key(&runs[*a]).total_cmp(&key(&runs[*b])));
    let run = &runs[order[order.len() / 2]];
    (key(run), run)
}

/// Claim + done rates by system, durability and workers.
#[derive(Default)]
struct ClaimRates {
    workers: Vec<usize>,
    /// (system, durability) → rate per worker count, in `workers` order.
    rates: Vec<(System, Durability, Vec<f64>)>,
    duplicates: usize,
}

impl ClaimRates {
    fn of(&self, system: System, durability: Durability) -> &[f64] {
        self.rates
            .iter()
            .find(|(s, d, _)| *s == system && *d == durability)
            .map_or(&[][..], |(_, _, r)| r.as_slice())
    }
}

/// Worker processes draining a queue: a table per durability, each
/// figure from the median of interleaved rounds.
fn claim_tables(ctx: &Ctx, section: &mut Section) -> Result<ClaimRates> {
    let workers: Vec<usize> = ctx.size(vec![1, 2, 4, 8, 16], vec![1, 2]);
    let tasks: u64 = ctx.size(600, 40);
    let tasks_full: u64 = ctx.size(200, 20);
    let rounds = rounds(ctx);
    section.intro.push(format!(
        "**Claim + done**: a fresh queue of {tasks} tasks ({tasks_full} with an fsync per \
         commit) drained by 1 to {} worker processes, as in section 2: inbox workers loop \
         `claim --next`, `done`; the raw peer claims with `SKIP LOCKED` and finishes with an \
         `UPDATE`. Every finished task is reported back and counted. Each figure is from \
         the round with the median rate of {rounds} rounds, run interleaved (every system \
         and worker count once, then again), so that the load other work puts on this \
         machine falls on every row alike; the range of the rounds' rates is shown.",
        workers.iter().max().copied().unwrap_or(1)
    ));
    let mut out = ClaimRates {
        workers: workers.clone(),
        ..ClaimRates::default()
    };
    for durability in Ctx::DURABILITIES {
        let n = match durability {
            Durability::Normal => tasks,
            Durability::Full => tasks_full,
        };
        let systems = systems(ctx);
        let mut runs: Vec<(System, usize, Vec<Outcome>)> = Vec::new();
        for round in 0..rounds {
            for &system in &systems {
                let target = ctx.target(system, durability);
                for &w in &workers {
                    progress(&format!(
                        "postgres claim, round {}: {} ({}), {w} workers",
                        round + 1,
                        system.label(),
                        durability.as_str()
                    ));
                    let o = super::claim::with_processes(ctx, &target, w, n)?;
                    if system.is_inbox() {
                        out.duplicates += o.duplicates + o.lost;
                    }
                    match runs.iter_mut().find(|(s, v, _)| *s == system && *v == w) {
                        Some((_, _, all)) => all.push(o),
                        None => runs.push((system, w, vec![o])),
                    }
                }
            }
        }
        for &system in &systems {
            let rates = workers
                .iter()
                .map(|w| {
                    runs.iter()
                        .find(|(s, v, _)| *s == system && v == w)
                        .map_or(0.0, |(_, _, all)| median_run(all, |o| o.rate).0)
                })
                .collect();
            out.rates.push((system, durability, rates));
        }
        let raw = out.of(System::Postgres, durability).to_vec();
        let mut table = claim_table(durability);
        for (system, w, all) in &runs {
            let (rate, o) = median_run(all, |o| o.rate);
            let index = workers.iter().position(|v| v == w).unwrap_or(0);
            let base = raw.get(index).copied().unwrap_or(0.0);
            let (low, high) = all.iter().fold((f64::INFINITY, 0.0_f64), |(l, h), o| {
                (l.min(o.rate), h.max(o.rate))
            });
            let mut cells = vec![system.label().to_owned(), w.to_string(), fmt_rate(rate)];
            cells.push(format!("{} – {}", fmt_rate(low), fmt_rate(high)));
            cells.extend(latency_cells(&o.claim));
            cells.push(fmt_us(Summary::of(o.times("done")).p50));
            cells.push(format!("{} / {}", o.duplicates, o.lost));
            cells.push(fmt_ratio(ratio(base, rate)));
            table.row(cells);
        }
        section.tables.push(table);
    }
    Ok(out)
}

fn claim_table(durability: Durability) -> Table {
    Table::new(
        format!(
            "**Claim + done, worker processes, {}**. Last column: the raw SKIP LOCKED peer's \
             rate with the same number of workers as a multiple of the system's (the issue's \
             target for inbox on PostgreSQL: ≤ 1.5×).",
            durability_caption(durability)
        ),
        [
            "system",
            "workers",
            "tasks/s",
            "rounds' range",
            "claim p50",
            "claim p99",
            "claim max",
            "done p50",
            "duplicates / lost",
            "raw peer ÷ system",
        ],
    )
}

/// The two claim targets, on the normal durability's figures, and
/// the NOTIFY and round-trip comparisons as notes.
fn claim_checks(section: &mut Section, c: &ClaimRates) {
    for durability in Ctx::DURABILITIES {
        let raw = c.of(System::Postgres, durability);
        let against_raw = |system: System| -> Vec<f64> {
            raw.iter()
                .zip(c.of(system, durability))
                .map(|(r, p)| ratio(*r, *p).unwrap_or(f64::INFINITY))
                .collect()
        };
        let listed = |ratios: &[f64]| {
            c.workers
                .iter()
                .zip(ratios)
                .map(|(w, r)| format!("{w}: {}", fmt_ratio(Some(*r))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let ratios = against_raw(System::InboxPg);
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        let floor = against_raw(System::PostgresOrdered);
        let in_server = against_raw(System::PostgresOrderedInServer);
        section.checks.push(check(
            &format!(
                "claim + done within 1.5× of the raw SKIP LOCKED peer at every worker count ({})",
                durability.as_str()
            ),
            format!("raw ÷ inbox on PostgreSQL by workers: {}", listed(&ratios)),
            worst <= 1.5,
            format!(
                "worst {} ({} over the 1.5× target). Event ids must become visible in \
                 increasing order, and the engine learns each id before its commit (its \
                 answer holds it), so every write holds one row from taking its id to its \
                 commit, a client's turn included. The raw queue with such a log and nothing \
                 else (ids read by the client, two round trips) is itself, raw ÷ it: {}; \
                 the same log with ids given inside the server's statement: {}. What is left \
                 above that floor is inbox's own work: its writes per command (thread, lease, \
                 event, message, NOTIFY) and the engine in the client",
                fmt_ratio(Some(worst)),
                fmt_ratio(Some(worst / 1.5)),
                listed(&floor),
                listed(&in_server)
            ),
        ));
    }
    let growth = |system| {
        let rates = c.of(system, Durability::Normal);
        match (rates.first(), rates.last()) {
            (Some(one), Some(most)) => ratio(*most, *one).unwrap_or(0.0),
            _ => 0.0,
        }
    };
    let (pg, sqlite) = (growth(System::InboxPg), growth(System::Inbox));
    let most = c.workers.last().copied().unwrap_or(1);
    section.checks.push(check(
        "aggregate claim + done grows with workers where SQLite's does not (normal; rate with \
         the most workers ≥ 1.25× the one-worker rate)",
        format!(
            "{most} workers ÷ 1 worker: inbox on PostgreSQL {}, inbox on SQLite {}",
            fmt_ratio(Some(pg)),
            fmt_ratio(Some(sqlite))
        ),
        pg >= 1.25,
        format!(
            "the ordered event log serializes commits from each one's event id to its end (see \
             the target above); more workers only overlap what lies outside that. The raw \
             queue with the same log, ids read by the client: {} ÷ its one-worker rate",
            fmt_ratio(Some(growth(System::PostgresOrdered)))
        ),
    ));
    section.checks.push(check(
        "0 duplicate (and 0 lost) tasks, every inbox configuration",
        c.duplicates.to_string(),
        c.duplicates == 0,
        "tasks were finished twice or never; see the tables".into(),
    ));
    for durability in Ctx::DURABILITIES {
        let shipped = c.of(System::InboxPg, durability);
        let plain = c.of(System::InboxPgOneByOne, durability);
        let quiet = c.of(System::InboxPgNoNotify, durability);
        let unread = c.of(System::InboxPgNoCommandReads, durability);
        if plain.is_empty() || quiet.is_empty() || unread.is_empty() {
            continue;
        }
        let pairs = |other: &[f64]| {
            c.workers
                .iter()
                .zip(shipped.iter().zip(other))
                .map(|(w, (s, o))| format!("{w}: {}", fmt_ratio(ratio(*s, *o))))
                .collect::<Vec<_>>()
                .join(", ")
        };
        section.notes.push(format!(
            "{} durability, inbox on PostgreSQL as shipped ÷ one statement per round trip, \
             by workers: {}; as shipped ÷ without NOTIFY: {}; as shipped ÷ without the \
             command's reads at BEGIN: {} (above 1: shipped is faster).",
            durability.as_str(),
            pairs(plain),
            pairs(quiet),
            pairs(unread)
        ));
    }
    let one = |system| {
        c.of(system, Durability::Normal)
            .first()
            .copied()
            .unwrap_or(0.0)
    };
    section.headlines.push(format!(
        "claim + done with one worker process: inbox on PostgreSQL {}, one statement per \
         round trip {}, inbox on SQLite {}, raw SKIP LOCKED {}; with {most} workers inbox on \
         PostgreSQL {} ÷ its one-worker rate",
        fmt_rate(one(System::InboxPg)),
        fmt_rate(one(System::InboxPgOneByOne)),
        fmt_rate(one(System::Inbox)),
        fmt_rate(one(System::Postgres)),
        fmt_ratio(Some(pg)),
    ));
}

/// Long-lived waiters woken by a commit in another process.
fn wake_table(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let n: usize = ctx.size(200, 10);
    section.intro.push(format!(
        "**Wake**: a long-lived waiter process blocks (inbox: `wait-reply` on the thread; on \
         PostgreSQL in `pg::listen::wait`, woken by the commit's NOTIFY, then re-running its \
         query; the raw peer: `LISTEN` and a `SELECT` of the notified row); the harness \
         commits the lead's answer and measures until the waiter's line arrives, as in \
         section 3. {n} wakes each, normal durability."
    ));
    let mut table = Table::new(
        "**Wake latency, long-lived waiters, normal durability**: from the write's start, \
         and from its return, to the waiter's output. Last column: p50 from the write's start \
         as a multiple of the raw PostgreSQL peer's.",
        [
            "waiter",
            "wakes",
            "p50",
            "p99",
            "max",
            "p50 from return",
            "write itself (p50)",
            "p50 ÷ raw peer",
        ],
    );
    let mut rows = Vec::new();
    for system in [System::Postgres, System::InboxPg, System::Inbox] {
        progress(&format!("postgres wake: {}, {n} wakes", system.label()));
        let (start, ret, write) =
            super::wake::long_lived(ctx, system, Role::Worker, Durability::Normal, n)?;
        rows.push((
            system,
            Summary::of(&start),
            Summary::of(&ret),
            Summary::of(&write),
        ));
    }
    let base = rows.first().map_or(0.0, |r| r.1.p50);
    for (system, s, r, w) in &rows {
        let mut cells = vec![system.label().to_owned(), s.n.to_string()];
        cells.extend(latency_cells(s));
        cells.push(fmt_us(r.p50));
        cells.push(fmt_us(w.p50));
        cells.push(fmt_ratio(ratio(s.p50, base)));
        table.row(cells);
    }
    section.tables.push(table);
    Ok(())
}

/// One process per command: `inbox claim --next` and `inbox done` against
/// PostgreSQL (connection setup included) beside inbox on SQLite and the
/// raw peer's `psql -c`, and what connecting costs on its own.
fn cli_table(ctx: &Ctx, section: &mut Section) -> Result<()> {
    let tasks: u64 = ctx.size(100, 10);
    let target = ctx.target(System::InboxPg, Durability::Normal);
    target.prepare()?;
    cli_speaks_postgres(ctx, &target)?;
    section.intro.push(format!(
        "**One process per command**: {tasks} tasks drained by one worker starting a process \
         per command, as in section 2 (`inbox claim --next`, then `inbox done`; the raw peer \
         `psql -c` with its statements), each process connecting anew; a floor process \
         (`inbox-bench-noop`) runs right before each claim process. **Connecting** is \
         measured on its own in process: `PgStore::connect` (TCP connection, startup, \
         authentication, the server starting a backend, the schema check) against a bare \
         TCP connection to the same port."
    ));
    let mut table = Table::new(
        "**One process per command, normal durability**: each command's process time \
         (median, p99) and its median ÷ the spawn floor measured right before it.",
        [
            "system",
            "claim cmd p50",
            "claim cmd p99",
            "done cmd p50",
            "done cmd p99",
            "floor p50",
            "claim cmd ÷ floor",
        ],
    );
    for system in [System::InboxPg, System::Inbox, System::Postgres] {
        progress(&format!("postgres CLI: {}, {tasks} tasks", system.label()));
        let o = super::claim::with_cli(ctx, &ctx.target(system, Durability::Normal), 1, tasks)?;
        let (claim, done, floor) = (
            Summary::of(o.times("claim")),
            Summary::of(o.times("done")),
            Summary::of(o.times("floor")),
        );
        table.row(vec![
            system.label().to_owned(),
            fmt_us(claim.p50),
            fmt_us(claim.p99),
            fmt_us(done.p50),
            fmt_us(done.p99),
            fmt_us(floor.p50),
            fmt_ratio(ratio(claim.p50, floor.p50)),
        ]);
    }
    section.tables.push(table);
    connect_table(ctx, section, &target)
}

/// Whether the `inbox` binary measured opens a `postgres://` database.
fn cli_speaks_postgres(ctx: &Ctx, target: &crate::peers::Target) -> Result<()> {
    let out = ctx.inbox(&target.db()).args(["list", "--json"]).output()?;
    if !out.status.success() {
        anyhow::bail!(
            "inbox list on PostgreSQL failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Connecting alone, in process.
fn connect_table(ctx: &Ctx, section: &mut Section, target: &crate::peers::Target) -> Result<()> {
    let n: usize = ctx.size(100, 5);
    let mut store = Vec::with_capacity(n);
    let mut session = Vec::with_capacity(n);
    let mut tcp = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let client = postgres::Client::connect(&target.url, postgres::NoTls)?;
        session.push(crate::proc::us_since(t));
        drop(client);
        let t0 = Instant::now();
        let mut pg =
            inbox_postgres::PgStore::connect(&target.url).map_err(|e| anyhow::anyhow!("{e}"))?;
        pg.ensure_schema().map_err(|e| anyhow::anyhow!("{e}"))?;
        store.push(crate::proc::us_since(t0));
        drop(pg);
        let t1 = Instant::now();
        let socket = std::net::TcpStream::connect(("127.0.0.1", ctx.pg.port))?;
        tcp.push(crate::proc::us_since(t1));
        drop(socket);
    }
    let (store, session, tcp) = (
        Summary::of(&store),
        Summary::of(&session),
        Summary::of(&tcp),
    );
    let mut table = Table::new(
        format!("**Connecting**, in process, {n} times each."),
        ["what", "p50", "p99"],
    );
    table.row(vec![
        "`PgStore::connect` + schema check".into(),
        fmt_us(store.p50),
        fmt_us(store.p99),
    ]);
    table.row(vec![
        "a session alone (`postgres::Client::connect`: startup, authentication, backend start)"
            .into(),
        fmt_us(session.p50),
        fmt_us(session.p99),
    ]);
    table.row(vec![
        "bare TCP connection to the server's port".into(),
        fmt_us(tcp.p50),
        fmt_us(tcp.p99),
    ]);
    section.tables.push(table);
    Ok(())
}
