//! Peer: Redis lists, the most common "just use Redis" work queue.
//!
//! How it is modelled (issue 4: "Redis ... lists with BLPOP"): a task is the
//! same JSON line the file peers write, pushed with `LPUSH tasks`. A worker
//! claims with `LMOVE tasks processing:<worker> RIGHT LEFT` (the reliable
//! queue pattern: the task moves atomically into the worker's own list, so
//! no two workers get it) and finishes with `LREM processing:<worker> 1
//! <task>`. Two agents talk through `to_worker` and `to_lead`: post is
//! `LPUSH`, wait is `BLPOP` (the server wakes the blocked client when a push
//! lands). One connection per client, on 127.0.0.1; the server is started
//! by the harness with the configuration printed in the report.
//!
//! What it does not do: leases or reclaiming a dead worker's
//! `processing:*` list (that needs a reaper the pattern leaves to you),
//! fencing, priorities, or history: a popped message is gone.

use std::time::Duration;

use anyhow::{Context, Result};

use super::{Claimed, Endpoint, Queue, Role, Task};

/// Empties the server.
pub(crate) fn prepare(url: &str) -> Result<()> {
    let mut con = connect(url)?;
    redis::cmd("FLUSHALL")
        .query::<()>(&mut con)
        .context("FLUSHALL failed")
}

/// One connection to the server at `url`.
pub(crate) fn connect(url: &str) -> Result<redis::Connection> {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .with_context(|| format!("cannot connect to Redis at {url}"))
}

/// The task id inside a task line.
pub(crate) fn task_id_of(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["content"]["taskId"].as_str().map(str::to_owned))
        .unwrap_or_else(|| line.to_owned())
}

/// A producer's or worker's connection.
pub(crate) struct RedisListQueue {
    con: redis::Connection,
    processing: String,
}

impl RedisListQueue {
    /// Connects as worker (or producer) `worker`.
    pub(crate) fn open(url: &str, worker: usize) -> Result<RedisListQueue> {
        Ok(RedisListQueue {
            con: connect(url)?,
            processing: format!("processing:{worker}"),
        })
    }
}

impl Queue for RedisListQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        let line = inbox_bench::files::task_line("lead", "worker", producer, seq);
        redis::cmd("LPUSH")
            .arg("tasks")
            .arg(line)
            .query::<i64>(&mut self.con)
            .context("LPUSH failed")
            .map(drop)
    }

    fn claim(&mut self) -> Result<Claimed> {
        let line: Option<String> = redis::cmd("LMOVE")
            .arg("tasks")
            .arg(&self.processing)
            .arg("RIGHT")
            .arg("LEFT")
            .query(&mut self.con)
            .context("LMOVE failed")?;
        Ok(Claimed {
            task: line.map(|line| Task {
                id: task_id_of(&line),
                handle: line,
                token: 0,
            }),
            conflicts: 0,
        })
    }

    fn done(&mut self, task: &Task) -> Result<()> {
        redis::cmd("LREM")
            .arg(&self.processing)
            .arg(1)
            .arg(&task.handle)
            .query::<i64>(&mut self.con)
            .context("LREM failed")
            .map(drop)
    }
}

/// An agent blocked in `BLPOP` on its own list.
pub(crate) struct RedisListEndpoint {
    con: redis::Connection,
    role: Role,
}

impl RedisListEndpoint {
    /// Connects as `role`.
    pub(crate) fn open(url: &str, role: Role) -> Result<RedisListEndpoint> {
        Ok(RedisListEndpoint {
            con: connect(url)?,
            role,
        })
    }
}

impl Endpoint for RedisListEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        let line = inbox_bench::files::task_line(self.role.me(), self.role.other(), 0, seq);
        redis::cmd("LPUSH")
            .arg(format!("to_{}", self.role.other()))
            .arg(line)
            .query::<i64>(&mut self.con)
            .context("LPUSH failed")
            .map(drop)
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(format!("to_{}", self.role.me()))
            .arg(timeout.as_secs_f64())
            .query(&mut self.con)
            .context("BLPOP failed")?;
        Ok(popped.is_some())
    }
}
