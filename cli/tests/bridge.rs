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

/// The action lines of a `--json` run, each as `(action, descriptor)` with
/// the whole line.
fn actions(run: &crate::common::Run) -> Vec<Value> {
    run.raw_stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The one action line about `descriptor`.
fn action_for<'a>(lines: &'a [Value], descriptor: &str) -> &'a Value {
    let mut about = lines.iter().filter(|l| l["descriptor"] == descriptor);
    let line = about
        .next()
        .unwrap_or_else(|| panic!("no line for {descriptor}: {lines:?}"));
    assert!(about.next().is_none(), "two lines for {descriptor}");
    line
}

fn thread_count(env: &TestEnv) -> usize {
    env.json(&["list", "--limit", "1000"], 0)["threads"]
        .as_array()
        .unwrap()
        .len()
}

/// A descriptor name of `length` bytes.
fn name_of_length(first: char, length: usize) -> String {
    let stem = length - ".task.json".len();
    format!("{first}{}.task.json", "x".repeat(stem - 1))
}

/// The longest file name the file system of `dir` takes.
fn name_max(dir: &Path) -> usize {
    usize::try_from(rustix::fs::statvfs(dir).unwrap().f_namemax).unwrap()
}

#[test]
fn a_descriptor_whose_files_cannot_be_written_is_never_sent_and_the_rest_go_on() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    let max = name_max(&dir);
    // Each derived name is the descriptor's plus `.result`, `.failed` (7
    // bytes) or `.processed` (10): one that fits them all, one that fits
    // `.failed` but not `.processed`, one that fits none.
    let fits = name_of_length('c', max - 10);
    let no_processed = name_of_length('d', max - 8);
    let nothing_fits = name_of_length('f', max - 3);
    for name in [
        "a-result-is-a-folder.task.json",
        "b-processed-is-a-folder.task.json",
        &fits,
        &no_processed,
        &nothing_fits,
        "e-fifo-and-link.task.json",
        "g-old-temporary.task.json",
        "z-last.task.json",
    ] {
        write(&dir, name, &prompt(&format!("Work of {}", &name[..1])));
    }
    std::fs::create_dir_all(dir.join("a-result-is-a-folder.task.json.result/inner")).unwrap();
    std::fs::create_dir_all(dir.join("b-processed-is-a-folder.task.json.processed/inner")).unwrap();
    // What a rename replaces without opening or following: a FIFO, a link.
    let fifo = dir.join("e-fifo-and-link.task.json.result");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // A folder where the `.result` used to be written first.
    std::fs::create_dir_all(dir.join(".g-old-temporary.task.json.result.tmp/inner")).unwrap();
    let secret = env.dir().join("secret.txt");
    std::fs::write(&secret, "keep me").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("e-fifo-and-link.task.json.processed")).unwrap();

    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);

    // `.result` is a folder: refused unsent, renamed `.failed` without it.
    let a = action_for(&lines, "a-result-is-a-folder.task.json");
    assert_eq!(a["action"], "refused", "{a}");
    assert_eq!(a["code"], "output_in_the_way", "{a}");
    assert!(a["result_error"].is_string(), "{a}");
    assert!(dir.join("a-result-is-a-folder.task.json.failed").is_file());
    assert!(
        dir.join("a-result-is-a-folder.task.json.result/inner")
            .is_dir()
    );
    // `.processed` is a folder: refused unsent, with its `.result`.
    let b = action_for(&lines, "b-processed-is-a-folder.task.json");
    assert_eq!(b["action"], "refused", "{b}");
    let b_result = result_of(&dir, "b-processed-is-a-folder.task.json");
    assert_eq!(b_result["code"], "output_in_the_way", "{b_result}");
    assert!(
        b_result["error"].as_str().unwrap().contains("not sent"),
        "{b_result}"
    );
    assert!(
        dir.join("b-processed-is-a-folder.task.json.failed")
            .is_file()
    );
    // A long name whose files all fit is dispatched.
    assert_eq!(action_for(&lines, &fits)["action"], "dispatched");
    assert_eq!(result_of(&dir, &fits)["ok"], true);
    assert!(dir.join(format!("{fits}.processed")).is_file());
    // `.processed` would not fit: refused unsent, renamed `.failed`.
    let d = action_for(&lines, &no_processed);
    assert_eq!(d["action"], "refused", "{d}");
    assert_eq!(result_of(&dir, &no_processed)["code"], "name_too_long");
    assert!(dir.join(format!("{no_processed}.failed")).is_file());
    // Nothing fits: left where it is, said why, never sent.
    let f = action_for(&lines, &nothing_fits);
    assert_eq!(f["action"], "stuck", "{f}");
    assert_eq!(f["code"], "name_too_long", "{f}");
    assert!(f["thread_id"].is_null(), "{f}");
    assert!(dir.join(&nothing_fits).is_file());
    // The FIFO and the link are replaced, never opened or followed.
    assert_eq!(
        action_for(&lines, "e-fifo-and-link.task.json")["action"],
        "dispatched"
    );
    assert_eq!(result_of(&dir, "e-fifo-and-link.task.json")["ok"], true);
    assert!(
        std::fs::symlink_metadata(dir.join("e-fifo-and-link.task.json.processed"))
            .unwrap()
            .is_file()
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep me");
    assert_eq!(
        action_for(&lines, "g-old-temporary.task.json")["action"],
        "dispatched"
    );
    // What comes after is processed.
    assert_eq!(
        action_for(&lines, "z-last.task.json")["action"],
        "dispatched"
    );
    assert_eq!(thread_count(&env), 4, "only the four dispatched were sent");
    // No temporary file is left behind.
    let leftovers: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") && !n.starts_with(".g-old"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Started again: the one left in place is said again, nothing is sent.
    let again = once(&env);
    assert_eq!(again.status, 0, "{again}");
    let lines = actions(&again);
    assert_eq!(action_for(&lines, &nothing_fits)["action"], "stuck");
    assert_eq!(thread_count(&env), 4);
}

#[test]
fn an_outcome_that_cannot_be_written_is_reported_and_the_bridge_goes_on() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let mut bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    write(&dir, "first.task.json", &prompt("First"));
    let dispatched = bridge.next_of("dispatched");
    let thread = dispatched["thread_id"].as_str().unwrap().to_owned();
    // Its `.result` becomes a folder before the outcome is written.
    std::fs::remove_file(dir.join("first.task.json.result")).unwrap();
    std::fs::create_dir_all(dir.join("first.task.json.result/inner")).unwrap();
    env.json(&["claim", "--agent", "worker", "--thread", &thread], 0);
    env.json(
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--summary",
            "Did it",
        ],
        0,
    );
    let unwritten = bridge.next_of("outcome_unwritten");
    assert_eq!(unwritten["thread_id"], thread.as_str(), "{unwritten}");
    assert_eq!(unwritten["status"], "done", "{unwritten}");

    write(&dir, "second.task.json", &prompt("Second"));
    let next = bridge.next_of("dispatched");
    assert_eq!(next["descriptor"], "second.task.json", "{next}");
    let (code, _) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
}

/// Makes the file at `path` immutable until dropped (even root cannot
/// rename over it): `None` where the file system has no such flag.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Option<Immutable> {
        let file = std::fs::File::open(path).unwrap();
        let flags = rustix::fs::ioctl_getflags(&file).ok()?;
        rustix::fs::ioctl_setflags(&file, flags | rustix::fs::IFlags::IMMUTABLE).ok()?;
        Some(Immutable(path.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let file = std::fs::File::open(&self.0).unwrap();
        let flags = rustix::fs::ioctl_getflags(&file).unwrap();
        rustix::fs::ioctl_setflags(&file, flags - rustix::fs::IFlags::IMMUTABLE).unwrap();
    }
}

#[test]
fn a_descriptor_that_cannot_be_renamed_after_its_send_is_finished_later_with_one_thread() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    // What no check before the send can see: an immutable file where the
    // descriptor is renamed to.
    write(&dir, "x.task.json.processed", "an earlier run's");
    let Some(immutable) = Immutable::set(&dir.join("x.task.json.processed")) else {
        eprintln!("skipped: needs root and a file system with the immutable flag");
        return;
    };
    write(&dir, "x.task.json", &prompt("Blocked after its send"));
    write(&dir, "y.task.json", &prompt("After it"));
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);
    let x = action_for(&lines, "x.task.json");
    assert_eq!(x["action"], "stuck", "{x}");
    let thread = x["thread_id"].as_str().unwrap().to_owned();
    assert_eq!(action_for(&lines, "y.task.json")["action"], "dispatched");
    assert!(dir.join("x.task.json").exists());
    assert_eq!(thread_count(&env), 2);

    // The next start (as after a crash between the send and the rename)
    // replays the send: the same thread, none added.
    let again = once(&env);
    assert_eq!(
        action_for(&actions(&again), "x.task.json")["thread_id"],
        thread.as_str()
    );
    drop(immutable);
    let finished = once(&env);
    assert_eq!(finished.status, 0, "{finished}");
    let x = action_for(&actions(&finished), "x.task.json").clone();
    assert_eq!(x["action"], "dispatched", "{x}");
    assert_eq!(x["thread_id"], thread.as_str(), "{x}");
    assert_eq!(result_of(&dir, "x.task.json")["threadId"], thread.as_str());
    assert!(!dir.join("x.task.json").exists());
    assert_eq!(thread_count(&env), 2, "sent once");

    // A running bridge tries a stuck descriptor again by itself.
    write(&dir, "w.task.json.processed", "an earlier run's");
    let immutable = Immutable::set(&dir.join("w.task.json.processed")).unwrap();
    let mut bridge = BridgeProcess::start(
        &env,
        "file-drop",
        &["drop", "--to", "worker", "--poll-ms", "100"],
    );
    write(&dir, "w.task.json", &prompt("Retried"));
    let stuck = bridge.next_of("stuck");
    let thread = stuck["thread_id"].as_str().unwrap().to_owned();
    drop(immutable);
    let dispatched = bridge.next_of("dispatched");
    assert_eq!(dispatched["descriptor"], "w.task.json", "{dispatched}");
    assert_eq!(dispatched["thread_id"], thread.as_str());
    let (code, rest) = bridge.stop(rustix::process::Signal::INT);
    assert_eq!(code, 0);
    assert!(rest.iter().all(|l| l["action"] != "stuck"), "{rest:?}");
    assert_eq!(thread_count(&env), 3, "x, y and w, each once");
}

#[test]
fn a_descriptor_written_again_after_it_finished_is_a_new_job() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let text = prompt("Nightly build");
    write(&dir, "nightly.task.json", &text);
    assert_eq!(once(&env).status, 0);
    let first = result_of(&dir, "nightly.task.json")["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["claim", "--agent", "worker", "--thread", &first], 0);
    env.json(
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &first,
            "--summary",
            "Built",
        ],
        0,
    );
    assert_eq!(once(&env).status, 0);
    assert_eq!(
        result_of(&dir, "nightly.task.json")["outcome"]["status"],
        "done"
    );

    // The same name and content again, beside the first run's files.
    write(&dir, "nightly.task.json", &text);
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let second = result_of(&dir, "nightly.task.json");
    assert!(second.get("outcome").is_none(), "a new job: {second}");
    let second = second["threadId"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert!(!run.raw_stdout.contains("finished"), "{run}");

    // Again after the first runs' files are gone (the inode may be reused),
    // with the first file's modification time copied (`cp -p`, `rsync -t`).
    let modified = std::fs::metadata(dir.join("nightly.task.json.processed"))
        .unwrap()
        .modified()
        .unwrap();
    for leftover in ["nightly.task.json.processed", "nightly.task.json.result"] {
        std::fs::remove_file(dir.join(leftover)).unwrap();
    }
    write(&dir, "nightly.task.json", &text);
    std::fs::File::options()
        .write(true)
        .open(dir.join("nightly.task.json"))
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(once(&env).status, 0);
    let third = result_of(&dir, "nightly.task.json")["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(third != first && third != second);

    // And while a bridge runs.
    let mut bridge = BridgeProcess::start(&env, "file-drop", &["drop", "--to", "worker"]);
    write(&dir, "nightly.task.json", &text);
    let fourth = bridge.next_of("dispatched")["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(![&first, &second, &third].contains(&&fourth));
    let (code, _) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert_eq!(thread_count(&env), 4, "one thread per file written");
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn a_folder_other_users_can_write_is_refused_unless_it_is_declared_shared() {
    use std::os::unix::fs::PermissionsExt as _;
    for mode in [0o777, 0o770, 0o1777, 0o720] {
        let env = TestEnv::initialized();
        let dir = drop_dir(&env);
        write(&dir, "a.task.json", &prompt("In a shared folder"));
        // Only its owner may change it (whatever the umask).
        std::fs::set_permissions(
            dir.join("a.task.json"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let run = once(&env);
        assert_eq!(run.status, 30, "mode {mode:o}: {run}");
        let error = &run.json()["error"];
        assert_eq!(error["code"], "invalid_value", "{run}");
        assert!(
            error["message"].as_str().unwrap().contains("--shared-dir"),
            "{run}"
        );
        assert!(dir.join("a.task.json").exists(), "nothing was processed");
        assert_eq!(thread_count(&env), 0);

        let run = env.run(&[
            "bridge",
            "file-drop",
            "drop",
            "--to",
            "worker",
            "--shared-dir",
            "--once",
            "--json",
        ]);
        assert_eq!(run.status, 0, "mode {mode:o}: {run}");
        assert_eq!(result_of(&dir, "a.task.json")["ok"], true);
    }

    // Opened to others while the bridge runs: it stops, sending nothing more.
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let bridge = BridgeProcess::start(
        &env,
        "file-drop",
        &["drop", "--to", "worker", "--poll-ms", "100"],
    );
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    write(&dir, "late.task.json", &prompt("Too late"));
    let mut child = bridge;
    let failure = child.next();
    assert_eq!(failure["ok"], false, "{failure}");
    assert_eq!(failure["error"]["code"], "invalid_value", "{failure}");
    let (code, _) = child.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 30);
    assert!(dir.join("late.task.json").exists());
    assert_eq!(thread_count(&env), 0);
}

#[test]
fn another_user_s_files_are_refused_even_in_a_shared_folder() {
    if !is_root() {
        eprintln!("skipped: files of another user need root to make");
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let stranger = Some(rustix::process::Uid::from_raw(64123));
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    write(&dir, "mine.task.json", &prompt("Mine"));
    assert_eq!(once(&env).status, 0);
    let mine = result_of(&dir, "mine.task.json")["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();

    // A stranger's descriptors, and a `.result` planted to be handed the
    // outcome of the bridge user's thread.
    for name in ["theirs.task.json", "z-spawn.task.json"] {
        write(&dir, name, &prompt("Theirs"));
        rustix::fs::chown(dir.join(name), stranger, None).unwrap();
    }
    let planted = json!({"ok": true, "threadId": mine, "to": "worker"}).to_string();
    write(&dir, "planted.task.json.result", &planted);
    rustix::fs::chown(dir.join("planted.task.json.result"), stranger, None).unwrap();
    write(&dir, "ours.task.json", &prompt("Ours"));
    std::fs::set_permissions(
        dir.join("ours.task.json"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    // The user's own, but others may rewrite it: in a shared folder, not
    // the user's alone.
    write(&dir, "open.task.json", &prompt("Rewritten by anyone"));
    std::fs::set_permissions(
        dir.join("open.task.json"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();

    let shared = [
        "bridge",
        "file-drop",
        "drop",
        "--to",
        "worker",
        "--shared-dir",
        "--once",
        "--json",
    ];
    let run = env.run(&shared);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);
    for name in ["theirs.task.json", "z-spawn.task.json"] {
        let line = action_for(&lines, name);
        assert_eq!(line["action"], "refused", "{line}");
        assert_eq!(line["code"], "not_owner", "{line}");
        assert!(dir.join(format!("{name}.failed")).exists());
        assert_eq!(result_of(&dir, name)["code"], "not_owner");
    }
    assert_eq!(action_for(&lines, "ours.task.json")["action"], "dispatched");
    let open = action_for(&lines, "open.task.json");
    assert_eq!(open["code"], "writable_by_others", "{open}");
    assert_eq!(thread_count(&env), 2, "mine and ours, none of theirs");

    // The planted `.result` is not followed: finishing the thread writes
    // its outcome to its own `.result` only.
    env.json(&["claim", "--agent", "worker", "--thread", &mine], 0);
    env.json(
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &mine,
            "--summary",
            "Secret",
        ],
        0,
    );
    let run = env.run(&shared);
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(
        std::fs::read_to_string(dir.join("planted.task.json.result")).unwrap(),
        planted
    );
    assert_eq!(
        result_of(&dir, "mine.task.json")["outcome"]["summary"],
        "Secret"
    );
}

/// A folder holding more descriptors than the bridge keeps names of at
/// once (a page) is gone through whole, in name order, each once, with the
/// refused ones among them finished too.
#[test]
fn a_folder_larger_than_a_page_is_gone_through_whole_in_name_order() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    let count = 700;
    for i in 0..count {
        let text = if i % 100 == 7 {
            "not json".to_owned()
        } else {
            prompt(&format!("task {i}"))
        };
        write(&dir, &format!("t-{i:04}.task.json"), &text);
    }
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);
    let order: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["descriptor"].as_str())
        .collect();
    let expected: Vec<String> = (0..count).map(|i| format!("t-{i:04}.task.json")).collect();
    assert_eq!(order, expected, "each descriptor once, in name order");
    let refused = lines.iter().filter(|l| l["action"] == "refused").count();
    assert_eq!(refused, 7, "{lines:?}");
    assert_eq!(thread_count(&env), count - 7);
}
