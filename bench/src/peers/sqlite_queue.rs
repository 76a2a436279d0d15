//! Peer: a bare SQLite work queue, the least any queue on SQLite does per
//! task, to read inbox's claim figures against the database it runs on.
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

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use inbox_bench::files::task_id;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::{Claimed, Durability, Queue, Task};

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
