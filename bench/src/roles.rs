//! The harness's child-process roles: the same binary, started with a
//! hidden subcommand (`__worker`, `__waiter`, `__responder`, see [`Child`])
//! and a JSON configuration, plays a worker, a blocked waiter or an
//! answering agent in a process of its own, so that every cross-process
//! figure really crosses processes.
//!
//! Protocol on stdout, one line each: `ready` once connected, then `woke`
//! per wake (waiters) or one JSON result (workers); `error: ...` on failure.
//! Workers start when they read `go` on stdin, so all start together. This
//! module must never time anything the parent can time itself: the parent
//! timestamps wake lines as they arrive.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
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

/// The child processes, as hidden subcommands of the harness, each given
/// its JSON configuration.
#[derive(Subcommand)]
pub(crate) enum Child {
    /// A worker: claims and finishes tasks until the queue is empty.
    #[command(name = "__worker", hide = true)]
    Worker {
        /// A [`WorkerConfig`] as JSON.
        config: String,
    },
    /// A waiter: prints `woke` each time its wait returns with a message.
    #[command(name = "__waiter", hide = true)]
    Waiter {
        /// An [`AgentConfig`] as JSON.
        config: String,
    },
    /// A responder: answers every message from the other agent.
    #[command(name = "__responder", hide = true)]
    Responder {
        /// An [`AgentConfig`] as JSON.
        config: String,
    },
}

/// Plays `child`; a failure is reported on stdout as `error: ...` (the
/// protocol's last line) with exit code 1.
pub(crate) fn run(child: Child) -> ExitCode {
    let result = match child {
        Child::Worker { config } => worker(&config),
        Child::Waiter { config } => waiter(&config),
        Child::Responder { config } => responder(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = say(&format!("error: {e:#}"));
            ExitCode::from(1)
        }
    }
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
