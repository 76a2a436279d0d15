//! The SQLite floor of a CLI write: a program that commits one row of
//! about 200 bytes to an SQLite database in one write transaction and
//! exits, with the same SQLite and the connection settings `inbox` gives a
//! one-command process (WAL, 2 KiB pages, no checkpoint on close, a
//! truncating checkpoint every `CHECKPOINT_FRAMES` WAL frames), and nothing of inbox's:
//! no engine, schema or argument parser. What any command that writes an
//! SQLite file from a fresh process pays here, read against the
//! process-spawn floor in the same run.
//!
//! `inbox-bench-sqlite-floor DB init` creates the database;
//! `inbox-bench-sqlite-floor DB normal|full` writes one row with
//! `synchronous` at that level. It must stay this small: any work added
//! here raises the floor inbox is read against.

use inbox_host_native::open::CHECKPOINT_FRAMES;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

fn main() -> rusqlite::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, mode] = args.as_slice() else {
        eprintln!("usage: inbox-bench-sqlite-floor DB init|normal|full");
        std::process::exit(2);
    };
    let init = mode == "init";
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if init {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let mut conn = Connection::open_with_flags(path, flags)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
    conn.wal_hook(Some(|wal: &mut rusqlite::hooks::Wal, frames| {
        // When an `inbox` process truncates the WAL: the same constant.
        if frames >= CHECKPOINT_FRAMES {
            // Busy is fine: a later commit checkpoints.
            let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::TRUNCATE);
        }
        Ok(())
    }))?;
    if init {
        return conn.execute_batch(
            "PRAGMA page_size = 2048; PRAGMA journal_mode = WAL;
             CREATE TABLE messages (id INTEGER PRIMARY KEY, recipient TEXT NOT NULL, body TEXT NOT NULL);
             CREATE INDEX messages_by_recipient ON messages (recipient, id);",
        );
    }
    let synchronous = if mode == "full" { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO messages (recipient, body) VALUES ('worker', ?1)",
        [
            "Benchmark task: a task assignment of about the size the peers send, \
          padded to some two hundred bytes so that a row is what a send writes; \
          the floor writes the same page or two each time.",
        ],
    )?;
    tx.commit()
}
