//! `watch::wait_or_stop`: a wait a host can stop from outside (the MCP
//! server, when its client cancels a call) ends soon after it is told to,
//! long before its own timeout, and otherwise behaves like `watch::wait`:
//! it wakes on another connection's commit and times out with the engine's
//! normal answer.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inbox_engine::{Engine, Request};
use inbox_host_native::{HostClock, NativeEngine};
use inbox_sqlite::watch::{ChangeWatcher, wait_or_stop};
use inbox_sqlite::{SqliteStore, open_existing};

fn engine(db: &Path) -> NativeEngine {
    let (store, _) = open_existing(db, None).unwrap();
    Engine::new(store, HostClock::system(), inbox_host_native::host_ids())
}

fn store(engine: &NativeEngine) -> &SqliteStore {
    engine.store()
}

fn initialized() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("coord.db");
    inbox_sqlite::open::init(&db, None).unwrap();
    (dir, db)
}

fn watch(timeout_seconds: u64) -> Request {
    Request::from_json(&format!(
        r#"{{"command":"watch","agent":"lead","timeout_seconds":{timeout_seconds}}}"#
    ))
    .unwrap()
}

#[test]
fn a_stopped_wait_ends_at_once_and_answers_nothing() {
    let (_dir, db) = initialized();
    let stop = Arc::new(AtomicBool::new(false));
    let waiting = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut watcher = ChangeWatcher::arm(&db);
            let mut engine = engine(&db);
            let started = Instant::now();
            let answer = wait_or_stop(&mut engine, store, watch(30), &mut watcher, &|| {
                stop.load(Ordering::Relaxed)
            });
            (answer, started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let stopped_at = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (answer, waited) = waiting.join().unwrap();
    assert!(answer.is_none(), "{answer:?}");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    // STOP_CHECK is 50 ms; a loaded machine gets a generous margin.
    assert!(
        stopped_at.elapsed() < Duration::from_secs(1),
        "took {:?} to stop",
        stopped_at.elapsed()
    );
}

#[test]
fn a_wait_that_is_not_stopped_wakes_on_a_commit_and_times_out_as_usual() {
    let (_dir, db) = initialized();
    let never = || false;

    let mut watcher = ChangeWatcher::arm(&db);
    let mut waiter = engine(&db);
    let answer = wait_or_stop(&mut waiter, store, watch(1), &mut watcher, &never).unwrap();
    assert_eq!(answer.exit_code(), 10, "{}", answer.to_json());
    assert!(answer.to_json().contains(r#""woke":false"#));

    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let send = r#"{"command":"send","from_agent":"boss","to_agent":"lead","subject":"s"}"#;
            let response = engine(&db).execute(Request::from_json(send).unwrap());
            assert!(response.is_ok(), "{}", response.to_json());
        })
    };
    let started = Instant::now();
    let answer = wait_or_stop(&mut waiter, store, watch(30), &mut watcher, &never).unwrap();
    writer.join().unwrap();
    assert_eq!(answer.exit_code(), 0, "{}", answer.to_json());
    assert!(answer.to_json().contains(r#""woke":true"#));
    assert!(started.elapsed() < Duration::from_secs(10));
}
