//! The crash check: many concurrent `inbox` processes of a mixed workload
//! against one database, SIGKILLed at pseudo-random moments, iteration after
//! iteration; after each iteration the database is audited.
//!
//! What must hold after every iteration:
//! - `PRAGMA integrity_check` is ok and `PRAGMA foreign_key_check` is empty;
//! - every command that printed success (exit 0, `"ok":true`) is in the
//!   database: its event, its message (whole, with its artifacts), its
//!   thread; a claim's lease token was issued; a `done`, `fail` or `cancel`
//!   left its thread in that status; a `show --mark-read` moved the cursor;
//! - the invariants of [`crate::db::check_state`] (at most one live lease per
//!   thread and only on an active thread, event ids 1..=max without gaps,
//!   every message and event has its thread, ...);
//! - the history checks of [`crate::db::check_history`] against the previous
//!   iteration (finished threads byte-identical, events append-only, ...);
//! - no process that was not killed failed with exit 50 or printed
//!   `database is locked`, and each printed exactly one JSON object;
//! - `inbox list` still answers.
//!
//! This module must never repair or reset the database between iterations:
//! the point is that damage, if any, accumulates where the audit sees it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::db::{self, Snapshot, ThreadRow};
use crate::failure::{Failure, Workdir};
use crate::process::{Inbox, Outcome};
use crate::rng::Rng;

const CHECK: &str = "crash";

/// How much crashing to do.
#[derive(Clone, Debug)]
pub struct CrashConfig {
    /// Iterations (each: a batch of concurrent processes, then an audit).
    pub iterations: usize,
    /// Stop after this long even if iterations remain.
    pub max_duration: Option<Duration>,
    /// Processes started at once in each iteration.
    pub processes: usize,
    /// The share of processes that get a SIGKILL, in percent.
    pub kill_percent: u64,
    /// The seed of every choice.
    pub seed: u64,
    /// Where to make the scratch folder (the system's temporary folder if `None`).
    pub work_dir: Option<PathBuf>,
}

impl CrashConfig {
    /// The bounded run CI does: 300 iterations of 6 processes, about 20 s.
    pub fn short(seed: u64) -> CrashConfig {
        CrashConfig {
            iterations: 300,
            max_duration: None,
            processes: 6,
            kill_percent: 50,
            seed,
            work_dir: None,
        }
    }

    /// The run on demand: thousands of iterations.
    pub fn long(seed: u64) -> CrashConfig {
        CrashConfig {
            iterations: 3000,
            ..CrashConfig::short(seed)
        }
    }
}

/// What a crash run did.
#[derive(Clone, Debug, Default)]
pub struct CrashReport {
    /// Iterations run (each audited).
    pub iterations: usize,
    /// Processes started.
    pub processes: usize,
    /// Processes a SIGKILL ended.
    pub killed: usize,
    /// Processes that exited 0 with `"ok":true`.
    pub acknowledged: usize,
    /// Processes killed after printing `"ok":true` (verified like the
    /// acknowledged ones).
    pub printed_then_killed: usize,
    /// Acknowledged writes whose effect was found in the database.
    pub writes_verified: usize,
    /// Outcomes of the processes that were not killed: `0`, `10`, or the
    /// exit code and error code (`20 lease_conflict`).
    pub exits: BTreeMap<String, usize>,
    /// Threads in the database at the end.
    pub threads: usize,
    /// Events in the database at the end.
    pub events: i64,
    /// Kills land this long after a process starts, at most.
    pub kill_window: Duration,
    /// Wall time.
    pub elapsed: Duration,
}

impl std::fmt::Display for CrashReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let exits: Vec<String> = self
            .exits
            .iter()
            .map(|(code, n)| format!("{n}× {code}"))
            .collect();
        write!(
            f,
            "crash: ok: {} iterations, {} processes, {} killed (SIGKILL within {:?} of start; {} of \
             them after printing success), {} acknowledged, {} acknowledged writes verified in the \
             database; outcomes of the others: {}; database at the end: {} threads, {} events; {:.1?}",
            self.iterations,
            self.processes,
            self.killed,
            self.kill_window,
            self.printed_then_killed,
            self.acknowledged,
            self.writes_verified,
            exits.join(", "),
            self.threads,
            self.events,
            self.elapsed
        )
    }
}

/// Runs the crash check in a scratch folder (kept, and named in the
/// failure, if the check fails).
pub fn run(inbox: &Inbox, config: &CrashConfig) -> Result<CrashReport, Failure> {
    Workdir::create(config.work_dir.as_deref(), CHECK, config.seed)?
        .run(|dir| run_in(inbox, config, dir))
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn run_in(inbox: &Inbox, config: &CrashConfig, dir: &Path) -> Result<CrashReport, Failure> {
    let started = Instant::now();
    let db_path = dir.join("coord.db");
    let on_db = |f: Failure| f.on(&db_path);
    let init = inbox.run(CHECK, &db_path, &args(&["init"]))?;
    if init.code != Some(0) {
        return Err(on_db(Failure::harness(
            CHECK,
            format!("init failed:\n{init}"),
        )));
    }
    let artifact = dir.join("artifact.txt");
    std::fs::write(&artifact, "an artifact the workload attaches\n").map_err(|e| {
        Failure::harness(CHECK, format!("cannot write {}: {e}", artifact.display()))
    })?;
    let artifact = artifact.display().to_string();

    let mut report = CrashReport {
        kill_window: calibrate(inbox, &db_path, dir, config.processes)?,
        ..CrashReport::default()
    };
    let mut rng = Rng::new(config.seed);
    let mut previous = Snapshot::default();
    let mut durability_full = false;

    for iteration in 0..config.iterations {
        if config.max_duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        // Now and then switch durability: both settings must survive kills.
        if iteration % 50 == 49 {
            durability_full = !durability_full;
            let level = if durability_full { "full" } else { "normal" };
            let init = inbox.run(CHECK, &db_path, &args(&["init", "--durability", level]))?;
            if init.code != Some(0) {
                return Err(on_db(Failure::violation(
                    CHECK,
                    "init --durability works on a database that survived kills",
                    init.to_string(),
                )));
            }
        }

        let plans = plan(&mut rng, &previous, iteration, config.processes, &artifact);
        let outcomes = run_batch(
            inbox,
            &db_path,
            dir,
            &plans,
            config,
            &mut rng,
            report.kill_window,
        )?;

        let conn = db::open_read_only(&db_path).map_err(|e| on_db(Failure::harness(CHECK, e)))?;
        let mut violations = db::check_storage(&conn);
        let now = db::now_text();
        let snapshot = Snapshot::read(&conn).map_err(|e| {
            on_db(Failure::violation(
                CHECK,
                "the database can be read after kills",
                e,
            ))
        })?;
        drop(conn);
        violations.extend(db::check_state(&snapshot, &now));
        violations.extend(db::check_history(&previous, &snapshot));
        if let Some(v) = violations.first() {
            let all: Vec<String> = violations
                .iter()
                .map(|v| format!("{}: {}", v.invariant, v.detail))
                .collect();
            return Err(on_db(Failure::violation(
                CHECK,
                v.invariant,
                format!(
                    "after iteration {iteration} (seed {}):\n{}\nthe iteration's processes:\n{}",
                    config.seed,
                    all.join("\n"),
                    describe(&outcomes)
                ),
            )));
        }

        for outcome in &outcomes {
            report.processes += 1;
            if outcome.killed() {
                report.killed += 1;
                // Killed after printing success: an agent reading its stdout
                // was told it happened, so it must have.
                let printed_ok = outcome
                    .json()
                    .filter(|j| j.get("ok") == Some(&Value::Bool(true)));
                if let Some(json) = printed_ok {
                    report.printed_then_killed += 1;
                    let write = verify_acknowledged(outcome, &json, &snapshot).map_err(|detail| {
                        on_db(Failure::violation(
                            CHECK,
                            "every command that printed success is in the database",
                            format!(
                                "iteration {iteration} (seed {}), killed after printing: {detail}\n{outcome}",
                                config.seed
                            ),
                        ))
                    })?;
                    report.writes_verified += usize::from(write);
                }
                continue;
            }
            let code = outcome.code.unwrap_or(-1);
            let json = check_contract(outcome).map_err(|f| {
                on_db(f.context(&format!("iteration {iteration} (seed {})", config.seed)))
            })?;
            let key = match outcome.error_code() {
                Some(error) => format!("{code} {error}"),
                None => code.to_string(),
            };
            *report.exits.entry(key).or_insert(0) += 1;
            if code == 0 {
                report.acknowledged += 1;
                match verify_acknowledged(outcome, &json, &snapshot) {
                    Ok(true) => report.writes_verified += 1,
                    Ok(false) => {}
                    Err(detail) => {
                        return Err(on_db(Failure::violation(
                            CHECK,
                            "every command that printed success is in the database",
                            format!(
                                "iteration {iteration} (seed {}): {detail}\n{outcome}",
                                config.seed
                            ),
                        )));
                    }
                }
            }
        }

        let list = inbox.run(CHECK, &db_path, &args(&["list", "--limit", "1000"]))?;
        let listed = list
            .json()
            .and_then(|j| j.get("threads").and_then(Value::as_array).map(Vec::len));
        if list.code != Some(0) || listed != Some(snapshot.threads.len().min(1000)) {
            return Err(on_db(Failure::violation(
                CHECK,
                "the database still serves commands after kills",
                format!(
                    "after iteration {iteration}: {} threads in the file, but:\n{list}",
                    snapshot.threads.len()
                ),
            )));
        }
        report.iterations += 1;
        previous = snapshot;
    }
    report.threads = previous.threads.len();
    report.events = previous.max_event_id();
    report.elapsed = started.elapsed();
    Ok(report)
}

/// How long a batch of concurrent processes lives here: kills are spread
/// over that window, so they land in every phase of a process's life
/// (start-up, opening the file, the transaction, the commit, printing).
fn calibrate(inbox: &Inbox, db: &Path, dir: &Path, processes: usize) -> Result<Duration, Failure> {
    let mut lives = Vec::new();
    for round in 0..3 {
        let mut running = Vec::new();
        for i in 0..processes.max(1) {
            let args = args(&[
                "send",
                "--from",
                "lead",
                "--to",
                "w1",
                "--subject",
                "warm-up",
            ]);
            running.push(Some(inbox.spawn(
                CHECK,
                db,
                &args,
                dir,
                &format!("warm{round}-{i}"),
                Stdio::null(),
            )?));
        }
        // Poll them all, so that each life is measured to its exit and not
        // to when this loop got round to it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while running.iter().any(Option::is_some) && Instant::now() < deadline {
            for slot in &mut running {
                let exited = slot
                    .as_mut()
                    .is_some_and(|p| matches!(p.child.try_wait(), Ok(Some(_))));
                if exited && let Some(process) = slot.take() {
                    let life = process.started.elapsed();
                    let outcome = process.finish(CHECK)?;
                    if outcome.code != Some(0) {
                        return Err(Failure::harness(
                            CHECK,
                            format!("warm-up send failed:\n{outcome}"),
                        )
                        .on(db));
                    }
                    lives.push(life);
                }
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if let Some(process) = running.into_iter().flatten().next() {
            return Err(Failure::harness(
                CHECK,
                format!("a warm-up send never ended: {:?}", process.args),
            )
            .on(db));
        }
    }
    lives.sort();
    let median = lives.get(lives.len() / 2).copied().unwrap_or_default();
    Ok((median * 3 / 2).max(Duration::from_millis(1)))
}

/// Starts every planned process at once (one thread each, released by a
/// barrier, so that they really overlap), kills the chosen ones at their
/// moment, and waits for all of them.
fn run_batch(
    inbox: &Inbox,
    db: &Path,
    dir: &Path,
    plans: &[Vec<String>],
    config: &CrashConfig,
    rng: &mut Rng,
    window: Duration,
) -> Result<Vec<Outcome>, Failure> {
    let delays: Vec<Option<Duration>> = plans
        .iter()
        .map(|_| {
            rng.percent(config.kill_percent)
                .then(|| Duration::from_micros(rng.below(window.as_micros() as u64 + 1)))
        })
        .collect();
    let barrier = Barrier::new(plans.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .zip(&delays)
            .enumerate()
            .map(|(i, (args, delay))| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let mut process =
                        inbox.spawn(CHECK, db, args, dir, &format!("p{i}"), Stdio::null())?;
                    if let Some(delay) = delay {
                        let at = process.started + *delay;
                        let now = Instant::now();
                        if at > now {
                            std::thread::sleep(at - now);
                        }
                        process.kill();
                    }
                    process.finish_within(CHECK, Duration::from_secs(60))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure::harness(CHECK, "a process thread panicked")))
            })
            .collect()
    })
}

fn describe(outcomes: &[Outcome]) -> String {
    outcomes.iter().map(|o| format!("{o}\n")).collect()
}

/// A process that was not killed kept the contract: one JSON object on
/// stdout, an exit code of the table, never exit 50 or `database is locked`.
fn check_contract(outcome: &Outcome) -> Result<Value, Failure> {
    if outcome.storage_trouble() {
        return Err(Failure::violation(
            CHECK,
            "no command fails with a storage error (exit 50) or `database is locked`",
            outcome.to_string(),
        ));
    }
    let Some(json) = outcome.json() else {
        return Err(Failure::violation(
            CHECK,
            "every command prints exactly one JSON object with --json",
            outcome.to_string(),
        ));
    };
    let ok = json.get("ok").and_then(Value::as_bool).unwrap_or(false);
    let expected_ok = matches!(outcome.code, Some(0 | 10));
    let has_error = json
        .pointer("/error/code")
        .and_then(Value::as_str)
        .is_some();
    if !matches!(outcome.code, Some(0 | 10 | 20 | 30 | 40)) || ok != expected_ok || ok == has_error
    {
        return Err(Failure::violation(
            CHECK,
            "exit codes and `ok` agree with the contract",
            outcome.to_string(),
        ));
    }
    Ok(json)
}

fn text<'a>(json: &'a Value, pointer: &str) -> Option<&'a str> {
    json.pointer(pointer).and_then(Value::as_str)
}

/// Checks that an acknowledged command's effect is in `snapshot`. Returns
/// whether it was a write (and so was checked).
fn verify_acknowledged(
    outcome: &Outcome,
    json: &Value,
    snapshot: &Snapshot,
) -> Result<bool, String> {
    let command = outcome.command();
    let has = |flag: &str| outcome.args.iter().any(|a| a == flag);
    // What the table says only reads (or waits) left nothing to check.
    let effect = inbox_engine::Command::parse(command).map(inbox_engine::Command::effect);
    if effect != Some(inbox_engine::Effect::Write) && !(command == "show" && has("--mark-read")) {
        return Ok(false);
    }
    let expected_events: &[&str] = match command {
        "show" => return verify_cursor(json, snapshot),
        "send" if has("--thread") => &["message_sent", "question_answered"],
        "send" => &["thread_created"],
        "claim" => &["thread_claimed"],
        "renew" => &["lease_renewed"],
        "update" => &["progress_reported", "thread_blocked"],
        "reply" => &["message_sent", "question_answered"],
        "done" => &["thread_completed"],
        "fail" => &["thread_failed"],
        "cancel" => &["thread_cancelled"],
        other => return Err(format!("the harness does not know `{other}`")),
    };
    let event_id = json
        .get("event_id")
        .and_then(Value::as_i64)
        .ok_or("no event_id in the output")?;
    let thread_id = text(json, "/thread/thread_id").ok_or("no thread in the output")?;
    let status = text(json, "/thread/status").ok_or("no thread status in the output")?;
    let event = snapshot
        .event(event_id)
        .ok_or_else(|| format!("event {event_id} is missing"))?;
    if event.thread_id != thread_id
        || !expected_events.contains(&event.event_type.as_str())
        || event.status != status
    {
        return Err(format!(
            "event {event_id} should be one of {expected_events:?} on {thread_id} leaving it {status}; it is {event:?}"
        ));
    }
    if let Some(message) = json.get("message").filter(|m| !m.is_null()) {
        let row = snapshot
            .messages
            .get(&event_id)
            .ok_or_else(|| format!("the message of event {event_id} is missing"))?;
        let same = Some(row.message_id.as_str()) == text(message, "/message_id")
            && Some(row.thread_id.as_str()) == text(message, "/thread_id")
            && Some(row.kind.as_str()) == text(message, "/kind")
            && Some(row.summary.as_str()) == text(message, "/summary")
            && Some(row.body.as_str()) == text(message, "/body")
            && Some(row.from_agent.as_str()) == text(message, "/from_agent");
        if !same {
            return Err(format!("message differs: stored {row:?}"));
        }
        let artifacts = message
            .get("artifacts")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let stored = snapshot
            .artifacts
            .values()
            .filter(|a| a.message_id == row.message_id)
            .count();
        if artifacts != stored {
            return Err(format!(
                "message {} was acknowledged with {artifacts} artifacts; {stored} are stored",
                row.message_id
            ));
        }
    }
    let thread: &ThreadRow = snapshot
        .threads
        .get(thread_id)
        .ok_or_else(|| format!("thread {thread_id} is missing"))?;
    if command == "send" && !has("--thread") {
        let same = Some(thread.subject.as_str()) == text(json, "/thread/subject")
            && Some(thread.assigned_to.as_str()) == text(json, "/thread/assigned_to")
            && Some(thread.created_by.as_str()) == text(json, "/thread/created_by");
        if !same {
            return Err(format!("thread differs: stored {thread:?}"));
        }
    }
    if matches!(command, "claim" | "renew") {
        let token = json
            .pointer("/lease/lease_token")
            .and_then(Value::as_i64)
            .ok_or("no lease token in the output")?;
        let lease = snapshot
            .leases
            .get(thread_id)
            .ok_or_else(|| format!("no lease row for {thread_id}"))?;
        if lease.lease_token < token
            || (command == "claim"
                && lease.lease_token == token
                && Some(lease.claimed_at.as_str()) != text(json, "/lease/claimed_at"))
        {
            return Err(format!(
                "acknowledged lease token {token}; stored {lease:?}"
            ));
        }
    }
    if matches!(command, "done" | "fail" | "cancel") && thread.status != status {
        return Err(format!(
            "acknowledged `{command}` left {thread_id} {status}; it is stored {}",
            thread.status
        ));
    }
    Ok(true)
}

fn verify_cursor(json: &Value, snapshot: &Snapshot) -> Result<bool, String> {
    let Some(cursor) = json.get("read_cursor").filter(|c| !c.is_null()) else {
        return Ok(false);
    };
    let key = (
        text(cursor, "/thread_id").unwrap_or_default().to_owned(),
        text(cursor, "/agent").unwrap_or_default().to_owned(),
    );
    let event = cursor
        .get("last_read_event_id")
        .and_then(Value::as_i64)
        .unwrap_or(i64::MAX);
    match snapshot.reads.get(&key) {
        Some(stored) if stored.last_read_event_id >= event => Ok(true),
        other => Err(format!(
            "read cursor {key:?} acknowledged at event {event}; stored {other:?}"
        )),
    }
}

/// The mixed workload of one iteration: `n` commands, mostly about a couple
/// of "hot" threads so that they race, built from what the database held
/// after the previous iteration.
fn plan(
    rng: &mut Rng,
    model: &Snapshot,
    iteration: usize,
    n: usize,
    artifact: &str,
) -> Vec<Vec<String>> {
    let open: Vec<&ThreadRow> = model
        .threads
        .values()
        .filter(|t| !t.is_terminal())
        .collect();
    let all: Vec<&ThreadRow> = model.threads.values().collect();
    let hot: Vec<&ThreadRow> = (0..2).filter_map(|_| rng.pick(&open).copied()).collect();
    let mut out = Vec::with_capacity(n);
    for slot in 0..n {
        let target = if rng.percent(80) {
            rng.pick(&hot)
        } else {
            rng.pick(&all)
        }
        .copied();
        out.push(command(rng, model, target, iteration, slot, artifact));
    }
    out
}

#[derive(Clone, Copy)]
enum Op {
    SendNew,
    SendInto,
    Claim,
    Update,
    Reply,
    Renew,
    Done,
    Fail,
    Cancel,
    ShowMarkRead,
    Fetch,
    List,
    Wait,
}

const OPS: &[(Op, u64)] = &[
    (Op::SendNew, 3),
    (Op::SendInto, 1),
    (Op::Claim, 4),
    (Op::Update, 2),
    (Op::Reply, 2),
    (Op::Renew, 1),
    (Op::Done, 2),
    (Op::Fail, 1),
    (Op::Cancel, 1),
    (Op::ShowMarkRead, 1),
    (Op::Fetch, 1),
    (Op::List, 1),
    (Op::Wait, 1),
];

fn command(
    rng: &mut Rng,
    model: &Snapshot,
    target: Option<&ThreadRow>,
    iteration: usize,
    slot: usize,
    artifact: &str,
) -> Vec<String> {
    let weights: Vec<u64> = OPS.iter().map(|(_, w)| *w).collect();
    let op = OPS
        .get(rng.weighted(&weights))
        .map_or(Op::SendNew, |(op, _)| *op);
    let worker = if rng.percent(50) { "w1" } else { "w2" };
    let label = format!("crash {iteration}.{slot}");
    let Some(thread) = target else {
        return send_new(rng, worker, &label, artifact);
    };
    // Holder commands on a thread nobody holds are mostly refused
    // (invalid_state); turn most of them into the claim a worker would make.
    let holder_op = matches!(op, Op::Update | Op::Renew | Op::Done | Op::Fail);
    let op = if holder_op && thread.status == "pending" && rng.percent(60) {
        Op::Claim
    } else {
        op
    };
    let id = thread.thread_id.clone();
    let holder = thread.assigned_to.clone();
    let current = model.leases.get(&id).map_or(0, |l| l.lease_token);
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
    let token = |rng: &mut Rng| -> Vec<String> {
        match rng.below(100) {
            0..70 => vec!["--lease-token".into(), current.max(1).to_string()],
            70..85 => Vec::new(),
            _ => vec!["--lease-token".into(), (current - 1).max(1).to_string()],
        }
    };
    match op {
        Op::SendNew => return send_new(rng, worker, &label, artifact),
        Op::SendInto => {
            let kind = rng
                .pick(&["question", "control", "event", "answer", "progress"])
                .copied()
                .unwrap_or("event");
            push(&[
                "send",
                "--from",
                "lead",
                "--thread",
                &id,
                "--kind",
                kind,
                "--summary",
                &label,
            ]);
        }
        Op::Claim => {
            let seconds = rng.pick(&["1", "2", "60", "600"]).copied().unwrap_or("60");
            push(&[
                "claim",
                "--agent",
                &holder,
                "--thread",
                &id,
                "--lease-seconds",
                seconds,
            ]);
        }
        Op::Update => {
            push(&[
                "update",
                "--agent",
                &holder,
                "--thread",
                &id,
                "--summary",
                &label,
            ]);
            match rng.below(3) {
                0 => push(&["--status", "in_progress"]),
                1 => push(&["--status", "blocked"]),
                _ => {}
            }
            a.extend(token(rng));
        }
        Op::Reply => {
            if rng.percent(60) {
                push(&[
                    "reply",
                    "--from",
                    "lead",
                    "--thread",
                    &id,
                    "--kind",
                    "answer",
                    "--summary",
                    &label,
                ]);
            } else {
                let kind = if rng.percent(50) {
                    "progress"
                } else {
                    "question"
                };
                push(&[
                    "reply",
                    "--from",
                    &holder,
                    "--thread",
                    &id,
                    "--kind",
                    kind,
                    "--summary",
                    &label,
                ]);
                a.extend(token(rng));
            }
        }
        Op::Renew => {
            push(&["renew", "--agent", &holder, "--thread", &id]);
            if rng.percent(50) {
                push(&["--lease-seconds", "30"]);
            }
            a.extend(token(rng));
        }
        Op::Done | Op::Fail => {
            let name = if matches!(op, Op::Done) {
                "done"
            } else {
                "fail"
            };
            push(&[
                name,
                "--agent",
                &holder,
                "--thread",
                &id,
                "--summary",
                &label,
            ]);
            if rng.percent(30) {
                push(&["--artifact", artifact, "--artifact-kind", "log"]);
            }
            if rng.percent(30) {
                push(&["--body", "the details\nover two lines"]);
            }
            a.extend(token(rng));
        }
        Op::Cancel => push(&[
            "cancel", "--agent", "lead", "--thread", &id, "--reason", &label,
        ]),
        Op::ShowMarkRead => {
            let reader = if rng.percent(50) {
                "lead"
            } else {
                holder.as_str()
            };
            push(&["show", "--agent", reader, "--thread", &id, "--mark-read"]);
        }
        Op::Fetch => {
            push(&["fetch", "--agent", &holder]);
            if rng.percent(30) {
                push(&["--status", "pending,blocked"]);
            }
            if rng.percent(30) {
                push(&["--unread"]);
            }
        }
        Op::List => push(&["list", "--limit", "20"]),
        Op::Wait => {
            if rng.percent(50) {
                push(&[
                    "wait-reply",
                    "--agent",
                    &holder,
                    "--thread",
                    &id,
                    "--timeout-seconds",
                    "0",
                ]);
            } else {
                push(&[
                    "watch",
                    "--agent",
                    "lead",
                    "--after-event",
                    "0",
                    "--limit",
                    "5",
                    "--timeout-seconds",
                    "0",
                ]);
            }
        }
    }
    a
}

fn send_new(rng: &mut Rng, worker: &str, label: &str, artifact: &str) -> Vec<String> {
    let attempts = (1 + rng.below(3)).to_string();
    let mut a = args(&[
        "send",
        "--from",
        "lead",
        "--to",
        worker,
        "--subject",
        label,
        "--max-attempts",
        &attempts,
    ]);
    if rng.percent(30) {
        let priority = if rng.percent(50) { "high" } else { "low" };
        a.extend(args(&["--priority", priority]));
    }
    if rng.percent(30) {
        a.extend(args(&[
            "--body",
            "A task body.\nIt has two lines and some unicode: ünïcødé ✓",
        ]));
    }
    if rng.percent(30) {
        a.extend(args(&["--payload-json", r#"{"step":1,"tags":["a","b"]}"#]));
    }
    if rng.percent(20) {
        a.extend(args(&["--artifact", artifact, "--artifact-kind", "spec"]));
    }
    a
}
