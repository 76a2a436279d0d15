//! The worker loop from the specification, run as separate processes
//! against one database, once with `--json` (the contract agents parse) and
//! once as people read it.

use crate::common::TestEnv;

#[test]
fn the_spec_worker_loop_in_json() {
    let env = TestEnv::initialized();
    let mut transcript = String::new();
    let mut step = |title: &str, args: &[&str]| -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let run = env.run(&all);
        transcript.push_str(&format!("$ inbox {title}\n{run}\n"));
        run.json()
    };
    let sent = step(
        "send",
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "backend-worker",
            "--subject",
            "Post CRUD routes",
            "--task",
            "T4",
            "--run",
            "R1",
            "--body",
            "Add create, read, update and delete for posts.",
        ],
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let thread = thread.as_str();

    step(
        "fetch",
        &["fetch", "--agent", "backend-worker", "--status", "pending"],
    );
    let claim = step(
        "claim",
        &[
            "claim",
            "--agent",
            "backend-worker",
            "--thread",
            thread,
            "--lease-seconds",
            "900",
        ],
    );
    assert_eq!(claim["lease"]["lease_token"], 1);
    step(
        "update in_progress",
        &[
            "update",
            "--agent",
            "backend-worker",
            "--thread",
            thread,
            "--lease-token",
            "1",
            "--status",
            "in_progress",
            "--summary",
            "Implementing post CRUD routes",
        ],
    );
    let blocked = step(
        "update blocked",
        &[
            "update",
            "--agent",
            "backend-worker",
            "--thread",
            thread,
            "--status",
            "blocked",
            "--summary",
            "Need auth decision",
            "--payload-json",
            r#"{"question":"Should admin auth use email/password in MVP?"}"#,
        ],
    );
    let after = blocked["event_id"].to_string();

    // The answer lands before the worker waits: wait-reply still finds it.
    step(
        "reply",
        &[
            "reply",
            "--from",
            "lead",
            "--to",
            "backend-worker",
            "--thread",
            thread,
            "--kind",
            "answer",
            "--summary",
            "Use email/password for MVP",
            "--body",
            "Use a simple credential flow for the first iteration.",
        ],
    );
    let woke = step(
        "wait-reply",
        &[
            "wait-reply",
            "--thread",
            thread,
            "--after-event",
            &after,
            "--timeout-seconds",
            "5",
        ],
    );
    assert_eq!(woke["woke"], true);
    assert_eq!(woke["message"]["kind"], "answer");

    std::fs::write(
        env.dir().join("result.md"),
        "CRUD routes for posts, with tests.\n",
    )
    .unwrap();
    step(
        "done",
        &[
            "done",
            "--agent",
            "backend-worker",
            "--thread",
            thread,
            "--lease-token",
            "1",
            "--summary",
            "Post CRUD implemented",
            "--body-file",
            "result.md",
            "--artifact",
            "result.md",
            "--artifact-kind",
            "report",
        ],
    );
    step("show", &["show", "--thread", thread]);
    step("list", &["list", "--agent", "lead"]);
    insta::assert_snapshot!(transcript);
}

#[test]
fn the_same_loop_as_people_read_it() {
    let env = TestEnv::initialized();
    let mut transcript = String::new();
    let mut step = |args: &[&str]| env.step(&mut transcript, args);
    step(&[
        "send",
        "--agent",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Add login",
        "--priority",
        "high",
    ]);
    let fetched = env.json(&["fetch", "--agent", "worker"], 0);
    let thread = fetched["threads"][0]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let thread = thread.as_str();
    step(&["fetch", "--agent", "worker"]);
    step(&["claim", "--agent", "worker", "--thread", thread]);
    step(&[
        "update",
        "--agent",
        "worker",
        "--thread",
        thread,
        "--status",
        "blocked",
        "--summary",
        "Email or username?",
    ]);
    step(&["list"]);
    step(&[
        "reply",
        "--agent",
        "lead",
        "--thread",
        thread,
        "--summary",
        "Email",
        "--body",
        "Usernames are being retired.",
    ]);
    step(&[
        "wait-reply",
        "--agent",
        "worker",
        "--thread",
        thread,
        "--timeout-seconds",
        "5",
    ]);
    step(&[
        "done",
        "--agent",
        "worker",
        "--thread",
        thread,
        "--summary",
        "Login added",
    ]);
    step(&[
        "show",
        "--agent",
        "worker",
        "--thread",
        thread,
        "--mark-read",
    ]);
    step(&["fetch", "--agent", "worker"]);
    insta::assert_snapshot!(transcript);
}

/// Linux refuses to start a process with one argument over 128 KiB, so a
/// large payload goes through --payload-file (or stdin).
#[test]
fn large_payloads_go_through_a_file() {
    let env = TestEnv::initialized();
    let big = serde_json::json!({"log": "x".repeat(200 << 10)});
    std::fs::write(env.dir().join("payload.json"), big.to_string()).unwrap();
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "Big",
            "--payload-file",
            "payload.json",
        ],
        0,
    );
    assert_eq!(
        sent["message"]["payload"]["log"].as_str().unwrap().len(),
        200 << 10
    );
    let both = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "w",
        "--subject",
        "x",
        "--payload-file",
        "payload.json",
        "--payload-json",
        "{}",
    ]);
    assert_eq!(
        both.status, 30,
        "the two payload flags exclude each other: {both}"
    );
    std::fs::write(env.dir().join("list.json"), "[1, 2]").unwrap();
    let not_object = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "w",
        "--subject",
        "x",
        "--payload-file",
        "list.json",
        "--json",
    ]);
    assert_eq!(not_object.status, 30);
    assert_eq!(not_object.json()["error"]["code"], "invalid_payload");
}

/// `claim --next` is the worker loop's first step without a `fetch`: it
/// takes the high-priority thread before the older normal one, then says
/// plainly (exit 10) when the queue is empty.
#[test]
fn claim_next_takes_the_queue_in_order() {
    let env = TestEnv::initialized();
    let mut transcript = String::new();
    let mut step = |args: &[&str]| env.step(&mut transcript, args);
    step(&[
        "send",
        "--agent",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Older, normal",
    ]);
    step(&[
        "send",
        "--agent",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Newer, high",
        "--priority",
        "high",
    ]);
    step(&["claim", "--agent", "worker", "--next"]);
    step(&["claim", "--agent", "worker", "--next", "--json"]);
    step(&["claim", "--agent", "worker", "--next"]);
    step(&["claim", "--agent", "worker", "--next", "--json"]);
    insta::assert_snapshot!(transcript);
}
