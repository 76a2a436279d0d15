//! Peer: Redis streams with a consumer group, Redis's answer to leases.
//!
//! How it is modelled (issue 4: "streams with XREADGROUP/XAUTOCLAIM for
//! leases"): a task is `XADD tasks * m <line>`. Workers of the group `g`
//! claim with `XREADGROUP GROUP g w<n> COUNT 1 STREAMS tasks >` (the entry
//! enters the group's pending list owned by that consumer: a lease without a
//! term), finish with `XACK`, and when nothing new is left try `XAUTOCLAIM
//! tasks g w<n> 60000 0-0 COUNT 1`, which takes over entries idle for over
//! 60 s (a dead worker's lease). Two agents talk through the streams
//! `s_to_worker` and `s_to_lead`: post is `XADD`, wait is `XREADGROUP ...
//! BLOCK` followed by `XACK`.
//!
//! What it does not do: fencing (a worker whose entry was auto-claimed can
//! still `XACK` it), delivery-count limits, or trimming.

use std::time::Duration;

use anyhow::{Context, Result};
use redis::streams::{StreamAutoClaimReply, StreamReadReply};

use super::redis_list::{connect, task_id_of};
use super::{Claimed, Endpoint, Queue, Role, Task};

/// Empties the server and creates the streams and their groups.
pub(crate) fn prepare(url: &str) -> Result<()> {
    let mut con = connect(url)?;
    redis::cmd("FLUSHALL").query::<()>(&mut con)?;
    for stream in ["tasks", "s_to_worker", "s_to_lead"] {
        redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg("g")
            .arg("$")
            .arg("MKSTREAM")
            .query::<()>(&mut con)
            .with_context(|| format!("XGROUP CREATE {stream} failed"))?;
    }
    Ok(())
}

fn line_of(entry: &redis::streams::StreamId) -> String {
    entry.get::<String>("m").unwrap_or_default()
}

/// A producer's or worker's connection.
pub(crate) struct RedisStreamQueue {
    con: redis::Connection,
    consumer: String,
}

impl RedisStreamQueue {
    /// Connects as worker (or producer) `worker`.
    pub(crate) fn open(url: &str, worker: usize) -> Result<RedisStreamQueue> {
        Ok(RedisStreamQueue {
            con: connect(url)?,
            consumer: format!("w{worker}"),
        })
    }
}

impl Queue for RedisStreamQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        let line = inbox_bench::files::task_line("lead", "worker", producer, seq);
        redis::cmd("XADD")
            .arg("tasks")
            .arg("*")
            .arg("m")
            .arg(line)
            .query::<String>(&mut self.con)
            .context("XADD failed")
            .map(drop)
    }

    fn claim(&mut self) -> Result<Claimed> {
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg("tasks")
            .arg(">")
            .query(&mut self.con)
            .context("XREADGROUP failed")?;
        let entry = reply.and_then(|r| r.keys.into_iter().next()?.ids.into_iter().next());
        let entry = match entry {
            Some(entry) => Some(entry),
            None => {
                // Nothing new: take over a lease that lapsed (idle > 60 s).
                let reclaimed: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                    .arg("tasks")
                    .arg("g")
                    .arg(&self.consumer)
                    .arg(60_000)
                    .arg("0-0")
                    .arg("COUNT")
                    .arg(1)
                    .query(&mut self.con)
                    .context("XAUTOCLAIM failed")?;
                reclaimed.claimed.into_iter().next()
            }
        };
        Ok(Claimed {
            task: entry.map(|entry| Task {
                id: task_id_of(&line_of(&entry)),
                handle: entry.id,
                token: 0,
            }),
            conflicts: 0,
        })
    }

    fn done(&mut self, task: &Task) -> Result<()> {
        redis::cmd("XACK")
            .arg("tasks")
            .arg("g")
            .arg(&task.handle)
            .query::<i64>(&mut self.con)
            .context("XACK failed")
            .map(drop)
    }
}

/// An agent blocked in `XREADGROUP ... BLOCK` on its own stream.
pub(crate) struct RedisStreamEndpoint {
    con: redis::Connection,
    role: Role,
}

impl RedisStreamEndpoint {
    /// Connects as `role`.
    pub(crate) fn open(url: &str, role: Role) -> Result<RedisStreamEndpoint> {
        Ok(RedisStreamEndpoint {
            con: connect(url)?,
            role,
        })
    }
}

impl Endpoint for RedisStreamEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        let line = inbox_bench::files::task_line(self.role.me(), self.role.other(), 0, seq);
        redis::cmd("XADD")
            .arg(format!("s_to_{}", self.role.other()))
            .arg("*")
            .arg("m")
            .arg(line)
            .query::<String>(&mut self.con)
            .context("XADD failed")
            .map(drop)
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let stream = format!("s_to_{}", self.role.me());
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg(self.role.me())
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(timeout.as_millis() as u64)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query(&mut self.con)
            .context("XREADGROUP BLOCK failed")?;
        let Some(entry) = reply.and_then(|r| r.keys.into_iter().next()?.ids.into_iter().next())
        else {
            return Ok(false);
        };
        redis::cmd("XACK")
            .arg(&stream)
            .arg("g")
            .arg(&entry.id)
            .query::<i64>(&mut self.con)
            .context("XACK failed")?;
        Ok(true)
    }
}
