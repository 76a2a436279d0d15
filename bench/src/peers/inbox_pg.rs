//! inbox on PostgreSQL, driven in process: the product's engine over its
//! PostgreSQL store (`inbox_postgres::PgStore`, docs/postgres.md), one
//! engine (one connection) per thread or process, sending the very requests
//! the SQLite inbox peer ([`super::inbox`]) sends, and waiting as the CLI
//! does, in `inbox_postgres::listen::wait` on the process's
//! listening [`Hub`].
//!
//! It owns the schema each durability's bus lives in (one schema of the
//! harness's cluster per durability, dropped and created again by
//! [`prepare`] as `inbox init` would create it) and the store's variants
//! the PostgreSQL workload compares ([`Variant`]). Durability is the raw
//! peer's: `synchronous_commit = off` for normal, `on` for full, set in the
//! connection string's `options`. It must never reach into the schema
//! behind the engine's back: every change goes through a request.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use inbox_engine::wire::{ClaimRequest, ShowRequest};
use inbox_engine::{Call, Engine, Output, Request, Response};
use inbox_host_native::{HostClock, host_ids};
use inbox_postgres::PgStore;
use inbox_postgres::listen::{self, Hub};
use serde::{Deserialize, Serialize};

use super::inbox::{
    WORKER, claim_next_request, claimed, done_request, post_request, send_request, wait_request,
};
use super::{Claimed, Durability, Endpoint, Queue, Role, Task};

/// The engine over the PostgreSQL store.
pub(crate) type PgEngine = Engine<PgStore, HostClock, inbox_engine::UlidIds>;

/// How the store talks to the server: the product's defaults, or with one
/// of its levers off, for the same-run comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Variant {
    /// As shipped: writes queued and sent with the next read or the
    /// commit, NOTIFY in the commit's round trip.
    Shipped,
    /// One round trip per statement, as the first cut talked (the
    /// "before" of the round-trip work).
    OneByOne,
    /// As shipped but without the NOTIFY at commit (its cost on commit
    /// throughput; waiters in other processes would fall back to polling).
    NoNotify,
    /// As shipped but without reading the command's own thread (or queue
    /// head) in `BEGIN`'s round trip: the "before" of that read-ahead.
    NoCommandReads,
}

/// The schema a durability's bus lives in.
fn schema(durability: Durability) -> String {
    format!("inbox_{}", durability.as_str())
}

/// The bus's URL, as a user names it in `--db`: the cluster at `port` on
/// 127.0.0.1, with the durability's `synchronous_commit` and the bus's
/// schema as session options.
pub(crate) fn url(port: u16, durability: Durability) -> String {
    let commit = match durability {
        Durability::Normal => "off",
        Durability::Full => "on",
    };
    format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?options=-c%20synchronous_commit%3D{commit}%20-c%20search_path%3D{}",
        schema(durability)
    )
}

/// Drops the bus's schema and creates it again, initialized as `inbox
/// init` does.
pub(crate) fn prepare(conninfo: &str, url: &str, durability: Durability) -> Result<()> {
    let mut admin = postgres::Client::connect(conninfo, postgres::NoTls)
        .with_context(|| format!("cannot connect to PostgreSQL ({conninfo})"))?;
    let name = schema(durability);
    admin
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .context("cannot create the inbox schema")?;
    let mut store = PgStore::connect(url).map_err(|e| anyhow!("{e}"))?;
    inbox_engine::Store::initialize(&mut store).map_err(|e| anyhow!("inbox init: {e}"))?;
    Ok(())
}

/// An engine on the bus with the store set up as `variant` says.
pub(crate) fn engine(url: &str, variant: Variant) -> Result<PgEngine> {
    let mut store = PgStore::connect(url).map_err(|e| anyhow!("{e}"))?;
    store.ensure_schema().map_err(|e| anyhow!("{e}"))?;
    store.pipeline(variant != Variant::OneByOne);
    store.notify_commits(variant != Variant::NoNotify);
    store.read_commands_ahead(variant != Variant::NoCommandReads);
    Ok(Engine::new(store, HostClock::system(), host_ids()))
}

fn run(engine: &mut PgEngine, request: Request) -> Result<Output> {
    let command = request.command();
    match engine.execute(request) {
        Response::Success(output) | Response::Replayed(output) => Ok(output),
        Response::Failure { error, .. } => {
            bail!(
                "inbox {command} on PostgreSQL failed: {} ({error})",
                error.code().as_str()
            )
        }
    }
}

/// A worker's or producer's client, as [`super::inbox::InboxQueue`].
pub(crate) struct PgInboxQueue {
    engine: PgEngine,
}

impl PgInboxQueue {
    pub(crate) fn open(url: &str, variant: Variant) -> Result<PgInboxQueue> {
        Ok(PgInboxQueue {
            engine: engine(url, variant)?,
        })
    }
}

impl Queue for PgInboxQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        run(&mut self.engine, send_request(producer, seq)).map(drop)
    }

    fn claim(&mut self) -> Result<Claimed> {
        claimed(run(&mut self.engine, claim_next_request())?)
    }

    fn done(&mut self, task: &Task) -> Result<()> {
        run(&mut self.engine, done_request(task)).map(drop)
    }
}

/// Creates the thread two agents talk in (see
/// [`super::inbox::create_channel`]).
pub(crate) fn create_channel(url: &str) -> Result<String> {
    let mut engine = engine(url, Variant::Shipped)?;
    let thread = match run(&mut engine, send_request(0, 0))? {
        Output::Send(out) => out.thread.thread.thread_id,
        _ => bail!("send answered with another command"),
    };
    run(
        &mut engine,
        Request::Claim(ClaimRequest {
            agent: Some(WORKER.into()),
            thread_id: Some(thread.clone()),
            next: false,
            lease_seconds: Some(86_400),
        }),
    )?;
    Ok(thread)
}

/// One agent's end of the conversation, waiting on a listener.
pub(crate) struct PgInboxEndpoint {
    engine: PgEngine,
    hub: Hub,
    thread: String,
    role: Role,
    cursor: u64,
}

impl PgInboxEndpoint {
    /// Opens an engine and the process's hub (listening before the first
    /// look, so no commit is missed).
    pub(crate) fn open(url: &str, thread: &str, role: Role) -> Result<PgInboxEndpoint> {
        let mut engine = engine(url, Variant::Shipped)?;
        let hub = engine.store().hub().map_err(|e| anyhow!("{e}"))?;
        let show = run(
            &mut engine,
            Request::Show(ShowRequest {
                thread_id: Some(thread.into()),
                ..ShowRequest::default()
            }),
        )?;
        let cursor = match show {
            Output::Show(out) => out.thread.thread.last_event_id,
            _ => 0,
        };
        Ok(PgInboxEndpoint {
            engine,
            hub,
            thread: thread.into(),
            role,
            cursor,
        })
    }
}

impl Endpoint for PgInboxEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        let request = post_request(self.role, &self.thread, seq);
        let event = match run(&mut self.engine, request)? {
            Output::Update(out) | Output::Reply(out) => out.event_id,
            _ => bail!("a post answered with another command"),
        };
        self.cursor = self.cursor.max(event);
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let request = wait_request(self.role, &self.thread, self.cursor, timeout);
        let response = listen::wait(&mut self.engine, Call::from(request), &self.hub, None)
            .ok_or_else(|| anyhow!("a wait with no stop condition stopped"))?;
        match response {
            Response::Success(Output::WaitReply(out)) => {
                self.cursor = self.cursor.max(out.next_event_id);
                Ok(out.woke)
            }
            Response::Success(Output::Watch(out)) => {
                self.cursor = self.cursor.max(out.next_event_id);
                Ok(out.woke)
            }
            Response::Success(_) | Response::Replayed(_) => {
                bail!("a wait answered with another command")
            }
            Response::Failure { error, .. } => {
                bail!("inbox wait failed: {} ({error})", error.code().as_str())
            }
        }
    }
}
