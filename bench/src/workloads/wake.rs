//! Workload 3: wake latency. A waiter blocks in another process; the
//! harness commits a message for it and measures from the moment its write
//! returned (the commit is done) to the moment the waiter's output line
//! reaches the harness. Also the idle waiter's CPU: user + system time from
//! `/proc/<pid>/stat` over a fixed idle period.
//!
//! Waiters are long-lived processes (`__waiter`: inbox's own waiting code,
//! Redis BLPOP or XREADGROUP BLOCK, PostgreSQL LISTEN, the file peers'
//! pollers) and, for inbox and Redis, one CLI process per wait (`inbox
//! wait-reply`, `inbox watch`, `redis-cli BLPOP`), started and given time to
//! block before the commit. Commits are spaced by a random gap so that
//! pollers are caught at a random point of their period. This module must
//! never start the clock before the waiter is blocked: a waiter that was
//! still starting would measure its own start-up, not a wake.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use inbox_bench::files::{filedrop, jsonl};
use inbox_bench_kit::markdown::Table;
use inbox_bench_kit::stats::{Summary, ratio};

use super::{check, durability_caption, latency_cells, progress};
use crate::ctx::Ctx;
use crate::fmt::{fmt_ratio, fmt_us};
use crate::peers::{Durability, Endpoint, Role, System, Target, inbox::InboxEndpoint};
use crate::proc::{ChildGuard, Lines, Rng, cpu_nanos, us_between};
use crate::report::Section;
use crate::roles::AgentConfig;
use crate::svg::{Bar, bar_chart};

/// The waiters measured.
#[derive(Clone, Copy, PartialEq)]
enum Waiter {
    /// A long-lived process of this harness blocked in the system's wait.
    LongLived(System, Role),
    /// `inbox wait-reply` (or `watch`) started per wait.
    InboxCli(Role),
    /// `redis-cli BLPOP` started per wait.
    RedisCli,
}

impl Waiter {
    fn label(self) -> String {
        match self {
            Waiter::LongLived(System::Inbox, Role::WorkerWatch) => {
                "inbox watch (long-lived process)".into()
            }
            Waiter::LongLived(System::Inbox, _) => "inbox wait-reply (long-lived process)".into(),
            Waiter::LongLived(System::RedisList, _) => "Redis BLPOP (long-lived client)".into(),
            Waiter::LongLived(System::RedisStream, _) => {
                "Redis XREADGROUP BLOCK (long-lived client)".into()
            }
            Waiter::LongLived(System::Postgres, _) => {
                "PostgreSQL LISTEN (long-lived client)".into()
            }
            Waiter::LongLived(System::Jsonl, _) => "JSONL inbox, 1 s size poll".into(),
            Waiter::LongLived(System::FileDrop, _) => "file-drop, 2 s directory poll".into(),
            Waiter::LongLived(System::SqliteQueue, _) => {
                "bare SQLite waiter (long-lived process)".into()
            }
            Waiter::LongLived(System::SqliteReplyRows, _) => {
                "bare SQLite waiter, woken by a reply's rows (long-lived process)".into()
            }
            Waiter::LongLived(s, _) => s.label().into(),
            Waiter::InboxCli(Role::WorkerWatch) => "`inbox watch` CLI process".into(),
            Waiter::InboxCli(_) => "`inbox wait-reply` CLI process".into(),
            Waiter::RedisCli => "`redis-cli BLPOP` process".into(),
        }
    }

    fn system(self) -> System {
        match self {
            Waiter::LongLived(system, _) => system,
            Waiter::InboxCli(_) => System::Inbox,
            Waiter::RedisCli => System::RedisList,
        }
    }

    fn is_baseline(self) -> bool {
        self == Waiter::LongLived(System::RedisList, Role::Worker)
    }
}

const WAITERS: [Waiter; 12] = [
    Waiter::LongLived(System::RedisList, Role::Worker),
    Waiter::LongLived(System::Inbox, Role::Worker),
    Waiter::LongLived(System::Inbox, Role::WorkerWatch),
    Waiter::LongLived(System::SqliteQueue, Role::Worker),
    Waiter::LongLived(System::SqliteReplyRows, Role::Worker),
    Waiter::InboxCli(Role::Worker),
    Waiter::InboxCli(Role::WorkerWatch),
    Waiter::RedisCli,
    Waiter::LongLived(System::RedisStream, Role::Worker),
    Waiter::LongLived(System::Postgres, Role::Worker),
    Waiter::LongLived(System::Jsonl, Role::Worker),
    Waiter::LongLived(System::FileDrop, Role::Worker),
];

/// How long a per-wait CLI process is given to start and block.
const CLI_SETTLE: Duration = Duration::from_millis(40);

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("wake", "3. Wake latency");
    let normal = latency_tables(ctx, &mut section)?;
    let inbox_cpu = idle_cpu_table(ctx, &mut section)?;
    section.notes.push(format!(
        "The pollers' latency is set by design: the JSONL waiter looks every {} s (the seed \
         warns against looking more often than every second) and the file-drop poller every \
         {} s (the seed's default), so their medians sit near half a period.",
        jsonl::POLL.as_secs(),
        filedrop::POLL.as_secs()
    ));
    section.notes.push(
        "inbox waiters learn of a commit through inotify on the database's folder, confirm it \
         with `PRAGMA data_version`, then run the wait's query; Redis and PostgreSQL push the \
         message over an open socket. A CLI waiter also prints its JSON and exits before the \
         harness sees its line."
            .into(),
    );
    latency_checks(&mut section, &normal);
    section.checks.push(check(
        "idle waiter CPU ≤ 0.5 % of a core",
        format!("{inbox_cpu:.3} % (worst inbox waiter)"),
        inbox_cpu <= 0.5,
        format!("{:.3} points over", inbox_cpu - 0.5),
    ));
    let (long, long_r, cli_r) = (normal.long.0, normal.long.1, normal.cli.1);
    section.headlines.push(format!(
        "commit returned → waiter returned: inbox wait-reply p50 {} / p99 {} in a long-lived \
         process, {} / {} as a CLI process; from the write's start, inbox {} against Redis \
         BLPOP {} ({}); idle inbox waiters use {inbox_cpu:.2} % of a core",
        fmt_us(long_r.p50),
        fmt_us(long_r.p99),
        fmt_us(cli_r.p50),
        fmt_us(cli_r.p99),
        fmt_us(long.p50),
        fmt_us(normal.baseline),
        fmt_ratio(ratio(long.p50, normal.baseline))
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}

/// The figures the targets are checked on.
#[derive(Clone, Copy, Default)]
struct Figures {
    /// inbox `wait-reply` in a long-lived process: from the write's start,
    /// and from its return.
    long: (Summary, Summary),
    /// `inbox wait-reply` as a CLI process: the same two.
    cli: (Summary, Summary),
    /// Redis BLPOP's p50 from the write's start: the baseline.
    baseline: f64,
    /// The p50 of inbox's write alone, as the long-lived waiter's lead
    /// made it: what no faster wake can take off.
    write: f64,
    /// The bare SQLite waiter: from the write's start and from its
    /// return, and its write alone (p50s): the least any waiter that
    /// reads an SQLite database another process wrote pays.
    bare: (f64, f64, f64),
    /// The same waiter woken by a write of the rows an inbox reply
    /// writes: the same three figures.
    bare_reply: (f64, f64, f64),
}

/// A latency table per durability and one bar chart; returns the normal
/// durability's figures.
fn latency_tables(ctx: &Ctx, section: &mut Section) -> Result<Figures> {
    let fast_n: usize = ctx.size(300, 40);
    let cli_n: usize = ctx.size(150, 20);
    let poll_n: usize = ctx.size(16, 3);
    section.intro.push(format!(
        "A waiter blocks in another process; the harness commits a message for it (inbox: the \
         lead's `reply --kind answer` in the thread the worker waits on) and measures from the \
         moment its write returned to the moment the waiter's line reached the harness. \
         {fast_n} wakes per long-lived waiter, {cli_n} per CLI-process waiter (each process \
         is started and given {} to block first), {poll_n} per polling waiter, after a few \
         warm-up wakes; commits are spaced by a random gap (5 to 15 ms, or up to one poll \
         period for pollers). Baseline: Redis BLPOP with a long-lived client, in the same run.",
        fmt_us(CLI_SETTLE.as_secs_f64() * 1e6)
    ));
    let mut bars = Vec::new();
    let mut normal = Figures::default();
    for durability in Ctx::DURABILITIES {
        let mut table = latency_table(durability);
        let mut figures = Figures::default();
        for waiter in WAITERS {
            let n = match waiter {
                Waiter::LongLived(s, _) if s.polls() => poll_n,
                Waiter::InboxCli(_) | Waiter::RedisCli => cli_n,
                _ => fast_n,
            };
            progress(&format!(
                "wake: {} ({}), {n} wakes",
                waiter.label(),
                durability.as_str()
            ));
            let (from_start, from_return, write) = measure(ctx, waiter, durability, n)?;
            let (s, r) = (Summary::of(&from_start), Summary::of(&from_return));
            let write = Summary::of(&write);
            match waiter {
                _ if waiter.is_baseline() => figures.baseline = s.p50,
                Waiter::LongLived(System::Inbox, Role::Worker) => {
                    figures.long = (s, r);
                    figures.write = write.p50;
                }
                Waiter::InboxCli(Role::Worker) => figures.cli = (s, r),
                Waiter::LongLived(System::SqliteQueue, _) => {
                    figures.bare = (s.p50, r.p50, write.p50);
                }
                Waiter::LongLived(System::SqliteReplyRows, _) => {
                    figures.bare_reply = (s.p50, r.p50, write.p50);
                }
                _ => {}
            }
            table.row(latency_row(waiter, &s, &r, &write, figures.baseline));
            bars.push(Bar {
                label: format!(
                    "{} [{}]",
                    waiter.label().replace('`', ""),
                    durability.as_str()
                ),
                p50: s.p50.max(1.0),
                p99: s.p99.max(1.0),
                baseline: waiter.is_baseline(),
            });
        }
        section.tables.push(table);
        if durability == Durability::Normal {
            normal = figures;
        }
    }
    bar_chart(
        &ctx.out_dir.join("wake.svg"),
        "Wake latency: commit returned → waiter's output (median, p99 whisker)",
        "latency (log scale)",
        &bars,
    )?;
    section.plots.push((
        "wake.svg".into(),
        "Wake latency per waiter and durability, median with p99 whisker; grey is the Redis BLPOP baseline".into(),
    ));
    Ok(normal)
}

fn latency_table(durability: Durability) -> Table {
    Table::new(
        format!(
            "**Wake latency, {}**: p50/p99/max from the moment the writer called the \
             system (its write included) to the waiter's output; \"from return\": from the \
             moment the write returned (the commit is done), which can be slightly negative \
             when the server wakes the waiter before the writer reads its own reply. Last \
             column: p50 (from the write's start) as a multiple of Redis BLPOP's.",
            durability_caption(durability)
        ),
        [
            "waiter",
            "wakes",
            "p50",
            "p99",
            "max",
            "p50 from return",
            "p99 from return",
            "write itself (p50)",
            "p50 ÷ Redis BLPOP",
        ],
    )
}

/// One waiter's row: from the write's start `s`, from its return `r`, the
/// write itself, and the ratio to the baseline.
fn latency_row(
    waiter: Waiter,
    s: &Summary,
    r: &Summary,
    write: &Summary,
    baseline: f64,
) -> Vec<String> {
    let mut cells = vec![waiter.label(), s.n.to_string()];
    cells.extend(latency_cells(s));
    cells.push(fmt_us(r.p50));
    cells.push(fmt_us(r.p99));
    cells.push(fmt_us(write.p50));
    cells.push(fmt_ratio(ratio(s.p50, baseline)));
    cells
}

/// Every waiter idle at once; returns the worst inbox waiter's share of a
/// core, in percent.
fn idle_cpu_table(ctx: &Ctx, section: &mut Section) -> Result<f64> {
    let idle = Duration::from_secs(ctx.size(20, 4));
    progress(&format!("wake: idle CPU of every waiter over {idle:?}"));
    let cpu = idle_cpu(ctx, idle)?;
    let mut table = Table::new(
        format!(
            "**Idle waiter CPU**: CPU time of the waiting process (not of the servers), from \
             /proc/<pid>/schedstat, over {} s with nothing to wake for, normal durability, as a \
             percentage of one core.",
            idle.as_secs()
        ),
        ["waiter", "CPU time", "% of a core"],
    );
    let mut inbox_cpu: f64 = 0.0;
    for (waiter, nanos) in &cpu {
        let pct = *nanos as f64 / idle.as_nanos() as f64 * 100.0;
        if waiter.system() == System::Inbox {
            inbox_cpu = inbox_cpu.max(pct);
        }
        table.row(vec![
            waiter.label(),
            format!("{:.2} ms", *nanos as f64 / 1e6),
            format!("{pct:.4} %"),
        ]);
    }
    section.tables.push(table);
    Ok(inbox_cpu)
}

/// The three latency targets.
fn latency_checks(section: &mut Section, normal: &Figures) {
    let ((long, long_r), (_, cli_r), baseline) = (normal.long, normal.cli, normal.baseline);
    let best = if long_r.p50 <= cli_r.p50 {
        long_r
    } else {
        cli_r
    };
    section.checks.push(check(
        "wake p50 ≤ 0.5 ms across processes (commit returned → `wait-reply` returned)",
        format!(
            "long-lived {} / CLI process {}",
            fmt_us(long_r.p50),
            fmt_us(cli_r.p50)
        ),
        best.p50 <= 500.0,
        format!(
            "{} over at best; see the wake table for where the time goes",
            fmt_us(best.p50 - 500.0)
        ),
    ));
    section.checks.push(check(
        "wake p99 ≤ 5 ms across processes (commit returned → `wait-reply` returned)",
        format!(
            "long-lived {} / CLI process {}",
            fmt_us(long_r.p99),
            fmt_us(cli_r.p99)
        ),
        long_r.p99 <= 5_000.0 && cli_r.p99 <= 5_000.0,
        format!(
            "{} over (worst of the two)",
            fmt_us(long_r.p99.max(cli_r.p99) - 5_000.0)
        ),
    ));
    section.checks.push(check(
        "wake on par with Redis BLPOP in the same run (p50 from the write's start, long-lived waiters, ≤ 1.0×)",
        format!(
            "{} vs {} = {}",
            fmt_us(long.p50),
            fmt_us(baseline),
            fmt_ratio(ratio(long.p50, baseline))
        ),
        long.p50 <= baseline,
        wake_shortfall(normal),
    ));
}

/// Why inbox's wake is slower than Redis's, from the split of the write
/// and the waiter's part after it.
fn wake_shortfall(normal: &Figures) -> String {
    let (write, baseline) = (normal.write, normal.baseline);
    let write_part = if write >= baseline {
        "even a wake that cost nothing would leave inbox there. The rest is the waiter"
    } else {
        "the rest of the gap is the waiter's"
    };
    format!(
        "{} Redis's median. inbox's write alone (an SQLite transaction) takes {} at the median, \
         {} Redis's whole write and wake: {write_part}, {} from the write's return to its line: \
         woken by inotify on the WAL write, it confirms the commit with `PRAGMA data_version` \
         and re-runs its query, reading afresh the pages SQLite drops once another connection \
         has written (the \"write itself\" and \"from return\" columns split the two)",
        fmt_ratio(ratio(normal.long.0.p50, baseline)),
        fmt_us(write),
        fmt_ratio(ratio(write, baseline)),
        fmt_us(normal.long.1.p50),
    ) + &bare_floor(normal)
}

/// What the bare SQLite waiters say about the wake target: whether any
/// waiter on SQLite reaches Redis here, woken by one row and by a reply's
/// rows, and how much of inbox's time is its own.
fn bare_floor(normal: &Figures) -> String {
    let (start, from_return, write) = normal.bare;
    let (reply_start, reply_return, reply_write) = normal.bare_reply;
    let (inbox, baseline) = (normal.long.0.p50, normal.baseline);
    let side = if inbox >= reply_start {
        "above"
    } else {
        "below"
    };
    let one_row = if start >= baseline {
        "so on this machine no waiter that reads an SQLite database another process wrote, \
         woken this way, is on par with Redis"
    } else {
        "so a wake on SQLite can be on par with Redis"
    };
    let reply = if reply_start >= baseline {
        "so no SQLite write of what a reply records, with the indexes its readers need, is on \
         par with Redis here: the target is out of reach for inbox's data on SQLite, and inbox \
         is"
    } else {
        "so the target is within SQLite's reach even for a reply's rows, and inbox is"
    };
    format!(
        ". In the same run, the bare SQLite waiter (the same notification and confirmation, \
         one indexed `SELECT`, none of inbox's code) woken by a one-row `INSERT` takes {} from \
         the write's start = {} Redis's (the write {}, the wake {} from its return), \
         {one_row}; woken by the rows an inbox reply writes (the message, its event and the \
         thread's row, with the five indexes inbox reads them by: eight pages, as inbox's \
         reply) it takes {} = {} (the write {}, the wake {}), {reply} {} {side} it",
        fmt_us(start),
        fmt_ratio(ratio(start, baseline)),
        fmt_us(write),
        fmt_us(from_return),
        fmt_us(reply_start),
        fmt_ratio(ratio(reply_start, baseline)),
        fmt_us(reply_write),
        fmt_us(reply_return),
        fmt_us((inbox - reply_start).abs()),
    )
}

/// Starts a long-lived waiter child on a prepared channel and waits for
/// its `ready`.
fn spawn_waiter(ctx: &Ctx, target: &Target, role: Role) -> Result<(ChildGuard, Lines)> {
    let config = serde_json::to_string(&AgentConfig {
        target: target.clone(),
        role,
    })?;
    let mut cmd = Command::new(&ctx.bins.me);
    cmd.arg("__waiter")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = ChildGuard::spawn(&mut cmd, &format!("{} waiter", target.system.label()))?;
    let lines = child.lines()?;
    lines.expect("ready", Duration::from_secs(30))?;
    Ok((child, lines))
}

/// The per-wait CLI command of a CLI waiter, resuming after event `cursor`.
fn cli_waiter(ctx: &Ctx, waiter: Waiter, target: &Target, cursor: u64, timeout: u64) -> Command {
    match waiter {
        Waiter::RedisCli => {
            let mut cmd = ctx.redis_cli(target.durability);
            cmd.args(["BLPOP", "to_worker", &timeout.to_string()]);
            cmd
        }
        _ => {
            let mut cmd = ctx.inbox(&target.path);
            if waiter == Waiter::InboxCli(Role::WorkerWatch) {
                cmd.args(["watch", "--agent", "worker"]);
            } else {
                cmd.args(["wait-reply", "--agent", "worker", "--thread"])
                    .arg(target.thread.as_deref().unwrap_or_default());
            }
            cmd.args([
                "--timeout-seconds",
                &timeout.to_string(),
                "--json",
                "--after-event",
            ])
            .arg(cursor.to_string());
            cmd
        }
    }
}

/// `n` wakes of a long-lived `role` waiter of `system` (see [`measure`]).
pub(crate) fn long_lived(
    ctx: &Ctx,
    system: System,
    role: Role,
    durability: Durability,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    measure(ctx, Waiter::LongLived(system, role), durability, n)
}

/// `n` wakes (after warm-up); returns the latencies from the write's start
/// and from its return, and the writes' own durations, in µs.
fn measure(
    ctx: &Ctx,
    waiter: Waiter,
    durability: Durability,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let target = ctx.target(waiter.system(), durability).prepare_channel()?;
    let mut lead = Lead::open(waiter, &target)?;
    let (warmup, gap) = pacing(waiter);
    let mut rng = Rng::new(n as u64);
    let mut from_start = Vec::with_capacity(n);
    let mut from_return = Vec::with_capacity(n);
    let mut write = Vec::with_capacity(n);
    let long_lived = match waiter {
        Waiter::LongLived(_, role) => Some(spawn_waiter(ctx, &target, role)?),
        _ => None,
    };
    for i in 0..n + warmup {
        let per_wait = match long_lived {
            Some(_) => {
                std::thread::sleep(rng.between(gap.0, gap.1));
                None
            }
            None => Some(start_cli_waiter(
                ctx,
                waiter,
                &target,
                lead.cursor(),
                &mut rng,
            )?),
        };
        let t0 = Instant::now();
        lead.post(i as u64)?;
        let committed = Instant::now();
        let lines = match (&long_lived, &per_wait) {
            (Some((_, lines)), _) | (None, Some((_, lines))) => lines,
            _ => bail!("no waiter"),
        };
        let (at, line) = woke(waiter, lines)?;
        if let Some((mut child, _)) = per_wait {
            let code = child.wait_code()?;
            if code != 0 {
                bail!("{} exited with {code}: {line}", waiter.label());
            }
        }
        if i >= warmup {
            from_start.push(us_between(t0, at));
            from_return.push(us_between(committed, at));
            write.push(us_between(t0, committed));
        }
    }
    Ok((from_start, from_return, write))
}

/// Warm-up wakes, and the range of the random gap before each commit: up
/// to one poll period for pollers, so they are caught at a random point of
/// it.
fn pacing(waiter: Waiter) -> (usize, (Duration, Duration)) {
    match waiter.system() {
        System::Jsonl => (1, (Duration::ZERO, jsonl::POLL)),
        System::FileDrop => (1, (Duration::ZERO, filedrop::POLL)),
        _ => (5, (Duration::from_millis(5), Duration::from_millis(15))),
    }
}

/// The committing agent. The inbox CLI waiters resume after the lead's
/// event cursor, so for them it posts through an inbox endpoint that keeps
/// it.
struct Lead {
    endpoint: Box<dyn Endpoint>,
    inbox: Option<InboxEndpoint>,
}

impl Lead {
    fn open(waiter: Waiter, target: &Target) -> Result<Lead> {
        let endpoint = target.endpoint(Role::Lead)?;
        let inbox = match waiter {
            Waiter::InboxCli(_) => Some(InboxEndpoint::open(
                &target.path,
                target.thread.as_deref().unwrap_or_default(),
                Role::Lead,
            )?),
            _ => None,
        };
        Ok(Lead { endpoint, inbox })
    }

    fn cursor(&self) -> u64 {
        self.inbox.as_ref().map_or(0, InboxEndpoint::cursor)
    }

    fn post(&mut self, seq: u64) -> Result<()> {
        match self.inbox.as_mut() {
            Some(lead) => lead.post(seq),
            None => self.endpoint.post(seq),
        }
    }
}

/// Starts one per-wait CLI waiter and gives it time to block.
fn start_cli_waiter(
    ctx: &Ctx,
    waiter: Waiter,
    target: &Target,
    cursor: u64,
    rng: &mut Rng,
) -> Result<(ChildGuard, Lines)> {
    let mut cmd = cli_waiter(ctx, waiter, target, cursor, 30);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = ChildGuard::spawn(&mut cmd, &waiter.label())?;
    let lines = child.lines()?;
    std::thread::sleep(CLI_SETTLE + rng.between(Duration::ZERO, Duration::from_millis(10)));
    Ok((child, lines))
}

/// The waiter's line and when it arrived.
fn woke(waiter: Waiter, lines: &Lines) -> Result<(Instant, String)> {
    let timeout = if waiter.system().polls() {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(30)
    };
    let (at, line) = lines.next(timeout)?;
    if let Some(error) = line.strip_prefix("error:") {
        bail!("{}: {}", waiter.label(), error.trim());
    }
    Ok((at, line))
}

/// Every waiter blocked at once with nothing to wake for; CPU ticks used by
/// each over `idle`.
fn idle_cpu(ctx: &Ctx, idle: Duration) -> Result<Vec<(Waiter, u64)>> {
    let mut running = Vec::new();
    for waiter in WAITERS {
        let target = ctx
            .target(waiter.system(), Durability::Normal)
            .prepare_channel()?;
        let child = match waiter {
            Waiter::LongLived(_, role) => spawn_waiter(ctx, &target, role)?.0,
            _ => {
                let cursor = match waiter {
                    Waiter::InboxCli(_) => InboxEndpoint::open(
                        &target.path,
                        target.thread.as_deref().unwrap_or_default(),
                        Role::Lead,
                    )?
                    .cursor(),
                    _ => 0,
                };
                // Long enough to outlast the idle period.
                let mut cmd = cli_waiter(ctx, waiter, &target, cursor, 600);
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                ChildGuard::spawn(&mut cmd, &waiter.label())?
            }
        };
        running.push((waiter, child));
    }
    // Let start-up finish before counting.
    std::thread::sleep(Duration::from_secs(1));
    let before: Vec<u64> = running
        .iter()
        .map(|(_, c)| cpu_nanos(c.pid()))
        .collect::<Result<_>>()?;
    std::thread::sleep(idle);
    let mut out = Vec::new();
    for ((waiter, child), before) in running.iter().zip(before) {
        let after = cpu_nanos(child.pid())?;
        out.push((*waiter, after.saturating_sub(before)));
    }
    Ok(out)
}
