//! `inbox export --format F` and `inbox import --format F FILE`, with real
//! files and the real binary: the lossless dump round-trips byte for byte
//! and imports once; seed 004's mailbox log and seed 002's member inbox
//! lines round-trip, import once, and read in `inbox read` and `list` as
//! the seeds describe them; malformed lines are skipped and counted; a
//! newer, cut, over-long or conflicting dump is refused and changes
//! nothing; large imports show a progress bar on a terminal only.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use serde_json::Value;

use crate::common::TestEnv;
use crate::export_import::{busy_project, rows};

/// Seed 004's own example lines, as its documentation prints them.
const SEED_004: &str = r#"{"id":"msg_001","type":"task-assigned","from":"orchestrator","to":"agent:ag_x1","body":"...","read":true,"createdAt":"2026-05-10T14:00:00Z"}
{"id":"msg_002","type":"task-done","from":"agent:ag_x1","to":"orchestrator","body":"...","read":false,"createdAt":"2026-05-10T14:04:32Z"}
{"id":"msg_003","type":"status","from":"agent:ag_x2","to":"broadcast","body":"Running tests...","read":false,"createdAt":"2026-05-10T14:04:45Z"}
"#;

/// Seed 002's example messages, one per line, in the order a team would
/// send them (its request/response extension included).
const SEED_002: &str = r#"{"type":"team_broadcast","from":"coordinator","to":"all","timestamp":"2026-02-15T09:00:00Z","content":{"text":"Daily standup in 30 minutes","recipients":["backend-dev","frontend-dev","tester"]}}
{"type":"task_assignment","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T10:30:00Z","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","subject":"Implement user authentication API","priority":4,"estimatedHours":8}}
{"type":"task_status_request","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T11:00:00Z","requestId":"req-98765","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890"}}
{"type":"task_status_response","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T11:01:00Z","requestId":"req-98765","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","status":"in_progress","progress":60,"eta":"2026-02-15T14:00:00Z"}}
{"type":"message","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T11:15:00Z","content":{"text":"Please prioritize the authentication task, frontend is blocked."}}
{"type":"blocking_notification","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T14:00:00Z","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","blockedBy":["b2c3d4e5-f6a7-8901-bcde-f12345678901"],"reason":"Cannot test authentication until implementation is complete"}}
{"type":"message","from":"coordinator","to":"backend-dev","timestamp":"2026-02-15T14:10:00Z","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","text":"Use the mock provider for now."}}
{"type":"task_completion","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T16:00:00Z","content":{"taskId":"a1b2c3d4-e5f6-7890-abcd-ef1234567890","actualHours":7.5,"notes":"Implemented with JWT, added rate limiting"}}
{"type":"idle_notification","from":"backend-dev","to":"coordinator","timestamp":"2026-02-15T16:30:00Z","content":{"reason":"no_assigned_tasks","lastTaskCompleted":"a1b2c3d4-e5f6-7890-abcd-ef1234567890"}}
"#;

/// The lines of a file, each parsed: equal JSON whatever the key order.
fn values(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn write(env: &TestEnv, name: &str, text: &str) {
    std::fs::write(env.dir().join(name), text).unwrap();
}

fn contents(env: &TestEnv, name: &str) -> String {
    std::fs::read_to_string(env.dir().join(name)).unwrap()
}

/// `busy_project`, with orch's tables, the registry, an idempotency key and
/// a setting filled too.
fn everything() -> TestEnv {
    let (env, _) = busy_project();
    let lead = ["--agent", "lead"];
    env.orch_json(
        &[&lead[..], &["run", "create", "--goal", "Move", "--id", "r"]].concat(),
        0,
    );
    write(
        &env,
        "plan.json",
        r#"[{"task_id": "a", "title": "A", "assignee": "w"}, {"task_id": "b", "title": "B", "assignee": "w", "needs": ["a"]}]"#,
    );
    env.orch_json(&[&lead[..], &["plan", "--file", "plan.json"]].concat(), 0);
    env.orch_json(&[&lead[..], &["dispatch", "--all-ready"]].concat(), 0);
    env.json(
        &[
            "agent",
            "register",
            "--agent",
            "w",
            "--role",
            "builder",
            "--idempotency-key",
            "register-w",
        ],
        0,
    );
    env.json(&["settings", "--keep-days", "9"], 0);
    env
}

#[test]
fn the_dump_holds_every_table_and_round_trips_byte_for_byte() {
    let env = everything();
    let exported = env.json(&["export", "dump.jsonl"], 0);
    assert_eq!(exported["format"], "jsonl");
    let dump = contents(&env, "dump.jsonl");
    let mode = std::fs::metadata(env.dir().join("dump.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only");
    let lines = values(&dump);
    assert_eq!(lines[0]["record"], "header");
    assert_eq!(lines[0]["format"], "inbox-jsonl");
    assert_eq!(lines.last().unwrap()["record"], "end");
    assert_eq!(exported["records"].as_u64(), Some(lines.len() as u64 - 2));
    // Every table of the schema has its rows in the file.
    for (table, rows) in rows(&env.db()) {
        let in_file = lines
            .iter()
            .filter(|l| l["record"] == table.as_str())
            .count();
        assert_eq!(in_file, rows.len(), "{table}");
    }

    let imported = env.json(&["--db", "copy/new.db", "import", "dump.jsonl"], 0);
    assert_eq!(imported["added"], exported["records"], "{imported}");
    assert_eq!(rows(&env.dir().join("copy/new.db")), rows(&env.db()));
    env.json(&["--db", "copy/new.db", "export", "again.jsonl"], 0);
    assert_eq!(contents(&env, "again.jsonl"), dump, "byte for byte");

    // Twice adds nothing.
    let twice = env.json(&["--db", "copy/new.db", "import", "dump.jsonl"], 0);
    assert_eq!(
        (twice["added"].as_u64(), twice["present"].clone()),
        (Some(0), exported["records"].clone())
    );
    // The copy is an ordinary database.
    env.json(
        &[
            "--db",
            "copy/new.db",
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "Next",
        ],
        0,
    );
}

#[test]
fn the_dump_goes_to_stdout_without_a_file_and_never_over_one_unless_forced() {
    let (env, _) = busy_project();
    let run = env.run(&["export"]);
    assert_eq!(run.status, 0, "{run}");
    assert!(
        run.raw_stdout
            .starts_with(r#"{"record":"header","format":"inbox-jsonl""#)
    );
    assert!(
        run.stderr.contains("Exported"),
        "the report goes to stderr: {run}"
    );
    let refused = env.json(&["export", "-"], 30);
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");

    write(&env, "kept.txt", "keep me");
    std::os::unix::fs::symlink("kept.txt", env.dir().join("link.jsonl")).unwrap();
    let refused = env.json(&["export", "link.jsonl"], 30);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--force")
    );
    env.json(&["export", "link.jsonl", "--force"], 0);
    assert_eq!(
        contents(&env, "kept.txt"),
        "keep me",
        "the link was replaced, not followed"
    );
    assert!(contents(&env, "link.jsonl").starts_with(r#"{"record":"header""#));
}

#[test]
fn a_row_present_with_other_values_refuses_the_whole_dump() {
    let (env, thread) = busy_project();
    env.json(&["export", "dump.jsonl"], 0);
    let changed =
        contents(&env, "dump.jsonl").replace("\"subject\":\"One\"", "\"subject\":\"Changed\"");
    write(&env, "changed.jsonl", &changed);
    let before = rows(&env.db());
    let refused = env.json(&["import", "changed.jsonl"], 30);
    assert_eq!(refused["error"]["code"], "invalid_state", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("threads thread_id=\"") && message.contains(&thread),
        "{message}"
    );
    assert!(message.contains("nothing was imported"), "{message}");
    assert_eq!(rows(&env.db()), before);
    // The unchanged file is the database's own: nothing to add.
    let same = env.json(&["import", "dump.jsonl"], 0);
    assert_eq!(same["added"], 0);
}

#[test]
fn newer_cut_unknown_and_over_long_dumps_are_refused_and_change_nothing() {
    let (env, _) = busy_project();
    env.json(&["export", "dump.jsonl"], 0);
    let dump = contents(&env, "dump.jsonl");
    let header_end = dump.find('\n').unwrap();
    let records = &dump[header_end + 1..];
    let without_end = &dump[..dump.trim_end().rfind('\n').unwrap() + 1];
    // After rows that would import: none of them may be written.
    let huge = format!(
        "{without_end}{{\"record\":\"threads\",\"subject\":\"{}\"}}\n",
        "x".repeat(65 << 20)
    );
    let cases = [
        (
            "newer-format",
            dump.replace("\"format_version\":1", "\"format_version\":2"),
            50,
            "schema_too_new",
            "format_version 2",
        ),
        (
            "newer-schema",
            dump.replace("\"schema_version\":4", "\"schema_version\":99"),
            50,
            "schema_too_new",
            "schema_version 99",
        ),
        (
            "cut",
            without_end.to_owned(),
            30,
            "invalid_value",
            "cut short",
        ),
        (
            "headless",
            records.to_owned(),
            30,
            "invalid_value",
            "--format mailbox-jsonl",
        ),
        (
            "unknown",
            dump.replacen("\"record\":\"events\"", "\"record\":\"gadgets\"", 1),
            30,
            "invalid_value",
            "no such table",
        ),
        ("huge", huge, 30, "too_long", "longer than 67108864 bytes"),
    ];
    env.json(&["--db", "dest.db", "init"], 0);
    let empty = rows(&env.dir().join("dest.db"));
    for (name, text, exit, code, says) in cases {
        write(&env, name, &text);
        let refused = env.json(&["--db", "dest.db", "import", name], exit);
        assert_eq!(refused["error"]["code"], code, "{name}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{name}: {message}");
        assert_eq!(rows(&env.dir().join("dest.db")), empty, "{name} wrote");
    }
}

#[test]
fn seed_004s_example_log_reads_as_its_mailbox_and_round_trips() {
    let env = TestEnv::initialized();
    write(&env, "mailbox.jsonl", SEED_004);
    let mut transcript = String::new();
    let args = ["import", "--format", "mailbox-jsonl", "mailbox.jsonl"];
    env.step(&mut transcript, &args);
    env.step(&mut transcript, &["list"]);
    env.step(&mut transcript, &["read", "--agent", "orchestrator"]);
    insta::assert_snapshot!(transcript);

    // The worker read its task; the orchestrator has the result unread.
    let read = env.json(&["read", "--agent", "ag_x1"], 10);
    assert_eq!(read["messages"], serde_json::json!([]));
    let orchestrator = env.json(&["read", "--agent", "orchestrator"], 0);
    let result = &orchestrator["messages"][0];
    assert_eq!(
        (result["kind"].as_str(), result["thread_status"].as_str()),
        (Some("result"), Some("done"))
    );
    assert_eq!(result["payload"]["mailbox"]["id"], "msg_002");
    // A status to broadcast reaches every registered agent.
    env.json(&["agent", "register", "--agent", "ag_x3"], 0);
    let everyone = env.json(&["read", "--agent", "ag_x3"], 0);
    assert_eq!(everyone["messages"][0]["body"], "Running tests...");

    let twice = env.json(&args, 0);
    assert_eq!(
        (twice["imported"].as_u64(), twice["present"].as_u64()),
        (Some(0), Some(3))
    );
    env.json(&["export", "--format", "mailbox-jsonl", "out.jsonl"], 0);
    assert_eq!(
        contents(&env, "out.jsonl"),
        SEED_004,
        "the same lines, byte for byte"
    );
}

#[test]
fn a_mailbox_conversation_blocks_answers_and_finishes_its_thread() {
    let env = TestEnv::initialized();
    let log = r#"{"id":"m1","type":"task-assigned","from":"orchestrator","to":"agent:ag_1","subject":"Add login","body":"Build the login page","metadata":{"files":["a.rs"],"weight":1.50},"issueId":"ISS-7","read":true,"createdAt":"2026-05-10T14:00:00Z"}
{"id":"m2","type":"status","from":"agent:ag_1","to":"orchestrator","body":"Started","read":true,"createdAt":"2026-05-10T14:01:00Z"}
{"id":"m3","type":"question","from":"agent:ag_1","to":"orchestrator","body":"Email or SSO?","read":true,"createdAt":"2026-05-10T14:02:00Z"}
{"id":"m4","type":"answer","from":"orchestrator","to":"agent:ag_1","body":"Email","read":false,"createdAt":"2026-05-10T14:03:00Z"}
{"id":"m5","type":"task-done","from":"agent:ag_1","to":"orchestrator","body":"Login page done\n\nFiles: a.rs","read":false,"createdAt":"2026-05-10T14:04:00Z","trace":"t-1"}
{"id":"m6","type":"review-request","from":"orchestrator","to":"role:reviewer","body":"Review the login page","agentId":"ag_1","read":false,"createdAt":"2026-05-10T14:05:00Z"}
"#;
    write(&env, "log.jsonl", log);
    let imported = env.json(&["import", "--format", "mailbox-jsonl", "log.jsonl"], 0);
    assert_eq!(imported["imported"], 6, "{imported}");
    let list = env.json(&["list"], 0);
    let threads = list["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{list}");
    let task = threads
        .iter()
        .find(|t| t["subject"] == "Add login")
        .unwrap();
    assert_eq!(task["status"], "done");
    let shown = env.json(
        &["show", "--thread", task["thread_id"].as_str().unwrap()],
        0,
    );
    let kinds: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["task", "progress", "question", "answer", "result"]);
    assert_eq!(shown["messages"][0]["payload"]["issue_id"], "ISS-7");
    let pool = threads
        .iter()
        .find(|t| t["subject"] != "Add login")
        .unwrap();
    assert_eq!(pool["assigned_to"], "role:reviewer", "a notice to the role");

    env.json(&["export", "--format", "mailbox-jsonl", "out.jsonl"], 0);
    assert_eq!(values(&contents(&env, "out.jsonl")), values(log));
}

#[test]
fn malformed_and_refused_lines_are_reported_by_number_and_skipped() {
    let env = TestEnv::initialized();
    let mut log = std::fs::File::create(env.dir().join("log.jsonl")).unwrap();
    let good = |id: &str, to: &str| {
        format!(
            r#"{{"id":"{id}","type":"task-assigned","from":"orchestrator","to":"agent:{to}","body":"Work {id}","read":false,"createdAt":"2026-05-10T14:00:00Z"}}"#
        )
    };
    writeln!(log, "{}", good("a", "w1")).unwrap();
    writeln!(log, "not json at all").unwrap();
    writeln!(log, "[1, 2]").unwrap();
    writeln!(
        log,
        r#"{{"id":"b","type":"shout","from":"x","to":"y","body":"","createdAt":"t"}}"#
    )
    .unwrap();
    log.write_all(b"\xff\xfe not utf-8\n").unwrap();
    writeln!(
        log,
        r#"{{"id":"c","type":"status","from":"x","to":"y","body":"{}","createdAt":"t"}}"#,
        "z".repeat(9 << 20)
    )
    .unwrap();
    // Refused by inbox: w2 may not finish w1's task (a claim it is refused).
    writeln!(
        log,
        r#"{{"id":"d","type":"task-done","from":"agent:w2","to":"orchestrator","body":"mine now","agentId":"w1","read":false,"createdAt":"t"}}"#
    )
    .unwrap();
    writeln!(log).unwrap();
    writeln!(log, "{}", good("e", "w3")).unwrap();
    drop(log);

    let run = env.run(&["import", "--format", "mailbox-jsonl", "log.jsonl"]);
    assert_eq!(run.status, 0, "{run}");
    insta::assert_snapshot!(run.to_string());
    let again = env.json(&["import", "--format", "mailbox-jsonl", "log.jsonl"], 0);
    assert_eq!(
        (
            again["lines"].as_u64(),
            again["present"].as_u64(),
            again["malformed"].as_u64(),
            again["refused"].as_u64()
        ),
        (Some(8), Some(2), Some(5), Some(1)),
        "{again}"
    );
    let problems: Vec<(u64, &str)> = again["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["line"].as_u64().unwrap(), p["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        problems,
        [
            (2, "invalid_value"),
            (3, "invalid_value"),
            (4, "invalid_value"),
            (5, "invalid_value"),
            (6, "invalid_value"),
            (7, "not_assigned")
        ]
    );
    // The refused line left nothing: no claim by w2 was recorded.
    let shown = env.json(&["list", "--assigned-to", "w1"], 0);
    assert_eq!(shown["threads"][0]["status"], "pending", "{shown}");
    assert_eq!(shown["threads"][0]["attempts"], 0, "{shown}");
}

#[test]
fn seed_002s_lines_become_a_task_thread_and_round_trip() {
    let env = TestEnv::initialized();
    write(&env, "inbox", SEED_002);
    let args = ["import", "--format", "teams-jsonl", "inbox"];
    let imported = env.json(&args, 0);
    assert_eq!(
        (
            imported["imported"].as_u64(),
            imported["malformed"].as_u64()
        ),
        (Some(9), Some(0)),
        "{imported}"
    );
    let task = env.json(
        &["list", "--task", "a1b2c3d4-e5f6-7890-abcd-ef1234567890"],
        0,
    );
    let thread = &task["threads"][0];
    assert_eq!(
        (thread["status"].as_str(), thread["assigned_to"].as_str()),
        (Some("done"), Some("backend-dev"))
    );
    let shown = env.json(
        &["show", "--thread", thread["thread_id"].as_str().unwrap()],
        0,
    );
    let kinds: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    // The status request, the response, the block, the answer that
    // unblocked it (a message from the coordinator), the result.
    assert_eq!(
        kinds,
        ["task", "question", "event", "question", "answer", "result"]
    );
    let broadcast = env.json(&["list", "--assigned-to", "broadcast"], 0);
    assert_eq!(
        broadcast["threads"][0]["subject"],
        "Daily standup in 30 minutes"
    );

    assert_eq!(env.json(&args, 0)["present"], 9, "twice adds nothing");
    env.json(&["export", "--format", "teams-jsonl", "out"], 0);
    assert_eq!(values(&contents(&env, "out")), values(SEED_002));
}

#[test]
fn the_seed_002_shell_writer_appends_and_a_second_import_takes_only_the_new_line() {
    let env = TestEnv::initialized();
    let inbox = env.dir().join("members/backend-dev/inbox");
    std::fs::create_dir_all(inbox.parent().unwrap()).unwrap();
    // The seed's own writer: echo "$MESSAGE" >> inbox.
    let append = |text: &str| {
        let script = format!(
            "MESSAGE='{{\"type\":\"message\",\"from\":\"coordinator\",\"to\":\"backend-dev\",\"timestamp\":\"'$(date -u +%Y-%m-%dT%H:%M:%SZ)'\",\"content\":{{\"text\":\"{text}\"}}}}'\necho \"$MESSAGE\" >> {}",
            inbox.display()
        );
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .status()
            .unwrap();
        assert!(status.success());
    };
    append("Hello");
    let path = inbox.display().to_string();
    let first = env.json(&["import", "--format", "teams-jsonl", &path], 0);
    assert_eq!(first["imported"], 1);
    append("Hello again");
    let second = env.json(&["import", "--format", "teams-jsonl", &path], 0);
    assert_eq!(
        (second["imported"].as_u64(), second["present"].as_u64()),
        (Some(1), Some(1))
    );
    let read = env.json(&["read", "--agent", "backend-dev"], 0);
    let bodies: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["Hello", "Hello again"]);
    // A line reader reads the export back, as the seed's members do.
    env.json(&["export", "--format", "teams-jsonl", "out"], 0);
    for line in contents(&env, "out").lines() {
        let message: Value = serde_json::from_str(line).unwrap();
        assert_eq!(message["to"], "backend-dev");
        assert!(message["timestamp"].as_str().unwrap().ends_with('Z'), "UTC");
    }
}

#[test]
fn messages_written_in_inbox_export_as_seed_lines_that_rebuild_their_threads() {
    let (env, _) = busy_project();
    env.json(&["export", "--format", "mailbox-jsonl", "mailbox.jsonl"], 0);
    env.json(&["export", "--format", "teams-jsonl", "teams.jsonl"], 0);
    let mailbox = values(&contents(&env, "mailbox.jsonl"));
    assert_eq!(mailbox.len(), 3, "two tasks and a progress report");
    assert_eq!(mailbox[0]["type"], "task-assigned");
    assert_eq!(mailbox[0]["from"], "agent:lead");
    assert_eq!(mailbox[2]["type"], "status");
    assert_eq!(
        mailbox[2]["metadata"]["threadId"],
        mailbox[0]["metadata"]["threadId"]
    );
    let teams = values(&contents(&env, "teams.jsonl"));
    assert_eq!(teams[0]["type"], "task_assignment");
    assert_eq!(teams[2]["content"]["taskId"], teams[0]["content"]["taskId"]);

    for (format, file) in [
        ("mailbox-jsonl", "mailbox.jsonl"),
        ("teams-jsonl", "teams.jsonl"),
    ] {
        let db = format!("{format}.db");
        env.json(&["--db", &db, "import", "--format", format, file], 0);
        let list = env.json(&["--db", &db, "list"], 0);
        assert_eq!(
            list["threads"].as_array().unwrap().len(),
            2,
            "{format}: {list}"
        );
        let one = list["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["subject"] == "One")
            .unwrap();
        let shown = env.json(
            &[
                "--db",
                &db,
                "show",
                "--thread",
                one["thread_id"].as_str().unwrap(),
            ],
            0,
        );
        assert_eq!(
            shown["messages"].as_array().unwrap().len(),
            2,
            "{format}: {shown}"
        );
    }
}

#[test]
fn flags_that_do_not_go_together_are_usage_errors() {
    let env = TestEnv::initialized();
    for args in [
        &["import", "x.jsonl", "--replace"][..],
        &["import", "--sqlite", "a.db", "--format", "jsonl"],
        &["export", "--sqlite", "a.db", "out.jsonl"],
        &["import"],
        &["export", "--format", "csv"],
    ] {
        let refused = env.json(args, 30);
        assert_eq!(
            refused["error"]["code"], "invalid_request",
            "{args:?}: {refused}"
        );
    }
    let missing = env.json(&["--db", "never.db", "import", "missing.jsonl"], 30);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be read")
    );
    assert!(
        !env.dir().join("never.db").exists(),
        "no database made for a missing file"
    );
}

#[test]
fn a_large_import_shows_a_progress_bar_on_a_terminal_only() {
    let env = TestEnv::initialized();
    let mut log = String::new();
    for n in 0..500 {
        log.push_str(&format!(
            r#"{{"id":"n{n}","type":"status","from":"agent:w","to":"broadcast","body":"{}","read":false,"createdAt":"2026-05-10T14:00:00Z"}}"#,
            "step ".repeat(500)
        ));
        log.push('\n');
    }
    assert!(log.len() > 1 << 20);
    write(&env, "big.jsonl", &log);
    let args = ["import", "--format", "mailbox-jsonl", "big.jsonl"];
    let printed = crate::terminal::on_a_terminal(&env, &args);
    let text = String::from_utf8_lossy(&printed);
    assert!(text.contains("importing big.jsonl ["), "{text}");
    assert!(text.contains("Imported 500 of 500 lines"), "{text}");
    // Not in JSON, and not when stderr is not a terminal.
    let json = crate::terminal::on_a_terminal(&env, &[&args[..], &["--json"]].concat());
    assert!(!String::from_utf8_lossy(&json).contains("importing"));
    let piped = env.run(&args);
    assert!(!piped.stderr.contains("importing"), "{piped}");
    assert!(Path::new(&env.dir().join("big.jsonl")).exists());
}

#[test]
fn agents_keep_writing_while_a_long_import_runs() {
    let env = TestEnv::initialized();
    let mut log = String::new();
    for n in 0..4000 {
        log.push_str(&format!(
            r#"{{"id":"t{n}","type":"task-assigned","from":"orchestrator","to":"agent:w{}","body":"Task {n}","read":false,"createdAt":"2026-05-10T14:00:00Z"}}"#,
            n % 4
        ));
        log.push('\n');
    }
    write(&env, "long.jsonl", &log);
    let mut import = env.command(&[
        "import",
        "--format",
        "mailbox-jsonl",
        "long.jsonl",
        "--json",
    ]);
    import.stdout(std::process::Stdio::piped());
    let mut child = import.spawn().unwrap();
    // While it runs, another agent sends: each send waits at most for one
    // batch of the import (a fifth of a second), never for all of it, so
    // sends finish while the import is still under way.
    let mut during = 0;
    let mut sent = 0;
    while child.try_wait().unwrap().is_none() {
        env.json(
            &[
                "send",
                "--from",
                "lead",
                "--to",
                "x",
                "--subject",
                "Meanwhile",
            ],
            0,
        );
        sent += 1;
        if child.try_wait().unwrap().is_none() {
            during += 1;
        }
    }
    let output = child.wait_with_output().unwrap();
    let imported: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(imported["imported"], 4000, "{imported}");
    assert!(
        during >= 1,
        "no send finished while the import ran ({sent} sent)"
    );
    let list = env.json(&["list", "--assigned-to", "x", "--limit", "1000"], 0);
    assert_eq!(list["threads"].as_array().unwrap().len(), sent);
}
