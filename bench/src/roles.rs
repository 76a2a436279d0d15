//! The harness's child-process roles: the same binary, started with a
//! hidden first argument (`__worker`, `__waiter`, `__responder`) and a JSON
//! configuration, plays a worker, a blocked waiter or an answering agent in
//! a process of its own, so that every cross-process figure really crosses
//! processes.
//!
//! Protocol on stdout, one line each: `ready` once connected, then `woke`
//! per wake (waiters) or one JSON result (workers); `error: ...` on failure.
//! Workers start when they read `go` on stdin, so all start together. This
//! module must never time anything the parent can time itself: the parent
//! timestamps wake lines as they arrive.

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::peers::{Role, Target};

/// What a worker child is told.
#[derive(Serialize, Deserialize)]
pub(crate) struct WorkerConfig {
    pub(crate) target: Target,
    pub(crate) worker: usize,
}

/// What a worker child reports.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct WorkerReport {
    /// Task ids it finished (claim and done both succeeded).
    pub(crate) done: Vec<String>,
    /// Per task: µs from starting to look for work to holding a claim.
    pub(crate) claim_us: Vec<f64>,
    /// Per task: µs of the done.
    pub(crate) done_us: Vec<f64>,
    /// Claims lost to other workers.
    pub(crate) conflicts: u64,
    /// µs from `go` to the queue found empty.
    pub(crate) elapsed_us: f64,
}

/// What a waiter or responder child is told.
#[derive(Serialize, Deserialize)]
pub(crate) struct AgentConfig {
    pub(crate) target: Target,
    pub(crate) role: Role,
}

/// Runs a role if `args` names one; returns false otherwise.
pub(crate) fn dispatch(args: &[String]) -> bool {
    let (Some(role), Some(config)) = (args.get(1), args.get(2)) else {
        return false;
    };
    let result = match role.as_str() {
        "__worker" => worker(config),
        "__waiter" => waiter(config),
        "__responder" => responder(config),
        _ => return false,
    };
    if let Err(e) = result {
        let _ = say(&format!("error: {e:#}"));
        std::process::exit(1);
    }
    true
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Claims and finishes tasks until the queue is empty.
fn worker(config: &str) -> Result<()> {
    let config: WorkerConfig = serde_json::from_str(config).context("bad worker config")?;
    let mut queue = config.target.queue(config.worker)?;
    say("ready")?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "go" {
        bail!("expected `go`, got `{}`", line.trim());
    }
    let mut report = WorkerReport::default();
    let start = Instant::now();
    loop {
        let t0 = Instant::now();
        let claimed = queue.claim()?;
        report.conflicts += u64::from(claimed.conflicts);
        let Some(task) = claimed.task else { break };
        report.claim_us.push(crate::proc::us_since(t0));
        let t1 = Instant::now();
        queue.done(&task)?;
        report.done_us.push(crate::proc::us_since(t1));
        report.done.push(task.id);
    }
    report.elapsed_us = crate::proc::us_since(start);
    say(&serde_json::to_string(&report)?)
}

/// Blocks in the system's wait, printing `woke` each time it returns with a
/// message, forever (the parent kills it).
fn waiter(config: &str) -> Result<()> {
    let config: AgentConfig = serde_json::from_str(config).context("bad waiter config")?;
    let mut endpoint = config.target.endpoint(config.role)?;
    say("ready")?;
    loop {
        if endpoint.wait(Duration::from_secs(600))? {
            say("woke")?;
        }
    }
}

/// Answers every message from the other agent, forever.
fn responder(config: &str) -> Result<()> {
    let config: AgentConfig = serde_json::from_str(config).context("bad responder config")?;
    let mut endpoint = config.target.endpoint(config.role)?;
    say("ready")?;
    let mut seq = 0;
    loop {
        if endpoint.wait(Duration::from_secs(600))? {
            seq += 1;
            endpoint.post(seq)?;
        }
    }
}
