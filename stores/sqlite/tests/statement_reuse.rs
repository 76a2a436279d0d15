//! Regression: every statement the store runs is compiled once per
//! connection and reused, never re-prepared on later use.
//!
//! SQLite re-plans a statement whose plan looked at a bound value (a
//! `LIMIT ?`, a partial index's condition) each time that parameter is bound
//! again, and rusqlite clears a statement's bindings when it returns to the
//! cache: without the query planner stability setting, every cached
//! statement was compiled afresh on every use (a `show` took 48 µs in process
//! instead of 7 µs, after the upgrade to SQLite 3.54). This test counts
//! SQLite's own re-prepare counter for every statement of a repeated worker
//! loop.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use inbox_engine::{Engine, ManualClock, Request, SequentialIds, Store};
use inbox_sqlite::open_or_create;
use rusqlite::StatementStatus;
use rusqlite::trace::{TraceEvent, TraceEventCodes};

static REPREPARED: Mutex<BTreeMap<String, i32>> = Mutex::new(BTreeMap::new());

fn record(event: TraceEvent<'_>) {
    if let TraceEvent::Profile(statement, _) = event {
        let count = statement.get_status(StatementStatus::RePrepare);
        if count > 0 {
            REPREPARED
                .lock()
                .unwrap()
                .insert(statement.sql().into_owned(), count);
        }
    }
}

#[test]
fn no_statement_is_re_prepared_when_it_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open_or_create(&dir.path().join("reuse.db")).unwrap();
    store.initialize().unwrap();
    store
        .connection_mut()
        .trace_v2(TraceEventCodes::SQLITE_TRACE_PROFILE, Some(record))
        .unwrap();
    let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
    let mut engine = Engine::new(store, clock, SequentialIds::new());
    let mut run = |json: String| {
        let response = engine.execute(Request::from_json(&json).unwrap());
        assert!(response.is_ok(), "{json}: {}", response.to_json());
        response.to_json()
    };
    // A worker loop, many times over, with different values bound each time
    // (thread ids, limits, tokens): what a long-lived host does.
    for round in 0..20 {
        let sent = run(format!(
            r#"{{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Task {round}"}}"#
        ));
        let thread = sent
            .split(r#""thread_id":""#)
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        run(format!(
            r#"{{"command":"fetch","agent":"worker","limit":{}}}"#,
            round + 1
        ));
        run(r#"{"command":"claim","agent":"worker","next":true}"#.to_owned());
        run(format!(
            r#"{{"command":"update","agent":"worker","thread_id":"{thread}","lease_token":1,"status":"in_progress","summary":"s"}}"#
        ));
        run(format!(r#"{{"command":"show","thread_id":"{thread}"}}"#));
        run(format!(r#"{{"command":"list","limit":{}}}"#, 50 - round));
        run(format!(
            r#"{{"command":"watch","agent":"lead","after_event":{round},"timeout_seconds":0}}"#
        ));
        run(format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread}","lease_token":1,"summary":"ok"}}"#
        ));
    }
    let reprepared = REPREPARED.lock().unwrap().clone();
    assert!(
        reprepared.is_empty(),
        "statements SQLite compiled again on reuse (sql: times):\n{reprepared:#?}"
    );
}
