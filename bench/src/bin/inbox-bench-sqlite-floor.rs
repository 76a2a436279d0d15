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
//! `inbox-bench-sqlite-floor DB init-inbox-schema` creates it with inbox's
//! schema beside the floor's table, never touched by the writes, to measure
//! what a schema that size costs a fresh connection (SQLite parses every
//! table and index of a file before its first statement);
//! `inbox-bench-sqlite-floor DB normal|full` writes one row with
//! `synchronous` at that level. It must stay this small: any work added
//! here raises the floor inbox is read against.

use inbox_sqlite::open::CHECKPOINT_FRAMES;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

/// What one run of the program does.
#[derive(Clone, Copy)]
enum Mode {
    /// Create the database (with inbox's schema too, if true).
    Init { inbox_schema: bool },
    /// Commit one row, with `synchronous = FULL` if true.
    Write { full: bool },
}

fn main() -> rusqlite::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, mode) = match args.as_slice() {
        [path, mode] => match mode.as_str() {
            "init" => (
                path,
                Mode::Init {
                    inbox_schema: false,
                },
            ),
            "init-inbox-schema" => (path, Mode::Init { inbox_schema: true }),
            "normal" => (path, Mode::Write { full: false }),
            "full" => (path, Mode::Write { full: true }),
            _ => usage(),
        },
        _ => usage(),
    };
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if matches!(mode, Mode::Init { .. }) {
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
    match mode {
        Mode::Init { inbox_schema } => init(&conn, path, inbox_schema),
        Mode::Write { full } => write_one_row(conn, full),
    }
}

fn usage() -> ! {
    eprintln!("usage: inbox-bench-sqlite-floor DB init|init-inbox-schema|normal|full");
    std::process::exit(2);
}

/// Creates the floor's table (after inbox's schema, left untouched, which
/// refuses a file that already has tables of another program).
fn init(conn: &Connection, path: &str, inbox_schema: bool) -> rusqlite::Result<()> {
    conn.execute_batch("PRAGMA page_size = 2048; PRAGMA journal_mode = WAL;")?;
    if inbox_schema && let Err(e) = inbox_sqlite::schema::migrate(conn, path) {
        eprintln!("cannot create inbox's schema in {path}: {e}");
        std::process::exit(1);
    }
    conn.execute_batch(
        "CREATE TABLE floor_rows (id INTEGER PRIMARY KEY, recipient TEXT NOT NULL, body TEXT NOT NULL);
         CREATE INDEX floor_rows_by_recipient ON floor_rows (recipient, id);",
    )
}

/// The measured work: one row in one `BEGIN IMMEDIATE` transaction.
fn write_one_row(mut conn: Connection, full: bool) -> rusqlite::Result<()> {
    let synchronous = if full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO floor_rows (recipient, body) VALUES ('worker', ?1)",
        [
            "Benchmark task: a task assignment of about the size the peers send, \
          padded to some two hundred bytes so that a row is what a send writes; \
          the floor writes the same page or two each time.",
        ],
    )?;
    tx.commit()
}
