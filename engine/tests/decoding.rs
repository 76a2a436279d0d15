//! Robustness of everything that parses user input: the JSON request
//! decoder, transition scripts and timestamps. None may panic, and each
//! must agree with its reference.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{ManualClock, MemoryStore, Request, Response, Script, Timestamp, run_script};
use proptest::prelude::*;

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        any::<f64>().prop_map(|n| serde_json::json!(n)),
        "[a-z_]{0,12}".prop_map(serde_json::Value::String),
        prop::sample::select(vec![
            "send",
            "claim",
            "fetch",
            "wait-reply",
            "pending",
            "answer",
            "thr_000001"
        ])
        .prop_map(|s| serde_json::Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "command",
                    "agent",
                    "thread_id",
                    "from_agent",
                    "to_agent",
                    "subject",
                    "summary",
                    "kind",
                    "status",
                    "payload",
                    "artifacts",
                    "limit",
                    "lease_seconds",
                    "lease_token",
                    "after_event",
                    "kinds",
                    "unread",
                    "mark_read",
                    "path",
                    "metadata",
                ]),
                inner,
                0..6,
            )
            .prop_map(|m| serde_json::Value::Object(
                m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Any JSON at all decodes or fails cleanly, and whatever decodes
    /// executes to a well-formed response.
    #[test]
    fn any_json_request_decodes_or_fails_cleanly(value in json_value()) {
        let mut engine = inbox_engine::Engine::new(
            MemoryStore::new(),
            ManualClock::new(ManualClock::SCRIPT_EPOCH),
            inbox_engine::SequentialIds::new(),
        );
        let response = match Request::from_value(value) {
            Ok(request) => {
                // A request that decodes re-encodes to JSON that decodes to itself.
                let json = serde_json::to_value(&request).unwrap();
                prop_assert_eq!(Request::from_value(json).map_err(|e| e.to_json()), Ok(request.clone()));
                engine.execute(request)
            }
            Err(failure) => *failure,
        };
        let json: serde_json::Value = serde_json::from_str(&response.to_json()).unwrap();
        prop_assert!(json["ok"].is_boolean());
        if let Response::Failure { .. } = response {
            prop_assert!(json["error"]["code"].is_string());
            prop_assert_eq!(response.exit_code() % 10, 0);
        }
    }

    /// Arbitrary text never panics the JSON entry point.
    #[test]
    fn any_text_request_fails_cleanly(text in ".{0,200}") {
        let mut engine = inbox_engine::Engine::new(
            MemoryStore::new(),
            ManualClock::new(ManualClock::SCRIPT_EPOCH),
            inbox_engine::SequentialIds::new(),
        );
        let response = engine.execute_json(&text);
        prop_assert!(response.exit_code() == 0 || response.exit_code() >= 10);
    }

    /// Arbitrary text never panics the script parser, and any script that
    /// parses runs.
    #[test]
    fn any_script_text_parses_or_fails_with_a_line(text in "([a-z_=\\[\\]{}\" #\\\\,:0-9-]{0,30}\n?){0,6}") {
        match Script::parse(&text) {
            Ok(script) => {
                let _ = script.run(MemoryStore::new());
            }
            Err(error) => prop_assert!(error.line >= 1),
        }
    }

    /// Rendering agrees with the `time` crate across the whole range, and
    /// parsing inverts rendering.
    #[test]
    fn timestamps_render_like_the_time_crate_and_round_trip(
        millis in Timestamp::MIN.as_millis()..=Timestamp::MAX.as_millis()
    ) {
        let ours = Timestamp::from_millis(millis);
        let theirs = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).unwrap();
        let format = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        prop_assert_eq!(ours.to_string(), theirs.format(&format).unwrap());
        prop_assert_eq!(Timestamp::parse(&ours.to_string()), Ok(ours));
    }

    /// Timestamp parsing never panics on arbitrary text.
    #[test]
    fn timestamp_parse_never_panics(text in ".{0,40}") {
        let _ = Timestamp::parse(&text);
    }
}

#[test]
fn requests_name_the_field_that_did_not_decode() {
    let failure = Request::from_json(
        r#"{"command":"claim","agent":"w","thread_id":"t","lease_seconds":"soon"}"#,
    )
    .unwrap_err();
    let json: serde_json::Value = serde_json::from_str(&failure.to_json()).unwrap();
    assert_eq!(json["command"], "claim");
    assert_eq!(json["error"]["code"], "invalid_request");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`lease_seconds`:"),
        "{json}"
    );
}

#[test]
fn a_request_without_a_command_says_what_a_request_looks_like() {
    for text in [r#"{"agent":"w"}"#, "[]", r#"{"command":7}"#] {
        let failure = Request::from_json(text).unwrap_err();
        let json: serde_json::Value = serde_json::from_str(&failure.to_json()).unwrap();
        assert_eq!(json["ok"], false);
        assert_eq!(json["command"], serde_json::Value::Null);
        assert!(
            json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("\"command\""),
            "{json}"
        );
    }
    let failure = Request::from_json("{not json").unwrap_err();
    assert_eq!(failure.exit_code(), 30);
}

#[test]
fn limits_are_enforced_at_their_documented_values() {
    let mut engine = inbox_engine::Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        inbox_engine::SequentialIds::new(),
    );
    let send = |body: String, summary: String| {
        serde_json::json!({"command": "send", "from_agent": "a", "to_agent": "b", "subject": "s", "summary": summary, "body": body}).to_string()
    };
    let ok = engine.execute_json(&send(
        "x".repeat(inbox_engine::validate::BODY_MAX_BYTES),
        "s".into(),
    ));
    assert_eq!(ok.exit_code(), 0, "{}", ok.to_json());
    let long = engine.execute_json(&send(
        "x".repeat(inbox_engine::validate::BODY_MAX_BYTES + 1),
        "s".into(),
    ));
    assert_eq!(long.error_code().map(|c| c.as_str()), Some("too_long"));
    let summary = engine.execute_json(&send(
        String::new(),
        "é".repeat(inbox_engine::validate::SUMMARY_MAX_CHARS + 1),
    ));
    assert_eq!(summary.error_code().map(|c| c.as_str()), Some("too_long"));
    assert!(
        summary.to_json().contains("1001 characters"),
        "{}",
        summary.to_json()
    );
    let payload = serde_json::json!({"command": "send", "from_agent": "a", "to_agent": "b", "subject": "s",
        "payload": {"blob": "x".repeat(inbox_engine::validate::PAYLOAD_MAX_BYTES)}});
    assert_eq!(
        engine
            .execute_json(&payload.to_string())
            .error_code()
            .map(|c| c.as_str()),
        Some("too_long")
    );
}

#[test]
fn payload_json_text_from_a_command_line_is_checked_like_the_wire() {
    use inbox_engine::validate::parse_json_object;
    assert!(parse_json_object("payload", r#"{"a": 1}"#).is_ok());
    for bad in ["{a: 1}", "[1]", "\"s\"", ""] {
        let error = parse_json_object("payload", bad).unwrap_err();
        assert_eq!(error.code().as_str(), "invalid_payload", "{bad}");
    }
}

#[test]
fn a_script_expectation_that_does_not_hold_is_reported() {
    let transcript = run_script(
        "send from_agent=a to_agent=b subject=s\nclaim agent=b thread_id=thr_000001 => lease_conflict",
        MemoryStore::new(),
    )
    .unwrap();
    assert_eq!(
        transcript.failures,
        ["line 2: expected lease_conflict, got ok (exit 0)"]
    );
    assert!(
        transcript
            .text
            .contains("!! line 2: expected lease_conflict")
    );
}
