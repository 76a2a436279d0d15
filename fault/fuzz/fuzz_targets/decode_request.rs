//! libFuzzer target: arbitrary bytes through the JSON request decoder and
//! one engine call on a store holding a few threads. Nothing may panic, and
//! every response must serialize to the contract's JSON.

#![no_main]

use inbox_engine::{Engine, ManualClock, MemoryStore, SequentialIds};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    for line in [
        r#"{"command":"send","from_agent":"lead","to_agent":"w1","subject":"one"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"w1","subject":"two"}"#,
        r#"{"command":"claim","agent":"w1","thread_id":"thr_000002"}"#,
    ] {
        let _ = engine.execute_json(line);
    }
    let response = engine.execute_json(text);
    let json: serde_json_check::Value = match serde_json_check::from_str(&response.to_json()) {
        Ok(json) => json,
        Err(e) => panic!("response is not JSON: {e}"),
    };
    assert!(json["ok"].is_boolean());
});
