//! Every system the harness compares, behind two small interfaces:
//!
//! - [`Queue`]: send a task, claim the next one, mark it done (workloads 1,
//!   2 and 5);
//! - [`Endpoint`]: post a message to the other agent, and block until the
//!   other agent posts one (workloads 3 and 4).
//!
//! A [`Target`] names one system with one durability setting and where its
//! data lives; it is serializable so that worker and waiter child processes
//! rebuild the very same client. The systems themselves live in their own
//! modules, each with a header saying what it models and what it leaves out:
//! [`inbox`], [`inbox_pg`] (inbox on PostgreSQL), [`redis_list`],
//! [`redis_stream`], [`postgres`], [`sqlite_queue`] here, and the
//! file peers in [`inbox_bench::files`]. This module must never measure time; it
//! only dispatches.

pub(crate) mod inbox;
pub(crate) mod inbox_pg;
pub(crate) mod postgres;
pub(crate) mod redis_list;
pub(crate) mod redis_stream;
pub(crate) mod sqlite_queue;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use inbox_bench::files::{filedrop::FileDrop, json_array::JsonArray, jsonl::Jsonl};
use serde::{Deserialize, Serialize};

/// Commit durability, with the same meaning for every system (see the
/// report's configuration table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Durability {
    /// Survives a crash of any process; a power loss may lose the last
    /// writes. Each system's default or closest setting.
    Normal,
    /// Every write is fsynced before it is acknowledged.
    Full,
}

impl Durability {
    /// `normal` or `full`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Durability::Normal => "normal",
            Durability::Full => "full",
        }
    }

    /// Whether writes are fsynced.
    pub(crate) fn fsync(self) -> bool {
        self == Durability::Full
    }
}

/// The systems compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum System {
    /// inbox itself (SQLite, in process or through the CLI).
    Inbox,
    /// inbox with its writers going straight to SQLite's write lock, as
    /// before the writer gate and turn (the claim workload's worker
    /// processes only).
    InboxNoGate,
    /// inbox's CLI with `inbox daemon` serving its database (the claim
    /// workload's per-command workers only).
    InboxDaemon,
    /// A bare SQLite queue: one statement per transaction, SQLite's own
    /// busy handler (the claim workload's worker processes); and a bare
    /// SQLite waiter (the wake workload's long-lived waiters).
    SqliteQueue,
    /// The bare SQLite waiter woken by a write of a reply's rows: a
    /// message, its event and the thread's new state, with the indexes
    /// inbox reads them by (the wake workload's long-lived waiters only).
    SqliteReplyRows,
    /// A per-member append-only JSONL inbox with a line cursor (seed 002).
    Jsonl,
    /// A JSON-array inbox rewritten under a lock file per message.
    JsonArray,
    /// A folder of `*.task.json` descriptors polled every 2 s (seed 001).
    FileDrop,
    /// Redis lists: LPUSH / BLPOP / LMOVE.
    RedisList,
    /// Redis streams: XADD / XREADGROUP / XACK / XAUTOCLAIM.
    RedisStream,
    /// PostgreSQL: a `FOR UPDATE SKIP LOCKED` claim queue with LISTEN/NOTIFY.
    Postgres,
    /// The same queue keeping an event log whose ids commit in increasing
    /// order, the ids read by the client as inbox's engine must: what any
    /// such design costs at least (the PostgreSQL workload only).
    PostgresOrdered,
    /// The same log with the ids assigned inside one statement on the
    /// server: what a design that never shows the client an id before its
    /// commit could reach (the PostgreSQL workload only).
    PostgresOrderedInServer,
    /// inbox's engine over its PostgreSQL store (as shipped). Not in
    /// [`System::ALL`]: the PostgreSQL workload compares it.
    InboxPg,
    /// The same store talking one statement per round trip, as the first
    /// cut did.
    InboxPgOneByOne,
    /// The same store without its NOTIFY at commit.
    InboxPgNoNotify,
    /// The same store without the command's own reads in `BEGIN`'s round
    /// trip.
    InboxPgNoCommandReads,
}

impl System {
    /// Every system, in report order.
    pub(crate) const ALL: [System; 7] = [
        System::Inbox,
        System::Jsonl,
        System::JsonArray,
        System::FileDrop,
        System::RedisList,
        System::RedisStream,
        System::Postgres,
    ];

    /// The short name used in tables and plots.
    pub(crate) fn label(self) -> &'static str {
        match self {
            System::Inbox => "inbox",
            System::InboxNoGate => "inbox, no writer gate or turn",
            System::InboxDaemon => "inbox, to inbox daemon",
            System::SqliteQueue => "bare SQLite queue",
            System::SqliteReplyRows => "bare SQLite, a reply's rows",
            System::Jsonl => "JSONL inbox",
            System::JsonArray => "JSON array + lock",
            System::FileDrop => "file-drop (2 s poll)",
            System::RedisList => "Redis list",
            System::RedisStream => "Redis stream",
            System::Postgres => "PostgreSQL",
            System::PostgresOrdered => "PostgreSQL + ordered log, ids read by the client",
            System::PostgresOrderedInServer => "PostgreSQL + ordered log, ids given in the server",
            System::InboxPg => "inbox on PostgreSQL",
            System::InboxPgOneByOne => "inbox on PostgreSQL, one statement per round trip",
            System::InboxPgNoNotify => "inbox on PostgreSQL, no NOTIFY",
            System::InboxPgNoCommandReads => "inbox on PostgreSQL, command's reads not at BEGIN",
        }
    }

    /// For inbox on PostgreSQL: how its store is set up.
    pub(crate) fn pg_variant(self) -> Option<inbox_pg::Variant> {
        match self {
            System::InboxPg => Some(inbox_pg::Variant::Shipped),
            System::InboxPgOneByOne => Some(inbox_pg::Variant::OneByOne),
            System::InboxPgNoNotify => Some(inbox_pg::Variant::NoNotify),
            System::InboxPgNoCommandReads => Some(inbox_pg::Variant::NoCommandReads),
            _ => None,
        }
    }

    /// Whether it runs only in the claim tables: the ordered-log peers,
    /// and the store without its command reads (a send has none).
    pub(crate) fn claims_only(self) -> bool {
        matches!(
            self,
            System::PostgresOrdered
                | System::PostgresOrderedInServer
                | System::InboxPgNoCommandReads
        )
    }

    /// Whether it is inbox (on SQLite or on PostgreSQL, any variant).
    pub(crate) fn is_inbox(self) -> bool {
        self == System::Inbox || self.pg_variant().is_some()
    }

    /// Whether its waits poll on a timer (so wake latency is set by design).
    pub(crate) fn polls(self) -> bool {
        matches!(self, System::Jsonl | System::FileDrop)
    }
}

/// Which agent an [`Endpoint`] plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Role {
    /// The worker: posts questions, waits for answers (`wait-reply`).
    Worker,
    /// The worker waiting with `watch` instead of `wait-reply` (inbox only;
    /// the same as `Worker` elsewhere).
    WorkerWatch,
    /// The lead: posts answers, waits for questions (`watch`).
    Lead,
}

impl Role {
    fn me(self) -> &'static str {
        match self {
            Role::Worker | Role::WorkerWatch => "worker",
            Role::Lead => "lead",
        }
    }

    fn other(self) -> &'static str {
        match self {
            Role::Worker | Role::WorkerWatch => "lead",
            Role::Lead => "worker",
        }
    }
}

/// One system with one durability, and where its data lives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Target {
    /// The system.
    pub(crate) system: System,
    /// Its durability setting.
    pub(crate) durability: Durability,
    /// inbox: the database file; file peers: their folder; inbox on
    /// PostgreSQL: the cluster's conninfo (for its administration).
    pub(crate) path: PathBuf,
    /// Redis: the server URL; PostgreSQL: the conninfo.
    pub(crate) url: String,
    /// inbox endpoints: the thread the two agents talk in.
    pub(crate) thread: Option<String>,
}

/// A task a worker holds.
#[derive(Clone, Debug)]
pub(crate) struct Task {
    /// The task's identity, the same across workers (for duplicate checks).
    pub(crate) id: String,
    /// What the system needs to finish it (a row id, a stream entry id, a
    /// file name, the list value).
    pub(crate) handle: String,
    /// The lease token, where the system has one.
    pub(crate) token: u64,
}

/// The outcome of one claim attempt.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// The task now held, or `None` when there is no work left.
    pub(crate) task: Option<Task>,
    /// Claims lost to other workers on the way (not errors).
    pub(crate) conflicts: u32,
}

/// Send, claim, done.
pub(crate) trait Queue {
    /// Sends task `seq` of `producer` to the worker.
    fn send(&mut self, producer: usize, seq: u64) -> Result<()>;
    /// Claims the next task.
    fn claim(&mut self) -> Result<Claimed>;
    /// Finishes a claimed task.
    fn done(&mut self, task: &Task) -> Result<()>;
}

/// Post to the other agent; block until the other agent posts.
pub(crate) trait Endpoint {
    /// Posts message `seq` to the other agent.
    fn post(&mut self, seq: u64) -> Result<()>;
    /// Blocks until a message from the other agent arrives (true) or
    /// `timeout` passes (false).
    fn wait(&mut self, timeout: Duration) -> Result<bool>;
}

impl Target {
    /// What `$INBOX_DB` names for an inbox CLI process: the file, or for
    /// inbox on PostgreSQL its URL.
    pub(crate) fn db(&self) -> PathBuf {
        match self.system.pg_variant() {
            Some(_) => PathBuf::from(&self.url),
            None => self.path.clone(),
        }
    }

    /// Empties the system's store and creates what the workloads need.
    pub(crate) fn prepare(&self) -> Result<()> {
        match self.system {
            System::Inbox | System::InboxNoGate | System::InboxDaemon => {
                inbox::create(&self.path, self.durability)
            }
            System::SqliteQueue | System::SqliteReplyRows => sqlite_queue::prepare(&self.path),
            System::Jsonl | System::JsonArray | System::FileDrop => {
                if self.path.exists() {
                    std::fs::remove_dir_all(&self.path)?;
                }
                std::fs::create_dir_all(&self.path)?;
                match self.system {
                    System::Jsonl => Jsonl::prepare(&self.path),
                    System::JsonArray => JsonArray::prepare(&self.path),
                    _ => FileDrop::prepare(&self.path),
                }
            }
            System::RedisList => redis_list::prepare(&self.url),
            System::RedisStream => redis_stream::prepare(&self.url),
            System::Postgres | System::PostgresOrdered | System::PostgresOrderedInServer => {
                postgres::prepare(&self.url)
            }
            System::InboxPg
            | System::InboxPgOneByOne
            | System::InboxPgNoNotify
            | System::InboxPgNoCommandReads => {
                inbox_pg::prepare(&self.path.to_string_lossy(), &self.url, self.durability)
            }
        }
    }

    /// [`Target::prepare`], plus what two agents need to talk (inbox: a
    /// thread from the lead, claimed by the worker). Returns the target to
    /// hand to both agents.
    pub(crate) fn prepare_channel(&self) -> Result<Target> {
        self.prepare()?;
        let mut target = self.clone();
        if self.system == System::Inbox {
            target.thread = Some(inbox::create_channel(&self.path)?);
        }
        if let Some(rows) = sqlite_queue::Rows::of(self.system) {
            sqlite_queue::prepare_channel(&self.path, rows)?;
        }
        if self.system.pg_variant().is_some() {
            target.thread = Some(inbox_pg::create_channel(&self.url)?);
        }
        Ok(target)
    }

    /// A client for worker number `worker` (or producer).
    pub(crate) fn queue(&self, worker: usize) -> Result<Box<dyn Queue>> {
        let fsync = self.durability.fsync();
        Ok(match self.system {
            System::Inbox | System::InboxDaemon => {
                Box::new(inbox::InboxQueue::open(&self.path, worker)?)
            }
            System::InboxNoGate => Box::new(inbox::InboxQueue::open_without_gate(&self.path)?),
            System::SqliteQueue => Box::new(sqlite_queue::SqliteQueue::open(
                &self.path,
                self.durability,
                worker,
            )?),
            System::SqliteReplyRows => bail!("the reply-rows waiter is not in the queue workloads"),
            System::Jsonl => Box::new(JsonlQueue(Jsonl::new(&self.path, fsync))),
            System::JsonArray => {
                Box::new(JsonArrayQueue(JsonArray::new(&self.path, fsync), worker))
            }
            System::FileDrop => Box::new(FileDropQueue(FileDrop::new(&self.path, fsync), worker)),
            System::RedisList => Box::new(redis_list::RedisListQueue::open(&self.url, worker)?),
            System::RedisStream => {
                Box::new(redis_stream::RedisStreamQueue::open(&self.url, worker)?)
            }
            System::Postgres => Box::new(postgres::PgQueue::open(
                &self.url,
                self.durability,
                worker,
                postgres::Log::None,
            )?),
            System::PostgresOrdered => Box::new(postgres::PgQueue::open(
                &self.url,
                self.durability,
                worker,
                postgres::Log::ReadByClient,
            )?),
            System::PostgresOrderedInServer => Box::new(postgres::PgQueue::open(
                &self.url,
                self.durability,
                worker,
                postgres::Log::GivenInServer,
            )?),
            System::InboxPg
            | System::InboxPgOneByOne
            | System::InboxPgNoNotify
            | System::InboxPgNoCommandReads => {
                let variant = self
                    .system
                    .pg_variant()
                    .unwrap_or(inbox_pg::Variant::Shipped);
                Box::new(inbox_pg::PgInboxQueue::open(&self.url, variant)?)
            }
        })
    }

    /// An agent's end of a conversation (after [`Target::prepare_channel`]).
    pub(crate) fn endpoint(&self, role: Role) -> Result<Box<dyn Endpoint>> {
        let fsync = self.durability.fsync();
        Ok(match self.system {
            System::Inbox => {
                let Some(thread) = &self.thread else {
                    bail!("an inbox endpoint needs the channel's thread (prepare_channel)");
                };
                Box::new(inbox::InboxEndpoint::open(&self.path, thread, role)?)
            }
            System::Jsonl => {
                let mut jsonl = Jsonl::new(&self.path, fsync);
                jsonl.start_waiting(role.me())?;
                Box::new(JsonlEndpoint { jsonl, role })
            }
            System::FileDrop => Box::new(FileDropEndpoint {
                drop: FileDrop::new(&self.path, fsync),
                role,
            }),
            System::JsonArray => bail!("the JSON-array peer is not in the wait workloads"),
            System::InboxNoGate => {
                bail!("inbox without its writer gate is not in the wait workloads")
            }
            System::InboxDaemon => bail!("inbox through its daemon is not in the wait workloads"),
            System::SqliteQueue | System::SqliteReplyRows => {
                Box::new(sqlite_queue::SqliteEndpoint::open(
                    &self.path,
                    self.durability,
                    role,
                    sqlite_queue::Rows::of(self.system).unwrap_or(sqlite_queue::Rows::One),
                )?)
            }
            System::PostgresOrdered | System::PostgresOrderedInServer => {
                bail!("the ordered-log variants are not in the wait workloads")
            }
            System::RedisList => Box::new(redis_list::RedisListEndpoint::open(&self.url, role)?),
            System::RedisStream => {
                Box::new(redis_stream::RedisStreamEndpoint::open(&self.url, role)?)
            }
            System::Postgres => Box::new(postgres::PgEndpoint::open(
                &self.url,
                self.durability,
                role,
            )?),
            System::InboxPg
            | System::InboxPgOneByOne
            | System::InboxPgNoNotify
            | System::InboxPgNoCommandReads => {
                let Some(thread) = &self.thread else {
                    bail!("an inbox endpoint needs the channel's thread (prepare_channel)");
                };
                Box::new(inbox_pg::PgInboxEndpoint::open(&self.url, thread, role)?)
            }
        })
    }
}

struct JsonlQueue(Jsonl);

impl Queue for JsonlQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        self.0.send(producer, seq)
    }
    fn claim(&mut self) -> Result<Claimed> {
        Ok(Claimed {
            task: self.0.claim()?.map(|id| Task {
                handle: id.clone(),
                id,
                token: 0,
            }),
            conflicts: 0,
        })
    }
    fn done(&mut self, task: &Task) -> Result<()> {
        self.0.done(&task.id)
    }
}

struct JsonArrayQueue(JsonArray, usize);

impl Queue for JsonArrayQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        self.0.send(producer, seq)
    }
    fn claim(&mut self) -> Result<Claimed> {
        Ok(Claimed {
            task: self.0.claim(self.1)?.map(|id| Task {
                handle: id.clone(),
                id,
                token: 0,
            }),
            conflicts: 0,
        })
    }
    fn done(&mut self, task: &Task) -> Result<()> {
        self.0.done(&task.id)
    }
}

struct FileDropQueue(FileDrop, usize);

impl Queue for FileDropQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        self.0.send(producer, seq)
    }
    fn claim(&mut self) -> Result<Claimed> {
        let (name, conflicts) = self.0.claim(self.1)?;
        Ok(Claimed {
            task: name.map(|name| Task {
                id: name.clone(),
                handle: name,
                token: 0,
            }),
            conflicts,
        })
    }
    fn done(&mut self, task: &Task) -> Result<()> {
        self.0.done(&task.handle, self.1)
    }
}

struct JsonlEndpoint {
    jsonl: Jsonl,
    role: Role,
}

impl Endpoint for JsonlEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        self.jsonl.post(self.role.me(), self.role.other(), seq)
    }
    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        self.jsonl.wait(self.role.me(), timeout)
    }
}

struct FileDropEndpoint {
    drop: FileDrop,
    role: Role,
}

impl Endpoint for FileDropEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        self.drop.post(self.role.other(), seq)
    }
    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        self.drop.wait(self.role.me(), timeout)
    }
}
