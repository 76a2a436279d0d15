//! The load check: many worker processes draining a queue that producers
//! keep full, for a sustained period, the way an agent team works: every
//! step (`fetch`, `claim`, `update`, `done`) is its own `inbox` process.
//!
//! What must hold: no command fails with exit 50 or prints `database is
//! locked`; every claim that succeeds holds a token no other claim of that
//! thread got, and since leases are long, each thread is claimed at most
//! once; every claimed thread is completed exactly once, by its claimer,
//! whose `update` and `done` are never refused; the database audits clean at
//! the end. It reports throughput and the latency of claims. This module
//! must never retry a failed command to hide it: a worker only moves on from
//! the outcomes a real worker loop moves on from (an empty fetch, a claim
//! lost to another worker).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::db;
use crate::failure::{Failure, Workdir};
use crate::process::{Inbox, Outcome};
use crate::rng::Rng;

const CHECK: &str = "load";

/// How much load to apply.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Worker loops, each running one `inbox` process at a time.
    pub workers: usize,
    /// Producer loops sending new threads.
    pub producers: usize,
    /// How long workers keep taking new work.
    pub duration: Duration,
    /// The seed of every choice.
    pub seed: u64,
    /// Where to make the scratch folder.
    pub work_dir: Option<PathBuf>,
}

impl LoadConfig {
    /// The bounded run CI does: 32 workers for 20 s.
    pub fn short(seed: u64) -> LoadConfig {
        LoadConfig {
            workers: 32,
            producers: 4,
            duration: Duration::from_secs(20),
            seed,
            work_dir: None,
        }
    }

    /// The run on demand: 32 workers for 5 minutes.
    pub fn long(seed: u64) -> LoadConfig {
        LoadConfig {
            duration: Duration::from_secs(300),
            ..LoadConfig::short(seed)
        }
    }
}

/// Latency percentiles of one kind of command.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// How many were measured.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let at = |p: usize| {
            samples
                .get((samples.len() * p / 100).min(samples.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        Latency {
            count: samples.len(),
            p50: at(50),
            p99: at(99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.1?} p99 {:.1?} max {:.1?} (n={})",
            self.p50, self.p99, self.max, self.count
        )
    }
}

/// What a load run did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Worker loops.
    pub workers: usize,
    /// Threads sent by producers.
    pub sent: usize,
    /// Threads claimed and completed (each exactly once).
    pub completed: usize,
    /// Claims lost to another worker (`lease_conflict`).
    pub conflicts: usize,
    /// Claims of threads finished since the fetch (`thread_finished`).
    pub finished_races: usize,
    /// `inbox` processes run, all kinds.
    pub commands: usize,
    /// Time from the first to the last command.
    pub elapsed: Duration,
    /// Successful claims, from process start to exit.
    pub claim: Latency,
    /// Every command, from process start to exit.
    pub any: Latency,
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        write!(
            f,
            "load: ok: {} workers, {:.1?}: {} threads sent, {} completed exactly once \
             ({:.1} threads/s), {} commands ({:.0}/s), {} claims lost to lease_conflict and {} to \
             thread_finished, no exit 50, no double claim; claim latency {}; any command {}",
            self.workers,
            self.elapsed,
            self.sent,
            self.completed,
            self.completed as f64 / secs,
            self.commands,
            self.commands as f64 / secs,
            self.conflicts,
            self.finished_races,
            self.claim,
            self.any
        )
    }
}

/// Runs the load check in a scratch folder.
pub fn run(inbox: &Inbox, config: &LoadConfig) -> Result<LoadReport, Failure> {
    Workdir::create(config.work_dir.as_deref(), CHECK, config.seed)?
        .run(|dir| run_in(inbox, config, dir))
}

/// A successful claim, and what became of it.
#[derive(Clone, Debug)]
struct Claim {
    thread: String,
    token: i64,
    worker: usize,
    done_message: Option<String>,
}

#[derive(Default)]
struct Shared {
    claims: Vec<Claim>,
    claim_latency: Vec<Duration>,
    any_latency: Vec<Duration>,
    conflicts: usize,
    finished_races: usize,
    failure: Option<Failure>,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn run_in(inbox: &Inbox, config: &LoadConfig, dir: &Path) -> Result<LoadReport, Failure> {
    let db_path: Arc<PathBuf> = Arc::new(dir.join("coord.db"));
    let init = inbox.run(CHECK, &db_path, &strings(&["init"]))?;
    if init.code != Some(0) {
        return Err(Failure::harness(CHECK, format!("init failed:\n{init}")).on(&db_path));
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let claimed = Arc::new(AtomicUsize::new(0));
    let commands = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + config.duration;
    let mut rng = Rng::new(config.seed);
    let target_depth = config.workers * 2;

    let mut handles = Vec::new();
    for producer in 0..config.producers {
        let (inbox, db, stop, sent, claimed, commands, shared) = (
            inbox.clone(),
            Arc::clone(&db_path),
            Arc::clone(&stop),
            Arc::clone(&sent),
            Arc::clone(&claimed),
            Arc::clone(&commands),
            Arc::clone(&shared),
        );
        handles.push(std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                if sent.load(Ordering::Relaxed) >= claimed.load(Ordering::Relaxed) + target_depth {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                n += 1;
                let subject = format!("load task {producer}.{n}");
                let args = strings(&[
                    "send",
                    "--from",
                    "lead",
                    "--to",
                    "worker",
                    "--subject",
                    &subject,
                ]);
                let outcome = match inbox.run(CHECK, &db, &args) {
                    Ok(outcome) => outcome,
                    Err(failure) => return fail(&shared, &stop, failure),
                };
                commands.fetch_add(1, Ordering::Relaxed);
                lock(&shared).any_latency.push(outcome.elapsed);
                if outcome.code != Some(0) || outcome.storage_trouble() {
                    return fail(
                        &shared,
                        &stop,
                        violation("every send succeeds under load", &outcome),
                    );
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for worker in 0..config.workers {
        let (inbox, db, stop, claimed, commands, shared) = (
            inbox.clone(),
            Arc::clone(&db_path),
            Arc::clone(&stop),
            Arc::clone(&claimed),
            Arc::clone(&commands),
            Arc::clone(&shared),
        );
        let rng = rng.fork();
        handles.push(std::thread::spawn(move || {
            let context = Worker {
                inbox,
                db,
                stop,
                claimed,
                commands,
                shared,
                worker,
                deadline,
            };
            context.run(rng);
        }));
    }
    for handle in handles {
        if handle.join().is_err() {
            return Err(Failure::harness(CHECK, "a load thread panicked").on(&db_path));
        }
    }
    let elapsed = started.elapsed();
    let mut shared = std::mem::take(&mut *lock(&shared));
    if let Some(failure) = shared.failure.take() {
        return Err(failure.on(&db_path));
    }
    let report = LoadReport {
        workers: config.workers,
        sent: sent.load(Ordering::Relaxed),
        completed: shared.claims.len(),
        conflicts: shared.conflicts,
        finished_races: shared.finished_races,
        commands: commands.load(Ordering::Relaxed),
        elapsed,
        claim: Latency::of(std::mem::take(&mut shared.claim_latency)),
        any: Latency::of(std::mem::take(&mut shared.any_latency)),
    };
    verify(&db_path, &shared.claims).map_err(|f| f.on(&db_path))?;
    Ok(report)
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // A poisoned lock only means another loop panicked; the data is still
    // what it recorded.
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn fail(shared: &Mutex<Shared>, stop: &AtomicBool, failure: Failure) {
    stop.store(true, Ordering::Relaxed);
    let mut shared = lock(shared);
    if shared.failure.is_none() {
        shared.failure = Some(failure);
    }
}

fn violation(invariant: &str, outcome: &Outcome) -> Failure {
    let invariant = if outcome.storage_trouble() {
        "no command fails with exit 50 or `database is locked` under load"
    } else {
        invariant
    };
    Failure::violation(CHECK, invariant, outcome.to_string())
}

struct Worker {
    inbox: Inbox,
    db: Arc<PathBuf>,
    stop: Arc<AtomicBool>,
    claimed: Arc<AtomicUsize>,
    commands: Arc<AtomicUsize>,
    shared: Arc<Mutex<Shared>>,
    worker: usize,
    deadline: Instant,
}

impl Worker {
    fn step(&self, args: &[String]) -> Result<Outcome, Failure> {
        let outcome = self.inbox.run(CHECK, &self.db, args)?;
        self.commands.fetch_add(1, Ordering::Relaxed);
        lock(&self.shared).any_latency.push(outcome.elapsed);
        if outcome.storage_trouble() || outcome.json().is_none() {
            return Err(violation("every command prints one JSON object", &outcome));
        }
        Ok(outcome)
    }

    fn run(&self, mut rng: Rng) {
        while !self.stop.load(Ordering::Relaxed) && Instant::now() < self.deadline {
            if let Err(failure) = self.cycle(&mut rng) {
                return fail(&self.shared, &self.stop, failure);
            }
        }
    }

    /// fetch → claim → update → done, as a worker agent does it.
    fn cycle(&self, rng: &mut Rng) -> Result<(), Failure> {
        let fetched = self.step(&strings(&["fetch", "--agent", "worker", "--limit", "8"]))?;
        let candidates: Vec<String> = match fetched.code {
            Some(10) => {
                std::thread::sleep(Duration::from_millis(10 + rng.below(20)));
                return Ok(());
            }
            Some(0) => fetched
                .json()
                .and_then(|j| j.get("threads").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|t| {
                    t.get("thread_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect(),
            _ => return Err(violation("fetch answers 0 or 10", &fetched)),
        };
        // Workers that fetched the same queue often go for the same thread.
        let Some(thread) = candidates.get(rng.index(candidates.len())).cloned() else {
            return Err(violation("fetch exit 0 lists threads", &fetched));
        };
        let claim = self.step(&strings(&[
            "claim",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-seconds",
            "900",
        ]))?;
        match (claim.code, claim.error_code().as_deref()) {
            (Some(0), _) => {}
            (Some(20), Some("lease_conflict")) => {
                lock(&self.shared).conflicts += 1;
                return Ok(());
            }
            (Some(20), Some("thread_finished")) => {
                lock(&self.shared).finished_races += 1;
                return Ok(());
            }
            _ => {
                return Err(violation(
                    "a claim wins or loses cleanly (exit 0 or 20)",
                    &claim,
                ));
            }
        }
        self.claimed.fetch_add(1, Ordering::Relaxed);
        let token = claim
            .json()
            .and_then(|j| j.pointer("/lease/lease_token").and_then(Value::as_i64))
            .unwrap_or(0);
        let index = {
            let mut shared = lock(&self.shared);
            shared.claim_latency.push(claim.elapsed);
            shared.claims.push(Claim {
                thread: thread.clone(),
                token,
                worker: self.worker,
                done_message: None,
            });
            shared.claims.len() - 1
        };
        let token_text = token.to_string();
        let update = self.step(&strings(&[
            "update",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            &token_text,
            "--status",
            "in_progress",
            "--summary",
            "working",
        ]))?;
        if update.code != Some(0) {
            return Err(violation(
                "the holder of a lease is never refused (update)",
                &update,
            ));
        }
        let summary = format!("done by worker {} with token {token}", self.worker);
        let done = self.step(&strings(&[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            &token_text,
            "--summary",
            &summary,
        ]))?;
        if done.code != Some(0) {
            return Err(violation(
                "the holder of a lease is never refused (done)",
                &done,
            ));
        }
        let message = done.json().and_then(|j| {
            j.pointer("/message/message_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        if let Some(claim) = lock(&self.shared).claims.get_mut(index) {
            claim.done_message = message;
        }
        Ok(())
    }
}

/// Every claim unique per (thread, token), each thread claimed once and
/// completed exactly once by its claimer, and the database audits clean.
fn verify(db_path: &Path, claims: &[Claim]) -> Result<(), Failure> {
    let mut per_thread: BTreeMap<&str, Vec<&Claim>> = BTreeMap::new();
    for claim in claims {
        per_thread.entry(&claim.thread).or_default().push(claim);
    }
    for (thread, claims) in &per_thread {
        if claims.len() != 1 || claims.iter().any(|c| c.token != 1) {
            return Err(Failure::violation(
                CHECK,
                "no double claim: each thread is claimed once (its leases never ran out)",
                format!("{thread} was claimed by {claims:?}"),
            ));
        }
    }
    let (snapshot, violations) = db::audit(db_path).map_err(|e| Failure::harness(CHECK, e))?;
    if let Some(v) = violations.first() {
        return Err(Failure::violation(CHECK, v.invariant, v.detail.clone()));
    }
    let counts = snapshot.message_counts();
    let mut results: BTreeMap<&str, Vec<&db::MessageRow>> = BTreeMap::new();
    for m in snapshot.messages.values().filter(|m| m.kind == "result") {
        results.entry(m.thread_id.as_str()).or_default().push(m);
    }
    for claim in claims {
        let thread = snapshot.threads.get(&claim.thread);
        let results = results
            .get(claim.thread.as_str())
            .cloned()
            .unwrap_or_default();
        let summary = format!("done by worker {} with token {}", claim.worker, claim.token);
        let by_claimer = results.len() == 1
            && results.first().map(|m| &m.message_id) == claim.done_message.as_ref()
            && results.iter().all(|m| m.summary == summary);
        if thread.map(|t| t.status.as_str()) != Some("done") || !by_claimer {
            return Err(Failure::violation(
                CHECK,
                "every claimed thread is completed exactly once, by its claimer",
                format!("{claim:?}: thread {thread:?}, results {results:?}"),
            ));
        }
        // task, progress, result: nothing else was written to it.
        if counts.get(claim.thread.as_str()) != Some(&3) {
            return Err(Failure::violation(
                CHECK,
                "every claimed thread is completed exactly once, by its claimer",
                format!(
                    "{} has {:?} messages, expected 3",
                    claim.thread,
                    counts.get(claim.thread.as_str())
                ),
            ));
        }
    }
    let done = snapshot
        .threads
        .values()
        .filter(|t| t.status == "done")
        .count();
    if done != claims.len() {
        return Err(Failure::violation(
            CHECK,
            "every completed thread was acknowledged to exactly one worker",
            format!(
                "{done} threads are done; {} completions were acknowledged",
                claims.len()
            ),
        ));
    }
    Ok(())
}
