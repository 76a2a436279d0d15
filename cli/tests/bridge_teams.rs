//! `inbox bridge teams`: an Agent Teams folder, with real files, seed 002's
//! own shell snippets as the writer, `jq` (or a line reader) as the reader
//! of what the bridge writes, and the bridge as a real process (stopped by
//! signals, killed, started again).

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{BridgeProcess, TestEnv};

/// Runs `script` with `sh -c` in the test folder.
fn sh(env: &TestEnv, script: &str) -> String {
    let output = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(env.dir())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Seed 002's writer, verbatim but for the folder: `MESSAGE=...` and
/// `echo "$MESSAGE" >> .../inbox`, with the timestamp from `date -u`.
fn seed_send(env: &TestEnv, member: &str, kind: &str, from: &str, to: &str, content: &Value) {
    let script = format!(
        r#"MESSAGE='{{"type":"{kind}","from":"{from}","to":"{to}","timestamp":"'$(date -u +%Y-%m-%dT%H:%M:%SZ)'","content":{content}}}'
echo "$MESSAGE" >> team/members/{member}/inbox"#
    );
    sh(env, &script);
}

/// The member folders seed 002 has (its "Missing Inbox File" snippet).
fn team(env: &TestEnv, members: &[&str]) {
    for member in members {
        sh(
            env,
            &format!(
                r#"INBOX=team/members/{member}/inbox
if [ ! -f "$INBOX" ]; then
  mkdir -p "$(dirname "$INBOX")"
  touch "$INBOX"
fi"#
            ),
        );
    }
}

/// The member's inbox read as seed 002's reader does (`jq` when installed,
/// else a line reader), one JSON value per line.
fn read_inbox(env: &TestEnv, member: &str) -> Vec<Value> {
    let path = format!("team/members/{member}/inbox");
    let jq = Command::new("jq").arg("--version").output().is_ok();
    let text = if jq {
        sh(
            env,
            &format!(r#"while IFS= read -r line; do echo "$line" | jq -c '.'; done < {path}"#),
        )
    } else {
        std::fs::read_to_string(env.dir().join(&path)).unwrap()
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn once(env: &TestEnv, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["bridge", "teams", "team"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--once", "--json"]);
    let run = env.run(&all);
    assert_eq!(run.status, 0, "{run}");
    run.raw_stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(lines: &[Value], action: &str) -> usize {
    lines.iter().filter(|l| l["action"] == action).count()
}

fn thread(env: &TestEnv, id: &str) -> Value {
    env.json(&["show", "--thread", id], 0)
}

#[test]
fn seed_002_lines_open_block_and_finish_threads_and_inbox_writes_back() {
    let env = TestEnv::initialized();
    team(&env, &["backend-dev", "coordinator"]);
    let mut bridge = BridgeProcess::start(&env, "teams", &["team"]);

    seed_send(
        &env,
        "backend-dev",
        "task_assignment",
        "coordinator",
        "backend-dev",
        &json!({"taskId": "a1b2c3d4", "subject": "Implement user authentication API", "priority": 4, "estimatedHours": 8}),
    );
    let opened = bridge.next_of("opened");
    assert_eq!(opened["member"], "backend-dev", "{opened}");
    assert_eq!(opened["type"], "task_assignment");
    let id = opened["thread_id"].as_str().unwrap().to_owned();
    let shown = thread(&env, &id);
    assert_eq!(shown["thread"]["assigned_to"], "backend-dev");
    assert_eq!(shown["thread"]["created_by"], "coordinator");
    assert_eq!(shown["thread"]["task_id"], "a1b2c3d4");
    assert_eq!(shown["thread"]["priority"], "high");
    assert_eq!(
        shown["thread"]["subject"],
        "Implement user authentication API"
    );
    assert_eq!(
        shown["messages"][0]["payload"]["teams"]["line"]["content"]["estimatedHours"],
        8
    );

    // The member reports to the coordinator's inbox: blocked, then done.
    seed_send(
        &env,
        "coordinator",
        "blocking_notification",
        "backend-dev",
        "coordinator",
        &json!({"taskId": "a1b2c3d4", "blockedBy": ["x"], "reason": "Waiting for the schema"}),
    );
    let blocked = bridge.next_of("blocked");
    assert_eq!(blocked["thread_id"], id.as_str(), "{blocked}");
    let shown = thread(&env, &id);
    assert_eq!(shown["thread"]["status"], "blocked");
    assert_eq!(shown["thread"]["lease"]["agent"], "backend-dev");
    let question = shown["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(question["kind"], "question");
    assert_eq!(question["summary"], "Waiting for the schema");

    seed_send(
        &env,
        "backend-dev",
        "message",
        "coordinator",
        "backend-dev",
        &json!({"taskId": "a1b2c3d4", "text": "The schema is in main now"}),
    );
    let answered = bridge.next_of("message");
    assert_eq!(answered["thread_id"], id.as_str(), "{answered}");
    assert_eq!(thread(&env, &id)["thread"]["status"], "in_progress");

    seed_send(
        &env,
        "coordinator",
        "task_completion",
        "backend-dev",
        "coordinator",
        &json!({"taskId": "a1b2c3d4", "actualHours": 7.5, "notes": "Implemented with JWT"}),
    );
    let done = bridge.next_of("done");
    assert_eq!(done["thread_id"], id.as_str(), "{done}");
    let shown = thread(&env, &id);
    assert_eq!(shown["thread"]["status"], "done");
    let result = shown["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(result["kind"], "result");
    assert_eq!(result["from_agent"], "backend-dev");
    assert_eq!(result["summary"], "Implemented with JWT");

    seed_send(
        &env,
        "coordinator",
        "idle_notification",
        "backend-dev",
        "coordinator",
        &json!({"reason": "no_assigned_tasks", "lastTaskCompleted": "a1b2c3d4"}),
    );
    bridge.next_of("present");
    let agents = env.json(&["agent", "list"], 0);
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "backend-dev"),
        "{agents}"
    );

    // Outbound: a task sent through inbox lands in the member's file as a
    // seed line, and the member's completion naming it finishes it.
    let sent = env.json(
        &[
            "send",
            "--from",
            "coordinator",
            "--to",
            "backend-dev",
            "--subject",
            "Review the login page",
        ],
        0,
    );
    let new = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let written = bridge.next_of("written");
    assert_eq!(written["member"], "backend-dev", "{written}");
    assert_eq!(written["type"], "task_assignment");
    let raw = std::fs::read_to_string(env.dir().join("team/members/backend-dev/inbox")).unwrap();
    assert!(
        raw.lines().last().unwrap().starts_with(
            r#"{"type":"task_assignment","from":"coordinator","to":"backend-dev","timestamp":""#
        ),
        "{raw}"
    );
    let lines = read_inbox(&env, "backend-dev");
    let line = lines.last().unwrap();
    assert_eq!(line["type"], "task_assignment", "{line}");
    assert_eq!(line["from"], "coordinator");
    assert_eq!(line["to"], "backend-dev");
    assert_eq!(line["content"]["taskId"], new.as_str());
    assert_eq!(line["content"]["subject"], "Review the login page");
    let timestamp = line["timestamp"].as_str().unwrap();
    assert!(
        timestamp.len() == 24 && timestamp.ends_with('Z') && timestamp.as_bytes()[10] == b'T',
        "{timestamp}"
    );
    // Nothing the bridge ingested went back: the lines written by the
    // writer, and this one.
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        read_inbox(&env, "coordinator")
            .iter()
            .all(|l| l["content"].get("inbox").is_none())
    );

    seed_send(
        &env,
        "coordinator",
        "task_completion",
        "backend-dev",
        "coordinator",
        &json!({"taskId": new, "notes": "Looks good"}),
    );
    let done = bridge.next_of("done");
    assert_eq!(done["thread_id"], new.as_str(), "{done}");
    assert_eq!(thread(&env, &new)["thread"]["status"], "done");

    let (code, rest) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert_eq!(
        rest.last().unwrap(),
        &json!({"action": "stopped", "reason": "signal"})
    );
    // The hint of the bridge's own, beside the database, none in the team
    // folder (which every agent writes).
    assert!(hint_path(&env).starts_with(env.dir().join(".agents")));
    assert!(!env.dir().join("team/.inbox-bridge-teams.json").exists());
}

#[test]
fn malformed_lines_are_skipped_and_counted_and_never_read_again() {
    let env = TestEnv::initialized();
    team(&env, &["worker"]);
    let inbox = env.dir().join("team/members/worker/inbox");
    let mut text = String::from("{nope\n");
    text.push_str(r#"{"type":"gossip","from":"a","to":"worker","timestamp":"2026-02-15T10:30:00Z","content":{}}"#);
    text.push('\n');
    text.push_str(&format!("\"{}\"\n", "x".repeat(1_100_000)));
    text.push_str(
        r#"{"type":"task_completion","from":"worker","to":"c","timestamp":"t","content":{}}"#,
    );
    text.push('\n');
    text.push_str(r#"{"type":"task_assignment","from":"lead","to":"worker","timestamp":"2026-02-15T10:30:00Z","content":{"taskId":"T-1","subject":"Real work"}}"#);
    text.push('\n');
    // A line still being written (no newline yet) waits for its end.
    text.push_str(r#"{"type":"message","from":"lead","#);
    std::fs::write(&inbox, &text).unwrap();

    let lines = once(&env, &[]);
    let codes: Vec<&str> = lines
        .iter()
        .filter(|l| l["action"] == "skipped")
        .map(|l| l["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["malformed_json", "unknown_type", "too_long", "no_task"],
        "{lines:?}"
    );
    assert_eq!(count(&lines, "opened"), 1, "{lines:?}");
    assert_eq!(lines.last().unwrap()["action"], "stopped");

    // Read again: nothing is (the hint is past them) but the line that
    // has ended since.
    sh(
        &env,
        r#"printf '%s\n' '"to":"worker","timestamp":"t","content":{"text":"hi"}}' >> team/members/worker/inbox"#,
    );
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    assert_eq!(count(&lines, "opened"), 1, "{lines:?}");
    assert_eq!(
        env.json(&["list"], 0)["threads"].as_array().unwrap().len(),
        2
    );
}

#[test]
fn the_seed_s_rotation_and_clean_up_apply_nothing_again() {
    let env = TestEnv::initialized();
    team(&env, &["worker"]);
    for i in 1..=3 {
        seed_send(
            &env,
            "worker",
            "task_assignment",
            "lead",
            "worker",
            &json!({"taskId": format!("T-{i}"), "subject": format!("Task {i}")}),
        );
    }
    assert_eq!(count(&once(&env, &[]), "opened"), 3);
    // "Archive old messages": keep the last 2 lines, through a new file.
    sh(
        &env,
        r#"INBOX=team/members/worker/inbox
ARCHIVE=team/members/worker/inbox-archive
head -n -2 "$INBOX" >> "$ARCHIVE"
tail -n 2 "$INBOX" > "${INBOX}.tmp"
mv "${INBOX}.tmp" "$INBOX""#,
    );
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "rotated"), 1, "{lines:?}");
    let opened: Vec<&Value> = lines.iter().filter(|l| l["action"] == "opened").collect();
    assert_eq!(opened.len(), 2, "{lines:?}");
    assert!(opened.iter().all(|l| l["replayed"] == true), "{lines:?}");
    // "Rotate if over threshold": a fresh file; its lines are new.
    sh(
        &env,
        r#"INBOX=team/members/worker/inbox
mv "$INBOX" "${INBOX}.$(date +%Y%m%d-%H%M%S)"
touch "$INBOX""#,
    );
    seed_send(
        &env,
        "worker",
        "task_assignment",
        "lead",
        "worker",
        &json!({"taskId": "T-4", "subject": "Task 4"}),
    );
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "opened"), 1, "{lines:?}");
    let threads = env.json(&["list"], 0);
    assert_eq!(threads["threads"].as_array().unwrap().len(), 4, "{threads}");
}

#[test]
fn killed_and_started_again_it_applies_every_line_exactly_once() {
    let env = TestEnv::initialized();
    team(&env, &["worker"]);
    let mut bridge = BridgeProcess::start(&env, "teams", &["team"]);
    // The seed's writer, 200 times, while the bridge runs.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(
            r#"i=0
while [ $i -lt 200 ]; do
  i=$((i + 1))
  MESSAGE='{"type":"task_assignment","from":"lead","to":"worker","timestamp":"'$(date -u +%Y-%m-%dT%H:%M:%SZ)'","content":{"taskId":"T-'$i'","subject":"Task '$i'"}}'
  echo "$MESSAGE" >> team/members/worker/inbox
done"#,
        )
        .current_dir(env.dir())
        .spawn()
        .unwrap();
    for _ in 0..20 {
        bridge.next_of("opened");
    }
    let (code, _) = bridge.stop(rustix::process::Signal::KILL);
    assert_eq!(code, -1, "killed");
    assert!(writer.wait().unwrap().success());

    let lines = once(&env, &["--poll-ms", "50"]);
    assert_eq!(count(&lines, "refused"), 0, "{lines:?}");
    let threads = env.json(&["list", "--limit", "1000"], 0);
    let mut tasks: Vec<String> = threads["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tasks.len(), 200);
    tasks.sort();
    tasks.dedup();
    assert_eq!(tasks.len(), 200);

    // Without its hint the bridge reads everything again: every line
    // replays, nothing is added.
    std::fs::remove_file(hint_path(&env)).unwrap();
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "opened"), 200, "replayed, each once");
    assert!(
        lines
            .iter()
            .filter(|l| l["action"] == "opened")
            .all(|l| l["replayed"] == true)
    );
    assert_eq!(
        env.json(&["list", "--limit", "1000"], 0)["threads"]
            .as_array()
            .unwrap()
            .len(),
        200
    );
}

#[test]
fn outbound_lines_are_written_once_across_restarts_and_a_broadcast_reaches_everyone() {
    let env = TestEnv::initialized();
    team(&env, &["a", "b"]);
    // Broadcasts reach registered agents, in inbox as everywhere.
    env.json(&["agent", "register", "--agent", "a"], 0);
    env.json(&["agent", "register", "--agent", "b"], 0);
    // First start: the members are known from then on.
    once(&env, &[]);
    env.json(
        &["send", "--from", "lead", "--to", "a", "--subject", "One"],
        0,
    );
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "broadcast",
            "--subject",
            "Standup in 30 minutes",
        ],
        0,
    );
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 3, "{lines:?}");
    // The hint lost: the bridge finds its own lines in the files.
    std::fs::remove_file(hint_path(&env)).unwrap();
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
    let a = read_inbox(&env, "a");
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[1]["type"], "team_broadcast");
    assert_eq!(a[1]["to"], "all");
    assert_eq!(read_inbox(&env, "b").len(), 1);

    // The same broadcast line appended to every member's file by its
    // writer is one broadcast.
    for member in ["a", "b"] {
        sh(
            &env,
            &format!(
                r#"echo '{{"type":"team_broadcast","from":"lead","to":"all","timestamp":"2026-02-15T09:00:00Z","content":{{"text":"Daily standup","recipients":["a","b"]}}}}' >> team/members/{member}/inbox"#
            ),
        );
    }
    once(&env, &[]);
    let threads = env.json(&["list", "--assigned-to", "broadcast"], 0);
    assert_eq!(threads["threads"].as_array().unwrap().len(), 2, "{threads}");
}

#[test]
fn a_claude_code_inboxes_folder_round_trips() {
    let env = TestEnv::initialized();
    let inboxes = env.dir().join("team/inboxes");
    std::fs::create_dir_all(&inboxes).unwrap();
    let worker = json!([
        {"from": "team-lead", "text": "Old news", "summary": "old", "timestamp": "2026-02-15T09:00:00.000Z", "read": true},
        {"from": "team-lead", "text": "Please look at the flaky test", "summary": "flaky test", "timestamp": "2026-02-15T10:00:00.000Z", "read": false},
    ]);
    std::fs::write(inboxes.join("worker.json"), worker.to_string()).unwrap();
    std::fs::write(inboxes.join("team-lead.json"), "[]").unwrap();
    let mut bridge = BridgeProcess::start(&env, "teams", &["team", "--lead", "lead"]);
    let opened = bridge.next_of("opened");
    assert_eq!(opened["member"], "worker", "{opened}");
    let id = opened["thread_id"].as_str().unwrap().to_owned();
    let shown = thread(&env, &id);
    assert_eq!(shown["thread"]["created_by"], "lead");
    assert_eq!(shown["thread"]["assigned_to"], "worker");
    assert_eq!(shown["thread"]["subject"], "flaky test");

    // A reply in inbox reaches the lead's file as an entry, under its
    // lock, renamed over it.
    env.json(
        &[
            "reply",
            "--from",
            "worker",
            "--thread",
            &id,
            "--kind",
            "progress",
            "--summary",
            "Found it: a race in setup",
        ],
        0,
    );
    let written = bridge.next_of("written");
    assert_eq!(written["member"], "team-lead", "{written}");
    let lead: Value =
        serde_json::from_str(&std::fs::read_to_string(inboxes.join("team-lead.json")).unwrap())
            .unwrap();
    let entry = &lead[0];
    assert_eq!(entry["from"], "worker", "{lead}");
    assert_eq!(entry["read"], false);
    assert_eq!(entry["summary"], "Found it: a race in setup");
    assert!(entry["text"].as_str().unwrap().starts_with("Found it"));
    assert!(!inboxes.join("team-lead.json.lock").exists());

    // A task from the lead reaches the worker as Claude Code's JSON-encoded
    // task_assignment; the bridge does not read its own entry back.
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Fix the race",
        ],
        0,
    );
    bridge.next_of("written");
    let entries: Value =
        serde_json::from_str(&std::fs::read_to_string(inboxes.join("worker.json")).unwrap())
            .unwrap();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 3);
    let task: Value = serde_json::from_str(entries[2]["text"].as_str().unwrap()).unwrap();
    assert_eq!(task["type"], "task_assignment", "{task}");
    assert_eq!(task["subject"], "Fix the race");
    assert_eq!(task["assignedBy"], "team-lead");

    // Claude Code marks them read and rewrites the file: nothing new.
    let read: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e["read"] = json!(true);
            e
        })
        .collect();
    let tmp = inboxes.join("worker.json.tmp");
    std::fs::write(&tmp, serde_json::to_string(&read).unwrap()).unwrap();
    std::fs::rename(&tmp, inboxes.join("worker.json")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, rest) = bridge.stop(rustix::process::Signal::INT);
    assert_eq!(code, 0);
    assert_eq!(rest, vec![json!({"action": "stopped", "reason": "signal"})]);
    assert_eq!(
        env.json(&["list"], 0)["threads"].as_array().unwrap().len(),
        2
    );

    // Started again, it applies no entry twice (nor says so).
    let mut entries: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(inboxes.join("worker.json")).unwrap())
            .unwrap();
    entries.push(json!({"from": "team-lead", "text": "One more thing", "timestamp": "2026-02-15T11:00:00.000Z", "read": false}));
    std::fs::write(
        inboxes.join("worker.json"),
        serde_json::to_string(&entries).unwrap(),
    )
    .unwrap();
    let lines = once(&env, &["--lead", "lead"]);
    assert_eq!(count(&lines, "opened"), 1, "{lines:?}");
    let lines = once(&env, &["--lead", "lead"]);
    assert_eq!(count(&lines, "opened"), 0, "{lines:?}");
}

#[test]
fn links_planted_in_a_team_folder_are_never_followed() {
    let env = TestEnv::initialized();
    team(&env, &["worker"]);
    let secret = env.dir().join("secret.txt");
    let line = r#"{"type":"task_assignment","from":"lead","to":"evil","timestamp":"2026-02-15T10:30:00Z","content":{"subject":"Secret"}}"#;
    std::fs::write(&secret, format!("{line}\n")).unwrap();
    let evil = env.dir().join("team/members/evil");
    std::fs::create_dir_all(&evil).unwrap();
    std::os::unix::fs::symlink(&secret, evil.join("inbox")).unwrap();
    let elsewhere = env.dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("inbox"), format!("{line}\n")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, env.dir().join("team/members/linked")).unwrap();

    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "unreadable"), 1, "{lines:?}");
    assert_eq!(count(&lines, "opened"), 0, "{lines:?}");
    env.json(
        &["send", "--from", "lead", "--to", "evil", "--subject", "Hi"],
        0,
    );
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "linked",
            "--subject",
            "Hi",
        ],
        0,
    );
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "unwritable"), 1, "{lines:?}");
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        format!("{line}\n")
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.join("inbox")).unwrap(),
        format!("{line}\n")
    );
    assert_eq!(
        env.json(&["list"], 0)["threads"].as_array().unwrap().len(),
        2
    );
}

#[test]
fn a_folder_that_is_no_team_is_refused() {
    let env = TestEnv::initialized();
    std::fs::create_dir_all(env.dir().join("team")).unwrap();
    let run = env.run(&["bridge", "teams", "team", "--once", "--json"]);
    assert_eq!(run.status, 30, "{run}");
    assert!(run.raw_stdout.contains("not a team folder"), "{run}");
}

// ---- The outbound cursor comes only from facts the bridge can check -------

/// The member's file's lines that carry the bridge's marker for `message`
/// (not counting the test's forged ones, whose text says so).
fn lines_of(env: &TestEnv, member: &str, message: &str) -> usize {
    read_inbox(env, member)
        .iter()
        .filter(|l| l["content"]["inbox"]["messageId"] == message)
        .filter(|l| {
            !l["content"]["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("forged"))
        })
        .count()
}

/// Sends `subject` from `lead` to `to`; the message's id.
fn send(env: &TestEnv, to: &str, subject: &str) -> String {
    let sent = env.json(
        &["send", "--from", "lead", "--to", to, "--subject", subject],
        0,
    );
    sent["message"]["message_id"].as_str().unwrap().to_owned()
}

fn skipped_codes(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["action"] == "skipped")
        .map(|l| l["code"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_forged_or_copied_marker_line_never_stops_delivery() {
    let env = TestEnv::initialized();
    team(&env, &["a", "b"]);
    once(&env, &[]);
    let to_a = send(&env, "a", "To a");
    let first = send(&env, "b", "First to b");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 2, "{lines:?}");
    let a_marker = read_inbox(&env, "a")[0]["content"]["inbox"].clone();
    let b_marker = read_inbox(&env, "b")[0]["content"]["inbox"].clone();
    assert_eq!(a_marker["messageId"], to_a.as_str());
    assert_eq!(b_marker["messageId"], first.as_str());
    let team_id = b_marker["team"].clone();
    // A message to b not written yet, which a line claims was.
    let pending = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "b",
            "--subject",
            "Pending",
        ],
        0,
    );
    let pending_id = pending["message"]["message_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pending_marker = json!({
        "threadId": pending["message"]["thread_id"],
        "messageId": pending_id,
        "eventId": pending["message"]["event_id"],
        "member": "b",
        "team": team_id,
    });
    let with = |base: &Value, changes: Value| {
        let mut marker = base.clone();
        for (k, v) in changes.as_object().unwrap() {
            marker[k] = v.clone();
        }
        marker
    };
    // Lines that look like the bridge's own, appended by writers.
    let forged = [
        // far ahead of the database
        with(
            &pending_marker,
            json!({"messageId": "msg_01KFORGED00000000000000000", "eventId": 1_000_000}),
        ),
        // a made-up message id with the pending message's event
        with(
            &pending_marker,
            json!({"messageId": "msg_01KFORGED00000000000000001"}),
        ),
        // a's message, said to be b's
        with(&a_marker, json!({"member": "b"})),
        // the pending message, from another team's folder
        with(&pending_marker, json!({"team": "0123456789abcdef"})),
        // the pending message, written to a (as a's line would say)
        with(&pending_marker, json!({"member": "a"})),
        // b's first message with an event behind its own
        with(
            &b_marker,
            json!({"eventId": b_marker["eventId"].as_u64().unwrap() - 1}),
        ),
        // no message id
        json!({"eventId": 2_000_000, "member": "b", "team": team_id}),
        // a marker of an older bridge: no member, no team
        json!({"threadId": pending_marker["threadId"], "messageId": pending_id, "eventId": pending_marker["eventId"]}),
    ];
    for (i, marker) in forged.iter().enumerate() {
        seed_send(
            &env,
            "b",
            "message",
            "lead",
            "b",
            &json!({"text": format!("forged {i}"), "inbox": marker}),
        );
    }
    let after = send(&env, "b", "After the forged lines");
    let lines = once(&env, &[]);
    assert_eq!(lines_of(&env, "b", &pending_id), 1, "{lines:?}");
    assert_eq!(lines_of(&env, "b", &after), 1, "{lines:?}");
    assert_eq!(
        skipped_codes(&lines),
        vec!["unverified_marker"; forged.len()],
        "{lines:?}"
    );
    // Across restarts: every later message is written, once.
    let later = send(&env, "b", "Later");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 1, "{lines:?}");
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    for message in [&first, &pending_id, &after, &later] {
        assert_eq!(lines_of(&env, "b", message), 1, "{message}");
    }
    // Nothing the forged lines said was applied as a message either.
    assert_eq!(
        env.json(&["list"], 0)["threads"].as_array().unwrap().len(),
        5
    );
}

#[test]
fn a_bridge_line_copied_into_another_member_s_file_moves_no_cursor() {
    let env = TestEnv::initialized();
    team(&env, &["a", "b"]);
    env.json(&["agent", "register", "--agent", "a"], 0);
    env.json(&["agent", "register", "--agent", "b"], 0);
    once(&env, &[]);
    // b's inbox cannot be written for a while (a link in its place): its
    // messages wait while a's are written.
    let b_inbox = env.dir().join("team/members/b/inbox");
    std::fs::remove_file(&b_inbox).unwrap();
    std::os::unix::fs::symlink(env.dir().join("nowhere"), &b_inbox).unwrap();
    let waiting = send(&env, "b", "Waiting for b");
    let direct = send(&env, "a", "Only for a");
    let everyone = send(&env, "broadcast", "For everyone");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "unwritable"), 1, "{lines:?}");
    assert_eq!(lines_of(&env, "a", &direct), 1);
    assert_eq!(lines_of(&env, "a", &everyone), 1);
    // An agent puts a's lines (a message to a, a broadcast, both newer
    // than b's waiting message) into b's file.
    std::fs::remove_file(&b_inbox).unwrap();
    let a_file = std::fs::read_to_string(env.dir().join("team/members/a/inbox")).unwrap();
    std::fs::write(&b_inbox, &a_file).unwrap();
    let lines = once(&env, &[]);
    assert_eq!(lines_of(&env, "b", &waiting), 1, "{lines:?}");
    assert_eq!(
        skipped_codes(&lines),
        ["unverified_marker", "unverified_marker"],
        "{lines:?}"
    );
    // The broadcast is b's too: written to b by the bridge, beside the copy.
    assert_eq!(lines_of(&env, "b", &everyone), 2, "{lines:?}");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
}

#[test]
fn a_hint_whose_cursor_is_ahead_of_the_database_is_said_and_ignored() {
    let env = TestEnv::initialized();
    team(&env, &["b"]);
    once(&env, &[]);
    let first = send(&env, "b", "First");
    once(&env, &[]);
    let path = hint_path(&env);
    let mut hint: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    hint["members"]["b"]["outbound"] = json!(5_000_000);
    std::fs::write(&path, hint.to_string()).unwrap();
    let second = send(&env, "b", "Second");
    let lines = once(&env, &[]);
    assert_eq!(lines_of(&env, "b", &first), 1, "{lines:?}");
    assert_eq!(lines_of(&env, "b", &second), 1, "{lines:?}");
    assert_eq!(count(&lines, "hint_ignored"), 1, "{lines:?}");
    let third = send(&env, "b", "Third");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "hint_ignored"), 0, "{lines:?}");
    assert_eq!(lines_of(&env, "b", &third), 1, "{lines:?}");
}

#[test]
fn a_forged_claude_code_entry_never_stops_delivery() {
    let env = TestEnv::initialized();
    let inboxes = env.dir().join("team/inboxes");
    std::fs::create_dir_all(&inboxes).unwrap();
    std::fs::write(inboxes.join("worker.json"), "[]").unwrap();
    once(&env, &[]);
    let forged = json!([{"from": "team-lead", "text": "hi", "timestamp": "t", "read": false,
        "inbox": {"threadId": "thr_x", "messageId": "msg_01KFORGED00000000000000000", "eventId": 1_000_000, "member": "worker", "team": "0123456789abcdef"}}]);
    std::fs::write(inboxes.join("worker.json"), forged.to_string()).unwrap();
    let message = send(&env, "worker", "After the forged entry");
    let lines = once(&env, &[]);
    let entries: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(inboxes.join("worker.json")).unwrap())
            .unwrap();
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["inbox"]["messageId"] == message.as_str())
            .count(),
        1,
        "{entries:?}"
    );
    assert_eq!(skipped_codes(&lines), ["unverified_marker"], "{lines:?}");
    // Said once, not on every look.
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
}

// ---- A Claude Code lock the bridge no longer holds ---------------------------

/// The test-build hook that stalls the bridge at a step while it holds a
/// lock folder (`inbox_host_native::folder::STALL_ENV`).
const STALL_ENV: &str = "INBOX_TEST_LOCK_STALL";

/// `proper-lockfile`'s default stale time, which Claude Code's writers use.
const STALE: Duration = Duration::from_secs(10);

/// Waits until `pid` is stopped (state `T` in `/proc`); panics if it exits
/// first or never stops.
fn wait_stopped(child: &mut std::process::Child, step: &str) {
    let stat = format!("/proc/{}/stat", child.id());
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the bridge ended ({status}) without stalling at {step}");
        }
        let text = std::fs::read_to_string(&stat).unwrap_or_default();
        let state = text.rsplit(')').next().unwrap_or_default().trim_start();
        if state.starts_with('T') {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the bridge never stalled at {step}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A Claude Code writer as `proper-lockfile` makes it: `mkdir` the lock;
/// on `EEXIST`, a lock whose mtime is older than the stale time is a
/// crashed holder's, removed (`rmdir`) and taken. Returns whether it took
/// the lock.
fn rival_lock(lock: &std::path::Path) -> bool {
    match std::fs::create_dir(lock) {
        Ok(()) => return true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("{e}"),
    }
    let Ok(meta) = std::fs::metadata(lock) else {
        return false;
    };
    let age = meta.modified().unwrap().elapsed().unwrap_or_default();
    if age < STALE {
        return false;
    }
    let _ = std::fs::remove_dir(lock);
    std::fs::create_dir(lock).is_ok()
}

/// The rival's write under its lock: the array read, one entry added,
/// written in place (Node's `writeFile`) or beside it and renamed over.
fn rival_append(file: &std::path::Path, text: &str, rename: bool) {
    let mut entries: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    entries.push(json!({"from": "rival", "text": text, "timestamp": "2026-02-15T10:00:00.000Z", "read": false}));
    let bytes = serde_json::to_vec(&entries).unwrap();
    if rename {
        let tmp = file.with_extension("rival-tmp");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, file).unwrap();
    } else {
        std::fs::write(file, bytes).unwrap();
    }
}

/// Makes the lock folder look as old as a stall past the stale time makes
/// it (what a rival judges it by).
fn age_lock(lock: &std::path::Path) {
    let old = std::time::SystemTime::now() - STALE - Duration::from_secs(5);
    let dir = std::fs::File::open(lock).unwrap();
    dir.set_times(
        std::fs::FileTimes::new()
            .set_modified(old)
            .set_accessed(old),
    )
    .unwrap();
}

fn entries_of(file: &std::path::Path) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

/// The bridge once, stalled (SIGSTOP) at `step` while it holds the lock on
/// `worker.json`; meanwhile a rival takes the stale lock, appends an entry
/// and lets go (or keeps it); then the bridge goes on.
fn stalled_once(env: &TestEnv, step: &str, rename: bool, keep: bool) -> Vec<Value> {
    use std::os::unix::fs::MetadataExt as _;
    let file = env.dir().join("team/inboxes/worker.json");
    let lock = env.dir().join("team/inboxes/worker.json.lock");
    let mut command = env.command(&["bridge", "teams", "team", "--once", "--json"]);
    command
        .env(STALL_ENV, step)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    wait_stopped(&mut child, step);
    assert!(lock.is_dir(), "{step}: the bridge holds the lock");
    age_lock(&lock);
    assert!(rival_lock(&lock), "{step}: the rival takes the stale lock");
    let rivals = std::fs::metadata(&lock).unwrap().ino();
    rival_append(&file, &format!("rival at {step}"), rename);
    if !keep {
        std::fs::remove_dir(&lock).unwrap();
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{step}");
    if keep {
        let meta = std::fs::metadata(&lock);
        assert!(
            meta.is_ok_and(|m| m.ino() == rivals),
            "{step}: the bridge removed the rival's lock"
        );
        std::fs::remove_dir(&lock).unwrap();
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_bridge_stalled_holding_a_claude_code_lock_never_writes_after_losing_it() {
    // At every step from taking the lock to replacing the file, a stall
    // past the stale time lets a rival take the lock and write: the
    // rival's write stands, the bridge says it lost the race (never
    // `written`) and its message lands on the next pass, once. Stalled
    // before letting go, its write stands and the rival's lock is never
    // removed.
    let steps = [
        ("locked", true),
        ("read", true),
        ("written", true),
        ("checked", true),
        ("replaced", false),
        ("release", false),
    ];
    for (i, (step, before)) in steps.into_iter().enumerate() {
        for (rename, keep) in [(false, false), (true, true)] {
            let env = TestEnv::initialized();
            let inboxes = env.dir().join("team/inboxes");
            std::fs::create_dir_all(&inboxes).unwrap();
            let file = inboxes.join("worker.json");
            std::fs::write(&file, "[]").unwrap();
            once(&env, &[]);
            let message = send(&env, "worker", &format!("Message {i}"));
            let lines = stalled_once(&env, step, rename, keep);
            let label = format!("{step} rename={rename} keep={keep}: {lines:?}");
            let entries = entries_of(&file);
            let rival = |entries: &[Value]| entries.iter().filter(|e| e["from"] == "rival").count();
            assert_eq!(
                rival(&entries),
                1,
                "the rival's entry is lost: {label} {entries:?}"
            );
            // Written only when the lock was the bridge's from the lock to
            // the replace and after; else a lost race, said.
            let (written, lost) = if step == "release" { (1, 0) } else { (0, 1) };
            assert_eq!(count(&lines, "written"), written, "{label}");
            assert_eq!(count(&lines, "lost_race"), lost, "{label}");
            if lost == 1 {
                let said = lines.iter().find(|l| l["action"] == "lost_race").unwrap();
                assert_eq!(said["member"], "worker", "{label}");
                assert_eq!(said["message_ids"], json!([message]), "{label}");
            }
            // Before the replace, nothing of the bridge's is in the file.
            if before {
                assert!(
                    entries.iter().all(|e| e["inbox"].is_null()),
                    "{label} {entries:?}"
                );
            }
            // The next pass writes what did not land, once.
            once(&env, &[]);
            let entries = entries_of(&file);
            let ours = entries
                .iter()
                .filter(|e| e["inbox"]["messageId"] == message.as_str())
                .count();
            assert_eq!(ours, 1, "{label} {entries:?}");
            assert_eq!(rival(&entries), 1, "{label}");
            assert!(!inboxes.join("worker.json.lock").exists(), "{label}");
            // Nothing set aside is left behind.
            let names: Vec<String> = std::fs::read_dir(&inboxes)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, ["worker.json"], "{label}");
        }
    }
}

#[test]
fn a_slow_step_keeps_the_claude_code_lock_fresh() {
    // A slow disk (the bridge running, its read taking longer than the
    // stale time): its lock stays fresh, as proper-lockfile's holders keep
    // theirs, and a rival waiting for it never takes it as stale.
    let env = TestEnv::initialized();
    let inboxes = env.dir().join("team/inboxes");
    std::fs::create_dir_all(&inboxes).unwrap();
    let file = inboxes.join("worker.json");
    std::fs::write(&file, "[]").unwrap();
    once(&env, &[]);
    let message = send(&env, "worker", "Slow");
    let lock = inboxes.join("worker.json.lock");
    let mut command = env.command(&["bridge", "teams", "team", "--once", "--json"]);
    let slow = STALE + Duration::from_secs(3);
    command
        .env(STALL_ENV, format!("read:{}", slow.as_millis()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let child = command.spawn().unwrap();
    let started = std::time::Instant::now();
    while !lock.exists() {
        assert!(started.elapsed() < Duration::from_secs(30), "never locked");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The rival tries every 50 ms until it gets the lock.
    loop {
        if rival_lock(&lock) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "never free");
        std::thread::sleep(Duration::from_millis(50));
    }
    rival_append(&file, "rival after the bridge", false);
    std::fs::remove_dir(&lock).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(count(&lines, "written"), 1, "{lines:?}");
    let entries = entries_of(&file);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0]["inbox"]["messageId"], message.as_str());
    assert_eq!(entries[1]["from"], "rival");
}

// ---- The cursor moves over the bridge's own lines only where they run on --

/// The bridge's hint: beside the database, named by the team folder's
/// digest (where a bridge before it kept it: in the team folder).
fn hint_path(env: &TestEnv) -> std::path::PathBuf {
    let beside = std::fs::read_dir(env.dir().join(".agents"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("coord.db-bridge-teams-")
        });
    beside.unwrap_or_else(|| env.dir().join("team/.inbox-bridge-teams.json"))
}

/// Sets `members`' outbound cursors in the hint file at `path` to `event`
/// (a member it has no place for gets one read from its start).
fn set_outbound(path: &std::path::Path, members: &[&str], event: u64) {
    let mut hint: Value = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({"members": {}}));
    for member in members {
        let place = &mut hint["members"][member];
        if place.is_null() {
            *place = json!({"offset": 0, "line": 0, "inode": 0});
        }
        place["outbound"] = json!(event);
    }
    std::fs::write(path, hint.to_string()).unwrap();
}

/// The event of `member`'s newest message, as any agent can see it.
fn newest_event(env: &TestEnv, member: &str) -> u64 {
    let read = env.json(
        &[
            "read",
            "--agent",
            member,
            "--include-read",
            "--limit",
            "1000",
        ],
        0,
    );
    read["next_event_id"].as_u64().unwrap()
}

/// The marker an agent can make without the bridge for `message` to
/// `member`: the ids `inbox read --agent` shows, and the team folder's
/// digest from its path, as the bridge makes it.
fn marker_for(env: &TestEnv, member: &str, message: &str) -> Value {
    let read = env.json(
        &[
            "read",
            "--agent",
            member,
            "--include-read",
            "--limit",
            "1000",
        ],
        0,
    );
    let found = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["message_id"] == message)
        .unwrap_or_else(|| panic!("{read}"))
        .clone();
    let team = sh(
        env,
        r#"printf %s "$(cd team && pwd -P)" | sha256sum | cut -c1-16"#,
    );
    json!({
        "threadId": found["thread_id"], "messageId": message, "eventId": found["event_id"],
        "kind": found["kind"], "member": member, "team": team.trim(),
    })
}

/// Sends `n` messages to `to` (subjects `label 1`...); their ids.
fn send_many(env: &TestEnv, to: &str, label: &str, n: usize) -> Vec<String> {
    (1..=n)
        .map(|i| send(env, to, &format!("{label} {i}")))
        .collect()
}

/// When `message` to `member` was sent, as `inbox read` shows it.
fn created_at(env: &TestEnv, member: &str, message: &str) -> Value {
    let read = env.json(
        &[
            "read",
            "--agent",
            member,
            "--include-read",
            "--limit",
            "1000",
        ],
        0,
    );
    read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["message_id"] == message)
        .map(|m| m["created_at"].clone())
        .unwrap_or_else(|| panic!("{read}"))
}

/// Appends `line` to `member`'s seed 002 inbox, as any agent can.
fn append_line(env: &TestEnv, member: &str, line: &Value) {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(env.dir().join(format!("team/members/{member}/inbox")))
        .unwrap();
    writeln!(file, "{line}").unwrap();
}

#[test]
fn a_real_marker_ahead_of_messages_never_written_is_not_trusted() {
    let env = TestEnv::initialized();
    team(&env, &["alice"]);
    once(&env, &[]);
    // The bridge is stopped; ten messages to alice wait. An agent reads the
    // last one's ids and time and puts in alice's file the very line the
    // bridge would write for it.
    let waiting = send_many(&env, "alice", "Waiting", 10);
    let copy = json!({"type": "message", "from": "lead", "to": "alice",
        "timestamp": created_at(&env, "alice", &waiting[9]),
        "content": {"text": "Waiting 10", "inbox": marker_for(&env, "alice", &waiting[9])}});
    append_line(&env, "alice", &copy);
    let lines = once(&env, &[]);
    // Every one is written, the last one too: the agent's line comes after
    // messages the file lacks, so the bridge did not write it (it writes in
    // event order) and it stands for nothing.
    for (i, id) in waiting[..9].iter().enumerate() {
        assert_eq!(lines_of(&env, "alice", id), 1, "message {i}: {lines:?}");
    }
    assert_eq!(lines_of(&env, "alice", &waiting[9]), 2, "{lines:?}");
    let file = read_inbox(&env, "alice");
    assert_eq!(
        file.last().unwrap()["content"]["inbox"]["messageId"],
        waiting[9].as_str()
    );
    assert_eq!(count(&lines, "written"), 10, "{lines:?}");
    assert_eq!(skipped_codes(&lines), ["out_of_order"], "{lines:?}");
    let said = lines.iter().find(|l| l["action"] == "skipped").unwrap();
    assert_eq!(said["member"], "alice");
    assert_eq!(said["line"], 1, "{said}");
    // Said once; across restarts nothing is written twice, later ones are.
    let later = send(&env, "alice", "Later");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    assert_eq!(count(&lines, "written"), 1, "{lines:?}");
    for id in waiting[..9].iter().chain([&later]) {
        assert_eq!(lines_of(&env, "alice", id), 1, "{id}");
    }
}

#[test]
fn a_marker_of_the_next_message_with_other_words_stands_for_nothing() {
    let env = TestEnv::initialized();
    team(&env, &["alice"]);
    once(&env, &[]);
    // Stopped; the next message to alice waits. An agent writes lines with
    // its ids (in order: nothing before it is missing) but its own words,
    // or another time.
    let next = send(&env, "alice", "Deploy on Friday");
    let marker = marker_for(&env, "alice", &next);
    let when = created_at(&env, "alice", &next);
    for (text, timestamp) in [
        ("Do not deploy", when.clone()),
        ("Deploy on Friday", json!("2020-01-01T00:00:00Z")),
    ] {
        let line = json!({"type": "message", "from": "lead", "to": "alice",
            "timestamp": timestamp, "content": {"text": text, "inbox": marker}});
        append_line(&env, "alice", &line);
    }
    let lines = once(&env, &[]);
    assert_eq!(
        skipped_codes(&lines),
        ["unverified_marker", "unverified_marker"],
        "{lines:?}"
    );
    assert_eq!(count(&lines, "written"), 1, "{lines:?}");
    let real = read_inbox(&env, "alice");
    assert_eq!(real.len(), 3, "{real:?}");
    assert_eq!(real[2]["content"]["text"], "Deploy on Friday");
    assert_eq!(real[2]["timestamp"], when);
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written") + count(&lines, "skipped"), 0);
}

#[test]
fn a_real_claude_code_marker_ahead_of_messages_never_written_is_not_trusted() {
    let env = TestEnv::initialized();
    let inboxes = env.dir().join("team/inboxes");
    std::fs::create_dir_all(&inboxes).unwrap();
    let file = inboxes.join("worker.json");
    std::fs::write(&file, "[]").unwrap();
    once(&env, &[]);
    let first = send(&env, "worker", "First");
    once(&env, &[]);
    // Stopped; messages wait; an agent adds an entry with the last one's
    // marker (after the bridge's first entry).
    let waiting = send_many(&env, "worker", "Waiting", 6);
    let marker = marker_for(&env, "worker", &waiting[5]);
    let mut entries = entries_of(&file);
    entries.push(json!({"from": "lead", "summary": "Waiting 6",
        "text": json!({"type": "task_assignment", "description": "Waiting 6"}).to_string(),
        "timestamp": created_at(&env, "worker", &waiting[5]), "read": false,
        "inbox": marker}));
    std::fs::write(&file, serde_json::to_string(&entries).unwrap()).unwrap();
    let lines = once(&env, &[]);
    let entries = entries_of(&file);
    let of = |id: &str| {
        entries
            .iter()
            .filter(|e| e["inbox"]["messageId"] == id)
            .count()
    };
    for id in waiting[..5].iter().chain([&first]) {
        assert_eq!(of(id), 1, "{id}: {lines:?} {entries:?}");
    }
    // The agent's entry and the bridge's, after the ones before it.
    assert_eq!(of(&waiting[5]), 2, "{entries:?}");
    let last = entries.last().unwrap();
    assert_eq!(
        last["inbox"]["messageId"],
        waiting[5].as_str(),
        "{entries:?}"
    );
    assert_eq!(count(&lines, "written"), 6, "{lines:?}");
    assert_eq!(skipped_codes(&lines), ["out_of_order"], "{lines:?}");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
}

#[test]
fn a_hint_in_the_team_folder_moves_no_cursor() {
    let env = TestEnv::initialized();
    team(&env, &["b"]);
    once(&env, &[]);
    let first = send(&env, "b", "First");
    once(&env, &[]);
    // Stopped; messages wait. Any member may write the team folder: a hint
    // there with b's cursor at b's newest message (which the database
    // has, so no check against the database's newest event refuses it).
    let waiting = send_many(&env, "b", "Waiting", 3);
    let team_hint = env.dir().join("team/.inbox-bridge-teams.json");
    set_outbound(&team_hint, &["b"], newest_event(&env, "b"));
    let lines = once(&env, &[]);
    for id in waiting.iter().chain([&first]) {
        assert_eq!(lines_of(&env, "b", id), 1, "{id}: {lines:?}");
    }
    // The bridge's own hint is beside the database, owner-only.
    let hint = hint_path(&env);
    assert!(hint.starts_with(env.dir().join(".agents")), "{hint:?}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&hint).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

#[test]
fn a_hint_in_the_team_folder_is_never_read_even_with_none_beside_the_database() {
    let env = TestEnv::initialized();
    team(&env, &["b", "c"]);
    once(&env, &[]);
    let first = send(&env, "b", "First");
    once(&env, &[]);
    // Stopped; messages wait for b (whose file has a line of the
    // bridge's) and c (none). No hint beside the database (lost, or a
    // bridge before this one kept it in the team folder), and one in the
    // team folder, written by a member, with both cursors at their newest
    // message (which the database has).
    let waiting_b = send_many(&env, "b", "Waiting for b", 2);
    let waiting_c = send_many(&env, "c", "Waiting for c", 2);
    std::fs::remove_file(hint_path(&env)).unwrap();
    let team_hint = env.dir().join("team/.inbox-bridge-teams.json");
    set_outbound(&team_hint, &["b"], newest_event(&env, "b"));
    set_outbound(&team_hint, &["c"], newest_event(&env, "c"));
    let lines = once(&env, &[]);
    for (member, id) in [("b", &first)]
        .into_iter()
        .chain(waiting_b.iter().map(|id| ("b", id)))
        .chain(waiting_c.iter().map(|id| ("c", id)))
    {
        assert_eq!(lines_of(&env, member, id), 1, "{member} {id}: {lines:?}");
    }
    assert_eq!(count(&lines, "written"), 4, "{lines:?}");
    assert_eq!(count(&lines, "cursor_rebuilt"), 2, "{lines:?}");
    // Left where it is, never read: the next start writes nothing again.
    assert!(team_hint.exists());
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
}

#[test]
fn a_crash_after_writing_before_the_hint_is_saved_writes_each_message_once() {
    // Seed 002: the hint as a crash between the append and its save leaves
    // it (the one before the pass).
    let env = TestEnv::initialized();
    team(&env, &["w"]);
    once(&env, &[]);
    let before = std::fs::read(hint_path(&env)).unwrap();
    let early = send_many(&env, "w", "Early", 5);
    assert_eq!(count(&once(&env, &[]), "written"), 5);
    std::fs::write(hint_path(&env), &before).unwrap();
    let late = send_many(&env, "w", "Late", 3);
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 3, "{lines:?}");
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    for id in early.iter().chain(&late) {
        assert_eq!(lines_of(&env, "w", id), 1, "{id}");
    }

    // Claude Code: killed just after its entries replaced the file, before
    // it let go of the lock and saved its hint.
    let env = TestEnv::initialized();
    let inboxes = env.dir().join("team/inboxes");
    std::fs::create_dir_all(&inboxes).unwrap();
    let file = inboxes.join("worker.json");
    std::fs::write(&file, "[]").unwrap();
    once(&env, &[]);
    let early = send_many(&env, "worker", "Early", 5);
    let mut command = env.command(&["bridge", "teams", "team", "--once", "--json"]);
    command
        .env(STALL_ENV, "replaced")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    wait_stopped(&mut child, "replaced");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(entries_of(&file).len(), 5, "written before the crash");
    // The killed bridge's lock is a crashed holder's, taken over as stale.
    let lock = inboxes.join("worker.json.lock");
    if lock.exists() {
        age_lock(&lock);
    }
    let late = send_many(&env, "worker", "Late", 3);
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 3, "{lines:?}");
    assert_eq!(count(&lines, "skipped"), 0, "{lines:?}");
    let entries = entries_of(&file);
    for id in early.iter().chain(&late) {
        let n = entries
            .iter()
            .filter(|e| e["inbox"]["messageId"] == id.as_str())
            .count();
        assert_eq!(n, 1, "{id}: {entries:?}");
    }
}

#[test]
fn a_dropped_or_lost_hint_never_skips_what_was_sent_while_the_bridge_was_down() {
    let env = TestEnv::initialized();
    team(&env, &["a", "b", "c"]);
    once(&env, &[]);
    let first = send(&env, "a", "First to a");
    once(&env, &[]);
    // Stopped; messages wait for a and for b, whose file has no line of
    // the bridge's. The hint is further on than the database (a database
    // put back from a copy, a hint edited): dropped.
    let down_a = send(&env, "a", "While down, to a");
    let down_b = send(&env, "b", "While down, to b");
    set_outbound(&hint_path(&env), &["a", "b"], 5_000_000);
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "hint_ignored"), 2, "{lines:?}");
    for (member, id) in [("a", &first), ("a", &down_a), ("b", &down_b)] {
        assert_eq!(lines_of(&env, member, id), 1, "{member} {id}: {lines:?}");
    }
    assert_eq!(count(&lines, "written"), 2, "{lines:?}");
    // The hint lost altogether while messages wait, c's file with no line
    // of the bridge's either: each is written, once.
    let again_b = send(&env, "b", "Again, to b");
    let down_c = send(&env, "c", "While down, to c");
    std::fs::remove_file(hint_path(&env)).unwrap();
    let lines = once(&env, &[]);
    for (member, id) in [
        ("a", &first),
        ("a", &down_a),
        ("b", &down_b),
        ("b", &again_b),
        ("c", &down_c),
    ] {
        assert_eq!(lines_of(&env, member, id), 1, "{member} {id}: {lines:?}");
    }
    assert_eq!(count(&lines, "written"), 2, "{lines:?}");
    assert!(count(&lines, "cursor_rebuilt") >= 2, "{lines:?}");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written"), 0, "{lines:?}");
    assert_eq!(count(&lines, "cursor_rebuilt"), 0, "{lines:?}");
}

#[test]
fn a_hint_others_may_write_or_not_json_is_said_and_skips_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::initialized();
    team(&env, &["b"]);
    once(&env, &[]);
    let first = send(&env, "b", "First");
    once(&env, &[]);
    // Stopped; messages wait. The hint's cursor at b's newest message, and
    // the file writable by every user (as anyone could have made it so).
    let waiting = send_many(&env, "b", "Waiting", 2);
    let hint = hint_path(&env);
    set_outbound(&hint, &["b"], newest_event(&env, "b"));
    std::fs::set_permissions(&hint, std::fs::Permissions::from_mode(0o666)).unwrap();
    let lines = once(&env, &[]);
    let ignored: Vec<&Value> = lines
        .iter()
        .filter(|l| l["action"] == "hint_ignored")
        .collect();
    assert_eq!(ignored.len(), 1, "{lines:?}");
    assert!(ignored[0]["member"].is_null(), "{ignored:?}");
    for id in waiting.iter().chain([&first]) {
        assert_eq!(lines_of(&env, "b", id), 1, "{id}: {lines:?}");
    }
    assert_eq!(count(&lines, "written"), 2, "{lines:?}");
    // Written anew, owner-only.
    let mode = std::fs::metadata(&hint).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    // Not JSON: said, nothing skipped, nothing written twice.
    let later = send(&env, "b", "Later");
    std::fs::write(&hint, "{ not json").unwrap();
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "hint_ignored"), 1, "{lines:?}");
    assert_eq!(count(&lines, "written"), 1, "{lines:?}");
    assert_eq!(lines_of(&env, "b", &later), 1, "{lines:?}");
    let lines = once(&env, &[]);
    assert_eq!(count(&lines, "written") + count(&lines, "hint_ignored"), 0);
}
