//! Commands per second of the two in-process workloads every engine
//! benchmark of this repository runs (`inbox-bench wasm-baseline`, the wasm
//! benchmark it is the baseline of, and `inbox-plugin-bench`):
//!
//! - **send**: `send` opening a new thread (`from_agent`, `to_agent`,
//!   `subject`: the request of `docs/wasm-benchmarks.md`), `warmup` untimed
//!   then `ops` timed;
//! - **claim+done**: `warmup + ops` threads queued first (untimed), then
//!   pairs of `claim` with `next` and `done` with the lease token the claim
//!   returned, `warmup` untimed then `ops` timed; the rate is pairs per
//!   second (two write transactions each). The queue must be empty after.
//!
//! An engine takes part through a [`Caller`]: [`Typed`] drives anything
//! that executes typed requests (the built-in engine over any store),
//! [`Json`] anything that answers the JSON wire format ([`JsonEngine`]: the
//! built-in engine through `--json`'s work, the engine component). Each
//! harness runs the rounds in its own order. This module must never change
//! a store except through the engine measured, and times nothing but the
//! loops described here.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use inbox_engine::wire::{ClaimRequest, FinishRequest, SendRequest};
use inbox_engine::{Executor, Output, Request, Response};
use serde::Serialize;

/// The agent that sends.
pub const LEAD: &str = "lead";
/// The agent that claims and finishes.
pub const WORKER: &str = "worker";

/// How many operations, and how many rounds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Sizes {
    /// Timed operations per series and round.
    pub ops: u64,
    /// Untimed operations before them.
    pub warmup: u64,
    /// Rounds, each on new stores.
    pub rounds: u64,
}

/// The two workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// `send` of a new thread.
    #[serde(rename = "send")]
    Send,
    /// `claim` with `next`, then `done`.
    #[serde(rename = "claim+done")]
    ClaimDone,
}

impl Workload {
    /// Both, in report order.
    pub const ALL: [Workload; 2] = [Workload::Send, Workload::ClaimDone];

    /// The name in raw results and reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Send => "send",
            Workload::ClaimDone => "claim+done",
        }
    }
}

/// The lease a claim took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The thread claimed.
    pub thread_id: String,
    /// Its lease token.
    pub lease_token: u64,
}

/// How a workload reaches one engine: the adapter a new host or a new way
/// of calling the engine implements. Every method is one request; a refusal
/// is an error.
pub trait Caller {
    /// Sends new thread `seq` from the lead to the worker.
    fn send(&mut self, seq: u64) -> Result<()>;
    /// The worker claims the next thread of its queue (default lease); `None`
    /// when there is none.
    fn claim_next(&mut self) -> Result<Option<Lease>>;
    /// The worker finishes the thread it leased.
    fn done(&mut self, lease: Lease) -> Result<()>;
}

/// Operations per second of `workload` through `caller`, on the store it
/// holds (which must be new).
pub fn rate(workload: Workload, caller: &mut dyn Caller, sizes: Sizes) -> Result<f64> {
    match workload {
        Workload::Send => send_rate(caller, sizes),
        Workload::ClaimDone => claim_done_rate(caller, sizes),
    }
}

/// Sends/s over `ops` new threads after `warmup` untimed ones.
fn send_rate(caller: &mut dyn Caller, sizes: Sizes) -> Result<f64> {
    for seq in 0..sizes.warmup {
        caller.send(seq)?;
    }
    let start = Instant::now();
    for seq in sizes.warmup..sizes.warmup + sizes.ops {
        caller.send(seq)?;
    }
    Ok(sizes.ops as f64 / start.elapsed().as_secs_f64())
}

/// Claim+done pairs/s over `ops` queued threads after `warmup` untimed
/// pairs.
fn claim_done_rate(caller: &mut dyn Caller, sizes: Sizes) -> Result<f64> {
    for seq in 0..sizes.warmup + sizes.ops {
        caller.send(seq)?;
    }
    for _ in 0..sizes.warmup {
        pair(caller)?;
    }
    let start = Instant::now();
    for _ in 0..sizes.ops {
        pair(caller)?;
    }
    let rate = sizes.ops as f64 / start.elapsed().as_secs_f64();
    // Every queued thread was taken exactly once: the queue is empty now.
    if caller.claim_next()?.is_some() {
        bail!("threads were left in the queue after the timed loop");
    }
    Ok(rate)
}

/// One `claim` of the next thread and the `done` of the thread it leased.
fn pair(caller: &mut dyn Caller) -> Result<()> {
    let Some(lease) = caller.claim_next()? else {
        bail!("claim with next found nothing to claim: the queue ran dry early");
    };
    caller.done(lease)
}

/// The `send` of new thread `seq`.
pub fn send_request(seq: u64) -> Request {
    Request::Send(SendRequest {
        from_agent: Some(LEAD.into()),
        to_agent: Some(WORKER.into()),
        subject: Some(format!("Benchmark task {seq}")),
        ..SendRequest::default()
    })
}

/// The worker's `claim` of the next thread of its queue, default lease.
pub fn claim_next_request() -> Request {
    Request::Claim(ClaimRequest {
        agent: Some(WORKER.into()),
        next: true,
        ..ClaimRequest::default()
    })
}

/// The worker's `done` of the thread it leased.
pub fn done_request(lease: Lease) -> Request {
    Request::Done(FinishRequest {
        agent: Some(WORKER.into()),
        thread_id: Some(lease.thread_id),
        lease_token: Some(lease.lease_token),
        summary: Some("ok".into()),
        ..FinishRequest::default()
    })
}

/// [`send_request`] in the JSON wire format.
pub fn send_json(seq: u64) -> String {
    format!(
        r#"{{"command":"send","from_agent":"{LEAD}","to_agent":"{WORKER}","subject":"Benchmark task {seq}"}}"#
    )
}

/// [`claim_next_request`] in the JSON wire format.
pub const CLAIM_NEXT_JSON: &str = r#"{"command":"claim","agent":"worker","next":true}"#;

/// [`done_request`] in the JSON wire format.
pub fn done_json(lease: &Lease) -> String {
    format!(
        r#"{{"command":"done","agent":"{WORKER}","thread_id":"{}","lease_token":{},"summary":"ok"}}"#,
        lease.thread_id, lease.lease_token
    )
}

/// The lease of a successful claim's JSON response, read as a `--json`
/// caller reads it.
pub fn lease_of(claim_json: &str) -> Result<Lease> {
    let value: serde_json::Value = serde_json::from_str(claim_json)
        .with_context(|| format!("the claim response is not JSON: {claim_json}"))?;
    let thread_id = value["thread"]["thread_id"].as_str();
    let token = value["lease"]["lease_token"].as_u64();
    match (thread_id, token) {
        (Some(thread_id), Some(lease_token)) => Ok(Lease {
            thread_id: thread_id.to_owned(),
            lease_token,
        }),
        _ => bail!("the claim response has no thread id and lease token: {claim_json}"),
    }
}

/// Typed requests straight into an engine (`Executor::execute`), outputs
/// read as Rust values: the engine's own cost, without the JSON contract.
pub struct Typed(pub Box<dyn Executor>);

impl Typed {
    /// Executes `request`; a failure is an error quoting the engine's code.
    fn run(&mut self, request: Request) -> Result<Output> {
        let command = request.command();
        match self.0.execute(request) {
            Response::Success(output) | Response::Replayed(output) => Ok(output),
            Response::Failure { error, .. } => {
                bail!(
                    "inbox {command} failed: {} ({error})",
                    error.code().as_str()
                )
            }
        }
    }
}

impl Caller for Typed {
    fn send(&mut self, seq: u64) -> Result<()> {
        self.run(send_request(seq)).map(drop)
    }

    fn claim_next(&mut self) -> Result<Option<Lease>> {
        match self.run(claim_next_request())? {
            Output::Claim(out) => Ok(out.claimed.map(|c| Lease {
                thread_id: c.thread.thread.thread_id,
                lease_token: c.lease.lease_token,
            })),
            _ => bail!("claim answered with another command"),
        }
    }

    fn done(&mut self, lease: Lease) -> Result<()> {
        self.run(done_request(lease)).map(drop)
    }
}

/// One command's outcome, as a `--json` caller sees it.
pub struct Answer {
    /// The contract's exit code.
    pub exit_code: u8,
    /// The JSON response text.
    pub json: String,
}

/// An engine driven through the JSON wire format: request text in,
/// response text out.
pub trait JsonEngine {
    /// Executes one request; an error only when the engine itself failed
    /// (a trap in a component), never for a refusal, which is an answer.
    fn call(&mut self, request: &str) -> Result<Answer>;

    /// [`JsonEngine::call`], where anything but exit code `expected` is an
    /// error quoting the response.
    fn expect_exit(&mut self, request: &str, expected: u8) -> Result<Answer> {
        let answer = self.call(request)?;
        if answer.exit_code != expected {
            bail!(
                "expected exit {expected} for {request}, got {}: {}",
                answer.exit_code,
                answer.json
            );
        }
        Ok(answer)
    }
}

/// The built-in engine through JSON: the work of `Engine::execute_json`
/// (decode, execute) and `Response::to_json`, which is what the CLI's
/// `--json` does.
impl JsonEngine for Box<dyn Executor> {
    fn call(&mut self, request: &str) -> Result<Answer> {
        let response = match Request::from_json(request) {
            Ok(request) => self.execute(request),
            Err(failure) => *failure,
        };
        Ok(Answer {
            exit_code: response.exit_code(),
            json: response.to_json(),
        })
    }
}

/// The workloads' requests as JSON text through a [`JsonEngine`]; only the
/// claim's response is parsed (for its lease), as a `--json` caller does.
pub struct Json<E: JsonEngine>(pub E);

impl<E: JsonEngine> Caller for Json<E> {
    fn send(&mut self, seq: u64) -> Result<()> {
        self.0.expect_exit(&send_json(seq), 0).map(drop)
    }

    fn claim_next(&mut self) -> Result<Option<Lease>> {
        let answer = self.0.call(CLAIM_NEXT_JSON)?;
        match answer.exit_code {
            0 => lease_of(&answer.json).map(Some),
            // Nothing to claim.
            10 => Ok(None),
            code => bail!(
                "expected exit 0 or 10 for {CLAIM_NEXT_JSON}, got {code}: {}",
                answer.json
            ),
        }
    }

    fn done(&mut self, lease: Lease) -> Result<()> {
        self.0.expect_exit(&done_json(&lease), 0).map(drop)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::stores::StoreKind;

    #[test]
    fn json_requests_are_the_typed_ones() {
        let lease = Lease {
            thread_id: "thr_1".into(),
            lease_token: 3,
        };
        for (json, typed) in [
            (send_json(7), send_request(7)),
            (CLAIM_NEXT_JSON.to_owned(), claim_next_request()),
            (done_json(&lease), done_request(lease.clone())),
        ] {
            assert_eq!(Request::from_json(&json).unwrap(), typed, "{json}");
        }
    }

    #[test]
    fn reads_the_lease_of_a_claim() {
        let json = r#"{"ok":true,"command":"claim","thread":{"thread_id":"thr_A"},"lease":{"lease_token":2}}"#;
        let lease = lease_of(json).unwrap();
        assert_eq!((lease.thread_id.as_str(), lease.lease_token), ("thr_A", 2));
        assert!(lease_of(r#"{"ok":true,"command":"claim"}"#).is_err());
    }

    #[test]
    fn both_callers_run_both_workloads() {
        let sizes = Sizes {
            ops: 5,
            warmup: 2,
            rounds: 1,
        };
        let dir = std::env::temp_dir();
        for workload in Workload::ALL {
            let engine = || StoreKind::Memory.open(&dir, "unused").unwrap().engine();
            let typed = rate(workload, &mut Typed(engine()), sizes).unwrap();
            let json = rate(workload, &mut Json(engine()), sizes).unwrap();
            assert!(typed > 0.0 && json > 0.0, "{typed} {json}");
        }
    }
}
