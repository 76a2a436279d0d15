//! `inbox bridge file-drop`: seed 001's drop folder, with real files, a
//! real writer process and the bridge as a real process (stopped by
//! signals, killed, started again).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{BridgeProcess, TestEnv};

/// `inbox bridge file-drop drop --to worker --once --json`, to its end.
fn once(env: &TestEnv) -> crate::common::Run {
    env.run(&[
        "bridge",
        "file-drop",
        "drop",
        "--to",
        "worker",
        "--once",
        "--json",
    ])
}

fn drop_dir(env: &TestEnv) -> PathBuf {
    env.dir().join("drop")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

fn result_of(dir: &Path, name: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(format!("{name}.result")))
        .unwrap_or_else(|e| panic!("{name}.result: {e}"));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name}.result is not JSON ({e}): {text}"))
}

/// Waits (up to 20 s) until `check` holds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn prompt(text: &str) -> String {
    json!({"version": 1, "kind": "prompt", "prompt": text}).to_string()
}

#[test]
fn what_seed_001_refuses_is_failed_with_a_result_that_says_why() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let refused = [
        (
            "big.task.json",
            format!(
                "{{\"version\":1,\"kind\":\"prompt\",\"prompt\":\"{}\"}}",
                "x".repeat(70_000)
            ),
            "larger than the 64 KB limit",
        ),
        (
            "broken.task.json",
            "{\"version\":1,,}".to_owned(),
            "malformed JSON",
        ),
        (
            "no-prompt.task.json",
            r#"{"version":1,"kind":"prompt"}"#.to_owned(),
            "schema validation failed at 'prompt': required",
        ),
        (
            "empty.task.json",
            r#"{"version":1,"kind":"prompt","prompt":""}"#.to_owned(),
            "schema validation failed at 'prompt': must not be empty",
        ),
        (
            "unknown.task.json",
            r#"{"version":1,"kind":"prompt","prompt":"p","team":"x"}"#.to_owned(),
            "schema validation failed at 'team': unknown field",
        ),
        (
            "v2.task.json",
            r#"{"version":2,"kind":"prompt","prompt":"p"}"#.to_owned(),
            "schema validation failed at 'version': must be 1",
        ),
        (
            "spawn.task.json",
            r#"{"version":1,"kind":"spawn_worker","agent_type":"coder","prompt":"p"}"#.to_owned(),
            "--trust-all",
        ),
        (
            "bad-type.task.json",
            r#"{"version":1,"kind":"spawn_worker","agent_type":"boss","prompt":"p"}"#.to_owned(),
            "schema validation failed at 'agent_type'",
        ),
    ];
    for (name, text, _) in &refused {
        write(&dir, name, text);
    }
    // A link planted under a descriptor's name, to a file of ours.
    let secret = env.dir().join("secret.txt");
    std::fs::write(&secret, prompt("do not read me")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("link.task.json")).unwrap();
    write(&dir, "good.task.json", &prompt("Summarise today's changes"));
    write(&dir, "ignored.json", &prompt("not a descriptor name"));

    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let lines: Vec<Value> = run
        .raw_stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let actions: Vec<(&str, &str)> = lines
        .iter()
        .filter_map(|l| Some((l["action"].as_str()?, l["descriptor"].as_str()?)))
        .collect();
    // File-name order, one action each.
    let names: Vec<&str> = actions.iter().map(|(_, name)| *name).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(names.len(), refused.len() + 2);

    for (name, _, why) in &refused {
        let result = result_of(&dir, name);
        assert_eq!(result["ok"], false, "{name}: {result}");
        assert!(
            result["error"].as_str().unwrap().contains(why),
            "{name}: {result}"
        );
        assert!(result["failedAt"].is_string());
        assert!(dir.join(format!("{name}.failed")).exists(), "{name}");
        assert!(!dir.join(name).exists(), "{name}");
    }
    let link = result_of(&dir, "link.task.json");
    assert_eq!(link["code"], "symlink", "{link}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        prompt("do not read me")
    );

    let good = result_of(&dir, "good.task.json");
    assert_eq!(good["ok"], true);
    assert_eq!(good["descriptor"], json!({"kind": "prompt"}));
    assert!(dir.join("good.task.json.processed").exists());
    assert!(dir.join("ignored.json").exists());
    // The one thread there is, with what the descriptor said.
    let thread = good["threadId"].as_str().unwrap();
    let shown = env.json(&["show", "--thread", thread], 0);
    assert_eq!(shown["thread"]["assigned_to"], "worker");
    assert_eq!(shown["thread"]["created_by"], "file-drop");
    assert_eq!(shown["thread"]["subject"], "Summarise today's changes");
    assert_eq!(
        shown["messages"][0]["payload"]["file_drop"]["descriptor"],
        "good.task.json"
    );
    assert_eq!(
        env.json(&["list"], 0)["threads"].as_array().unwrap().len(),
        1
    );

    // Files written are the owner's alone.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("good.task.json.result"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_spawn_worker_goes_to_its_role_when_the_folder_is_trusted() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let spawn = json!({
        "version": 1, "kind": "spawn_worker", "agent_type": "coder", "skill": "fleet-coder",
        "role": "builder", "skills": ["vitest-patterns"], "name": "feature-x-impl",
        "prompt": "Implement feature X", "task_id": "T-1", "model": "m", "cwd": "/src"
    });
    write(&dir, "feature-x.task.json", &spawn.to_string());
    let run = env.run(&[
        "bridge",
        "file-drop",
        "drop",
        "--trust-all",
        "--once",
        "--json",
    ]);
    assert_eq!(run.status, 0, "{run}");
    let result = result_of(&dir, "feature-x.task.json");
    assert_eq!(result["to"], "role:builder", "{result}");
    let shown = env.json(
        &["show", "--thread", result["threadId"].as_str().unwrap()],
        0,
    );
    assert_eq!(shown["thread"]["assigned_to"], "role:builder");
    assert_eq!(shown["thread"]["subject"], "feature-x-impl");
    assert_eq!(shown["thread"]["task_id"], "T-1");
    let seed = &shown["messages"][0]["payload"]["file_drop"];
    assert_eq!(seed["skills"], json!(["vitest-patterns"]));
    assert_eq!(seed["agent_type"], "coder");
    assert_eq!(seed["cwd"], "/src");
}

#[test]
fn a_finished_thread_s_outcome_lands_in_its_result_and_a_signal_stops_cleanly() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let mut bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    // The seed's writer: a shell redirect, not an atomic rename.
    let status = Command::new("sh")
        .arg("-c")
        .arg(r#"echo '{"version":1,"kind":"prompt","prompt":"Summarise today changes"}' > drop/note.task.json"#)
        .current_dir(env.dir())
        .status()
        .unwrap();
    assert!(status.success());
    let dispatched = bridge.next();
    assert_eq!(dispatched["action"], "dispatched", "{dispatched}");
    let thread = dispatched["thread_id"].as_str().unwrap().to_owned();
    assert!(result_of(&dir, "note.task.json").get("outcome").is_none());

    env.json(&["claim", "--agent", "worker", "--thread", &thread], 0);
    std::fs::write(env.dir().join("summary.md"), "# Today\n").unwrap();
    env.json(
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--summary",
            "Summarised",
            "--artifact",
            "summary.md",
        ],
        0,
    );
    let finished = bridge.next();
    assert_eq!(finished["action"], "finished", "{finished}");
    assert_eq!(finished["status"], "done");
    let outcome = result_of(&dir, "note.task.json")["outcome"].clone();
    assert_eq!(outcome["status"], "done", "{outcome}");
    assert_eq!(outcome["summary"], "Summarised");
    assert_eq!(outcome["result"]["kind"], "result");
    assert_eq!(outcome["result"]["from_agent"], "worker");
    assert_eq!(outcome["artifacts"][0]["path"], "summary.md");
    assert_eq!(outcome["artifacts"][0]["size_bytes"], 8);

    let (code, rest) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert_eq!(rest, vec![json!({"action": "stopped", "reason": "signal"})]);
}

#[test]
fn a_thread_that_finishes_while_no_bridge_runs_gets_its_outcome_at_the_next_start() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    write(&dir, "a.task.json", &prompt("First"));
    assert_eq!(
        env.run(&["bridge", "file-drop", "drop", "--to", "worker", "--once"])
            .status,
        0
    );
    let thread = result_of(&dir, "a.task.json")["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["claim", "--agent", "worker", "--thread", &thread], 0);
    env.json(
        &[
            "fail",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--summary",
            "Could not",
        ],
        0,
    );
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let outcome = &result_of(&dir, "a.task.json")["outcome"];
    assert_eq!(outcome["status"], "failed", "{outcome}");
    assert_eq!(outcome["summary"], "Could not");
    // Written once: the next start has nothing left to follow.
    let again = once(&env);
    assert!(!again.raw_stdout.contains("finished"), "{again}");
}

#[test]
fn five_hundred_descriptors_through_a_kill_and_a_restart_end_exactly_once() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    let bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    // The writer: a shell loop, each descriptor written by a redirect.
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(r#"i=0; while [ $i -lt 500 ]; do printf '{"version":1,"kind":"prompt","prompt":"task %s"}\n' $i > drop/t-$(printf %04d $i).task.json; i=$((i+1)); done"#)
        .current_dir(env.dir())
        .spawn()
        .unwrap();
    let done_count = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".processed")
            })
            .count()
    };
    eventually("a first part processed", || done_count() >= 50);
    let (code, _) = bridge.stop(rustix::process::Signal::KILL);
    assert_eq!(code, -1, "killed");
    assert!(writer.wait().unwrap().success());

    let bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    eventually("all 500 processed", || done_count() == 500);
    let (code, _) = bridge.stop(rustix::process::Signal::INT);
    assert_eq!(code, 0);

    let mut threads = std::collections::BTreeSet::new();
    for i in 0..500 {
        let name = format!("t-{i:04}.task.json");
        assert!(!dir.join(&name).exists(), "{name} left behind");
        assert!(
            !dir.join(format!("{name}.failed")).exists(),
            "{name} failed"
        );
        let result = result_of(&dir, &name);
        assert_eq!(result["ok"], true, "{name}: {result}");
        assert!(
            threads.insert(result["threadId"].as_str().unwrap().to_owned()),
            "{name}: a thread twice"
        );
    }
    let listed = env.json(&["list", "--limit", "1000"], 0);
    assert_eq!(
        listed["threads"].as_array().unwrap().len(),
        500,
        "one thread per descriptor"
    );
}

#[test]
fn one_bridge_per_folder_and_a_removed_folder_comes_back() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let mut bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let second = once(&env);
    assert_eq!(second.status, 30, "{second}");
    assert_eq!(second.json()["error"]["code"], "invalid_state");

    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(bridge.next()["action"], "recreated");
    write(
        &dir,
        "after.task.json",
        &prompt("After the folder came back"),
    );
    assert_eq!(bridge.next()["action"], "dispatched");
    let (code, _) = bridge.stop(rustix::process::Signal::INT);
    assert_eq!(code, 0);
}

#[test]
fn a_bridge_needs_an_initialized_database_and_a_folder_of_its_own() {
    let env = TestEnv::new();
    let run = once(&env);
    assert_eq!(run.status, 50, "{run}");
    assert_eq!(run.json()["ok"], false);

    let env = TestEnv::initialized();
    std::fs::write(env.dir().join("file"), "").unwrap();
    let run = env.run(&[
        "bridge",
        "file-drop",
        "file",
        "--to",
        "worker",
        "--once",
        "--json",
    ]);
    assert_eq!(run.status, 30, "{run}");
    assert!(
        run.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a folder"),
        "{run}"
    );
    std::os::unix::fs::symlink(env.dir().join("elsewhere"), env.dir().join("linked")).unwrap();
    let run = env.run(&[
        "bridge",
        "file-drop",
        "linked",
        "--to",
        "worker",
        "--once",
        "--json",
    ]);
    assert_eq!(run.status, 30, "{run}");
    assert!(
        !env.dir().join("elsewhere").exists(),
        "a planted link is not followed"
    );
}

#[test]
fn a_descriptor_still_being_written_is_waited_for_not_refused() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let text = prompt("Written in two steps");
    let (head, tail) = text.split_at(10);
    write(&dir, "slow.task.json", head);
    let bridge = env
        .command(&[
            "bridge",
            "file-drop",
            "drop",
            "--to",
            "worker",
            "--once",
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("slow.task.json"))
        .unwrap();
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    let output = bridge.wait_with_output().unwrap();
    assert!(output.status.success());
    let result = result_of(&dir, "slow.task.json");
    assert_eq!(result["ok"], true, "{result}");
    assert!(dir.join("slow.task.json.processed").exists());

    // A file cut short and left so is malformed once it settled.
    write(&dir, "cut.task.json", head);
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(result_of(&dir, "cut.task.json")["code"], "malformed_json");
}
