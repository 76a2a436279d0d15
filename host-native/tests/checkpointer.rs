//! A long-lived store checkpoints on a thread of its own
//! (`host-native/src/checkpointer.rs`): the commits copy nothing back
//! themselves, yet the WAL is copied into the database, its length stays
//! bounded however fast the writer goes, every commit is kept, and the
//! thread ends with the store.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inbox_engine::{Engine, ManualClock, Request, SequentialIds, Store};
use inbox_host_native::checkpointer::{RESTART_FRAMES, THREAD_NAME};
use inbox_host_native::{Lifetime, SqliteStore, open_existing, open_or_create, set_lifetime};

fn send(n: usize) -> Request {
    Request::from_json(&format!(
        r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Task {n}","body":"{}"}}"#,
        "b".repeat(300)
    ))
    .unwrap()
}

fn created(dir: &Path) -> PathBuf {
    let path = dir.join("c.db");
    let mut store = open_or_create(&path).unwrap();
    store.initialize().unwrap();
    path
}

fn long_lived(path: &Path) -> Engine<SqliteStore, ManualClock, SequentialIds> {
    let (mut store, _) = open_existing(path, None).unwrap();
    set_lifetime(&mut store, Lifetime::LongLived).unwrap();
    let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
    Engine::new(store, clock, SequentialIds::new())
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn wal(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", path.display()))
}

/// Held by each test: the thread counts must not see another test's
/// checkpoint thread start or stop.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits (up to 10 s) until this process has `n` threads named `name`; a
/// new thread names itself once it runs. Returns how many there are then.
fn await_threads(name: &str, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = threads_named(name);
        if now == n || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The threads of this process whose name is `name`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[test]
fn the_thread_copies_the_log_back_and_keeps_it_bounded() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = created(dir.path());
    let before = len(&path);
    let mut engine = long_lived(&path);
    // About 12 frames of 2 KiB a send: some 24,000 frames written back to
    // back, six times the length at which the thread restarts the log.
    let sends = 2000;
    let mut longest = 0;
    for n in 0..sends {
        assert!(engine.execute(send(n)).is_ok());
        longest = longest.max(len(&wal(&path)));
    }
    // A restart lets the log grow a little past its mark while it waits
    // for its turn; twice the mark is far below the 47 MiB written.
    let bound = 2 * u64::try_from(RESTART_FRAMES).unwrap() * (2048 + 24);
    assert!(
        longest < bound,
        "the log reached {longest} bytes (bound {bound})"
    );
    // The database itself grew: the thread copied pages into it, which a
    // long-lived connection never did from its commits' own thread.
    let deadline = Instant::now() + Duration::from_secs(10);
    while len(&path) < before + 1_000_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(len(&path) > before + 1_000_000, "nothing was copied back");
    drop(engine);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let threads: i64 = conn
        .query_row("SELECT count(*) FROM threads", [], |row| row.get(0))
        .unwrap();
    assert_eq!(
        threads,
        i64::try_from(sends).unwrap(),
        "every commit is kept"
    );
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn the_thread_ends_with_its_store() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = created(dir.path());
    let name = THREAD_NAME;
    let others = threads_named(name);
    let engine = long_lived(&path);
    assert_eq!(await_threads(name, others + 1), others + 1);
    drop(engine);
    // Joined before the drop returns.
    assert_eq!(threads_named(name), others);
}

#[test]
fn a_one_command_store_has_no_thread_and_switching_back_stops_it() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = created(dir.path());
    let (mut store, _) = open_existing(&path, None).unwrap();
    let name = THREAD_NAME;
    let others = threads_named(name);
    assert_eq!(threads_named(name), others, "opening starts none");
    set_lifetime(&mut store, Lifetime::LongLived).unwrap();
    assert_eq!(await_threads(name, others + 1), others + 1);
    set_lifetime(&mut store, Lifetime::OneCommand).unwrap();
    assert_eq!(threads_named(name), others);
    store.begin(inbox_engine::TxMode::Read).unwrap();
    store.rollback().unwrap();
}

#[test]
fn a_store_that_syncs_every_commit_checkpoints_in_the_commit() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = created(dir.path());
    let name = THREAD_NAME;
    let others = threads_named(name);
    let (mut store, _) = open_existing(&path, Some(inbox_host_native::Durability::Full)).unwrap();
    set_lifetime(&mut store, Lifetime::LongLived).unwrap();
    // Given a moment to show up, had it been started.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(threads_named(name), others);
    let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
    let mut engine = Engine::new(store, clock, SequentialIds::new());
    for n in 0..400 {
        assert!(engine.execute(send(n)).is_ok());
    }
    // SQLite's own policy copied the log back in the commits: the log was
    // started over, so it is shorter than what 400 sends wrote.
    let written = 400 * 10 * (2048 + 24);
    assert!(len(&wal(&path)) < written, "the log was never started over");
}
