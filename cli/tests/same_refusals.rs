//! The command line refuses what the engine refuses, with the engine's own
//! code and message: every rule lives in the engine, and the CLI only turns
//! flags into a request. Each case sends the same bad request through
//! `inbox --json` (a real process on a fresh database) and through the
//! engine in process (on a fresh in-memory store) and requires the same
//! answer. Spellings outside a vocabulary never reach the engine from the
//! command line (clap refuses them as usage errors); they must still get the
//! same code and the vocabulary's own sentence.

use crate::common::TestEnv;
use inbox_engine::{
    Engine, Kind, ManualClock, MemoryStore, Priority, Request, Response, SequentialIds, Status,
    Vocabulary,
};
use serde_json::{Value, json};

/// The engine's answer to `request` on a fresh, initialized store.
fn engine_answer(request: &Value) -> Value {
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    assert!(engine.execute_json(r#"{"command":"init"}"#).is_ok());
    let response = match Request::from_value(request.clone()) {
        Ok(request) => engine.execute(request),
        Err(failure) => *failure,
    };
    serde_json::from_str(&Response::to_json(&response)).unwrap()
}

/// `inbox ARGS --json` on a fresh database.
fn cli_answer(args: &[&str]) -> (i32, Value) {
    binary_answer("inbox", args)
}

/// `BINARY ARGS --json` (`inbox` or `orch`) on a fresh database.
fn binary_answer(binary: &str, args: &[&str]) -> (i32, Value) {
    let env = TestEnv::initialized();
    let mut full = args.to_vec();
    full.push("--json");
    let run = if binary == "orch" {
        env.orch(&full)
    } else {
        env.run(&full)
    };
    (run.status, run.json())
}

/// Each case's command line, run by `binary`, answers exactly as the engine
/// answers its request: the same JSON, and the exit code of its error.
fn assert_refused_alike(binary: &str, cases: Vec<(Vec<&str>, Value)>) {
    for (args, request) in cases {
        let engine = engine_answer(&request);
        let (status, cli) = binary_answer(binary, &args);
        assert_eq!(engine["ok"], false, "{request}: the engine accepted it");
        assert_eq!(
            cli,
            engine,
            "`{binary} {}` answers unlike the engine",
            args.join(" ")
        );
        let code = engine["error"]["code"].as_str().unwrap();
        let exit = inbox_engine::ErrorCode::parse(code).unwrap().exit_code();
        assert_eq!(status, i32::from(exit), "{args:?}");
    }
}

#[test]
fn values_the_engine_refuses_get_the_engine_s_code_and_message() {
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (
            vec![
                "update",
                "--agent",
                "w",
                "--thread",
                "thr_1",
                "--status",
                "done",
                "--summary",
                "s",
            ],
            json!({"command": "update", "agent": "w", "thread_id": "thr_1", "status": "done", "summary": "s"}),
        ),
        (
            vec![
                "update",
                "--agent",
                "w",
                "--thread",
                "thr_1",
                "--status",
                "pending",
                "--summary",
                "s",
            ],
            json!({"command": "update", "agent": "w", "thread_id": "thr_1", "status": "pending", "summary": "s"}),
        ),
        (
            vec![
                "reply",
                "--agent",
                "lead",
                "--thread",
                "thr_1",
                "--kind",
                "result",
                "--summary",
                "s",
            ],
            json!({"command": "reply", "from_agent": "lead", "thread_id": "thr_1", "kind": "result", "summary": "s"}),
        ),
        (
            vec![
                "send",
                "--agent",
                "lead",
                "--to",
                "w",
                "--subject",
                "s",
                "--kind",
                "answer",
            ],
            json!({"command": "send", "from_agent": "lead", "to_agent": "w", "subject": "s", "kind": "answer"}),
        ),
        (
            vec![
                "send",
                "--agent",
                "lead",
                "--thread",
                "thr_1",
                "--summary",
                "s",
                "--kind",
                "result",
            ],
            json!({"command": "send", "from_agent": "lead", "thread_id": "thr_1", "summary": "s", "kind": "result"}),
        ),
        (
            vec![
                "send",
                "--agent",
                "lead",
                "--thread",
                "thr_1",
                "--summary",
                "s",
                "--priority",
                "high",
            ],
            json!({"command": "send", "from_agent": "lead", "thread_id": "thr_1", "summary": "s", "priority": "high"}),
        ),
        (
            vec!["fetch", "--agent", "w", "--status", "pending,done"],
            json!({"command": "fetch", "agent": "w", "status": ["pending", "done"]}),
        ),
        (
            vec!["claim", "--agent", "w", "--next", "--thread", "thr_1"],
            json!({"command": "claim", "agent": "w", "next": true, "thread_id": "thr_1"}),
        ),
        (
            vec![
                "claim",
                "--agent",
                "w",
                "--thread",
                "thr_1",
                "--lease-seconds",
                "0",
            ],
            json!({"command": "claim", "agent": "w", "thread_id": "thr_1", "lease_seconds": 0}),
        ),
        (
            vec![
                "renew",
                "--agent",
                "w",
                "--thread",
                "thr_1",
                "--lease-seconds",
                "86401",
            ],
            json!({"command": "renew", "agent": "w", "thread_id": "thr_1", "lease_seconds": 86401}),
        ),
        (
            vec![
                "wait-reply",
                "--agent",
                "w",
                "--thread",
                "thr_1",
                "--after-event",
                "3",
                "--after-message",
                "msg_1",
            ],
            json!({"command": "wait-reply", "agent": "w", "thread_id": "thr_1", "after_event": 3, "after_message": "msg_1"}),
        ),
        (
            vec!["watch", "--timeout-seconds", "90000"],
            json!({"command": "watch", "timeout_seconds": 90000}),
        ),
        (
            vec!["list", "--limit", "0"],
            json!({"command": "list", "limit": 0}),
        ),
        (
            vec![
                "send",
                "--agent",
                "lead",
                "--to",
                "w",
                "--subject",
                "s",
                "--max-attempts",
                "101",
            ],
            json!({"command": "send", "from_agent": "lead", "to_agent": "w", "subject": "s", "max_attempts": 101}),
        ),
        (
            vec!["send", "--agent", "lead", "--to", "inbox", "--subject", "s"],
            json!({"command": "send", "from_agent": "lead", "to_agent": "inbox", "subject": "s"}),
        ),
        (
            vec!["done", "--agent", "w", "--thread", "thr_1"],
            json!({"command": "done", "agent": "w", "thread_id": "thr_1"}),
        ),
        (
            vec!["show", "--thread", "thr_1", "--mark-read"],
            json!({"command": "show", "thread_id": "thr_1", "mark_read": true}),
        ),
        (
            vec![
                "cancel",
                "--agent",
                "lead",
                "--thread",
                "thr_1",
                "--reason",
                "two\nlines",
            ],
            json!({"command": "cancel", "agent": "lead", "thread_id": "thr_1", "reason": "two\nlines"}),
        ),
    ];
    assert_refused_alike("inbox", cases);
}

/// A spelling outside a vocabulary, given where one value is expected: the
/// command line refuses it before the engine, with the same code and the
/// engine's message plus a pointer to the help.
fn check_unknown<V: Vocabulary>(args: &[&str], request: Value, command: &str, value: &str) {
    let engine = engine_answer(&request);
    let (status, cli) = cli_answer(args);
    assert_eq!(status, 30);
    assert_eq!(cli["error"]["code"], "invalid_request");
    assert_eq!(cli["error"]["code"], engine["error"]["code"]);
    let engine_message = engine["error"]["message"].as_str().unwrap();
    assert!(
        engine_message.contains(&V::unknown(value)),
        "{engine_message}"
    );
    assert_eq!(
        cli["error"]["message"].as_str().unwrap(),
        format!("{engine_message}; see `inbox {command} --help`"),
    );
}

#[test]
fn spellings_outside_a_vocabulary_get_the_same_code_and_words() {
    check_unknown::<Status>(
        &[
            "update",
            "--agent",
            "w",
            "--thread",
            "thr_1",
            "--status",
            "finished",
            "--summary",
            "s",
        ],
        json!({"command": "update", "agent": "w", "thread_id": "thr_1", "status": "finished", "summary": "s"}),
        "update",
        "finished",
    );
    check_unknown::<Kind>(
        &[
            "reply",
            "--agent",
            "lead",
            "--thread",
            "thr_1",
            "--kind",
            "memo",
            "--summary",
            "s",
        ],
        json!({"command": "reply", "from_agent": "lead", "thread_id": "thr_1", "kind": "memo", "summary": "s"}),
        "reply",
        "memo",
    );
    check_unknown::<Priority>(
        &[
            "send",
            "--agent",
            "lead",
            "--to",
            "w",
            "--subject",
            "s",
            "--priority",
            "urgent",
        ],
        json!({"command": "send", "from_agent": "lead", "to_agent": "w", "subject": "s", "priority": "urgent"}),
        "send",
        "urgent",
    );
}

/// The leader's command line refuses what the engine refuses, the same way:
/// orch's values are checked by the engine alone.
#[test]
fn orch_values_the_engine_refuses_get_the_engine_s_code_and_message() {
    let add = |extra: &[&'static str]| {
        let mut args = vec![
            "task",
            "add",
            "--agent",
            "lead",
            "--run",
            "r",
            "--task",
            "t",
            "--title",
            "x",
            "--assignee",
            "w",
        ];
        args.extend_from_slice(extra);
        args
    };
    let task = |extra: Value| {
        let mut spec = json!({"task_id": "t", "title": "x", "assignee": "w"});
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        json!({"command": "orch-task-add", "agent": "lead", "run_id": "r", "task": spec})
    };
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (
            add(&["--max-attempts", "0"]),
            task(json!({"max_attempts": 0})),
        ),
        (
            add(&["--backoff-factor", "0.5"]),
            task(json!({"backoff_factor": 0.5})),
        ),
        (
            add(&["--max-backoff-seconds", "99999999"]),
            task(json!({"max_backoff_seconds": 99_999_999})),
        ),
        (
            vec![
                "task",
                "add",
                "--agent",
                "lead",
                "--run",
                "r",
                "--task",
                "bad id",
                "--title",
                "x",
                "--assignee",
                "w",
            ],
            json!({"command": "orch-task-add", "agent": "lead", "run_id": "r",
                   "task": {"task_id": "bad id", "title": "x", "assignee": "w"}}),
        ),
        (
            vec![
                "dispatch", "--agent", "lead", "--run", "r", "--task", "t", "--limit", "2",
            ],
            json!({"command": "orch-dispatch", "agent": "lead", "run_id": "r", "task_id": "t", "limit": 2}),
        ),
        (
            vec!["reject", "t", "--agent", "lead", "--run", "r"],
            json!({"command": "orch-reject", "agent": "lead", "run_id": "r", "task_id": "t"}),
        ),
        (
            vec!["reassign", "t", "--agent", "lead", "--run", "r"],
            json!({"command": "orch-reassign", "agent": "lead", "run_id": "r", "task_id": "t"}),
        ),
    ];
    assert_refused_alike("orch", cases);
}
