//! Retention with more registered agents than one `gc` asks
//! (`READERS_MAX`, 10,000): a broadcast is "read by everyone it reaches"
//! only if every registered agent was asked and had read it, so with more
//! agents than that no broadcast goes as read; once they are few enough
//! again, the rule applies as usual.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{Engine, ManualClock, MemoryStore, SequentialIds};

type TestEngine = Engine<MemoryStore, ManualClock, SequentialIds>;

fn run(engine: &mut TestEngine, json: &str) -> serde_json::Value {
    let response = engine.execute_json(json);
    assert!(response.is_ok(), "{json}: {}", response.to_json());
    serde_json::from_str(&response.to_json()).unwrap()
}

fn removed(gc: &serde_json::Value) -> Vec<String> {
    (gc["removed"].as_array().unwrap().iter())
        .map(|r| r["thread_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_broadcast_is_never_read_by_everyone_when_not_everyone_was_asked() {
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    run(&mut engine, r#"{"command":"init"}"#);
    // 10,001 agents: by name, the last one is past the limit.
    let names: Vec<String> = (0..=10_000).map(|i| format!("a{i:05}")).collect();
    for name in &names {
        run(
            &mut engine,
            &format!(r#"{{"command":"agent-register","agent":"{name}"}}"#),
        );
    }
    let sent = run(
        &mut engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"broadcast","subject":"Freeze"}"#,
    );
    let broadcast = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    run(
        &mut engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"w","subject":"Newer"}"#,
    );
    // Everyone but the last has read it.
    for name in &names[..10_000] {
        run(
            &mut engine,
            &format!(
                r#"{{"command":"show","agent":"{name}","thread_id":"{broadcast}","mark_read":true}}"#
            ),
        );
    }
    let gc = r#"{"command":"gc","keep_read_hours":0}"#;
    assert_eq!(removed(&run(&mut engine, gc)), Vec::<String>::new());
    // The last one leaves: now every registered agent was asked, and read it.
    run(
        &mut engine,
        r#"{"command":"agent-unregister","agent":"a10000"}"#,
    );
    assert_eq!(removed(&run(&mut engine, gc)), [broadcast]);
}
