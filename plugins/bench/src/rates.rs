//! Commands per second of the two workloads every engine benchmark of this
//! repository runs, for each engine over each kind of store, each series on
//! a new store, in rounds.
//!
//! - **send**: `send` opening a new thread (`from_agent`, `to_agent`,
//!   `subject`: the request of `docs/wasm-benchmarks.md`), `warmup` untimed
//!   then `ops` timed;
//! - **claim+done**: `warmup + ops` threads queued first (untimed), then
//!   pairs of `claim` with `next` and `done` with the lease token the claim
//!   returned, `warmup` untimed then `ops` timed; the rate is pairs per
//!   second (two write transactions each).
//!
//! Rounds are the outer loop, and the engines swap places every round, so a
//! slow spell of this shared machine touches every series alike. This
//! module must never change a store except through the engine measured.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use inbox_plugin_host::Plugin;
use serde::Serialize;

use crate::engines::{self, EngineKind, JsonEngine, StoreKind};

/// How many operations, and how many rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct RateSizes {
    /// Timed operations per series and round.
    pub(crate) ops: u64,
    /// Untimed operations before them.
    pub(crate) warmup: u64,
    /// Rounds, each on new stores.
    pub(crate) rounds: u64,
}

/// The two workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) enum Workload {
    /// `send` of a new thread.
    #[serde(rename = "send")]
    Send,
    /// `claim` with `next`, then `done`.
    #[serde(rename = "claim+done")]
    ClaimDone,
}

impl Workload {
    /// Both, in report order.
    pub(crate) const ALL: [Workload; 2] = [Workload::Send, Workload::ClaimDone];

    /// The name in the raw results and the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Send => "send",
            Workload::ClaimDone => "claim+done",
        }
    }
}

/// Every round's rate of one engine, store and workload.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Series {
    /// The engine.
    pub(crate) engine: EngineKind,
    /// The store.
    pub(crate) store: StoreKind,
    /// The workload.
    pub(crate) workload: Workload,
    /// Operations per second, one per round, in run order.
    pub(crate) ops_per_sec: Vec<f64>,
}

/// Runs every series for `sizes.rounds` rounds, new stores under `dir`.
pub(crate) fn measure(plugin: &Plugin, dir: &Path, sizes: RateSizes) -> Result<Vec<Series>> {
    let mut series = Vec::new();
    for store in StoreKind::ALL {
        for workload in Workload::ALL {
            for engine in EngineKind::ALL {
                series.push(Series {
                    engine,
                    store,
                    workload,
                    ops_per_sec: Vec::new(),
                });
            }
        }
    }
    for round in 0..sizes.rounds {
        let started = Instant::now();
        for store in StoreKind::ALL {
            for workload in Workload::ALL {
                let mut order = EngineKind::ALL;
                if round % 2 == 1 {
                    order.reverse();
                }
                for engine in order {
                    let name = format!("{}-{}-{}", engine.name(), store.name(), round);
                    let mut under_test = engines::fresh(engine, store, plugin, dir, &name)
                        .with_context(|| {
                            format!(
                                "cannot open the {} store for the {}",
                                store.name(),
                                engine.name()
                            )
                        })?;
                    let rate = match workload {
                        Workload::Send => send(under_test.as_mut(), sizes),
                        Workload::ClaimDone => claim_done(under_test.as_mut(), sizes),
                    }
                    .with_context(|| {
                        format!(
                            "{} through the {} over {}",
                            workload.name(),
                            engine.name(),
                            store.name()
                        )
                    })?;
                    drop(under_test);
                    if store == StoreKind::SqliteFile {
                        engines::remove_database(&dir.join(format!("{name}.db")))?;
                    }
                    let slot = series
                        .iter_mut()
                        .find(|s| s.engine == engine && s.store == store && s.workload == workload)
                        .ok_or_else(|| anyhow!("no series for {name}"))?;
                    slot.ops_per_sec.push(rate);
                }
            }
        }
        eprintln!(
            "  round {}/{} in {:.1} s",
            round + 1,
            sizes.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(series)
}

/// The `send` request of task `seq`.
pub(crate) fn send_request(seq: u64) -> String {
    format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Benchmark task {seq}"}}"#
    )
}

/// The worker's `claim` of the next thread of its queue, default lease.
pub(crate) const CLAIM_NEXT: &str = r#"{"command":"claim","agent":"worker","next":true}"#;

/// The `done` of `thread_id` under lease `token`.
pub(crate) fn done_request(thread_id: &str, token: u64) -> String {
    format!(
        r#"{{"command":"done","agent":"worker","thread_id":"{thread_id}","lease_token":{token},"summary":"ok"}}"#
    )
}

/// Sends/s over `ops` new threads after `warmup` untimed ones.
fn send(engine: &mut dyn JsonEngine, sizes: RateSizes) -> Result<f64> {
    for seq in 0..sizes.warmup {
        engine.expect_exit(&send_request(seq), 0)?;
    }
    let start = Instant::now();
    for seq in sizes.warmup..sizes.warmup + sizes.ops {
        engine.expect_exit(&send_request(seq), 0)?;
    }
    Ok(sizes.ops as f64 / start.elapsed().as_secs_f64())
}

/// Claim+done pairs/s over `ops` queued threads after `warmup` untimed
/// pairs.
fn claim_done(engine: &mut dyn JsonEngine, sizes: RateSizes) -> Result<f64> {
    for seq in 0..sizes.warmup + sizes.ops {
        engine.expect_exit(&send_request(seq), 0)?;
    }
    for _ in 0..sizes.warmup {
        pair(engine)?;
    }
    let start = Instant::now();
    for _ in 0..sizes.ops {
        pair(engine)?;
    }
    let rate = sizes.ops as f64 / start.elapsed().as_secs_f64();
    // Every queued thread was taken exactly once: the queue is empty now
    // (exit 10: nothing to claim).
    engine
        .expect_exit(CLAIM_NEXT, 10)
        .context("threads were left in the queue after the timed loop")?;
    Ok(rate)
}

/// One `claim` of the next thread and the `done` of the thread it leased,
/// reading the thread id and lease token from the JSON response as a
/// `--json` caller does.
fn pair(engine: &mut dyn JsonEngine) -> Result<()> {
    let claimed = engine.expect_exit(CLAIM_NEXT, 0)?;
    let (thread_id, token) = lease_of(&claimed.json)?;
    engine.expect_exit(&done_request(&thread_id, token), 0)?;
    Ok(())
}

/// The thread id and lease token of a successful claim's response.
pub(crate) fn lease_of(claim_json: &str) -> Result<(String, u64)> {
    let value: serde_json::Value = serde_json::from_str(claim_json)
        .with_context(|| format!("the claim response is not JSON: {claim_json}"))?;
    let thread_id = value["thread"]["thread_id"].as_str();
    let token = value["lease"]["lease_token"].as_u64();
    match (thread_id, token) {
        (Some(thread_id), Some(token)) => Ok((thread_id.to_owned(), token)),
        _ => bail!("the claim response has no thread id and lease token: {claim_json}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn requests_are_the_wire_format() {
        for request in [
            send_request(7),
            CLAIM_NEXT.to_owned(),
            done_request("thr_1", 3),
        ] {
            inbox_engine::Request::from_json(&request).unwrap();
        }
    }

    #[test]
    fn reads_the_lease_of_a_claim() {
        let json = r#"{"ok":true,"command":"claim","thread":{"thread_id":"thr_A"},"lease":{"lease_token":2}}"#;
        assert_eq!(lease_of(json).unwrap(), ("thr_A".to_owned(), 2));
        assert!(lease_of(r#"{"ok":true,"command":"claim"}"#).is_err());
    }
}
