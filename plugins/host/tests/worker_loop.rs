//! The full worker loop through the engine component, over a real SQLite
//! file and over memory: what an agent runtime embedding the plugin sees.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod common;

use inbox_engine::{Executor, MemoryStore, Request, Store, WaitStep, Waiter};
use inbox_plugin_host::PluginEngine;
use serde_json::Value;

fn call<S: Store, C: inbox_engine::Clock>(
    engine: &mut PluginEngine<S, C>,
    request: &str,
) -> (u8, Value) {
    let response = engine.execute_json(request).unwrap();
    let json: Value = serde_json::from_str(&response.json).unwrap();
    (response.exit_code, json)
}

/// Leader sends, worker fetches, claims, blocks on a question, the leader's
/// answer wakes its wait-reply (driven by the engine's Waiter through the
/// component), the worker finishes. Returns the thread id.
fn worker_loop<S: Store + 'static>(
    engine: &mut PluginEngine<S, inbox_engine::ManualClock>,
) -> String {
    let (exit, init) = call(engine, r#"{"command":"init"}"#);
    assert_eq!(exit, 0, "{init}");

    let (exit, sent) = call(
        engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login","body":"Use the session table.","task_id":"T1"}"#,
    );
    assert_eq!(exit, 0, "{sent}");
    let thread_id = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    assert!(thread_id.starts_with("thr_"), "{thread_id}");

    let (exit, fetched) = call(engine, r#"{"command":"fetch","agent":"worker"}"#);
    assert_eq!(exit, 0);
    assert_eq!(fetched["threads"][0]["thread_id"], thread_id.as_str());

    let (exit, claimed) = call(
        engine,
        &format!(
            r#"{{"command":"claim","agent":"worker","thread_id":"{thread_id}","lease_seconds":600}}"#
        ),
    );
    assert_eq!(exit, 0, "{claimed}");
    let token = claimed["lease"]["lease_token"].as_u64().unwrap();

    let (exit, blocked) = call(
        engine,
        &format!(
            r#"{{"command":"update","agent":"worker","thread_id":"{thread_id}","status":"blocked","summary":"Email or username?"}}"#
        ),
    );
    assert_eq!(exit, 0, "{blocked}");
    assert_eq!(blocked["thread"]["status"], "blocked");

    // The worker waits for the answer: the engine's Waiter, polling through
    // the component, finds nothing yet.
    let wait = Request::from_json(&format!(
        r#"{{"command":"wait-reply","agent":"worker","thread_id":"{thread_id}","timeout_seconds":1800}}"#
    ))
    .unwrap();
    let mut waiter = Waiter::new(wait).unwrap();
    assert!(matches!(waiter.poll(engine), WaitStep::Pending { .. }));

    engine.clock_mut().advance_millis(15 * 60 * 1000);
    let (exit, answered) = call(
        engine,
        &format!(
            r#"{{"command":"reply","from_agent":"lead","thread_id":"{thread_id}","summary":"Email."}}"#
        ),
    );
    assert_eq!(exit, 0, "{answered}");

    let WaitStep::Finished(woke) = waiter.poll(engine) else {
        panic!("the answer did not wake the wait");
    };
    assert_eq!(woke.exit_code(), 0);
    let woke: Value = serde_json::from_str(&woke.to_json()).unwrap();
    assert_eq!(woke["woke"], true);
    assert_eq!(woke["message"]["summary"], "Email.");
    assert_eq!(woke["thread"]["status"], "in_progress");

    let (exit, done) = call(
        engine,
        &format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread_id}","lease_token":{token},"summary":"Login added"}}"#
        ),
    );
    assert_eq!(exit, 0, "{done}");
    assert_eq!(done["thread"]["status"], "done");

    // Refusals come back as the contract's errors, not as plugin errors.
    let (exit, again) = call(
        engine,
        &format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread_id}","lease_token":{token},"summary":"Twice"}}"#
        ),
    );
    assert_eq!(
        (exit, again["error"]["code"].as_str()),
        (20, Some("thread_finished"))
    );
    let (exit, missing) = call(engine, r#"{"command":"show","thread_id":"thr_nope"}"#);
    assert_eq!(
        (exit, missing["error"]["code"].as_str()),
        (40, Some("thread_not_found"))
    );
    let (exit, bad) = call(engine, "not json");
    assert_eq!(
        (exit, bad["error"]["code"].as_str()),
        (30, Some("invalid_request"))
    );
    thread_id
}

#[test]
fn the_worker_loop_runs_through_the_component_over_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.db");
    let store = inbox_sqlite::open::open_or_create(&path).unwrap();
    let mut engine = common::engine_plugin()
        .instantiate(store, common::clock(), 7)
        .unwrap();
    let thread_id = worker_loop(&mut engine);
    drop(engine);

    // What the component wrote is an ordinary inbox database: the native
    // engine reads the same history.
    let store = inbox_sqlite::open::open_existing(&path, None).unwrap().0;
    let mut native =
        inbox_engine::Engine::new(store, common::clock(), inbox_engine::SequentialIds::new());
    let shown = native.execute_json(&format!(
        r#"{{"command":"show","thread_id":"{thread_id}"}}"#
    ));
    let shown: Value = serde_json::from_str(&shown.to_json()).unwrap();
    assert_eq!(shown["thread"]["status"], "done");
    let kinds: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["task", "question", "answer", "result"]);
}

#[test]
fn the_worker_loop_runs_through_the_component_over_memory() {
    let mut engine = common::engine_plugin()
        .instantiate(MemoryStore::new(), common::clock(), 7)
        .unwrap();
    worker_loop(&mut engine);
    assert!(engine.fuel_used() > 0, "fuel is metered");
}

#[test]
fn ids_differ_between_instances_and_increase_within_one() {
    let plugin = common::engine_plugin();
    let send = r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#;
    let mut ids = Vec::new();
    for seed in [1, 2] {
        let mut engine = plugin
            .instantiate(MemoryStore::new(), common::clock(), seed)
            .unwrap();
        for _ in 0..3 {
            let (_, sent) = call(&mut engine, send);
            ids.push(sent["thread"]["thread_id"].as_str().unwrap().to_owned());
        }
    }
    assert!(ids[0] < ids[1] && ids[1] < ids[2], "{ids:?}");
    assert!(ids[3] < ids[4] && ids[4] < ids[5], "{ids:?}");
    assert_ne!(
        ids[0], ids[3],
        "two instances with different seeds made the same id"
    );
}

#[test]
fn the_executor_reports_the_engine_version_the_component_was_built_from() {
    let mut engine = common::engine_plugin()
        .instantiate(MemoryStore::new(), common::clock(), 1)
        .unwrap();
    let response = Executor::execute(
        &mut engine,
        Request::from_json(r#"{"command":"version"}"#).unwrap(),
    );
    let json: Value = serde_json::from_str(&response.to_json()).unwrap();
    assert_eq!(json["engine_version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn the_engine_component_imports_only_our_interfaces() {
    let mut imports = common::engine_plugin().imports();
    imports.sort();
    assert_eq!(
        imports,
        [
            "inbox:engine/clock@0.5.0",
            "inbox:engine/entropy@0.5.0",
            "inbox:engine/store@0.5.0",
            "inbox:engine/types@0.5.0",
        ],
        "the component must not import WASI or anything else"
    );
}
