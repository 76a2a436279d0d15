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
    // What the bridge did not create, and leaves as it is: a FIFO, a link.
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
    // The FIFO and the link refuse it unsent; both are left as they are,
    // never opened, followed or replaced.
    let e = action_for(&lines, "e-fifo-and-link.task.json");
    assert_eq!(e["action"], "refused", "{e}");
    assert_eq!(e["code"], "output_in_the_way", "{e}");
    assert!(e["result_error"].is_string(), "{e}");
    assert!(dir.join("e-fifo-and-link.task.json.failed").is_file());
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &std::fs::symlink_metadata(&fifo).unwrap().file_type()
    ));
    assert!(
        std::fs::symlink_metadata(dir.join("e-fifo-and-link.task.json.processed"))
            .unwrap()
            .is_symlink()
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
    assert_eq!(thread_count(&env), 3, "only the three dispatched were sent");
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
    assert_eq!(thread_count(&env), 3);
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

/// Marks the file or folder at `path` immutable (or append-only) until
/// dropped: no rename can replace or move it, root's included (`chattr
/// +i`, `+a`). `None` where that cannot be done (not root, a file system
/// without such marks).
struct Marked(PathBuf, rustix::fs::IFlags);

impl Marked {
    fn set(path: &Path, mark: rustix::fs::IFlags) -> Option<Marked> {
        let file = std::fs::File::open(path).unwrap();
        let flags = rustix::fs::ioctl_getflags(&file).ok()?;
        rustix::fs::ioctl_setflags(&file, flags | mark).ok()?;
        Some(Marked(path.to_path_buf(), mark))
    }

    fn immutable(path: &Path) -> Option<Marked> {
        Marked::set(path, rustix::fs::IFlags::IMMUTABLE)
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        let file = std::fs::File::open(&self.0).unwrap();
        let flags = rustix::fs::ioctl_getflags(&file).unwrap();
        rustix::fs::ioctl_setflags(&file, flags - self.1).unwrap();
    }
}

/// Whether files can be marked immutable here (root, and a file system
/// that has the mark); says why the caller skips otherwise.
fn marks_work(env: &TestEnv) -> bool {
    let probe = env.dir().join("mark-probe");
    std::fs::write(&probe, "").unwrap();
    let works = Marked::immutable(&probe).is_some();
    if !works {
        eprintln!("skipped: needs root and a file system with the immutable mark (chattr +i)");
    }
    works
}

/// The test-build hook that stops the bridge (SIGSTOP) once, after its
/// first send and the record of it: what comes next can then be broken as
/// no check before the send could foresee.
const STALL: (&str, &str) = (inbox_host_native::folder::STALL_ENV, "file-drop-sent");

/// Waits until process `pid` is stopped; panics if it never stops.
fn wait_stopped(pid: rustix::process::Pid) {
    let stat = format!("/proc/{}/stat", pid.as_raw_nonzero());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&stat).unwrap_or_default();
        let state = text.rsplit(')').next().unwrap_or_default().trim_start();
        if state.starts_with('T') {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the bridge never stopped after its send (state {state:?})"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn go_on(pid: rustix::process::Pid) {
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
}

/// `once`, stopped after its first send while `meanwhile` runs.
fn once_stalled(env: &TestEnv, meanwhile: impl FnOnce()) -> crate::common::Run {
    let mut command = env.command(&[
        "bridge",
        "file-drop",
        "drop",
        "--to",
        "worker",
        "--once",
        "--json",
    ]);
    command
        .env(STALL.0, STALL.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = rustix::process::Pid::from_child(&child);
    wait_stopped(pid);
    meanwhile();
    go_on(pid);
    let output = child.wait_with_output().unwrap();
    let raw_stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    crate::common::Run {
        status: output.status.code().unwrap_or(-1),
        stdout: raw_stdout.clone(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        raw_stdout,
    }
}

/// A folder where `name` is renamed to: the rename after the send fails.
fn block_rename(dir: &Path, name: &str) -> PathBuf {
    let blocker = dir.join(format!("{name}.processed"));
    std::fs::create_dir_all(blocker.join("inner")).unwrap();
    blocker
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Moves the test clock (and so `gc`'s) past `keep_days` (7) and runs
/// `gc`: the idempotency keys of every send so far are gone.
fn gc_past_keep_days(env: &TestEnv, days: u32) {
    env.set_now(&format!("2026-01-{:02}T00:00:00Z", 1 + days));
    let gc = env.json(&["gc"], 0);
    assert!(gc["expired_keys"].as_u64().unwrap() > 0, "{gc}");
}

/// The thread ids of every thread, oldest first.
fn thread_ids(env: &TestEnv) -> Vec<String> {
    env.json(&["list", "--limit", "1000"], 0)["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["thread_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A descriptor stuck after its send (its rename fails, as no check before
/// the send could foresee) is never sent again, whatever happens to it
/// before its files are finished: a `chattr -i` or `chmod` that changes its
/// status-change time (and so the key a new file would get), a restart,
/// `gc` removing its send's idempotency key, a crash between the send and
/// its files. Its files are finished for the thread it opened.
#[test]
fn a_descriptor_stuck_after_its_send_is_never_sent_again() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();

    // While a bridge runs: stuck, repaired (chattr -i where it can be
    // made immutable, else the folder in the way removed; chmod either
    // way), finished by the same bridge for the same thread.
    let mut bridge = BridgeProcess::start_with(
        &env,
        "file-drop",
        &["drop", "--to", "worker", "--poll-ms", "100"],
        &[STALL],
    );
    write(&dir, "a.task.json", &prompt("Stuck while a bridge runs"));
    wait_stopped(bridge.pid());
    let marked = Marked::immutable(&dir.join("a.task.json"));
    let blocker = marked.is_none().then(|| block_rename(&dir, "a.task.json"));
    go_on(bridge.pid());
    let stuck = bridge.next_of("stuck");
    assert_eq!(stuck["descriptor"], "a.task.json", "{stuck}");
    let thread = stuck["thread_id"].as_str().unwrap().to_owned();
    if let Some(blocker) = &blocker {
        chmod(&dir.join("a.task.json"), 0o600);
        std::fs::remove_dir_all(blocker).unwrap();
    }
    drop(marked);
    let dispatched = bridge.next_of("dispatched");
    assert_eq!(dispatched["descriptor"], "a.task.json", "{dispatched}");
    assert_eq!(dispatched["thread_id"], thread.as_str(), "{dispatched}");
    let (code, rest) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert!(rest.iter().all(|l| l["action"] != "dispatched"), "{rest:?}");
    assert_eq!(thread_ids(&env), std::slice::from_ref(&thread), "sent once");
    assert_eq!(result_of(&dir, "a.task.json")["threadId"], thread.as_str());
    assert!(dir.join("a.task.json.processed").is_file());

    // Stuck, then repaired (chmod) while no bridge runs: the next start
    // finishes it for its thread.
    let blocker = dir.join("b.task.json.processed");
    write(&dir, "b.task.json", &prompt("Stuck across a restart"));
    let run = once_stalled(&env, || {
        block_rename(&dir, "b.task.json");
    });
    assert_eq!(run.status, 0, "{run}");
    let stuck = action_for(&actions(&run), "b.task.json").clone();
    assert_eq!(stuck["action"], "stuck", "{stuck}");
    let b_thread = stuck["thread_id"].as_str().unwrap().to_owned();
    chmod(&dir.join("b.task.json"), 0o600);
    std::fs::remove_dir_all(&blocker).unwrap();
    let run = once(&env);
    let b = action_for(&actions(&run), "b.task.json").clone();
    assert_eq!(b["action"], "dispatched", "{b}");
    assert_eq!(b["thread_id"], b_thread.as_str(), "{b}");
    assert_eq!(thread_ids(&env).len(), 2, "a and b, each once");

    // Stuck, and its key removed by retention before it is repaired (the
    // descriptor itself untouched): finished for its thread.
    let blocker = dir.join("c.task.json.processed");
    write(&dir, "c.task.json", &prompt("Stuck past keep_days"));
    let run = once_stalled(&env, || {
        block_rename(&dir, "c.task.json");
    });
    let stuck = action_for(&actions(&run), "c.task.json").clone();
    let c_thread = stuck["thread_id"].as_str().unwrap().to_owned();
    gc_past_keep_days(&env, 8);
    std::fs::remove_dir_all(&blocker).unwrap();
    let run = once(&env);
    let c = action_for(&actions(&run), "c.task.json").clone();
    assert_eq!(c["action"], "dispatched", "{c}");
    assert_eq!(c["thread_id"], c_thread.as_str(), "{c}");
    assert_eq!(thread_ids(&env).len(), 3, "a, b and c, each once");

    // Killed between the send and its files, then chmod, then its key
    // removed: the next start finishes it for the thread it opened.
    write(&dir, "d.task.json", &prompt("Killed after its send"));
    let mut command = env.command(&[
        "bridge",
        "file-drop",
        "drop",
        "--to",
        "worker",
        "--once",
        "--json",
    ]);
    command
        .env(STALL.0, STALL.1)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    wait_stopped(rustix::process::Pid::from_child(&child));
    child.kill().unwrap();
    child.wait().unwrap();
    let before = thread_ids(&env);
    assert_eq!(before.len(), 4, "d was sent before the kill");
    let d_thread = before
        .iter()
        .find(|t| ![&thread, &b_thread, &c_thread].contains(t));
    chmod(&dir.join("d.task.json"), 0o600);
    gc_past_keep_days(&env, 16);
    let run = once(&env);
    let d = action_for(&actions(&run), "d.task.json").clone();
    assert_eq!(d["action"], "dispatched", "{d}");
    assert_eq!(d["thread_id"].as_str(), d_thread.map(String::as_str), "{d}");
    assert_eq!(thread_ids(&env).len(), 4, "a, b, c and d, each once");
    assert!(dir.join("d.task.json.processed").is_file());

    // Finished, the same name and content written anew is a new job.
    write(&dir, "d.task.json", &prompt("Killed after its send"));
    let run = once(&env);
    let again = action_for(&actions(&run), "d.task.json").clone();
    assert_eq!(again["action"], "dispatched", "{again}");
    assert_ne!(again["thread_id"].as_str(), d_thread.map(String::as_str));
    assert_eq!(thread_ids(&env).len(), 5);
}

/// A descriptor that an immutable mark keeps from being renamed, repaired
/// with `chattr -i` (which changes its status-change time), opens one
/// thread: while a bridge runs, across a restart, and after `gc` removed
/// the keys of earlier sends.
#[test]
fn an_immutable_descriptor_repaired_with_chattr_opens_one_thread() {
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    if !marks_work(&env) {
        return;
    }
    write(
        &dir,
        "a.task.json",
        &prompt("Immutable while a bridge runs"),
    );
    let marked = Marked::immutable(&dir.join("a.task.json")).unwrap();
    let mut bridge = BridgeProcess::start(
        &env,
        "file-drop",
        &["drop", "--to", "worker", "--poll-ms", "100"],
    );
    let stuck = bridge.next_of("stuck");
    assert_eq!(stuck["descriptor"], "a.task.json", "{stuck}");
    drop(marked);
    let dispatched = bridge.next_of("dispatched");
    assert_eq!(dispatched["descriptor"], "a.task.json", "{dispatched}");
    let (code, _) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert_eq!(thread_count(&env), 1, "a once");

    write(&dir, "b.task.json", &prompt("Immutable across a restart"));
    let marked = Marked::immutable(&dir.join("b.task.json")).unwrap();
    let run = once(&env);
    assert_eq!(action_for(&actions(&run), "b.task.json")["action"], "stuck");
    drop(marked);
    let run = once(&env);
    assert_eq!(
        action_for(&actions(&run), "b.task.json")["action"],
        "dispatched"
    );
    assert_eq!(thread_count(&env), 2, "a and b, each once");

    write(&dir, "c.task.json", &prompt("Immutable past keep_days"));
    let marked = Marked::immutable(&dir.join("c.task.json")).unwrap();
    let run = once(&env);
    assert_eq!(action_for(&actions(&run), "c.task.json")["action"], "stuck");
    env.set_now("2026-01-09T00:00:00Z");
    env.json(&["gc"], 0);
    drop(marked);
    let run = once(&env);
    assert_eq!(
        action_for(&actions(&run), "c.task.json")["action"],
        "dispatched"
    );
    assert_eq!(thread_count(&env), 3, "a, b and c, each once");
}

/// What no rename can replace or move (an immutable or append-only
/// `.result`, `.processed`, the hidden name `.result` is first written
/// under, the descriptor itself, or an append-only folder) refuses the
/// descriptor before anything is sent, and the others go on.
#[test]
fn a_name_no_rename_can_replace_refuses_the_descriptor_before_its_send() {
    use inbox_host_native::folder::temporary_name;
    use rustix::fs::IFlags;
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    if !marks_work(&env) {
        return;
    }
    let mut marks = Vec::new();
    let mut planted = |name: &std::ffi::OsStr, mark: IFlags| {
        std::fs::write(dir.join(name), "planted").unwrap();
        marks.push(Marked::set(&dir.join(name), mark).unwrap());
    };
    planted("a.task.json.result".as_ref(), IFlags::IMMUTABLE);
    planted("b.task.json.processed".as_ref(), IFlags::IMMUTABLE);
    planted(
        &temporary_name("c.task.json.result".as_ref()),
        IFlags::APPEND,
    );
    planted("e.task.json.processed".as_ref(), IFlags::APPEND);
    for name in ["a", "b", "c", "d", "e", "z"] {
        write(
            &dir,
            &format!("{name}.task.json"),
            &prompt(&format!("Work {name}")),
        );
    }
    marks.push(Marked::immutable(&dir.join("d.task.json")).unwrap());
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);
    for name in ["a", "b", "c", "e"] {
        let line = action_for(&lines, &format!("{name}.task.json"));
        assert_eq!(line["action"], "refused", "{line}");
        assert_eq!(line["code"], "output_in_the_way", "{line}");
        assert!(line["error"].as_str().unwrap().contains("chattr"), "{line}");
        assert!(dir.join(format!("{name}.task.json.failed")).is_file());
    }
    assert!(action_for(&lines, "a.task.json")["result_error"].is_string());
    assert_eq!(result_of(&dir, "b.task.json")["code"], "output_in_the_way");
    // The descriptor itself cannot be renamed: left where it is, nothing
    // written for it, said why.
    let d = action_for(&lines, "d.task.json");
    assert_eq!(d["action"], "stuck", "{d}");
    assert_eq!(d["code"], "unrenamable", "{d}");
    assert!(d["thread_id"].is_null(), "{d}");
    assert!(!dir.join("d.task.json.result").exists());
    assert_eq!(action_for(&lines, "z.task.json")["action"], "dispatched");
    assert_eq!(thread_count(&env), 1, "only z was sent");

    // An append-only folder: names can be added, none renamed or
    // replaced. Nothing is sent until the mark is off.
    drop(marks);
    write(&dir, "f.task.json", &prompt("In an append-only folder"));
    let folder_mark = Marked::set(&dir, IFlags::APPEND).unwrap();
    let run = once(&env);
    assert_eq!(run.status, 0, "{run}");
    let f = action_for(&actions(&run), "f.task.json").clone();
    assert_eq!(f["action"], "stuck", "{f}");
    assert!(f["thread_id"].is_null(), "{f}");
    assert_eq!(thread_count(&env), 1);
    drop(folder_mark);
    let run = once(&env);
    let lines = actions(&run);
    assert_eq!(action_for(&lines, "f.task.json")["action"], "dispatched");
    assert_eq!(action_for(&lines, "d.task.json")["action"], "dispatched");
    assert_eq!(thread_count(&env), 3, "z, f and d, each once");
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
fn a_folder_other_users_can_write_is_refused_unless_it_is_declared_shared_and_sticky() {
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
    for mode in [0o777, 0o770, 0o1777, 0o720, 0o1770] {
        let env = TestEnv::initialized();
        let dir = drop_dir(&env);
        write(&dir, "a.task.json", &prompt("In a shared folder"));
        // Only its owner may change it (whatever the umask).
        chmod(&dir.join("a.task.json"), 0o644);
        chmod(&dir, mode);
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

        let run = env.run(&shared);
        if mode & 0o1000 == 0 {
            // Others could rename the owner's files: sticky or nothing.
            assert_eq!(run.status, 30, "mode {mode:o}: {run}");
            let error = &run.json()["error"];
            assert_eq!(error["code"], "invalid_value", "{run}");
            let message = error["message"].as_str().unwrap();
            assert!(message.contains("chmod +t"), "{run}");
            assert!(message.contains("not sticky"), "{run}");
            assert!(dir.join("a.task.json").exists(), "nothing was processed");
            assert_eq!(thread_count(&env), 0);
            continue;
        }
        assert_eq!(run.status, 0, "mode {mode:o}: {run}");
        assert_eq!(result_of(&dir, "a.task.json")["ok"], true);
    }

    // Opened to others while the bridge runs: it stops, sending nothing
    // more; and so does a shared one whose sticky bit is taken off.
    for (flags, from, to) in [
        (&[][..], 0o700, 0o777),
        (&["--shared-dir"][..], 0o1777, 0o777),
    ] {
        let env = TestEnv::initialized();
        let dir = drop_dir(&env);
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, from);
        let mut args = vec!["drop", "--to", "worker", "--poll-ms", "100"];
        args.extend_from_slice(flags);
        let mut bridge = BridgeProcess::start(&env, "file-drop", &args);
        chmod(&dir, to);
        write(&dir, "late.task.json", &prompt("Too late"));
        let failure = bridge.next();
        assert_eq!(failure["ok"], false, "{failure}");
        assert_eq!(failure["error"]["code"], "invalid_value", "{failure}");
        let (code, _) = bridge.stop(rustix::process::Signal::TERM);
        assert_eq!(code, 30);
        assert!(dir.join("late.task.json").exists());
        assert_eq!(thread_count(&env), 0);
    }
}

/// The names of the files in `dir`.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn another_user_s_files_are_passed_over_and_cost_the_owner_nothing() {
    if !is_root() {
        eprintln!("skipped: files of another user need root to make");
        return;
    }
    let stranger = Some(rustix::process::Uid::from_raw(64123));
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    write(&dir, "mine.task.json", &prompt("Mine"));
    assert_eq!(once(&env).status, 0);
    let mine = result_of(&dir, "mine.task.json")["threadId"]
        .as_str()
        .unwrap()
        .to_owned();
    chmod(&dir, 0o1777);

    // A stranger's descriptors (a file, a link, a FIFO), and a `.result`
    // planted to be handed the outcome of the bridge user's thread.
    let theirs = ["theirs.task.json", "z-spawn.task.json"];
    for name in theirs {
        write(&dir, name, &prompt("Theirs"));
        rustix::fs::chown(dir.join(name), stranger, None).unwrap();
    }
    std::os::unix::fs::symlink(
        dir.join("mine.task.json.result"),
        dir.join("link.task.json"),
    )
    .unwrap();
    rustix::fs::chownat(
        rustix::fs::CWD,
        dir.join("link.task.json"),
        stranger,
        None,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.join("fifo.task.json"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    rustix::fs::chown(dir.join("fifo.task.json"), stranger, None).unwrap();
    let planted = json!({"ok": true, "threadId": mine, "to": "worker"}).to_string();
    write(&dir, "planted.task.json.result", &planted);
    rustix::fs::chown(dir.join("planted.task.json.result"), stranger, None).unwrap();
    write(&dir, "ours.task.json", &prompt("Ours"));
    chmod(&dir.join("ours.task.json"), 0o644);
    // The user's own, but others may rewrite it: in a shared folder, not
    // the user's alone.
    write(&dir, "open.task.json", &prompt("Rewritten by anyone"));
    chmod(&dir.join("open.task.json"), 0o666);
    let strangers = [
        "fifo.task.json",
        "link.task.json",
        "theirs.task.json",
        "z-spawn.task.json",
    ];

    let shared = ["drop", "--to", "worker", "--shared-dir", "--poll-ms", "100"];
    let mut bridge = BridgeProcess::start(&env, "file-drop", &shared);
    let mut said = Vec::new();
    while said.len() < 6 {
        let line = bridge.next();
        said.push(line);
    }
    for name in strangers {
        let line = action_for(&said, name);
        assert_eq!(line["action"], "passed_over", "{line}");
        assert_eq!(line["code"], "not_owner", "{line}");
        assert_eq!(line["owner"], 64123, "{line}");
    }
    assert_eq!(action_for(&said, "ours.task.json")["action"], "dispatched");
    let open = action_for(&said, "open.task.json");
    assert_eq!(open["code"], "writable_by_others", "{open}");
    // Nothing was written for the strangers' files, nothing renamed.
    let names = names_in(&dir);
    for name in strangers {
        assert!(names.contains(&name.to_owned()), "{names:?}");
        for suffix in [".result", ".failed", ".processed"] {
            assert!(!names.contains(&format!("{name}{suffix}")), "{names:?}");
        }
    }
    // Said once: later looks (another descriptor of the user's) pass them
    // over in silence; a stranger's file written again is said again.
    write(&dir, "later.task.json", &prompt("Later"));
    assert_eq!(bridge.next()["descriptor"], "later.task.json");
    std::fs::write(dir.join("theirs.task.json"), prompt("Theirs, again")).unwrap();
    let again = bridge.next();
    assert_eq!(again["action"], "passed_over", "{again}");
    assert_eq!(again["descriptor"], "theirs.task.json", "{again}");
    let (code, rest) = bridge.stop(rustix::process::Signal::TERM);
    assert_eq!(code, 0);
    assert!(
        rest.iter().all(|l| l["action"] != "passed_over"),
        "{rest:?}"
    );
    assert_eq!(
        thread_count(&env),
        3,
        "mine, ours and later; none of theirs"
    );

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

/// Gives everything under `path` (links themselves, not what they point
/// to) to `uid`.
fn chown_tree(path: &Path, uid: u32) {
    let id = Some(rustix::process::Uid::from_raw(uid));
    let group = Some(rustix::process::Gid::from_raw(uid));
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    rustix::fs::chownat(rustix::fs::CWD, path, id, group, flags).unwrap();
    if std::fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// What the bridge did not create, at a name it would write or rename to
/// (`.result`, `.processed`, `.failed`, the hidden name `.result` is first
/// written under), refuses the descriptor before anything is sent, and is
/// left as it is: a stranger's file in the owner's sticky shared folder (a
/// folder's owner could replace it, and must not), a link or a FIFO of the
/// bridge's own user. The bridge runs as a user of its own (root could
/// replace anything anyway), and the other descriptors go on.
#[test]
fn a_foreign_file_at_a_name_the_bridge_writes_refuses_the_descriptor_unsent() {
    if !is_root() {
        eprintln!("skipped: a bridge user and a stranger need root to make");
        return;
    }
    use inbox_host_native::folder::temporary_name;
    let (owner, stranger) = (64100, 64123);
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    for name in ["a", "b", "c", "d", "e", "f", "z"] {
        let descriptor = format!("{name}.task.json");
        write(&dir, &descriptor, &prompt(&format!("Work {name}")));
        chmod(&dir.join(descriptor), 0o644);
    }
    chown_tree(env.dir(), owner);
    chmod(&dir, 0o1777);
    let theirs = [
        std::ffi::OsString::from("a.task.json.result"),
        "b.task.json.processed".into(),
        temporary_name("c.task.json.result".as_ref()),
        "d.task.json.failed".into(),
        "d.task.json.result".into(),
    ];
    for name in &theirs {
        std::fs::write(dir.join(name), "a stranger's").unwrap();
        chmod(&dir.join(name), 0o644);
        chown_tree(&dir.join(name), stranger);
    }
    // The bridge user's own, but not files: a link and a FIFO.
    std::os::unix::fs::symlink("../elsewhere", dir.join("e.task.json.result")).unwrap();
    chown_tree(&dir.join("e.task.json.result"), owner);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        dir.join("f.task.json.processed"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    chown_tree(&dir.join("f.task.json.processed"), owner);

    // The bridge user runs a copy of the binary from a folder every user
    // can reach: the checkout's own may sit in a folder only root enters
    // (a clone into `mktemp -d`, mode 0700).
    let reachable = tempfile::tempdir().unwrap();
    chmod(reachable.path(), 0o755);
    let binary = reachable.path().join("inbox");
    std::fs::copy(crate::common::inbox_bin(), &binary).unwrap();
    chmod(&binary, 0o755);
    let mut command = env.command_of(
        &binary,
        &[
            "bridge",
            "file-drop",
            "drop",
            "--to",
            "worker",
            "--shared-dir",
            "--once",
            "--json",
        ],
    );
    {
        use std::os::unix::process::CommandExt as _;
        command.uid(owner).gid(owner);
    }
    let run = env.run_command(command);
    // Every foreign file is as it was.
    for name in &theirs {
        let meta = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), stranger);
        assert_eq!(
            std::fs::read_to_string(dir.join(name)).unwrap(),
            "a stranger's"
        );
    }
    chown_tree(env.dir(), 0);
    assert_eq!(run.status, 0, "{run}");
    let lines = actions(&run);
    for name in ["a", "b", "c", "e", "f"] {
        let line = action_for(&lines, &format!("{name}.task.json"));
        assert_eq!(line["action"], "refused", "{line}");
        assert_eq!(line["code"], "output_in_the_way", "{line}");
        assert!(
            line["error"].as_str().unwrap().contains("did not create"),
            "{line}"
        );
        assert!(dir.join(format!("{name}.task.json.failed")).is_file());
    }
    assert!(
        action_for(&lines, "a.task.json")["error"]
            .as_str()
            .unwrap()
            .contains("uid 64123")
    );
    // Where its `.result` is not the bridge's, the refusal says so rather
    // than write over it.
    for name in ["a", "c", "e"] {
        let line = action_for(&lines, &format!("{name}.task.json"));
        assert!(line["result_error"].is_string(), "{line}");
    }
    assert_eq!(result_of(&dir, "b.task.json")["code"], "output_in_the_way");
    assert_eq!(result_of(&dir, "f.task.json")["code"], "output_in_the_way");
    // Not even `.failed` can d become: left where it is, nothing written.
    let d = action_for(&lines, "d.task.json");
    assert_eq!(d["action"], "stuck", "{d}");
    assert_eq!(d["code"], "output_in_the_way", "{d}");
    assert!(d["thread_id"].is_null(), "{d}");
    assert!(dir.join("d.task.json").is_file());
    assert!(
        std::fs::symlink_metadata(dir.join("e.task.json.result"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(action_for(&lines, "z.task.json")["action"], "dispatched");
    assert_eq!(thread_count(&env), 1, "only z was sent");
}

/// A stranger's file planted at `.result` after the checks and the send
/// (in the moment no check can close) is never written over: the
/// descriptor is stuck for the thread it opened, and once the file is
/// gone it is finished for that thread, never sent again.
#[test]
fn a_foreign_file_planted_after_the_send_is_not_written_over() {
    if !is_root() {
        eprintln!("skipped: a stranger's file needs root to make");
        return;
    }
    let env = TestEnv::initialized();
    let dir = drop_dir(&env);
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir, "g.task.json", &prompt("Planted after its send"));
    let planted = dir.join("g.task.json.result");
    let run = once_stalled(&env, || {
        std::fs::write(&planted, "a stranger's").unwrap();
        chown_tree(&planted, 64123);
    });
    assert_eq!(run.status, 0, "{run}");
    let g = action_for(&actions(&run), "g.task.json").clone();
    assert_eq!(g["action"], "stuck", "{g}");
    let thread = g["thread_id"].as_str().unwrap().to_owned();
    assert_eq!(std::fs::read_to_string(&planted).unwrap(), "a stranger's");
    assert!(dir.join("g.task.json").is_file());
    std::fs::remove_file(&planted).unwrap();
    let run = once(&env);
    let g = action_for(&actions(&run), "g.task.json").clone();
    assert_eq!(g["action"], "dispatched", "{g}");
    assert_eq!(g["thread_id"], thread.as_str(), "{g}");
    assert_eq!(result_of(&dir, "g.task.json")["threadId"], thread.as_str());
    assert_eq!(thread_count(&env), 1, "sent once");
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
