//! `inbox-bench wasm-baseline`: the native figures the wasm benchmark
//! (`host-wasm/js/bench/run.mjs`) sets its Node and Chromium figures
//! against, measured in the same run. It prints one JSON object on stdout
//! and writes no report of its own.
//!
//! It runs exactly the wasm benchmark's two workloads, one engine in this
//! process, one store per round:
//! - **send**: `send` of a new thread (`from_agent`, `to_agent`, `subject`
//!   only, as the JS runner sends it), `warmup` untimed then `ops` timed;
//! - **claim+done**: `warmup + ops` threads sent first (untimed), then pairs
//!   of `claim --next` and `done` with the returned lease token, `warmup`
//!   untimed then `ops` timed.
//!
//! over these stores, each new for every round:
//! - `sqlite-file`: the native SQLite store in a file under a temporary
//!   folder, created as `inbox init` creates it (WAL, normal durability: no
//!   fsync per commit) and opened with the long-lived settings every other
//!   in-process figure of the harness uses ([`crate::peers::inbox::engine`]);
//!   this is *the* native SQLite figure;
//! - `sqlite-file-full`: the same with `--durability full` (fsync per
//!   commit), the native counterpart of a store that flushes every commit;
//! - `sqlite-memory`: native SQLite in memory (`:memory:`) with the settings
//!   the wasm `sqlite` store applies, so that wasm against native compares
//!   the same SQLite work;
//! - `memory`: the engine's `MemoryStore`, as the wasm `memory` store.
//!
//! Each is driven twice: with typed requests (`Engine::execute`, as the
//! rest of the harness does) and through the JSON contract (request text
//! decoded, response encoded and parsed back), which is the work every call
//! of the wasm package does on top of the engine. Rates are operations (a
//! send, or a claim and its done) per second of the timed loop; the runner
//! takes the medians, so every round's rate is printed.
//!
//! This module must never reach into the SQLite file behind the engine's
//! back: every change is a request, as in every other workload.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use inbox_engine::wire::{ClaimRequest, FinishRequest, SendRequest};
use inbox_engine::{Engine, Executor, MemoryStore, Output, Request, Response, Store};
use inbox_host_native::store::PORTABLE_PRAGMAS;
use inbox_host_native::{HostClock, SqliteStore, host_ids};
use serde::Serialize;
use serde_json::{Value, json};

use crate::peers::Durability;
use crate::peers::inbox::{LEAD, WORKER};
use crate::services::TempDir;

const USAGE: &str = "\
usage: inbox-bench wasm-baseline [--ops N] [--warmup N] [--rounds N]

  --ops N     timed operations per round and workload (default 2000)
  --warmup N  untimed operations before them (default 200)
  --rounds N  rounds, each on new stores (default 5)

Prints one JSON object: every round's sends/s and claim+done pairs/s for the
native engine over SQLite in a file (normal and full durability), SQLite in
memory and the in-memory store; host-wasm/js/bench/run.mjs runs it.";

/// The stores measured, in output order.
const STORES: [&str; 4] = ["sqlite-file", "sqlite-file-full", "sqlite-memory", "memory"];

/// How requests reach the engine.
#[derive(Clone, Copy)]
enum Api {
    /// `Engine::execute` with a typed request.
    Typed,
    /// JSON text in, JSON text out and parsed, as the wasm package does.
    Json,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Typed => "typed",
            Api::Json => "json",
        }
    }
}

#[derive(Clone, Copy)]
struct Sizes {
    ops: u64,
    warmup: u64,
    rounds: u64,
}

#[derive(Serialize)]
struct Series {
    store: &'static str,
    api: &'static str,
    workload: &'static str,
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

/// Runs the subcommand with the arguments after `wasm-baseline`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let sizes = parse(args)?;
    let tmp = TempDir::new()?;
    let apis = [Api::Typed, Api::Json];
    let workloads = ["send", "claim+done"];
    let mut series: Vec<Series> = Vec::new();
    for store in STORES {
        for api in apis {
            for workload in workloads {
                series.push(Series {
                    store,
                    api: api.name(),
                    workload,
                    ops_per_sec: Vec::new(),
                });
            }
        }
    }
    // Rounds outermost, so that a slow spell of the machine touches every
    // series alike instead of one series wholesale.
    for round in 0..sizes.rounds {
        let mut index = 0;
        for store in STORES {
            for api in apis {
                for workload in workloads {
                    let mut engine = open(store, tmp.path(), round)
                        .with_context(|| format!("cannot open the {store} store"))?;
                    let rate = match workload {
                        "send" => send(engine.as_mut(), api, sizes),
                        _ => claim_done(engine.as_mut(), api, sizes),
                    }
                    .with_context(|| format!("{workload} over {store} ({})", api.name()))?;
                    series[index].ops_per_sec.push(rate);
                    index += 1;
                }
            }
        }
    }
    let baseline = Baseline {
        ops: sizes.ops,
        warmup: sizes.warmup,
        rounds: sizes.rounds,
        sqlite_version: rusqlite::version(),
        series,
    };
    let text = serde_json::to_string(&baseline)?;
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

fn parse(args: &[String]) -> Result<Sizes> {
    let mut sizes = Sizes {
        ops: 2000,
        warmup: 200,
        rounds: 5,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--ops" => &mut sizes.ops,
            "--warmup" => &mut sizes.warmup,
            "--rounds" => &mut sizes.rounds,
            "-h" | "--help" => {
                writeln!(std::io::stdout(), "{USAGE}")?;
                std::process::exit(0);
            }
            other => bail!("unknown flag `{other}`\n\n{USAGE}"),
        };
        let Some(value) = args.next() else {
            bail!("{arg} needs a number\n\n{USAGE}");
        };
        *slot = value
            .parse()
            .with_context(|| format!("{arg} needs a number, not `{value}`"))?;
    }
    if sizes.ops == 0 || sizes.rounds == 0 {
        bail!("--ops and --rounds must be at least 1\n\n{USAGE}");
    }
    Ok(sizes)
}

/// A new engine over `store` (a new file under `dir` for the file stores).
fn open(store: &str, dir: &Path, round: u64) -> Result<Box<dyn Executor>> {
    match store {
        "sqlite-file" | "sqlite-file-full" => {
            let durability = if store == "sqlite-file" {
                Durability::Normal
            } else {
                Durability::Full
            };
            let path = dir.join(format!("{store}-{round}.db"));
            crate::peers::inbox::create(&path, durability)?;
            Ok(Box::new(crate::peers::inbox::engine(&path)?))
        }
        "sqlite-memory" => {
            // As the wasm package opens its `sqlite` store (host-wasm/src/backend.rs).
            let conn = rusqlite::Connection::open_in_memory()?;
            conn.execute_batch(PORTABLE_PRAGMAS)?;
            let mut store = SqliteStore::new(conn, ":memory:").map_err(|e| anyhow!("{e}"))?;
            store.initialize().map_err(|e| anyhow!("{e}"))?;
            Ok(Box::new(Engine::new(
                store,
                HostClock::system(),
                host_ids(),
            )))
        }
        _ => {
            let mut store = MemoryStore::new();
            store.initialize().map_err(|e| anyhow!("{e}"))?;
            Ok(Box::new(Engine::new(
                store,
                HostClock::system(),
                host_ids(),
            )))
        }
    }
}

/// Runs `request` through `api`, a failure being an error. Returns the
/// thread id and lease token of a claim's lease (`None` for other commands,
/// and for a claim that found nothing), read from the typed output or from
/// the parsed JSON as a JS caller reads it.
fn call(engine: &mut dyn Executor, api: Api, request: Request) -> Result<Option<(String, u64)>> {
    let command = request.command();
    let response = match api {
        Api::Typed => engine.execute(request),
        Api::Json => {
            let text = request_json(&request)?;
            let request = Request::from_json(&text).map_err(|failure| {
                anyhow!("{command} request did not decode: {}", failure.to_json())
            })?;
            let response = engine.execute(request);
            let value: Value = serde_json::from_str(&response.to_json())?;
            if response.is_ok() {
                let thread = value["thread"]["thread_id"].as_str();
                let token = value["lease"]["lease_token"].as_u64();
                return Ok(thread.zip(token).map(|(t, l)| (t.to_owned(), l)));
            }
            response
        }
    };
    match response {
        Response::Success(Output::Claim(out)) => Ok(out
            .claimed
            .map(|c| (c.thread.thread.thread_id, c.lease.lease_token))),
        Response::Success(_) => Ok(None),
        Response::Failure { error, .. } => {
            bail!(
                "inbox {command} failed: {} ({error})",
                error.code().as_str()
            )
        }
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

fn send_request(seq: u64) -> Request {
    Request::Send(SendRequest {
        from_agent: Some(LEAD.into()),
        to_agent: Some(WORKER.into()),
        subject: Some(format!("Benchmark task {seq}")),
        ..SendRequest::default()
    })
}

/// Sends/s over `ops` new threads after `warmup` untimed ones.
fn send(engine: &mut dyn Executor, api: Api, sizes: Sizes) -> Result<f64> {
    for seq in 0..sizes.warmup {
        call(engine, api, send_request(seq))?;
    }
    let start = Instant::now();
    for seq in sizes.warmup..sizes.warmup + sizes.ops {
        call(engine, api, send_request(seq))?;
    }
    Ok(sizes.ops as f64 / start.elapsed().as_secs_f64())
}

/// Claim+done pairs/s over `ops` queued threads after `warmup` untimed pairs.
fn claim_done(engine: &mut dyn Executor, api: Api, sizes: Sizes) -> Result<f64> {
    for seq in 0..sizes.warmup + sizes.ops {
        call(engine, Api::Typed, send_request(seq))?;
    }
    for _ in 0..sizes.warmup {
        pair(engine, api)?;
    }
    let start = Instant::now();
    for _ in 0..sizes.ops {
        pair(engine, api)?;
    }
    let rate = sizes.ops as f64 / start.elapsed().as_secs_f64();
    // Every queued thread was taken exactly once: the queue is empty now.
    if call(engine, Api::Typed, claim_next())?.is_some() {
        bail!("threads left in the queue after the timed loop");
    }
    Ok(rate)
}

/// `claim --next` for the worker, with the default lease.
fn claim_next() -> Request {
    Request::Claim(ClaimRequest {
        agent: Some(WORKER.into()),
        next: true,
        ..ClaimRequest::default()
    })
}

/// One `claim --next` and the `done` of the thread it leased.
fn pair(engine: &mut dyn Executor, api: Api) -> Result<()> {
    let claimed = call(engine, api, claim_next())?;
    let Some((thread, token)) = claimed else {
        bail!("claim --next found nothing to claim: the queue ran dry early");
    };
    call(
        engine,
        api,
        Request::Done(FinishRequest {
            agent: Some(WORKER.into()),
            thread_id: Some(thread),
            lease_token: Some(token),
            summary: Some("ok".into()),
            ..FinishRequest::default()
        }),
    )?;
    Ok(())
}
