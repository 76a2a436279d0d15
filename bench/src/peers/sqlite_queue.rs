//! Peer: a bare SQLite work queue and waiter, the least any queue on SQLite
//! does per task and per wake, to read inbox's claim and wake figures
//! against the database it runs on.
//!
//! How it is modelled: one table of tasks in an SQLite database in WAL
//! mode with 2 KiB pages, `synchronous` NORMAL or FULL as the durability
//! asks, the same SQLite `inbox` links. A worker claims in one
//! `BEGIN IMMEDIATE` transaction (one `UPDATE ... RETURNING` of the first
//! pending task, found through a partial index) and finishes in another
//! (one `UPDATE` that checks the claim's token). Waiting for the write
//! lock is SQLite's own busy handler (`busy_timeout`), as a program that
//! sets nothing else gets. WAL checkpoints are SQLite's default (every
//! 1000 frames, in the commit that passes them).
//!
//! What it leaves out, against inbox: lease expiry and recording lapses,
//! the agent's record, the thread's messages and the event log (one
//! statement per transaction here, about ten in inbox), checks of the
//! database file's identity, and the writer gate.
//!
//! The waiter (workload 3) learns of a commit the way inbox's does, and no
//! cheaper way exists for a process that reads a database another process
//! wrote: inotify on the database's folder reports the WAL's write, `PRAGMA
//! data_version` shows when the commit is visible (chased with 50 µs
//! pauses, since making a commit visible writes only the mapped `-shm`),
//! and one indexed `SELECT` reads the message. Its watch stays armed for
//! the process's life, so no commit can slip between a look and a sleep
//! and nothing is paid to add or remove it. A message is one `INSERT` in
//! its own transaction ([`Rows::One`]), or, to read inbox's write against
//! what its data costs in SQLite, the rows an inbox reply writes and the
//! indexes inbox reads them by ([`Rows::Reply`]).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use inbox_bench::files::task_id;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::{Claimed, Durability, Endpoint, Queue, Role, System, Task};

/// How long a writer waits for the lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates a fresh database at `path`, removing an old one and its WAL.
pub(crate) fn prepare(path: &Path) -> Result<()> {
    inbox_bench_kit::stores::remove_sqlite(path)?;
    let conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA page_size = 2048;
         PRAGMA journal_mode = WAL;
         CREATE TABLE tasks (
             id INTEGER PRIMARY KEY,
             task_id TEXT NOT NULL UNIQUE,
             body TEXT NOT NULL,
             status INTEGER NOT NULL DEFAULT 0, -- 0 pending, 1 claimed, 2 done
             worker INTEGER,
             token INTEGER NOT NULL DEFAULT 0
         );
         CREATE INDEX pending ON tasks (id) WHERE status = 0;",
    )
    .context("cannot create the SQLite queue")
}

/// A producer's or worker's connection.
pub(crate) struct SqliteQueue {
    conn: Connection,
    worker: usize,
}

impl SqliteQueue {
    /// Opens the queue at `path` as worker (or producer) `worker`.
    pub(crate) fn open(path: &Path, durability: Durability, worker: usize) -> Result<SqliteQueue> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let synchronous = if durability.fsync() { "FULL" } else { "NORMAL" };
        conn.pragma_update(None, "synchronous", synchronous)?;
        Ok(SqliteQueue { conn, worker })
    }
}

impl Queue for SqliteQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.prepare_cached("INSERT INTO tasks (task_id, body) VALUES (?1, ?2)")?
            .execute((
                task_id(producer, seq),
                format!("Benchmark task {producer}-{seq}: a task assignment of about the size the peers send."),
            ))?;
        tx.commit()?;
        Ok(())
    }

    fn claim(&mut self) -> Result<Claimed> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let claimed = tx
            .prepare_cached(
                "UPDATE tasks SET status = 1, worker = ?1, token = token + 1
                 WHERE id = (SELECT id FROM tasks WHERE status = 0 ORDER BY id LIMIT 1)
                 RETURNING id, task_id, token",
            )?
            .query_row([i64::try_from(self.worker)?], |row| {
                Ok(Task {
                    handle: row.get::<_, i64>(0)?.to_string(),
                    id: row.get(1)?,
                    token: row.get::<_, i64>(2)?.try_into().unwrap_or(0),
                })
            })
            .optional()?;
        tx.commit()?;
        Ok(Claimed {
            task: claimed,
            conflicts: 0,
        })
    }

    fn done(&mut self, task: &Task) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = tx
            .prepare_cached(
                "UPDATE tasks SET status = 2 WHERE id = ?1 AND status = 1 AND token = ?2",
            )?
            .execute((task.handle.parse::<i64>()?, i64::try_from(task.token)?))?;
        tx.commit()?;
        if changed == 1 {
            Ok(())
        } else {
            Err(anyhow!(
                "task {} was not held with token {}",
                task.id,
                task.token
            ))
        }
    }
}

/// What a message's write is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rows {
    /// One row in a table with one index: the least a message costs.
    One,
    /// The pages an inbox reply writes (eight): the message in its table,
    /// unique by id and indexed by thread and by recipient; its event,
    /// indexed by thread and by source; the thread's row, its latest
    /// message and event. No status changes, so no status index is
    /// touched, as in inbox's reply to a thread at work.
    Reply,
}

impl Rows {
    /// The rows `system`'s waiter is woken by, if it is a bare SQLite one.
    pub(crate) fn of(system: System) -> Option<Rows> {
        match system {
            System::SqliteQueue => Some(Rows::One),
            System::SqliteReplyRows => Some(Rows::Reply),
            _ => None,
        }
    }
}

/// The thread a [`Rows::Reply`] message is written in.
const THREAD: &str = "thr_bench";

/// Adds the two agents' messages to a queue made by [`prepare`].
pub(crate) fn prepare_channel(path: &Path, rows: Rows) -> Result<()> {
    let tables = match rows {
        Rows::One => {
            "CREATE TABLE messages (
                 id INTEGER PRIMARY KEY,
                 to_agent TEXT NOT NULL,
                 body TEXT NOT NULL
             );
             CREATE INDEX inbox_of ON messages (to_agent, id);"
        }
        Rows::Reply => {
            "CREATE TABLE messages (
                 id INTEGER PRIMARY KEY,
                 message_id TEXT NOT NULL UNIQUE,
                 thread_id TEXT NOT NULL,
                 to_agent TEXT NOT NULL,
                 body TEXT NOT NULL
             );
             CREATE INDEX inbox_of ON messages (to_agent, id);
             CREATE INDEX messages_of ON messages (thread_id, id);
             CREATE TABLE events (
                 id INTEGER PRIMARY KEY,
                 thread_id TEXT NOT NULL,
                 source TEXT NOT NULL,
                 summary TEXT NOT NULL
             );
             CREATE INDEX events_of ON events (thread_id, id);
             CREATE INDEX events_by ON events (source, id);
             CREATE TABLE threads (
                 thread_id TEXT PRIMARY KEY NOT NULL,
                 status TEXT NOT NULL,
                 latest_message_id TEXT,
                 last_event_id INTEGER NOT NULL
             ) WITHOUT ROWID;
             CREATE INDEX threads_of ON threads (status);
             INSERT INTO threads VALUES ('thr_bench', 'claimed', NULL, 0);"
        }
    };
    Connection::open(path)?
        .execute_batch(tables)
        .context("cannot create the SQLite messages")
}

/// How long a WAL write is chased for its commit before the waiter sleeps
/// until the next notification.
const CHASE: Duration = Duration::from_millis(10);

/// The pause between two looks at `data_version` while chasing.
const CHASE_PAUSE: Duration = Duration::from_micros(50);

/// One agent's end of a conversation over a bare SQLite table.
pub(crate) struct SqliteEndpoint {
    conn: Connection,
    role: Role,
    rows: Rows,
    /// The id of the last message read.
    cursor: i64,
    wal: wal_watch::WalWatch,
}

impl SqliteEndpoint {
    /// Opens `role`'s end; it reads only messages sent after it opened.
    pub(crate) fn open(
        path: &Path,
        durability: Durability,
        role: Role,
        rows: Rows,
    ) -> Result<SqliteEndpoint> {
        let wal = wal_watch::WalWatch::new(path)?;
        let conn = SqliteQueue::open(path, durability, 0)?.conn;
        let cursor = conn.query_row("SELECT coalesce(max(id), 0) FROM messages", [], |row| {
            row.get(0)
        })?;
        Ok(SqliteEndpoint {
            conn,
            role,
            rows,
            cursor,
            wal,
        })
    }

    /// The next message to this agent after the cursor, if any.
    fn look(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT id FROM messages WHERE to_agent = ?1 AND id > ?2 ORDER BY id LIMIT 1",
            )?
            .query_row((self.role.me(), self.cursor), |row| row.get(0))
            .optional()?)
    }

    fn data_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?)
    }
}

impl Endpoint for SqliteEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let body = format!("Benchmark message {seq}: about the size of an agent's answer.");
        match self.rows {
            Rows::One => {
                tx.prepare_cached("INSERT INTO messages (to_agent, body) VALUES (?1, ?2)")?
                    .execute((self.role.other(), body))?;
            }
            Rows::Reply => {
                let message_id = format!("msg_{seq:016}");
                let id: i64 = tx
                    .prepare_cached(
                        "INSERT INTO messages (message_id, thread_id, to_agent, body)
                         VALUES (?1, ?2, ?3, ?4) RETURNING id",
                    )?
                    .query_row((&message_id, THREAD, self.role.other(), &body), |row| {
                        row.get(0)
                    })?;
                tx.prepare_cached(
                    "INSERT INTO events (id, thread_id, source, summary) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute((id, THREAD, self.role.me(), &body))?;
                tx.prepare_cached(
                    "UPDATE threads SET latest_message_id = ?2, last_event_id = ?3
                     WHERE thread_id = ?1",
                )?
                .execute((THREAD, &message_id, id))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut seen = self.data_version()?;
        let mut chase_until = None;
        loop {
            if let Some(id) = self.look()? {
                self.cursor = id;
                return Ok(true);
            }
            // Sleep until another connection's commit shows.
            loop {
                let version = self.data_version()?;
                if version != seen {
                    seen = version;
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                let pause = match chase_until {
                    Some(until) if now < until => CHASE_PAUSE,
                    _ => deadline - now,
                };
                if self.wal.wait(pause)? {
                    chase_until = Some(Instant::now() + CHASE);
                }
            }
        }
    }
}

/// inotify on the database's folder, filtered to its WAL. Written here
/// rather than taken from `inbox-host-native`, whose watch belongs to its
/// store: this peer must not run any of inbox's code.
mod wal_watch {
    use std::ffi::OsString;
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt as _;
    use std::path::Path;
    use std::time::Duration;

    use anyhow::{Context as _, Result};
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    pub(super) struct WalWatch {
        fd: OwnedFd,
        wal: OsString,
    }

    impl WalWatch {
        pub(super) fn new(db: &Path) -> Result<WalWatch> {
            let dir = db.parent().context("the database has no folder")?;
            let mut wal = db
                .file_name()
                .context("the database has no name")?
                .to_owned();
            wal.push("-wal");
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
            inotify::add_watch(&fd, dir, WatchFlags::MODIFY | WatchFlags::CREATE)?;
            Ok(WalWatch { fd, wal })
        }

        /// Blocks up to `timeout`; true if the WAL was written meanwhile.
        pub(super) fn wait(&mut self, timeout: Duration) -> Result<bool> {
            let timespec = Timespec {
                tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            if poll(&mut fds, Some(&timespec))? == 0 {
                return Ok(false);
            }
            self.drain()
        }

        /// Reads every queued event; true if one was about the WAL.
        fn drain(&mut self) -> Result<bool> {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            let mut wal = false;
            loop {
                match reader.next() {
                    Ok(event) => {
                        wal |= event
                            .file_name()
                            .is_some_and(|name| name.to_bytes() == self.wal.as_bytes());
                    }
                    Err(rustix::io::Errno::AGAIN) => return Ok(wal),
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }
}
