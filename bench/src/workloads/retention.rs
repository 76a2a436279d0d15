//! Workload 9: the database file under retention. One producer and one
//! worker in process run tasks through their whole life (send, claim,
//! done) on a real SQLite file, twice in the same run: with retention off
//! (the default: nothing is ever removed) and with `inbox settings
//! --auto-gc on` and seed 004's limits (5,000 messages; 7 days and 24 hours
//! never pass in a run this short, so the count limit is the one at work).
//! It records the size of the file (and its `-wal`) and the messages held
//! as the tasks go by, and what the automatic steps cost per task. The
//! question it answers: does the file stop growing, and at what price. It
//! must never measure the two runs on one database.

use std::path::Path;
use std::time::Instant;

use anyhow::{Result, anyhow};
use inbox_bench_kit::markdown::Table;
use inbox_engine::wire::{ClaimRequest, FinishRequest, GcRequest, SendRequest, SettingsRequest};
use inbox_engine::{Output, Request};

use super::{check, progress};
use crate::ctx::Ctx;
use crate::fmt::fmt_ratio;
use crate::peers::Durability;
use crate::peers::inbox::{self, LEAD, WORKER, create, engine};
use crate::report::Section;

/// How many times along the run the size is taken.
const POINTS: u64 = 10;

/// One point of a run: after `tasks` tasks, the files' size and the
/// messages held.
struct Point {
    tasks: u64,
    bytes: u64,
    messages: u64,
}

/// One run: its points and its rate.
struct Trace {
    points: Vec<Point>,
    tasks_per_second: f64,
}

/// The size of the database file and its `-wal`.
fn size(db: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", db.display())).ok())
        .map(|m| m.len())
        .sum()
}

/// Runs `tasks` tasks on a new database at `db`, with retention off
/// (`keep_messages` `None`) or on with that limit.
fn trace(db: &Path, tasks: u64, keep_messages: Option<u32>) -> Result<Trace> {
    create(db, Durability::Normal)?;
    let mut engine = engine(db)?;
    if keep_messages.is_some() {
        let settings = SettingsRequest {
            auto_gc: Some(true),
            keep_messages,
            ..SettingsRequest::default()
        };
        inbox::run(&mut engine, Request::Settings(settings))?;
    }
    let every = (tasks / POINTS).max(1);
    let mut points = Vec::new();
    let mut busy = 0.0;
    for i in 0..tasks {
        let begun = Instant::now();
        let send = SendRequest {
            from_agent: Some(LEAD.into()),
            to_agent: Some(WORKER.into()),
            subject: Some(format!("Retention task {i}")),
            body: Some(format!(
                "Task {i}: a task assignment of about the size agents send."
            )),
            ..SendRequest::default()
        };
        let Output::Send(sent) = inbox::run(&mut engine, Request::Send(send))? else {
            return Err(anyhow!("send answered another command"));
        };
        let thread_id = Some(sent.thread.thread.thread_id);
        let claim = ClaimRequest {
            agent: Some(WORKER.into()),
            thread_id: thread_id.clone(),
            ..ClaimRequest::default()
        };
        inbox::run(&mut engine, Request::Claim(claim))?;
        let done = FinishRequest {
            agent: Some(WORKER.into()),
            thread_id,
            summary: Some("Done".into()),
            ..FinishRequest::default()
        };
        inbox::run(&mut engine, Request::Done(done))?;
        busy += begun.elapsed().as_secs_f64();
        if (i + 1) % every == 0 {
            points.push(Point {
                tasks: i + 1,
                bytes: size(db),
                messages: messages(&mut engine)?,
            });
        }
    }
    Ok(Trace {
        points,
        tasks_per_second: tasks as f64 / busy.max(f64::EPSILON),
    })
}

/// Messages held, as `gc --dry-run` counts them (it removes nothing: the
/// limits it is given allow nothing to go).
fn messages(engine: &mut inbox_host_native::NativeEngine) -> Result<u64> {
    let count = GcRequest {
        keep_days: Some(36_500),
        keep_messages: Some(u32::MAX),
        keep_read_hours: Some(876_000),
        dry_run: true,
        limit: None,
    };
    match inbox::run(engine, Request::Gc(count))? {
        Output::Gc(out) => Ok(out.messages_left),
        _ => Err(anyhow!("gc answered another command")),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

/// Runs the workload.
pub(crate) fn run(ctx: &Ctx) -> Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("retention", "9. The database file under retention");
    let tasks: u64 = ctx.size(100_000, 3_000);
    // A quick run is too short to reach seed 004's limit: it uses a tenth.
    let limit: u32 = ctx.size(5_000, 500);
    section.intro.push(format!(
        "**{tasks} tasks through their whole life** (send, claim, done: two messages and \
         three events each), one after another in one process over a SQLite file at normal \
         durability, twice in the same run on databases of their own: retention off (the \
         default) and `inbox settings --auto-gc on` with seed 004's limits (at most {limit} \
         messages; threads idle for 7 days or read and idle for 24 hours also go, which \
         never happens within a run this short, so the count limit is the one at work). \
         Sizes are the database file plus its `-wal`; messages held are counted by `gc \
         --dry-run`; the rate is tasks per second of the loop's own time, the size \
         measurements left out."
    ));
    let dir = ctx.tmp.path();
    progress(&format!("retention: {tasks} tasks, retention off"));
    let off = trace(&dir.join("retention-off.db"), tasks, None)?;
    progress(&format!("retention: {tasks} tasks, auto gc on"));
    let on = trace(&dir.join("retention-on.db"), tasks, Some(limit))?;
    let mut table = Table::new(
        "**Size of the database as tasks go by**, retention off and on, same run.",
        vec![
            "tasks done",
            "size, retention off",
            "size, auto gc on",
            "messages held, off",
            "messages held, on",
        ],
    );
    for (a, b) in off.points.iter().zip(&on.points) {
        table.row(vec![
            a.tasks.to_string(),
            mib(a.bytes),
            mib(b.bytes),
            a.messages.to_string(),
            b.messages.to_string(),
        ]);
    }
    section.tables.push(table);
    let mut rates = Table::new(
        "**What the automatic steps cost**: tasks per second (send, claim and done, in \
         process), and the rate with auto gc against the rate without.",
        vec!["retention", "tasks/s", "÷ off"],
    );
    rates.row(vec![
        "off".into(),
        format!("{:.0}", off.tasks_per_second),
        String::new(),
    ]);
    rates.row(vec![
        "auto gc on".into(),
        format!("{:.0}", on.tasks_per_second),
        fmt_ratio(Some(on.tasks_per_second / off.tasks_per_second)),
    ]);
    section.tables.push(rates);
    let last = |t: &Trace| t.points.last().map_or(0, |p| p.bytes);
    let half = |t: &Trace| {
        let middle = (t.points.len() / 2).saturating_sub(1);
        t.points.get(middle).map_or(0, |p| p.bytes)
    };
    let (end, middle) = (last(&on), half(&on));
    let growth = end as f64 / middle.max(1) as f64;
    section.headlines.push(format!(
        "after {tasks} tasks: {} with retention off, {} with auto gc on ({} held)",
        mib(last(&off)),
        mib(end),
        on.points.last().map_or(0, |p| p.messages),
    ));
    section.checks.push(check(
        "with auto gc on, the file stops growing: its size after all the tasks ≤ 1.1× its size halfway",
        format!("{} halfway, {} at the end ({growth:.2}×)", mib(middle), mib(end)),
        growth <= 1.1,
        "the file still grows with retention on".into(),
    ));
    let held = on.points.last().map_or(0, |p| p.messages);
    section.checks.push(check(
        &format!(
            "with auto gc on, the messages held stay near the limit (≤ {limit} + one step's worth)"
        ),
        format!("{held} messages held"),
        held <= u64::from(limit) + 2 * 32,
        "the automatic steps do not keep up".into(),
    ));
    section.seconds = started.elapsed().as_secs_f64();
    Ok(section)
}
