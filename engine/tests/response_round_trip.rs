//! `Response::from_json` reads back exactly what `Response::to_json` wrote:
//! a host that runs the engine in a sandbox (the wasmtime plugin) gets JSON
//! across the boundary and must print, render and exit as if it had run the
//! engine itself. Covers every output type and every exit-code class.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{
    Engine, EngineError, ErrorCode, ManualClock, MemoryStore, Response, SequentialIds,
};

fn round_trip(response: &Response) {
    let json = response.to_json();
    let back = Response::from_json(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(back.to_json(), json, "JSON changed on the way back");
    assert_eq!(back.exit_code(), response.exit_code(), "{json}");
    assert_eq!(back.error_code(), response.error_code(), "{json}");
    if let (Some(a), Some(b)) = (back.error(), response.error()) {
        assert_eq!(a.to_string(), b.to_string(), "the message a person reads");
    }
}

#[test]
fn every_output_and_every_exit_class_reads_back_unchanged() {
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    let requests = [
        r#"{"command":"init"}"#,
        r#"{"command":"version"}"#,
        r#"{"command":"fetch","agent":"worker"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login","payload":{"n":1.5,"deep":{"x":[1,null,"é"]}},"artifacts":[{"path":"https://example.com/spec","kind":"url","metadata":{"v":2}}]}"#,
        r#"{"command":"fetch","agent":"worker"}"#,
        r#"{"command":"claim","agent":"worker","thread_id":"thr_000001"}"#,
        r#"{"command":"claim","agent":"other","thread_id":"thr_000001"}"#,
        r#"{"command":"claim","agent":"worker","next":true}"#,
        r#"{"command":"renew","agent":"worker","thread_id":"thr_000001","lease_token":1}"#,
        r#"{"command":"update","agent":"worker","thread_id":"thr_000001","lease_token":1,"status":"blocked","summary":"Which table?"}"#,
        r#"{"command":"reply","from_agent":"lead","thread_id":"thr_000001","kind":"answer","summary":"sessions"}"#,
        r#"{"command":"show","thread_id":"thr_000001","agent":"worker","mark_read":true}"#,
        r#"{"command":"watch","agent":"lead","after_event":0}"#,
        r#"{"command":"wait-reply","agent":"lead","thread_id":"thr_000001","after_event":0}"#,
        r#"{"command":"done","agent":"worker","thread_id":"thr_000001","lease_token":1,"summary":"Added"}"#,
        r#"{"command":"done","agent":"worker","thread_id":"thr_000001","lease_token":1,"summary":"Again"}"#,
        r#"{"command":"list","agent":"worker"}"#,
        r#"{"command":"sweep"}"#,
        r#"{"command":"show","thread_id":"thr_999999"}"#,
        r#"{"command":"send","from_agent":"lead"}"#,
        r#"{"command":"nonsense"}"#,
        r#"not json"#,
    ];
    let mut exit_codes = Vec::new();
    for request in requests {
        let response = engine.execute_json(request);
        exit_codes.push(response.exit_code());
        round_trip(&response);
    }
    for class in [0, 10, 20, 30, 40] {
        assert!(
            exit_codes.contains(&class),
            "no exit {class} in {exit_codes:?}"
        );
    }
}

#[test]
fn store_and_internal_failures_read_back_with_their_code() {
    for code in ErrorCode::ALL {
        let response = Response::failure(
            Some("send".into()),
            EngineError::Relayed {
                code: *code,
                message: format!("a {code} from elsewhere"),
            },
        );
        round_trip(&response);
        assert_eq!(response.exit_code(), code.exit_code());
    }
}

#[test]
fn text_that_is_not_a_response_is_refused_with_the_reason() {
    let cases = [
        ("", "not JSON"),
        ("[]", "not a response"),
        (r#"{"ok":false,"command":"send"}"#, "without an `error`"),
        (
            r#"{"ok":false,"command":null,"error":{"code":"no_such_code","message":"m"}}"#,
            "unknown error code `no_such_code`",
        ),
        (r#"{"ok":true,"command":"teleport"}"#, "bad output"),
    ];
    for (json, want) in cases {
        let error = Response::from_json(json).expect_err(json);
        assert!(error.contains(want), "{json}: {error}");
    }
}
