//! The writer gate (`<db>-gate`, see `writer_gate.rs`) and the writer turn
//! (`<db>-turn`, `writer_turn.rs`): the first native writer holds the turn
//! and goes before the writers that came after it, who sleep on it; one
//! that has slept too long closes the gate; a closed gate holds every other
//! native writer back, even from a free lock, and a holder that dies lets
//! them go at once; a planted link is never used. Holders here are real processes
//! (util-linux `flock`) and real database files; SQLite's lock is held by a
//! connection of the test's own.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use inbox_engine::{Engine, Request, Store, UlidIds};
use inbox_host_native::HostClock;
use inbox_sqlite::writer_gate::{STARVED, SUFFIX};
use inbox_sqlite::{open_existing, open_or_create};

/// A new database in a folder of its own.
fn initialized() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("team.db");
    let mut store = open_or_create(&db).unwrap();
    store.initialize().unwrap();
    (dir, db)
}

fn gate_file(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(SUFFIX);
    PathBuf::from(name)
}

/// A real process holding `file`'s `flock`, exclusive, until it is killed.
fn flock_holder(file: &Path) -> Child {
    let child = Command::new("flock")
        // `--no-fork`: the lock is the process that is killed, not a child
        // `sleep` that would inherit it.
        .args(["--exclusive", "--no-fork"])
        .arg(file)
        .args(["sleep", "60"])
        .spawn()
        .expect("util-linux flock");
    let started = Instant::now();
    while !closed(file) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "flock never took it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// Whether someone holds the gate closed: a shared `flock` of an open file
/// of the test's own is refused.
fn closed(file: &Path) -> bool {
    let Ok(own) = File::open(file) else {
        return false;
    };
    match own.try_lock_shared() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(e) => panic!("{e:?}"),
    }
}

/// Sends one thread with `subject` through a store of its own, on a thread,
/// and says when the send returned.
fn send_later(db: &Path, subject: &str) -> std::thread::JoinHandle<(String, Instant)> {
    let db = db.to_path_buf();
    let request = Request::from_json(&format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"{subject}"}}"#
    ))
    .unwrap();
    std::thread::spawn(move || {
        let (store, _) = open_existing(&db, None).unwrap();
        let mut engine = Engine::new(store, HostClock::system(), UlidIds::from_seed(seed()));
        let response = engine.execute(request).to_json();
        (response, Instant::now())
    })
}

/// A seed of its own for each writer's ids.
fn seed() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The subjects of the threads, in the order they were written.
fn subjects(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut statement = conn
        .prepare("SELECT subject FROM threads ORDER BY last_event_id")
        .unwrap();
    statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// SQLite's write lock, held by a connection of the test's own until it is
/// dropped.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(db: &Path) -> WriteLock {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock(conn)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

#[test]
fn a_closed_gate_holds_a_writer_back_from_a_free_lock_until_its_holder_dies() {
    let (_dir, db) = initialized();
    let mut holder = flock_holder(&gate_file(&db));
    let writer = send_later(&db, "after the holder");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        subjects(&db).is_empty(),
        "SQLite's lock is free, but the gate is closed: no write"
    );
    holder.kill().unwrap();
    let killed = Instant::now();
    holder.wait().unwrap();
    let (response, wrote) = writer.join().unwrap();
    assert!(response.contains("\"ok\":true"), "{response}");
    assert!(
        wrote.duration_since(killed) < Duration::from_secs(2),
        "the kernel let go of the dead holder's lock: {:?}",
        wrote.duration_since(killed)
    );
    assert_eq!(subjects(&db), ["after the holder"]);
}

/// The writer turn's word (`<db>-turn`, see `writer_turn.rs`): the
/// holder's thread id, with the top bit set while others sleep on it; 0
/// when free.
fn turn_word(db: &Path) -> u32 {
    let mut name = db.as_os_str().to_owned();
    name.push(inbox_sqlite::writer_turn::SUFFIX);
    let bytes = std::fs::read(PathBuf::from(name)).unwrap_or_default();
    bytes
        .get(..4)
        .map_or(0, |word| u32::from_ne_bytes(word.try_into().unwrap()))
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_first_writer_holds_the_turn_later_ones_sleep_and_a_starved_one_closes_the_gate() {
    let (_dir, db) = initialized();
    let gate = gate_file(&db);
    // SQLite's lock, held by a writer that knows neither turn nor gate (as
    // the `sqlite3` shell or an older inbox): the first native writer
    // takes the turn and waits for SQLite's lock in its busy handler.
    let lock = WriteLock::take(&db);
    let first = send_later(&db, "first");
    wait_until(
        "the first writer took the turn",
        Duration::from_secs(5),
        || turn_word(&db) != 0,
    );
    // Writers that come later sleep on the turn instead of racing the
    // first for SQLite's lock when it is let go.
    let later: Vec<_> = (0..3)
        .map(|n| send_later(&db, &format!("later {n}")))
        .collect();
    wait_until(
        "a later writer sleeps on the turn",
        Duration::from_secs(5),
        || turn_word(&db) & (1 << 31) != 0,
    );
    // Once one of them has slept STARVED, it closes the gate: writers that
    // have not yet gone to sleep on the turn hold back behind it.
    wait_until(
        "a starved writer closed the gate",
        STARVED + Duration::from_secs(5),
        || closed(&gate),
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(subjects(&db).is_empty(), "nobody passed SQLite's lock");
    drop(lock);
    let (response, _) = first.join().unwrap();
    assert!(response.contains("\"ok\":true"), "{response}");
    for writer in later {
        let (response, _) = writer.join().unwrap();
        assert!(response.contains("\"ok\":true"), "{response}");
    }
    let written = subjects(&db);
    assert_eq!(written.len(), 4);
    assert_eq!(
        written[0], "first",
        "the turn's holder went first: {written:?}"
    );
    assert!(!closed(&gate), "open once every write ended");
    assert_eq!(turn_word(&db), 0, "the turn is free once every write ended");
}

#[test]
fn a_write_waits_for_a_stuck_turn_and_a_held_lock_one_busy_budget_in_all() {
    let (_dir, db) = initialized();
    // A writer stuck holding both the turn and SQLite's lock (a stopped
    // process, as far as the others can tell: its thread still runs).
    let mut turn = inbox_sqlite::writer_turn::Turn::open(&db).unwrap();
    let taken = turn.take(Instant::now());
    assert_eq!(taken, inbox_sqlite::writer_turn::Taken::Yes);
    let lock = WriteLock::take(&db);
    let started = Instant::now();
    let (response, returned) = send_later(&db, "behind a stuck writer").join().unwrap();
    let waited = returned.duration_since(started);
    assert!(response.contains("\"ok\":false"), "{response}");
    assert!(response.to_lowercase().contains("busy"), "{response}");
    // The 10 s budget, spent asleep on the turn, is not granted again in
    // SQLite's busy handler.
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(15)).contains(&waited),
        "waited {waited:?}"
    );
    drop(lock);
    drop(turn);
}

#[test]
fn the_gate_file_is_owner_only_and_a_planted_link_is_never_used() {
    let (dir, db) = initialized();
    // The gate file a write creates is owner-only.
    let (response, _) = send_later(&db, "one").join().unwrap();
    assert!(response.contains("\"ok\":true"), "{response}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(gate_file(&db)).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // Another database whose gate name is a link to a file someone holds:
    // writers go straight to SQLite's lock instead of waiting for it.
    let other = dir.path().join("other.db");
    let mut store = open_or_create(&other).unwrap();
    store.initialize().unwrap();
    let target = dir.path().join("held-elsewhere");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, gate_file(&other)).unwrap();
    let mut holder = flock_holder(&target);
    let started = Instant::now();
    let (response, wrote) = send_later(&other, "two").join().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(response.contains("\"ok\":true"), "{response}");
    // Held back, it would have waited out the whole busy budget (10 s).
    assert!(
        wrote.duration_since(started) < Duration::from_secs(2),
        "held back by a file behind a link: {:?}",
        wrote.duration_since(started)
    );
    assert_eq!(subjects(&other), ["two"]);
}
