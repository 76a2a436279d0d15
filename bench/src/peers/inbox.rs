//! inbox itself, driven in process: the product's own engine and SQLite
//! host (`inbox_engine::Engine` over `inbox_host_native`), opened exactly as
//! the CLI opens it (`cli/src/lib.rs`, `open_engine`), one engine (one
//! SQLite connection) per thread or process.
//!
//! It owns creating a store with a durability setting, the request shapes
//! the workloads send, and the worker and waiter loops over the engine:
//! claims go through `fetch` then `claim` (a worker picks at random among
//! the candidates, so concurrent workers rarely collide), waits block in
//! `inbox_sqlite::watch::wait` like `inbox wait-reply` and `inbox
//! watch` do. It must never reach into the SQLite file behind the engine's
//! back: every change goes through a request, so every figure is what an
//! agent would get.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use inbox_bench_kit::stores;
use inbox_engine::wire::{
    ClaimRequest, FinishRequest, ReplyRequest, SendRequest, ShowRequest, UpdateRequest,
    WaitReplyRequest, WatchRequest,
};
use inbox_engine::{Engine, Kind, Output, Request, Response, Status};
use inbox_host_native::{HostClock, NativeEngine, host_ids};
use inbox_sqlite::open_existing;
use inbox_sqlite::watch::{ChangeWatcher, wait};

use super::{Claimed, Durability, Endpoint, Queue, Role, Task};

/// The agent names every workload uses (the worker's is shared by all
/// worker processes: inbox tells them apart by lease token).
pub(crate) use inbox_bench_kit::rates::{LEAD, WORKER};

/// Creates a fresh database at `path` (removing an old one and its WAL)
/// with the given durability, as `inbox init --durability` does.
pub(crate) fn create(path: &Path, durability: Durability) -> Result<()> {
    stores::create_sqlite(
        path,
        match durability {
            Durability::Normal => inbox_sqlite::Durability::Normal,
            Durability::Full => inbox_sqlite::Durability::Full,
        },
    )
}

/// `inbox daemon` serving the database at a path, stopped (killed) when
/// dropped: the rows whose commands hand their calls to it.
pub(crate) struct Daemon(std::process::Child);

impl Daemon {
    /// Starts `inbox` (`program`) as the daemon of the existing database
    /// at `db`; returns once it listens.
    pub(crate) fn serve(program: &Path, db: &Path) -> Result<Daemon> {
        let mut child = std::process::Command::new(program)
            .args(["daemon", "--json", "--db"])
            .arg(db)
            .env_remove("INBOX_NOW")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let mut first = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut first)?;
        }
        let daemon = Daemon(child);
        if !first.starts_with("{\"ok\":true") {
            bail!("inbox daemon did not start on {}: {first:?}", db.display());
        }
        Ok(daemon)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Opens an engine on an existing database for a process that runs many
/// commands (in-process producers, worker and waiter roles), as an embedding
/// host would: with the long-lived checkpoint policy, not the CLI's
/// one-command policy (see docs/lab-log.md).
pub(crate) fn engine(path: &Path) -> Result<NativeEngine> {
    Ok(Engine::new(
        stores::open_sqlite(path)?,
        HostClock::system(),
        host_ids(),
    ))
}

/// An engine set up as one CLI process sets it up (the one-command
/// lifetime: truncating checkpoints, no recovery left for the next
/// process), for measuring what a process does with the database.
pub(crate) fn one_shot_engine(path: &Path) -> Result<NativeEngine> {
    let (store, _) =
        open_existing(path, None).map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    Ok(Engine::new(store, HostClock::system(), host_ids()))
}

/// Executes `request`; a failure is an error quoting the engine's code.
pub(crate) fn run(engine: &mut NativeEngine, request: Request) -> Result<Output> {
    let command = request.command();
    match engine.execute(request) {
        Response::Success(output) | Response::Replayed(output) => Ok(output),
        Response::Failure { error, .. } => {
            bail!(
                "inbox {command} failed: {} ({error})",
                error.code().as_str()
            )
        }
    }
}

/// The new-thread request for task `seq` of `producer`: about the same
/// bytes as the peers' JSON line.
pub(crate) fn send_request(producer: usize, seq: u64) -> Request {
    Request::Send(SendRequest {
        from_agent: Some(LEAD.into()),
        to_agent: Some(WORKER.into()),
        subject: Some(format!("Implement benchmark task {producer}-{seq}")),
        task_id: Some(inbox_bench::files::task_id(producer, seq)),
        body: Some(format!(
            "Benchmark task {producer}-{seq}: a task assignment of about the size the peers send."
        )),
        ..SendRequest::default()
    })
}

/// A worker's client: `claim --next` (the worker's atomic take of the next
/// thread of its queue, as SKILL.md teaches and as the Redis and PostgreSQL
/// peers take theirs), then `done`.
pub(crate) struct InboxQueue {
    engine: NativeEngine,
}

impl InboxQueue {
    /// Opens an engine for worker (or producer) `worker`.
    pub(crate) fn open(path: &Path, _worker: usize) -> Result<InboxQueue> {
        Ok(InboxQueue {
            engine: engine(path)?,
        })
    }

    /// The same, with the engine's writes going straight to SQLite's write
    /// lock (no writer gate, no writer turn): the baseline they are
    /// measured against.
    pub(crate) fn open_without_gate(path: &Path) -> Result<InboxQueue> {
        let mut store = stores::open_sqlite(path)?;
        store.gate_writers(None);
        Ok(InboxQueue {
            engine: Engine::new(store, HostClock::system(), host_ids()),
        })
    }
}

impl Queue for InboxQueue {
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

/// The worker's `claim --next`, as every inbox queue sends it.
pub(crate) fn claim_next_request() -> Request {
    Request::Claim(ClaimRequest {
        agent: Some(WORKER.into()),
        thread_id: None,
        next: true,
        lease_seconds: Some(900),
    })
}

/// What a `claim --next` answered, as the workloads count it.
pub(crate) fn claimed(output: Output) -> Result<Claimed> {
    let Output::Claim(out) = output else {
        bail!("inbox claim answered with another command")
    };
    let task = out.claimed.map(|claimed| Task {
        id: claimed.thread.thread.thread_id.clone(),
        handle: claimed.thread.thread.thread_id,
        token: claimed.lease.lease_token,
    });
    Ok(Claimed { task, conflicts: 0 })
}

/// The worker's `done` of a claimed task.
pub(crate) fn done_request(task: &Task) -> Request {
    Request::Done(FinishRequest {
        agent: Some(WORKER.into()),
        thread_id: Some(task.handle.clone()),
        lease_token: Some(task.token),
        summary: Some("ok".into()),
        ..FinishRequest::default()
    })
}

/// Creates the thread two agents talk in: sent by the lead, claimed by the
/// worker with a lease far longer than any run.
pub(crate) fn create_channel(path: &Path) -> Result<String> {
    let mut engine = engine(path)?;
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

/// One agent's end of the conversation in a thread.
pub(crate) struct InboxEndpoint {
    engine: NativeEngine,
    watcher: ChangeWatcher,
    thread: String,
    role: Role,
    /// Events up to here are seen: the wait's `after_event`.
    cursor: u64,
}

impl InboxEndpoint {
    /// Opens an engine and arms the change watcher (before the first look,
    /// as the CLI does, so no commit is missed).
    pub(crate) fn open(path: &Path, thread: &str, role: Role) -> Result<InboxEndpoint> {
        let watcher = ChangeWatcher::arm(path);
        let mut engine = engine(path)?;
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
        Ok(InboxEndpoint {
            engine,
            watcher,
            thread: thread.into(),
            role,
            cursor,
        })
    }

    /// The event id after which the next wait looks.
    pub(crate) fn cursor(&self) -> u64 {
        self.cursor
    }
}

/// Seconds for a wait's `timeout_seconds` (at least 1).
fn timeout_seconds(timeout: Duration) -> u64 {
    timeout.as_secs().max(1)
}

impl Endpoint for InboxEndpoint {
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
        match wait(&mut self.engine, Engine::store, request, &mut self.watcher) {
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

/// What `role` posts as message `seq` in `thread`: the worker blocks on a
/// question, as `inbox update --status blocked`; the lead answers, as
/// `inbox reply --kind answer`.
pub(crate) fn post_request(role: Role, thread: &str, seq: u64) -> Request {
    match role {
        Role::Worker | Role::WorkerWatch => Request::Update(UpdateRequest {
            agent: Some(WORKER.into()),
            thread_id: Some(thread.to_owned()),
            status: Some(Status::Blocked),
            summary: Some(format!("Question {seq}: which option?")),
            ..UpdateRequest::default()
        }),
        Role::Lead => Request::Reply(ReplyRequest {
            from_agent: Some(LEAD.into()),
            thread_id: Some(thread.to_owned()),
            kind: Some(Kind::Answer),
            summary: Some(format!("Answer {seq}: the first option.")),
            ..ReplyRequest::default()
        }),
    }
}

/// The wait `role` blocks in, after event `cursor`: the worker's
/// `wait-reply` (or `watch`) on `thread`, the lead's `watch` for blocked
/// threads.
pub(crate) fn wait_request(role: Role, thread: &str, cursor: u64, timeout: Duration) -> Request {
    match role {
        Role::Worker => Request::WaitReply(WaitReplyRequest {
            thread_id: Some(thread.to_owned()),
            agent: Some(WORKER.into()),
            after_event: Some(cursor),
            timeout_seconds: Some(timeout_seconds(timeout)),
            ..WaitReplyRequest::default()
        }),
        Role::WorkerWatch => Request::Watch(WatchRequest {
            agent: Some(WORKER.into()),
            after_event: Some(cursor),
            timeout_seconds: Some(timeout_seconds(timeout)),
            ..WatchRequest::default()
        }),
        Role::Lead => Request::Watch(WatchRequest {
            agent: Some(LEAD.into()),
            status: vec![Status::Blocked],
            after_event: Some(cursor),
            timeout_seconds: Some(timeout_seconds(timeout)),
            ..WatchRequest::default()
        }),
    }
}
