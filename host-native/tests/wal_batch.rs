//! The VFS that writes a transaction's WAL frames with one write
//! (`inbox_host_native::wal_batch`) against the guarantees it must keep:
//! an acknowledged commit survives the process being killed right after
//! it; transactions too large for one write (spilled mid-way, rewritten,
//! past the gathering cap) come back whole when another process recovers
//! the WAL, in `normal` and in `full`; a rolled-back transaction's spilled
//! frames are never written over another connection's later commits;
//! plain SQLite connections write the same file alongside; and a reader
//! keeps its mapping of the database only while the file keeps its length.
//! Recovery is the judge throughout: SQLite checks every frame's checksum
//! when it rebuilds the WAL index, and stops at the first frame that is
//! missing or wrong, so a frame written late, twice, or not at all loses
//! the commits after it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use inbox_host_native::wal_batch;
use rusqlite::{Connection, OpenFlags, params};

/// A connection through the batching VFS, as every native store opens one,
/// without the checkpoint on close (so the WAL is what the next opener
/// must recover).
fn batched(path: &Path, synchronous: &str) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(path, flags, wal_batch::vfs()).unwrap();
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    conn.execute_batch(&format!(
        "PRAGMA page_size = 2048; PRAGMA journal_mode = WAL; PRAGMA synchronous = {synchronous};
         PRAGMA wal_autocheckpoint = 0;
         CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS rows_k ON rows (k);"
    ))
    .unwrap();
    conn
}

/// Opens the file with SQLite's own VFS, as the `sqlite3` shell would:
/// after every other connection closed, this rebuilds the WAL index from
/// the WAL's frames.
fn recovered(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok", "the recovered database is damaged");
    conn
}

/// (row count, sum of ids, total bytes of values) as `conn` sees them.
fn contents(conn: &Connection) -> (i64, i64, i64) {
    conn.query_row(
        "SELECT count(*), coalesce(sum(id), 0), coalesce(sum(length(v)), 0) FROM rows",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

/// A row of several frames' worth: the row, its index entry, and with
/// every few rows a page split.
fn insert(conn: &Connection, id: i64, size: i64) {
    conn.execute(
        "INSERT INTO rows (id, k, v) VALUES (?1, ?2, zeroblob(?3))",
        params![
            id,
            format!("key-{:08}", id.wrapping_mul(7919) % 100_003),
            size
        ],
    )
    .unwrap();
}

const CHILD_DB: &str = "INBOX_WAL_BATCH_CHILD_DB";
const CHILD_IDLE_AFTER: &str = "INBOX_WAL_BATCH_CHILD_IDLE_AFTER";

/// This test binary running only the ignored child test `test` on the
/// database `db`, its stdout piped back.
fn child(test: &str, db: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--ignored", "--nocapture", "--quiet"])
        .env(CHILD_DB, db)
        .stdout(Stdio::piped());
    command
}

/// The database a child test was given, or none when it is run on its
/// own (it then does nothing).
fn child_db() -> Option<PathBuf> {
    std::env::var_os(CHILD_DB).map(PathBuf::from)
}

/// The child of `an_acknowledged_commit_survives_a_kill_right_after_it`:
/// commits one transaction after another and prints each one's number
/// once `COMMIT` has returned, until it is killed; with
/// `CHILD_IDLE_AFTER=N` it stops touching the database after commit N, so
/// that the kill finds nothing but what COMMIT left.
#[test]
#[ignore = "run by an_acknowledged_commit_survives_a_kill_right_after_it"]
fn committing_child() {
    let Some(path) = child_db() else {
        return;
    };
    let idle_after: Option<i64> = std::env::var(CHILD_IDLE_AFTER)
        .ok()
        .and_then(|n| n.parse().ok());
    let conn = batched(&path, "NORMAL");
    for n in 1.. {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        insert(&conn, n * 2, 1500);
        insert(&conn, n * 2 + 1, 300);
        conn.execute_batch("COMMIT").unwrap();
        // Every frame was written by the commit itself, before SQLite
        // published it, not by the lock's release after.
        assert_eq!(wal_batch::late_writes(), 0);
        // The acknowledgement: nothing is written to the WAL after COMMIT
        // returns and before the next transaction.
        println!("{n}");
        if idle_after == Some(n) {
            std::thread::sleep(std::time::Duration::from_secs(600));
        }
    }
}

#[test]
fn an_acknowledged_commit_survives_a_kill_right_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    for round in 0..6u64 {
        // Kill it after a different number of commits each round: in odd
        // rounds in the middle of writing the next one, in even rounds when
        // it has done nothing since the last COMMIT returned.
        let wanted = 40 + round * 37;
        let mut command = child("committing_child", &path);
        if round % 2 == 0 {
            command.env(CHILD_IDLE_AFTER, wanted.to_string());
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acknowledged = 0;
        while acknowledged < wanted {
            let line = lines.next().unwrap().unwrap();
            if let Ok(n) = line.trim().parse::<u64>() {
                acknowledged = n;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let conn = recovered(&path);
        let ids: i64 = conn
            .query_row("SELECT count(*) FROM rows WHERE id >= 2", [], |r| r.get(0))
            .unwrap();
        let committed = u64::try_from(ids).unwrap() / 2;
        assert!(
            committed >= acknowledged,
            "round {round}: {acknowledged} commits acknowledged, {committed} recovered"
        );
        // Each child starts its numbering again: start from an empty table.
        conn.execute_batch("DELETE FROM rows; PRAGMA wal_checkpoint(TRUNCATE);")
            .unwrap();
    }
}

/// One transaction larger than the page cache (so SQLite writes frames
/// before the commit, reads some back, overwrites them in place and
/// rewrites their checksums after the commit frame) and larger than what
/// is gathered before a write.
fn large_transaction(conn: &Connection) {
    conn.execute_batch("PRAGMA cache_size = 16; BEGIN IMMEDIATE")
        .unwrap();
    for id in 0..3000 {
        insert(conn, id, 700);
    }
    // Pages spilled to the WAL above are changed again in the same
    // transaction.
    conn.execute("UPDATE rows SET v = zeroblob(900) WHERE id % 3 = 0", [])
        .unwrap();
    conn.execute("DELETE FROM rows WHERE id % 7 = 0", [])
        .unwrap();
    conn.execute_batch("COMMIT").unwrap();
}

/// The rows `large_transaction` leaves.
const LARGE_ROWS: i64 = 3000 - 429;

/// `large_transaction`, then many small ones.
fn large_then_small(path: &Path, synchronous: &str) -> (i64, i64, i64) {
    let conn = batched(path, synchronous);
    large_transaction(&conn);
    for id in 3000..3200 {
        insert(&conn, id, 100);
    }
    let seen = contents(&conn);
    drop(conn);
    seen
}

/// The child of `a_large_commit_survives_a_kill_right_after_it`: commits
/// `large_transaction`, says so, and touches the database no more.
#[test]
#[ignore = "run by a_large_commit_survives_a_kill_right_after_it"]
fn large_committing_child() {
    let Some(path) = child_db() else {
        return;
    };
    let conn = batched(&path, "NORMAL");
    large_transaction(&conn);
    // The checksum rewrites after the commit frame were written as they
    // came, not by the lock's release.
    assert_eq!(wal_batch::late_writes(), 0);
    println!("committed");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// The last thing SQLite writes for a transaction whose frames were
/// spilled and overwritten is a checksum rewrite, after the commit frame:
/// it must be in the file when COMMIT returns, or recovery stops at it.
#[test]
fn a_large_commit_survives_a_kill_right_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large-killed.db");
    let mut child = child("large_committing_child", &path).spawn().unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let said = lines
        .map(Result::unwrap)
        .any(|line| line.trim() == "committed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(said, "the child ended without committing");
    assert_eq!(contents(&recovered(&path)).0, LARGE_ROWS);
}

#[test]
fn large_transactions_recover_whole_in_normal_and_full() {
    for synchronous in ["NORMAL", "FULL"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large.db");
        let written = large_then_small(&path, synchronous);
        assert_eq!(written.0, LARGE_ROWS + 200);
        let wal = std::fs::metadata(dir.path().join("large.db-wal"))
            .unwrap()
            .len();
        assert!(
            wal > 1 << 20,
            "{synchronous}: the WAL holds the transactions ({wal} bytes)"
        );
        assert_eq!(
            contents(&recovered(&path)),
            written,
            "{synchronous}: recovery gave back something else than was committed"
        );
    }
}

#[test]
fn plain_sqlite_connections_write_the_same_file_alongside() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let ours = batched(&path, "NORMAL");
    let plain = Connection::open(&path).unwrap();
    plain
        .busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    for id in 0..400 {
        let conn = if id % 3 == 0 { &plain } else { &ours };
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        insert(conn, id, 200 + (id % 5) * 300);
        conn.execute_batch("COMMIT").unwrap();
        if id % 50 == 49 {
            // Each reads what the other wrote, and the WAL starts over under
            // both now and then.
            assert_eq!(contents(&ours), contents(&plain));
            plain
                .execute_batch("PRAGMA wal_checkpoint(RESTART)")
                .unwrap();
        }
    }
    let seen = contents(&ours);
    assert_eq!(seen.0, 400);
    drop(ours);
    drop(plain);
    assert_eq!(contents(&recovered(&path)), seen);
}

/// A transaction that spilled frames to the WAL and was then rolled back
/// leaves nothing to be written later: another connection's commits, made
/// where those frames were, stay whole when this one reads and writes
/// again. Transactions of many sizes, so that some end their rollback
/// with spilled frames still gathered.
#[test]
fn a_rolled_back_spill_leaves_nothing_to_write_later() {
    for rows in (20..400).step_by(9) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rolled-back.db");
        let ours = batched(&path, "NORMAL");
        let plain = Connection::open(&path).unwrap();
        plain
            .busy_timeout(std::time::Duration::from_secs(5))
            .unwrap();
        insert(&ours, 0, 100);
        ours.execute_batch("PRAGMA cache_size = 16; BEGIN IMMEDIATE")
            .unwrap();
        for id in 1..rows {
            insert(&ours, id, 700);
        }
        ours.execute_batch("ROLLBACK").unwrap();
        for id in 1000..1300 {
            plain.execute_batch("BEGIN IMMEDIATE").unwrap();
            insert(&plain, id, 900);
            plain.execute_batch("COMMIT").unwrap();
        }
        assert_eq!(contents(&ours), contents(&plain), "{rows} rows rolled back");
        insert(&ours, 2000, 100);
        let seen = contents(&plain);
        assert_eq!(seen.0, 302, "{rows} rows rolled back");
        drop(ours);
        drop(plain);
        assert_eq!(contents(&recovered(&path)), seen, "{rows} rows rolled back");
    }
}

/// A writer through the VFS of a database of `rows` rows, all of them
/// checkpointed into the file.
fn written_through(path: &Path, rows: i64) -> Connection {
    let writer = batched(path, "NORMAL");
    for id in 0..rows {
        insert(&writer, id, 300);
    }
    checkpoint(&writer);
    writer
}

/// Copies the WAL into the database file and starts it over.
fn checkpoint(conn: &Connection) {
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
}

/// A reader through the VFS with the database mapped, as every native
/// store maps it, once it has read a commit of `writer`'s: setting
/// `mmap_size` maps the file to a length the VFS does not see, so the
/// first request to drop that mapping goes through, and the file is mapped
/// anew.
fn mapped_reader(path: &Path, writer: &Connection) -> Connection {
    let reader = batched(path, "NORMAL");
    reader
        .execute_batch("PRAGMA mmap_size = 1073741824")
        .unwrap();
    contents(&reader);
    writer
        .execute("UPDATE rows SET v = zeroblob(299) WHERE id = 0", [])
        .unwrap();
    contents(&reader);
    reader
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Declined requests to drop `reader`'s mapping, after one read of it.
fn kept_after_a_read(reader: &Connection) -> u64 {
    contents(reader);
    wal_batch::kept_mappings(reader).unwrap()
}

/// SQLite asks to drop the mapping whenever another connection committed;
/// while the file keeps its length the reader keeps it, and still reads
/// every change: commits in the WAL, and pages a checkpoint rewrote in the
/// file itself under the mapping.
#[cfg(target_os = "linux")]
#[test]
fn a_reader_keeps_its_mapping_while_the_file_keeps_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mapped.db");
    let writer = written_through(&path, 200);
    let reader = mapped_reader(&path, &writer);
    let start = kept_after_a_read(&reader);
    let len = file_len(&path);
    for round in 1..=20_u64 {
        // Shorter than the row was (an identical row would write nothing),
        // so that no page splits and the file keeps its length.
        writer
            .execute(
                "UPDATE rows SET v = zeroblob(?1) WHERE id = ?2",
                params![300 - round as i64, round as i64],
            )
            .unwrap();
        if round % 5 == 0 {
            // The new bytes move from the WAL into the file, in place.
            checkpoint(&writer);
        }
        assert_eq!(contents(&reader), contents(&writer), "round {round}");
        assert_eq!(file_len(&path), len, "the file kept its length");
        assert_eq!(
            wal_batch::kept_mappings(&reader).unwrap(),
            start + round,
            "round {round}: the mapping was dropped although the file kept its length"
        );
    }
}

/// When the file grows or is cut short between two of the reader's
/// transactions, the reader drops its mapping as SQLite asks and maps the
/// file anew: it reads the grown file whole, and nothing past the end of
/// the shortened one (which would kill the process with `SIGBUS`).
#[cfg(target_os = "linux")]
#[test]
fn a_reader_maps_a_file_that_grew_or_shrank_anew() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resized.db");
    let writer = written_through(&path, 100);
    let reader = mapped_reader(&path, &writer);
    let kept = kept_after_a_read(&reader);

    let before = file_len(&path);
    for id in 100..2_000 {
        insert(&writer, id, 900);
    }
    checkpoint(&writer);
    assert!(file_len(&path) > before, "the file grew");
    assert_eq!(
        kept_after_a_read(&reader),
        kept,
        "grown: the mapping was kept"
    );
    assert_eq!(contents(&reader), contents(&writer));

    let grown = file_len(&path);
    writer
        .execute_batch("DELETE FROM rows WHERE id >= 50; VACUUM; PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    assert!(file_len(&path) < grown / 4, "the file was cut short");
    assert_eq!(
        kept_after_a_read(&reader),
        kept,
        "shrunk: the mapping was kept"
    );
    assert_eq!(contents(&reader), contents(&writer));
    let check: String = reader
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}
