//! The write-ahead log read and appended as bytes (`wal.rs`), against real
//! SQLite: what `committed_image` builds from a database's files is what
//! SQLite itself reads, whatever state the log is in (uncommitted frames
//! spilled by a big transaction, a partial checkpoint, a log started over
//! with old frames left behind), and a commit appended by `Log::append` is
//! read by connections that were already open and by new ones, and SQLite
//! writes on after it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use inbox_host_native::shared_file;
use inbox_host_native::wal::{self, Log};
use rusqlite::Connection;

struct Db {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Db {
    fn new() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = open(&path);
        conn.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT);")
            .unwrap();
        Db { _dir: dir, path }
    }

    fn files(&self) -> (Vec<u8>, Vec<u8>) {
        let wal = std::fs::read(companion(&self.path, "-wal")).unwrap_or_default();
        (std::fs::read(&self.path).unwrap(), wal)
    }
}

fn companion(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", path.display()))
}

/// A connection as the CLI makes one: WAL, no checkpoint unless asked, no
/// checkpoint on close.
fn open(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
        .unwrap();
    conn
}

fn insert(conn: &Connection, from: i64, to: i64) {
    let tx = conn.unchecked_transaction().unwrap();
    for n in from..to {
        tx.execute(
            "INSERT INTO t VALUES (?1, ?2)",
            (n, format!("row {n} {}", "x".repeat(200))),
        )
        .unwrap();
    }
    tx.commit().unwrap();
}

fn rows(conn: &Connection) -> Vec<i64> {
    let mut stmt = conn.prepare("SELECT n FROM t ORDER BY n").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// What SQLite reads from `image` alone.
fn rows_of_image(image: &[u8]) -> Vec<i64> {
    let mut conn = Connection::open_in_memory().unwrap();
    shared_file::load(&mut conn, image).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    rows(&conn)
}

#[test]
fn the_image_is_what_sqlite_reads_with_the_log_in_any_state() {
    let db = Db::new();
    let conn = open(&db.path);
    insert(&conn, 0, 50);
    insert(&conn, 50, 60);
    let (main, log) = db.files();
    assert!(
        !log.is_empty(),
        "the commits must be in the log for this test to mean anything"
    );
    assert_eq!(
        rows_of_image(&wal::committed_image(&main, &log).unwrap().0),
        rows(&conn)
    );
    // Without the log, the main file alone misses them (the table too).
    let mut alone = Connection::open_in_memory().unwrap();
    shared_file::load(&mut alone, &main).unwrap();
    assert!(
        alone
            .query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
            .is_err()
    );

    // A partial checkpoint, then more commits.
    conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")
        .unwrap();
    insert(&conn, 60, 70);
    let (main, log) = db.files();
    assert_eq!(
        rows_of_image(&wal::committed_image(&main, &log).unwrap().0),
        (0..70).collect::<Vec<_>>()
    );

    // The log started over (new salts) with the old frames behind it.
    conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)")
        .unwrap();
    insert(&conn, 70, 71);
    let (main, log) = db.files();
    let (image, parsed) = wal::committed_image(&main, &log).unwrap();
    assert!(
        parsed.frames() < 5,
        "only the new log's frames count: {}",
        parsed.frames()
    );
    assert_eq!(rows_of_image(&image), (0..71).collect::<Vec<_>>());
}

#[test]
fn frames_of_a_transaction_that_never_committed_do_not_count() {
    let db = Db::new();
    let conn = open(&db.path);
    insert(&conn, 0, 10);
    // A tiny cache makes a big transaction spill pages into the log before
    // its commit; read the files while it is still open.
    conn.execute_batch("PRAGMA cache_size = 2; BEGIN;").unwrap();
    for n in 10..2000 {
        conn.execute("INSERT INTO t VALUES (?1, ?2)", (n, "y".repeat(300)))
            .unwrap();
    }
    let (main, log) = db.files();
    let (image, parsed) = wal::committed_image(&main, &log).unwrap();
    assert!(
        log.len() > 32 + parsed.frames() * 4120,
        "the spill must reach the log"
    );
    assert_eq!(rows_of_image(&image), (0..10).collect::<Vec<_>>());
    conn.execute_batch("ROLLBACK").unwrap();
}

/// Appends the commit that turns the files' image into `change(image)`,
/// and clears the index header, as `shared_file` does.
fn append_commit(db: &Db, change: impl FnOnce(&Connection)) {
    let (main, log_bytes) = db.files();
    let (image, log) = wal::committed_image(&main, &log_bytes).unwrap();
    let mut mem = Connection::open_in_memory().unwrap();
    shared_file::load(&mut mem, &image).unwrap();
    change(&mem);
    let mut new = shared_file::save(&mut mem).unwrap();
    new[18] = 2;
    new[19] = 2;
    let (offset, bytes) = log
        .append(&image, &new, [7, 9])
        .expect("a change to append");
    let wal_path = companion(&db.path, "-wal");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&wal_path)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &bytes, offset as u64).unwrap();
    let shm = companion(&db.path, "-shm");
    if shm.exists() {
        let file = std::fs::OpenOptions::new().write(true).open(&shm).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &[0u8; 96], 0).unwrap();
    }
}

#[test]
fn an_appended_commit_is_read_by_open_and_new_connections_and_sqlite_writes_after_it() {
    let db = Db::new();
    let conn = open(&db.path);
    insert(&conn, 0, 20);
    assert_eq!(rows(&conn).len(), 20);

    append_commit(&db, |mem| insert(mem, 20, 40));
    // The connection that was open all along sees it at its next read.
    assert_eq!(rows(&conn), (0..40).collect::<Vec<_>>());
    assert_eq!(rows(&open(&db.path)), (0..40).collect::<Vec<_>>());

    // SQLite appends after it, checkpoints it, and it all stays.
    insert(&conn, 40, 45);
    append_commit(&db, |mem| {
        mem.execute("DELETE FROM t WHERE n < 5", []).unwrap();
    });
    insert(&conn, 45, 50);
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    drop(conn);
    let fresh = open(&db.path);
    let ok: String = fresh
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    assert_eq!(rows(&fresh), (5..50).collect::<Vec<_>>());
}

#[test]
fn a_commit_into_an_empty_log_starts_a_new_one() {
    let db = Db::new();
    let conn = open(&db.path);
    insert(&conn, 0, 3);
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .unwrap();
    assert_eq!(db.files().1.len(), 0);
    append_commit(&db, |mem| insert(mem, 3, 6));
    assert_eq!(rows(&conn), (0..6).collect::<Vec<_>>());
    let (main, log) = db.files();
    assert!(Log::parse(&log, 4096).frames() > 0);
    assert_eq!(
        rows_of_image(&wal::committed_image(&main, &log).unwrap().0),
        (0..6).collect::<Vec<_>>()
    );
}

#[test]
fn the_same_image_appends_nothing() {
    let db = Db::new();
    let conn = open(&db.path);
    insert(&conn, 0, 3);
    let (main, log) = db.files();
    let (image, parsed) = wal::committed_image(&main, &log).unwrap();
    assert!(parsed.append(&image, &image, [1, 2]).is_none());
}
