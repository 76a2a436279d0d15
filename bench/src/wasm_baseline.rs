//! `inbox-bench wasm-baseline`: the native figures the wasm benchmark
//! (`host-wasm/js/bench/run.mjs`) sets its Node and Chromium figures
//! against, measured in the same run. It prints one JSON object on stdout
//! and writes no report of its own.
//!
//! It runs exactly the wasm benchmark's two workloads (the kit's
//! [`inbox_bench_kit::rates`]: `send`, and `claim --next` with `done`), one
//! engine in this process, over these stores (the kit's
//! [`StoreKind`]), each new for every round:
//! - `sqlite-file`: the native SQLite store in a file under a temporary
//!   folder, created as `inbox init` creates it (WAL, normal durability: no
//!   fsync per commit) and opened with the long-lived settings every other
//!   in-process figure of the harness uses; this is *the* native SQLite
//!   figure;
//! - `sqlite-file-full`: the same with `--durability full` (fsync per
//!   commit), the native counterpart of a store that flushes every commit;
//! - `sqlite-memory`: native SQLite in memory (`:memory:`) with the settings
//!   the wasm `sqlite` store applies, so that wasm against native compares
//!   the same SQLite work;
//! - `memory`: the engine's `MemoryStore`, as the wasm `memory` store.
//!
//! Each is driven twice: with typed requests (the kit's [`Typed`] caller,
//! as the rest of the harness does) and through the JSON contract as
//! JavaScript calls the wasm package ([`Js`]: the request built as JSON
//! text and decoded, the response encoded and parsed back), which is the
//! work every call of the wasm package does on top of the engine. Rates are
//! operations (a send, or a claim and its done) per second of the timed
//! loop; the runner takes the medians, so every round's rate is printed, in
//! the JSON shape `run.mjs` reads.
//!
//! This module must never reach into the SQLite file behind the engine's
//! back: every change is a request, as in every other workload.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use inbox_bench_kit::rates::{
    self, Caller, Lease, Sizes, Typed, Workload, claim_next_request, done_request, send_request,
};
use inbox_bench_kit::stores::{self, StoreKind};
use inbox_engine::{Executor, Request};
use serde::Serialize;
use serde_json::{Value, json};

use crate::services::TempDir;

/// The sizes of a run.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Timed operations per round and workload
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    ops: u64,
    /// Untimed operations before them
    #[arg(long, value_name = "N", default_value_t = 200)]
    warmup: u64,
    /// Rounds, each on new stores
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
}

/// The stores measured, in output order.
const STORES: [StoreKind; 4] = [
    StoreKind::SqliteFile,
    StoreKind::SqliteFileFull,
    StoreKind::SqliteMemory,
    StoreKind::Memory,
];

/// How requests reach the engine.
#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "lowercase")]
enum Api {
    /// Typed requests (the kit's [`Typed`]).
    Typed,
    /// JSON text in, JSON text out and parsed, as the wasm package does
    /// ([`Js`]).
    Json,
}

/// Every round's rate of one store, API and workload.
#[derive(Serialize)]
struct Series {
    store: StoreKind,
    api: Api,
    workload: Workload,
    /// Operations per second, one per round, in run order.
    ops_per_sec: Vec<f64>,
}

#[derive(Serialize)]
struct Baseline {
    ops: u64,
    warmup: u64,
    rounds: u64,
    sqlite_version: &'static str,
    series: Vec<Series>,
}

/// Runs the subcommand.
pub(crate) fn run(args: &Args) -> Result<()> {
    let sizes = Sizes {
        ops: args.ops,
        warmup: args.warmup,
        rounds: args.rounds,
    };
    let tmp = TempDir::new()?;
    let mut series: Vec<Series> = Vec::new();
    for store in STORES {
        for api in [Api::Typed, Api::Json] {
            for workload in Workload::ALL {
                series.push(Series {
                    store,
                    api,
                    workload,
                    ops_per_sec: Vec::new(),
                });
            }
        }
    }
    // Rounds outermost, so that a slow spell of the machine touches every
    // series alike instead of one series wholesale.
    for round in 0..sizes.rounds {
        for s in &mut series {
            let rate = one(s, tmp.path(), round, sizes)
                .with_context(|| format!("{} over {}", s.workload.name(), s.store.name()))?;
            s.ops_per_sec.push(rate);
        }
    }
    let baseline = Baseline {
        ops: sizes.ops,
        warmup: sizes.warmup,
        rounds: sizes.rounds,
        sqlite_version: stores::sqlite_version(),
        series,
    };
    let text = serde_json::to_string(&baseline)?;
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// One round of one series, on a new store under `dir`.
fn one(series: &Series, dir: &Path, round: u64, sizes: Sizes) -> Result<f64> {
    let name = format!("{}-{round}", series.store.name());
    let engine = series.store.open(dir, &name)?.engine();
    let mut caller: Box<dyn Caller> = match series.api {
        Api::Typed => Box::new(Typed(engine)),
        Api::Json => Box::new(Js(engine)),
    };
    let rate = rates::rate(series.workload, caller.as_mut(), sizes)?;
    drop(caller);
    series.store.remove(dir, &name)?;
    Ok(rate)
}

/// The engine as JavaScript calls the wasm package: each request built as
/// JSON text (what `JSON.stringify` of the same fields gives) and decoded,
/// each response encoded to JSON text and parsed back.
struct Js(Box<dyn Executor>);

impl Js {
    /// Runs `request`, a failure being an error; returns the lease a claim
    /// took, read from the parsed response as a JS caller reads it.
    fn call(&mut self, request: Request) -> Result<Option<Lease>> {
        let command = request.command();
        let text = request_json(&request)?;
        let request = Request::from_json(&text).map_err(|failure| {
            anyhow!("{command} request did not decode: {}", failure.to_json())
        })?;
        let response = self.0.execute(request);
        let value: Value = serde_json::from_str(&response.to_json())?;
        if let Some(error) = response.error() {
            bail!(
                "inbox {command} failed: {} ({error})",
                error.code().as_str()
            );
        }
        let thread = value["thread"]["thread_id"].as_str();
        let token = value["lease"]["lease_token"].as_u64();
        Ok(thread.zip(token).map(|(t, l)| Lease {
            thread_id: t.to_owned(),
            lease_token: l,
        }))
    }
}

impl Caller for Js {
    fn send(&mut self, seq: u64) -> Result<()> {
        self.call(send_request(seq)).map(drop)
    }

    fn claim_next(&mut self) -> Result<Option<Lease>> {
        self.call(claim_next_request())
    }

    fn done(&mut self, lease: Lease) -> Result<()> {
        self.call(done_request(lease)).map(drop)
    }
}

/// The JSON text of the request, as a JS caller's `JSON.stringify` of the
/// same fields gives it.
fn request_json(request: &Request) -> Result<String> {
    let value = match request {
        Request::Send(r) => json!({
            "command": "send", "from_agent": r.from_agent, "to_agent": r.to_agent,
            "subject": r.subject,
        }),
        Request::Claim(r) => json!({"command": "claim", "agent": r.agent, "next": r.next}),
        Request::Done(r) => json!({
            "command": "done", "agent": r.agent, "thread_id": r.thread_id,
            "lease_token": r.lease_token, "summary": r.summary,
        }),
        other => bail!("no JSON form for {} here", other.command()),
    };
    Ok(value.to_string())
}
