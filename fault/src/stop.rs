//! The stop check: workers frozen with SIGSTOP past their lease, and leases
//! left to run out, on the real clock.
//!
//! - **A frozen worker is fenced off.** A worker claims with a short lease
//!   and, like a real agent, has two processes about the thread: a
//!   `wait-reply` keeping its lease alive and a stale-token command (a `done`,
//!   `fail`, `update`, `renew` or `reply` chosen by the seed) that reads its
//!   body from stdin, so it is certainly frozen *before* it writes (the
//!   waiter names its lease token in some rounds and not in others: it keeps
//!   alive the lease it held when it began either way). Both are
//!   SIGSTOPped; the lease runs out; a second worker process reclaims (token
//!   2). Resumed, the frozen ones must get `lease_lost` (exit 20) and change
//!   nothing: the second worker's lease is untouched and its `done` wins.
//! - **The last attempt dead-letters.** With `--max-attempts 2`, two claims
//!   whose 1 s leases run out leave the thread `failed`, with a `result`
//!   message from `inbox` whose payload says `lease_expired`; reads show it
//!   at once, and any later claim or holder command gets `thread_finished`.
//! - **A writer stuck holding the write lock** (modelled by a connection of
//!   this harness holding `BEGIN IMMEDIATE`, as a writer SIGSTOPped inside its
//!   transaction would) does not stop readers; writers wait, then give up
//!   with `storage_busy` (exit 50) instead of hanging, having changed
//!   nothing; once the lock is released everything proceeds.
//!
//! This module must never use `INBOX_NOW`: leases run out on the real clock.

use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::db::{self, Snapshot};
use crate::failure::{Failure, Workdir};
use crate::process::{self, Inbox, Outcome};
use crate::rng::Rng;

const CHECK: &str = "stop";

/// How many rounds of each stop scenario to run.
#[derive(Clone, Debug)]
pub struct StopConfig {
    /// Rounds of the frozen-worker and dead-letter scenarios.
    pub rounds: usize,
    /// Whether to run the stuck-writer scenario (it takes the busy budget,
    /// about 10 s).
    pub stuck_writer: bool,
    /// The seed of every choice.
    pub seed: u64,
    /// Where to make scratch folders.
    pub work_dir: Option<std::path::PathBuf>,
}

impl StopConfig {
    /// The bounded run CI does.
    pub fn short(seed: u64) -> StopConfig {
        StopConfig {
            rounds: 2,
            stuck_writer: true,
            seed,
            work_dir: None,
        }
    }

    /// The run on demand.
    pub fn long(seed: u64) -> StopConfig {
        StopConfig {
            rounds: 10,
            ..StopConfig::short(seed)
        }
    }
}

/// What a stop run did.
#[derive(Clone, Debug, Default)]
pub struct StopReport {
    /// Frozen workers resumed after a reclaim, each fenced off.
    pub fenced: Vec<String>,
    /// Threads dead-lettered by lease expiry on their last attempt.
    pub dead_lettered: usize,
    /// Writers that gave up with `storage_busy` behind a stuck writer, and
    /// how long they waited.
    pub busy_writers: Vec<Duration>,
    /// Wall time.
    pub elapsed: Duration,
}

impl std::fmt::Display for StopReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stop: ok: {} frozen workers resumed after a reclaim were fenced off with lease_lost ({}); \
             {} threads dead-lettered on their last attempt; {} writers behind a stuck write lock \
             gave up with storage_busy after {:?}; {:.1?}",
            self.fenced.len(),
            self.fenced.join(", "),
            self.dead_lettered,
            self.busy_writers.len(),
            self.busy_writers,
            self.elapsed
        )
    }
}

/// Runs every stop scenario.
pub fn run(inbox: &Inbox, config: &StopConfig) -> Result<StopReport, Failure> {
    let started = Instant::now();
    let mut rng = Rng::new(config.seed);
    let mut report = StopReport::default();
    for round in 0..config.rounds {
        let command =
            FENCED_COMMANDS[(rng.index(FENCED_COMMANDS.len()) + round) % FENCED_COMMANDS.len()];
        let lease = 1 + rng.below(2);
        let dir = Workdir::create(config.work_dir.as_deref(), "stop-fenced", config.seed)?;
        let token = if round % 2 == 0 {
            WaiterToken::Omitted
        } else {
            WaiterToken::Given
        };
        dir.run(|dir| frozen_worker_is_fenced(inbox, dir, command, lease, token))?;
        report.fenced.push(command.to_owned());
        let dir = Workdir::create(config.work_dir.as_deref(), "stop-dead-letter", config.seed)?;
        dir.run(|dir| last_attempt_dead_letters(inbox, dir))?;
        report.dead_lettered += 1;
    }
    if config.stuck_writer {
        let dir = Workdir::create(config.work_dir.as_deref(), "stop-stuck-writer", config.seed)?;
        report.busy_writers = dir.run(|dir| stuck_writer_times_out(inbox, dir))?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Whether the frozen worker's `wait-reply` names its lease token. Without
/// one, the waiter must still keep alive only the lease it held when it
/// began (its token), never a later claim under the same agent name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaiterToken {
    /// `--lease-token 1`.
    Given,
    /// No `--lease-token`: the agent name alone.
    Omitted,
}

/// The stale-token commands a frozen worker may have been about to run.
pub const FENCED_COMMANDS: &[&str] = &["done", "fail", "update", "renew", "reply"];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs `args` and insists on `code` (and, for failures, `error`).
fn expect(
    inbox: &Inbox,
    db: &Path,
    args: &[&str],
    code: i32,
    error: Option<&str>,
    invariant: &str,
) -> Result<Value, Failure> {
    let outcome = inbox.run(CHECK, db, &strings(args))?;
    expect_outcome(&outcome, code, error, invariant).map_err(|f| f.on(db))
}

fn expect_outcome(
    outcome: &Outcome,
    code: i32,
    error: Option<&str>,
    invariant: &str,
) -> Result<Value, Failure> {
    let json = outcome.json();
    let got_error = outcome.error_code();
    if outcome.code != Some(code) || got_error.as_deref() != error || json.is_none() {
        let wanted = error.map_or(String::new(), |e| format!(" ({e})"));
        return Err(Failure::violation(
            CHECK,
            invariant,
            format!("expected exit {code}{wanted}, got:\n{outcome}"),
        ));
    }
    Ok(json.unwrap_or_default())
}

fn init_with_thread(inbox: &Inbox, db: &Path, max_attempts: u32) -> Result<String, Failure> {
    expect(inbox, db, &["init"], 0, None, "init works")?;
    let sent = expect(
        inbox,
        db,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Frozen work",
            "--max-attempts",
            &max_attempts.to_string(),
        ],
        0,
        None,
        "send works",
    )?;
    sent.pointer("/thread/thread_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Failure::harness(CHECK, format!("send printed no thread id: {sent}")))
}

fn claim(inbox: &Inbox, db: &Path, thread: &str, seconds: u64) -> Result<Value, Failure> {
    expect(
        inbox,
        db,
        &[
            "claim",
            "--agent",
            "worker",
            "--thread",
            thread,
            "--lease-seconds",
            &seconds.to_string(),
        ],
        0,
        None,
        "a thread whose lease ran out can be claimed again",
    )
}

/// Polls `fetch` until `thread` is claimable again (its lease ran out).
fn wait_until_claimable(
    inbox: &Inbox,
    db: &Path,
    thread: &str,
    limit: Duration,
) -> Result<(), Failure> {
    let deadline = Instant::now() + limit;
    loop {
        let fetched = inbox.run(
            CHECK,
            db,
            &strings(&["fetch", "--agent", "worker", "--status", "pending,blocked"]),
        )?;
        let listed = fetched
            .json()
            .and_then(|j| j.get("threads").cloned())
            .and_then(|t| t.as_array().cloned())
            .is_some_and(|threads| threads.iter().any(|t| t["thread_id"] == thread));
        if listed {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::violation(
                CHECK,
                "a lease nobody renews runs out on time",
                format!("{thread} is still not claimable after {limit:?}:\n{fetched}"),
            )
            .on(db));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn audit(db: &Path) -> Result<Snapshot, Failure> {
    let (snapshot, violations) = db::audit(db).map_err(|e| Failure::harness(CHECK, e).on(db))?;
    if let Some(v) = violations.first() {
        return Err(Failure::violation(CHECK, v.invariant, v.detail.clone()).on(db));
    }
    Ok(snapshot)
}

/// A worker frozen past its `lease`-second lease, with a waiter and a
/// stale-token `command` pending, is fenced off once another process has
/// reclaimed the thread; the new holder's `done` wins. Runs in `dir`.
pub fn frozen_worker_is_fenced(
    inbox: &Inbox,
    dir: &Path,
    command: &str,
    lease: u64,
    waiter_token: WaiterToken,
) -> Result<(), Failure> {
    let db = dir.join("coord.db");
    let thread = init_with_thread(inbox, &db, 3)?;
    let first = claim(inbox, &db, &thread, lease)?;
    if first.pointer("/lease/lease_token") != Some(&Value::from(1)) {
        return Err(Failure::harness(CHECK, format!("first claim: {first}")).on(&db));
    }

    // The frozen worker's two processes: a waiter keeping the lease alive,
    // and a command with its token that is blocked reading its body.
    let mut waiter_args = strings(&[
        "wait-reply",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--timeout-seconds",
        "60",
    ]);
    if waiter_token == WaiterToken::Given {
        waiter_args.extend(strings(&["--lease-token", "1"]));
    }
    let waiter = inbox.spawn(CHECK, &db, &waiter_args, dir, "waiter", Stdio::null())?;
    let mut stale_args = strings(&[
        command,
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--lease-token",
        "1",
    ]);
    match command {
        "renew" => {}
        "reply" => stale_args.extend(strings(&[
            "--kind",
            "progress",
            "--summary",
            "frozen worker's reply",
            "--body-file",
            "-",
        ])),
        "update" => stale_args.extend(strings(&[
            "--status",
            "in_progress",
            "--summary",
            "frozen worker's update",
            "--body-file",
            "-",
        ])),
        _ => stale_args.extend(strings(&[
            "--summary",
            "frozen worker's result",
            "--body-file",
            "-",
        ])),
    }
    // A command with a body is frozen while it waits for that body on stdin
    // (it has started and parsed its arguments, but not opened the
    // database); a renew, which reads nothing, is frozen before it starts.
    let mut stale = if command == "renew" {
        inbox.spawn_frozen(CHECK, &db, &stale_args, dir, "stale")?
    } else {
        let running = inbox.spawn(CHECK, &db, &stale_args, dir, "stale", Stdio::piped())?;
        process::signal(CHECK, running.pid(), "STOP")?;
        running
    };
    std::thread::sleep(Duration::from_millis(200));
    process::signal(CHECK, waiter.pid(), "STOP")?;
    for (name, pid) in [("waiter", waiter.pid()), ("stale", stale.pid())] {
        if !process::wait_stopped(pid, Duration::from_secs(5)) {
            return Err(
                Failure::harness(CHECK, format!("the {name} process {pid} did not stop")).on(&db),
            );
        }
    }
    if let Some(mut stdin) = stale.child.stdin.take() {
        stdin
            .write_all(b"Written before the freeze; must never land.\n")
            .map_err(|e| Failure::harness(CHECK, format!("cannot feed the frozen process: {e}")))?;
    }

    // While they are frozen, the lease runs out and another worker process
    // (the same agent name: only the token tells them apart) takes over.
    wait_until_claimable(inbox, &db, &thread, Duration::from_secs(lease + 10))?;
    let second = claim(inbox, &db, &thread, 600)?;
    if second.pointer("/lease/lease_token") != Some(&Value::from(2)) {
        return Err(Failure::violation(
            CHECK,
            "each claim issues the next lease token",
            format!("the reclaim after expiry returned {second}"),
        )
        .on(&db));
    }
    let lease_before = audit(&db)?.leases.get(&thread).cloned();

    process::signal(CHECK, waiter.pid(), "CONT")?;
    process::signal(CHECK, stale.pid(), "CONT")?;
    let waited = waiter
        .finish_within(CHECK, Duration::from_secs(30))
        .map_err(|f| f.on(&db))?;
    let late = stale
        .finish_within(CHECK, Duration::from_secs(30))
        .map_err(|f| f.on(&db))?;
    let fenced =
        "a worker frozen past its lease and resumed after a reclaim is fenced off (lease_lost)";
    expect_outcome(&late, 20, Some("lease_lost"), fenced).map_err(|f| f.on(&db))?;
    expect_outcome(&waited, 20, Some("lease_lost"), fenced).map_err(|f| f.on(&db))?;

    let after = audit(&db)?;
    if after.leases.get(&thread) != lease_before.as_ref() {
        return Err(Failure::violation(
            CHECK,
            "a fenced-off worker changes nothing",
            format!(
                "the new holder's lease was {lease_before:?}\nafter the frozen worker resumed: {:?}",
                after.leases.get(&thread)
            ),
        )
        .on(&db));
    }
    if let Some(m) = after
        .messages
        .values()
        .find(|m| m.summary.starts_with("frozen worker"))
    {
        return Err(Failure::violation(
            CHECK,
            "a fenced-off worker changes nothing",
            format!("its message landed: {m:?}"),
        )
        .on(&db));
    }

    let done = expect(
        inbox,
        &db,
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            "2",
            "--summary",
            "the new holder's result",
        ],
        0,
        None,
        "the worker that reclaimed the thread can finish it",
    )?;
    let after = audit(&db)?;
    let results: Vec<_> = after
        .thread_messages(&thread)
        .into_iter()
        .filter(|m| m.kind == "result")
        .collect();
    let winner = done.pointer("/message/message_id").and_then(Value::as_str);
    if after.threads.get(&thread).map(|t| t.status.as_str()) != Some("done")
        || results.len() != 1
        || results.first().map(|m| m.message_id.as_str()) != winner
    {
        return Err(Failure::violation(
            CHECK,
            "the thread is finished once, by the worker holding the latest lease",
            format!(
                "thread {:?}\nresult messages {results:?}",
                after.threads.get(&thread)
            ),
        )
        .on(&db));
    }
    Ok(())
}

/// Two claims whose leases run out on a thread allowing two attempts leave
/// it `failed` by `inbox` with reason `lease_expired`. Runs in `dir`.
pub fn last_attempt_dead_letters(inbox: &Inbox, dir: &Path) -> Result<(), Failure> {
    let db = dir.join("coord.db");
    let thread = init_with_thread(inbox, &db, 2)?;
    claim(inbox, &db, &thread, 1)?;
    wait_until_claimable(inbox, &db, &thread, Duration::from_secs(10))?;
    let second = claim(inbox, &db, &thread, 1)?;
    let expires = second
        .pointer("/lease/expires_at")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // Let the last lease run out, with margin, then read before any write.
    std::thread::sleep(Duration::from_millis(1300));
    while db::now_text() <= expires {
        std::thread::sleep(Duration::from_millis(50));
    }
    let dead = "a lease running out on the last attempt dead-letters the thread";
    let shown = expect(inbox, &db, &["show", "--thread", &thread], 0, None, dead)?;
    if shown.pointer("/thread/status").and_then(Value::as_str) != Some("failed") {
        return Err(Failure::violation(
            CHECK,
            dead,
            format!("reads do not show it failed: {shown}"),
        )
        .on(&db));
    }
    expect(
        inbox,
        &db,
        &["claim", "--agent", "worker", "--thread", &thread],
        20,
        Some("thread_finished"),
        "a dead-lettered thread cannot be claimed again",
    )?;
    expect(
        inbox,
        &db,
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            "2",
            "--summary",
            "too late",
        ],
        20,
        Some("thread_finished"),
        "the last holder gets no grace once its last lease ran out",
    )?;
    let after = audit(&db)?;
    let row = after.threads.get(&thread);
    let results: Vec<_> = after
        .thread_messages(&thread)
        .into_iter()
        .filter(|m| m.kind == "result")
        .collect();
    let from_inbox = results.len() == 1
        && results.iter().all(|m| {
            m.from_agent == "inbox"
                && serde_json::from_str::<Value>(&m.payload_json)
                    .ok()
                    .and_then(|p| p.get("reason").cloned())
                    == Some(Value::from("lease_expired"))
        });
    if row.map(|t| (t.status.as_str(), t.attempts)) != Some(("failed", 2)) || !from_inbox {
        return Err(Failure::violation(
            CHECK,
            dead,
            format!("thread {row:?}\nresult messages {results:?}"),
        )
        .on(&db));
    }
    Ok(())
}

/// Behind a connection holding the write lock, readers answer and writers
/// give up with `storage_busy`, changing nothing; returns how long each
/// writer waited. Runs in `dir`.
pub fn stuck_writer_times_out(inbox: &Inbox, dir: &Path) -> Result<Vec<Duration>, Failure> {
    let db = dir.join("coord.db");
    let thread = init_with_thread(inbox, &db, 3)?;
    let before = audit(&db)?;
    let holder = rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch("BEGIN IMMEDIATE").map(|()| c))
        .map_err(|e| Failure::harness(CHECK, format!("cannot take the write lock: {e}")).on(&db))?;

    // Readers are not blocked by a writer in WAL mode.
    let read = expect(
        inbox,
        &db,
        &["show", "--thread", &thread],
        0,
        None,
        "readers are not blocked by a stuck writer",
    );
    // Two writers at once: both wait, then give up cleanly.
    let writers: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| {
            let args = strings(&[
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                &format!("behind a stuck writer {n}"),
            ]);
            inbox.spawn(
                CHECK,
                &db,
                &args,
                dir,
                &format!("writer-{n}"),
                Stdio::null(),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut waited = Vec::new();
    let mut outcomes = Vec::new();
    for writer in writers {
        outcomes.push(
            writer
                .finish_within(CHECK, Duration::from_secs(60))
                .map_err(|f| f.on(&db))?,
        );
    }
    drop(holder);
    read?;
    for outcome in &outcomes {
        expect_outcome(
            outcome,
            50,
            Some("storage_busy"),
            "a writer behind a stuck write lock gives up with storage_busy instead of hanging",
        )
        .map_err(|f| f.on(&db))?;
        if outcome.stdout.contains("database is locked") {
            return Err(Failure::violation(
                CHECK,
                "SQLite's lock error never leaks through",
                outcome.to_string(),
            )
            .on(&db));
        }
        waited.push(outcome.elapsed);
    }
    let after = audit(&db)?;
    if after.max_event_id() != before.max_event_id() || after.threads.len() != before.threads.len()
    {
        return Err(Failure::violation(
            CHECK,
            "a writer that gave up changed nothing",
            format!(
                "{} events before, {} after",
                before.max_event_id(),
                after.max_event_id()
            ),
        )
        .on(&db));
    }
    expect(
        inbox,
        &db,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "after the lock was released",
        ],
        0,
        None,
        "writes proceed once the stuck writer is gone",
    )?;
    audit(&db)?;
    Ok(waited)
}
