//! `orch`, the leader's command line, end to end with real processes: its
//! help (every screen snapshotted, with examples), its subcommands against
//! the engine's orch commands, a leader's session as a person reads it, and
//! a 50-task graph drained by a leader sleeping in `orch wait` and three
//! `inbox` worker processes, with a question and a rejection on the way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use clap::CommandFactory;
use inbox_cli::orch_args::OrchCli;
use inbox_engine::Command as EngineCommand;
use serde_json::Value;

use crate::common::{TestEnv, inbox_bin, orch_bin};

/// What a process printed and its exit code: for threads, which cannot
/// share a [`TestEnv`].
struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n{}{}", self.status, self.stdout, self.stderr)
    }
}

/// Runs `binary args...` in `dir` on the real clock, as `agent`.
fn ran(dir: &std::path::Path, binary: &str, agent: &str, args: &[&str]) -> Ran {
    ran_with(dir, binary, agent, args, &[])
}

/// [`ran`] with more environment variables (`PATH`, say).
fn ran_with(
    dir: &std::path::Path,
    binary: &str,
    agent: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Ran {
    let output = std::process::Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env_remove("INBOX_DB")
        .env_remove("INBOX_NOW")
        .env("INBOX_AGENT", agent)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    Ran {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Every runnable subcommand of `orch`, as its words (`["run", "create"]`):
/// the leaves, and a group that runs by itself too (`orch council` starts a
/// council, `orch council show` reads one).
fn leaf_subcommands() -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for sub in command.get_subcommands() {
            path.push(sub.get_name().to_owned());
            if sub.has_subcommands() {
                if !sub.is_subcommand_required_set() {
                    out.push(path.clone());
                }
                walk(sub, path, out);
            } else {
                out.push(path.clone());
            }
            path.pop();
        }
    }
    let mut out = Vec::new();
    // Subcommands are deferred: build the whole tree to see them all.
    let mut orch = OrchCli::command();
    orch.build();
    walk(&orch, &mut Vec::new(), &mut out);
    out
}

#[test]
fn orch_root_help_explains_the_leaders_loop() {
    let env = TestEnv::new();
    let run = env.orch(&["--help"]);
    assert_eq!(run.status, 0);
    assert!(run.stdout.contains("orch wait") && run.stdout.contains("orch dispatch --all-ready"));
    insta::assert_snapshot!(run.to_string());
}

#[test]
fn every_orch_command_has_help_with_examples() {
    let env = TestEnv::new();
    for words in leaf_subcommands() {
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let run = env.orch(&args);
        assert_eq!(run.status, 0, "{words:?}: {run}");
        assert!(
            run.stdout.contains("Examples:"),
            "orch {words:?} has no examples"
        );
        insta::assert_snapshot!(format!("orch_help_{}", words.join("_")), run.to_string());
    }
}

/// Each orch command of the engine is one `orch` subcommand (`orch run
/// create` is `orch-run-create`); `orch skill`, `orch completions` and
/// `orch man` are the tools.
#[test]
fn the_orch_subcommands_are_the_engine_s_orch_commands() {
    let cli: BTreeSet<String> = leaf_subcommands()
        .iter()
        .map(|words| format!("orch-{}", words.join("-")))
        .collect();
    let mut engine: BTreeSet<String> = EngineCommand::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .filter(|name| name.starts_with("orch-"))
        .collect();
    for tool in ["orch-skill", "orch-completions", "orch-man"] {
        engine.insert(tool.to_owned());
    }
    assert_eq!(cli, engine);
}

#[test]
fn a_leaders_session_reads_well() {
    let env = TestEnv::initialized();
    std::fs::write(
        env.dir().join("plan.json"),
        r#"{"tasks": [
            {"task_id": "schema", "title": "Users table", "assignee": "db-worker", "acceptance": ["the migration runs twice"]},
            {"task_id": "api", "title": "Login API", "assignee": "web-worker", "needs": ["schema"], "review": true},
            {"task_id": "docs", "title": "Document login", "assignee": "db-worker", "needs": ["api"]}
        ]}"#,
    )
    .unwrap();
    let mut t = String::new();
    let lead = ["--agent", "lead"];
    let with = |args: &[&'static str]| -> Vec<&'static str> { [&lead[..], args].concat() };
    env.orch_step(
        &mut t,
        &with(&[
            "run",
            "create",
            "--goal",
            "Ship the login page",
            "--id",
            "login",
        ]),
    );
    env.orch_step(&mut t, &with(&["plan", "--file", "plan.json"]));
    env.orch_step(&mut t, &with(&["dispatch", "--task", "api"]));
    env.orch_step(&mut t, &with(&["dispatch", "--all-ready"]));
    let claim = env.json(&["claim", "--agent", "db-worker", "--next"], 0);
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    env.step(
        &mut t,
        &[
            "done",
            "--agent",
            "db-worker",
            "--thread",
            &thread,
            "--summary",
            "users table migrated",
        ],
    );
    env.orch_step(&mut t, &["status"]);
    env.orch_step(&mut t, &with(&["dispatch", "--all-ready"]));
    let claim = env.json(&["claim", "--agent", "web-worker", "--next"], 0);
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    env.step(
        &mut t,
        &[
            "update",
            "--agent",
            "web-worker",
            "--thread",
            &thread,
            "--status",
            "blocked",
            "--summary",
            "Email or username?",
        ],
    );
    env.orch_step(&mut t, &["wait", "--timeout-seconds", "5"]);
    env.orch_step(&mut t, &with(&["answer", "api", "--summary", "Email"]));
    env.step(
        &mut t,
        &[
            "done",
            "--agent",
            "web-worker",
            "--thread",
            &thread,
            "--summary",
            "POST /login works",
        ],
    );
    env.orch_step(
        &mut t,
        &with(&["reject", "api", "--reason", "Add rate limiting"]),
    );
    env.orch_step(&mut t, &["task", "show", "api"]);
    env.orch_step(&mut t, &with(&["cancel", "schema"]));
    env.orch_step(&mut t, &with(&["cancel", "api"]));
    env.orch_step(
        &mut t,
        &with(&["cancel", "api", "--cascade", "--reason", "Out of scope"]),
    );
    env.orch_step(&mut t, &["run", "list"]);
    insta::assert_snapshot!(t);
}

/// A leader reads `orch wait`, `orch status` and `orch ready` on every
/// wake, so their lists carry one line per task; the body and criteria,
/// however long, are in `orch task show` only.
#[test]
fn lists_carry_a_line_per_task_and_task_show_the_whole_task() {
    let env = TestEnv::initialized();
    let body = "Step. ".repeat(4000);
    let plan = serde_json::json!({"tasks": [
        {"task_id": "big", "title": "A long brief", "assignee": "w", "body": body,
         "acceptance": ["it builds"]},
        {"task_id": "next", "title": "After it", "assignee": "w", "needs": ["big"]}
    ]});
    std::fs::write(env.dir().join("plan.json"), plan.to_string()).unwrap();
    env.orch_json(&["--agent", "lead", "run", "create", "--goal", "g"], 0);
    env.orch_json(&["--agent", "lead", "plan", "--file", "plan.json"], 0);

    let lists = [
        (vec!["wait", "--timeout-seconds", "0"], "actionable"),
        (vec!["status"], "actionable"),
        (vec!["ready"], "tasks"),
    ];
    for (args, field) in lists {
        let out = env.orch_json(&args, 0);
        let line = &out[field][0];
        assert_eq!(line["task_id"], "big", "{args:?}: {out}");
        assert_eq!(line["status"], "ready", "{args:?}: {out}");
        assert_eq!(line["title"], "A long brief", "{args:?}: {out}");
        assert!(
            line.get("body").is_none(),
            "{args:?} lists the body: {line}"
        );
        assert!(line.get("acceptance").is_none(), "{args:?}: {line}");
        assert!(
            out.to_string().len() < 4000,
            "{args:?}: {} bytes",
            out.to_string().len()
        );
    }
    let status = env.orch_json(&["status"], 0);
    assert_eq!(status["waiting"][0]["task_id"], "next");
    assert_eq!(
        status["waiting"][0]["waiting_on"],
        serde_json::json!(["big"])
    );

    let show = env.orch_json(&["task", "show", "big"], 0);
    assert_eq!(show["task"]["body"], body);
    assert_eq!(show["task"]["acceptance"], serde_json::json!(["it builds"]));
}

/// Tasks `t00`..`t49`: each needs the task five before it, and every third
/// also the one three before, so the graph has width and depth. `t07`
/// wants review; its worker asks a question on `t12`.
fn fifty_task_plan() -> String {
    let tasks: Vec<Value> = (0..50)
        .map(|i| {
            let mut needs = Vec::new();
            if i >= 5 {
                needs.push(format!("t{:02}", i - 5));
            }
            if i >= 3 && i % 3 == 0 {
                needs.push(format!("t{:02}", i - 3));
            }
            serde_json::json!({
                "task_id": format!("t{i:02}"),
                "title": format!("Step {i}"),
                "assignee": format!("w{}", i % 3 + 1),
                "needs": needs,
                "review": i == 7,
            })
        })
        .collect();
    serde_json::json!({ "tasks": tasks }).to_string()
}

/// One worker process after another for agent `me`: claim the next thread,
/// ask on t12 and wait for the answer, finish; watch while there is
/// nothing, until told to stop.
fn worker(
    dir: &std::path::Path,
    me: &str,
    stop: &AtomicBool,
    finished: &Mutex<Vec<(String, String)>>,
) {
    let run = |args: &[&str]| ran(dir, inbox_bin(), me, args);
    loop {
        let claim = run(&[
            "claim",
            "--agent",
            me,
            "--next",
            "--lease-seconds",
            "300",
            "--json",
        ]);
        if claim.status == 10 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            run(&["watch", "--agent", me, "--timeout-seconds", "1"]);
            continue;
        }
        assert_eq!(claim.status, 0, "{claim}");
        let claim = claim.json();
        let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
        let token = claim["lease"]["lease_token"].to_string();
        let task = claim["thread"]["task_id"].as_str().unwrap().to_owned();
        let attempt = claim["thread"]["attempts"].as_u64().unwrap();
        let hold = ["--thread", &thread, "--lease-token", &token];
        if task == "t12" {
            let ask = run(&[
                &["update"][..],
                &hold,
                &["--status", "blocked", "--summary", "Which port?"],
            ]
            .concat());
            assert_eq!(ask.status, 0, "{ask}");
            let answer = run(&[
                &["wait-reply"][..],
                &hold,
                &["--timeout-seconds", "60", "--json"],
            ]
            .concat());
            assert_eq!(answer.status, 0, "{answer}");
            assert_eq!(answer.json()["message"]["summary"], "8080");
        }
        let done = run(&[
            &["done"][..],
            &hold,
            &["--summary", &format!("{task} done (attempt {attempt})")],
        ]
        .concat());
        assert_eq!(done.status, 0, "{done}");
        finished.lock().unwrap().push((task, thread));
    }
}

/// The leader: dispatch, then sleep in `orch wait` and act on what needs it
/// until the run ends. Returns the run as the last wait saw it.
fn leader(dir: &std::path::Path) -> Value {
    let orch = |args: &[&str]| ran(dir, orch_bin(), "lead", args);
    let mut cursor: Option<String> = None;
    let mut rejected = false;
    let dispatched = orch(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(dispatched.status, 0, "{dispatched}");
    for _ in 0..500 {
        let mut args = vec!["wait", "--timeout-seconds", "60", "--json"];
        if let Some(c) = &cursor {
            args.extend(["--after-event", c.as_str()]);
        }
        let woke = orch(&args);
        assert_eq!(woke.status, 0, "the leader's wait timed out: {woke}");
        let woke = woke.json();
        cursor = Some(woke["next_event_id"].to_string());
        if woke["run"]["status"] != "active" {
            return woke["run"].clone();
        }
        for task in woke["actionable"].as_array().unwrap() {
            let id = task["task_id"].as_str().unwrap();
            let out = match task["status"].as_str().unwrap() {
                "ready" => orch(&["dispatch", "--all-ready", "--json"]),
                "blocked" => orch(&["answer", id, "--summary", "8080", "--json"]),
                "review" if !rejected => {
                    rejected = true;
                    orch(&["reject", id, "--reason", "Add tests", "--json"])
                }
                "review" => orch(&["accept", id, "--json"]),
                other => panic!("task {id} is {other}: {task}"),
            };
            // A task listed twice (ready tasks all go at once) is refused
            // the second time; anything else must succeed.
            assert!(matches!(out.status, 0 | 10 | 30), "{out}");
        }
    }
    panic!("the run did not end after 500 waits");
}

#[test]
fn a_leader_and_three_workers_drain_a_fifty_task_graph() {
    let env = TestEnv::initialized();
    std::fs::write(env.dir().join("plan.json"), fifty_task_plan()).unwrap();
    env.orch_json(
        &[
            "--agent",
            "lead",
            "run",
            "create",
            "--goal",
            "Fifty steps",
            "--id",
            "fifty",
        ],
        0,
    );
    let plan = env.orch_json(&["--agent", "lead", "plan", "--file", "plan.json"], 0);
    assert_eq!(plan["tasks"].as_array().unwrap().len(), 50);

    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(Mutex::new(Vec::new()));
    let dir = env.dir().to_path_buf();
    let run = std::thread::scope(|scope| {
        for me in ["w1", "w2", "w3"] {
            let (dir, stop, finished) = (&dir, &stop, &finished);
            scope.spawn(move || worker(dir, me, stop, finished));
        }
        let run = leader(&dir);
        stop.store(true, Ordering::SeqCst);
        run
    });

    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["counts"]["done"], 50, "{run}");
    let finished = finished.lock().unwrap();
    let threads: BTreeSet<&String> = finished.iter().map(|(_, thread)| thread).collect();
    assert_eq!(threads.len(), finished.len(), "a thread was finished twice");
    let mut per_task: BTreeMap<&str, usize> = BTreeMap::new();
    for (task, _) in finished.iter() {
        *per_task.entry(task).or_default() += 1;
    }
    assert_eq!(per_task.len(), 50);
    // Only the rejected task was worked twice; every task is done once.
    for (task, times) in &per_task {
        let expected = if *task == "t07" { 2 } else { 1 };
        assert_eq!(*times, expected, "{task} was finished {times} times");
        let show = env.orch_json(&["task", "show", task], 0);
        assert_eq!(show["task"]["status"], "done", "{show}");
        let succeeded = show["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["status"] == "succeeded")
            .count();
        assert_eq!(succeeded, 1, "{show}");
    }
}

/// A bad plan file, or bad arguments, get a clear error with the right exit
/// code and the JSON error shape, and change nothing.
#[test]
fn bad_plans_and_arguments_are_refused_and_change_nothing() {
    let env = TestEnv::initialized();
    env.orch_json(
        &[
            "--agent", "lead", "run", "create", "--goal", "G", "--id", "r",
        ],
        0,
    );
    let write = |name: &str, text: &str| std::fs::write(env.dir().join(name), text).unwrap();
    write("broken.json", "{\"tasks\": [");
    write(
        "field.json",
        r#"[{"task_id": "a", "titel": "A", "assignee": "w"}]"#,
    );
    write("shape.json", r#"{"task": []}"#);
    write(
        "deep.json",
        r#"[{"task_id": "a", "title": "A", "assignee": "w"}, {"task_id": "b", "title": "B", "assignee": "w", "needs": ["a", 5]}]"#,
    );
    write(
        "cycle.json",
        r#"[{"task_id": "a", "title": "A", "assignee": "w", "needs": ["b"]}, {"task_id": "b", "title": "B", "assignee": "w", "needs": ["a"]}]"#,
    );
    let cases: [(&[&str], i32, &str, &str); 9] = [
        (
            &["plan", "--file", "/dev/zero"],
            30,
            "too_long",
            "more than 67108864 bytes",
        ),
        (
            &["plan", "--file", "broken.json"],
            30,
            "invalid_request",
            "broken.json: not valid JSON: EOF while parsing",
        ),
        (
            &["plan", "--file", "field.json"],
            30,
            "invalid_request",
            "tasks[0]: unknown field `titel`",
        ),
        (
            &["plan", "--file", "deep.json"],
            30,
            "invalid_request",
            "deep.json: tasks[1].needs[1]: invalid type: number, expected a string",
        ),
        (
            &["plan", "--file", "shape.json"],
            30,
            "invalid_request",
            "a plan is {\"tasks\": [...]} or an array of tasks",
        ),
        (
            &["plan", "--file", "cycle.json"],
            30,
            "dependency_cycle",
            "a needs b needs a",
        ),
        (&["plan"], 30, "missing_field", "orch plan --file plan.json"),
        (
            &["wait", "--timeout-seconds", "-1"],
            30,
            "invalid_request",
            "invalid value '-1'",
        ),
        (&["dispatch"], 30, "missing_field", "--all-ready"),
    ];
    for (args, exit, code, message) in cases {
        let out = env.orch_json(&[&["--agent", "lead"][..], args].concat(), exit);
        assert_eq!(out["ok"], false, "{out}");
        assert_eq!(out["error"]["code"], code, "{args:?}: {out}");
        let text = out["error"]["message"].as_str().unwrap();
        assert!(text.contains(message), "{args:?}: {text}");
    }
    let status = env.orch_json(&["status"], 0);
    assert_eq!(
        status["run"]["tasks_added"], 0,
        "a refused plan added tasks: {status}"
    );
    let unused = env.orch(&["--agent", "lead", "frobnicate", "--json"]);
    assert_eq!(unused.status, 30, "{unused}");
}

#[test]
fn orch_skill_prints_and_installs_the_leaders_skill() {
    let env = TestEnv::new();
    let printed = env.orch(&["skill"]);
    assert_eq!(printed.status, 0, "{printed}");
    assert!(printed.stdout.starts_with("---\nname: orch\n"), "{printed}");
    let json = env.orch_json(&["skill"], 0);
    assert_eq!(json["command"], "orch-skill");
    assert!(json["skill"].as_str().unwrap().contains("orch wait"));
    let installed = env.orch_json(&["skill", "--install", "skills"], 0);
    let path = env.dir().join("skills/orch/SKILL.md");
    assert_eq!(installed["installed"], path.display().to_string());
    assert_eq!(std::fs::read_to_string(path).unwrap(), printed.raw_stdout);
}

/// `git ARGS` in `dir`, which must succeed; its stdout.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Tester", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A run with a repository, end to end with the real `git` and real
/// processes: each attempt gets its own worktree and branch, the worker is
/// told where, a worker's commits stay on its branch, uncommitted work is
/// saved on a ref when the attempt ends, and `orch worktree list` and `gc`
/// say and do exactly that.
#[test]
fn a_run_with_a_repository_gives_each_attempt_a_worktree() {
    let env = TestEnv::initialized();
    let repo = env.dir().join("project");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    let created = lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project", "--json",
    ]);
    assert_eq!(created.status, 0, "{created}");
    let spec = &created.json()["run"]["repo"];
    assert_eq!(spec["repo"], repo.display().to_string());
    assert_eq!(
        spec["worktrees"],
        repo.join(".agents/worktrees").display().to_string()
    );
    for (task, who) in [("api", "w1"), ("ui", "w2")] {
        let added = lead(&[
            "task",
            "add",
            "--task",
            task,
            "--title",
            task,
            "--assignee",
            who,
        ]);
        assert_eq!(added.status, 0, "{added}");
    }
    let dispatched = lead(&["dispatch", "--all-ready"]);
    assert_eq!(dispatched.status, 0, "{dispatched}");
    assert!(dispatched.stdout.contains("worktree "), "{dispatched}");
    assert!(
        dispatched.stdout.contains("branch orch/web/api/1"),
        "{dispatched}"
    );

    // w1 claims, finds its worktree in the task's payload, commits there.
    let claim = ran(env.dir(), inbox_bin(), "w1", &["claim", "--next", "--json"]).json();
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let shown = ran(
        env.dir(),
        inbox_bin(),
        "w1",
        &["show", "--thread", &thread, "--json"],
    )
    .json();
    let api = std::path::PathBuf::from(
        shown["messages"][0]["payload"]["worktree"]["path"]
            .as_str()
            .unwrap(),
    );
    std::fs::write(api.join("api.rs"), "fn login() {}\n").unwrap();
    git(&api, &["add", "api.rs"]);
    git(&api, &["commit", "-q", "-m", "login"]);
    let done = ran(
        env.dir(),
        inbox_bin(),
        "w1",
        &["done", "--thread", &thread, "--summary", "ok"],
    );
    assert_eq!(done.status, 0, "{done}");

    // w2 leaves an untracked file and gives up.
    let claim = ran(env.dir(), inbox_bin(), "w2", &["claim", "--next", "--json"]).json();
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let ui = repo.join(".agents/worktrees/web/ui/1");
    std::fs::write(ui.join("draft.txt"), "half\n").unwrap();
    let failed = ran(
        env.dir(),
        inbox_bin(),
        "w2",
        &["fail", "--thread", &thread, "--summary", "stuck"],
    );
    assert_eq!(failed.status, 0, "{failed}");

    // Before any orch write, the list shows the truth untidied: api's
    // worktree clean with a commit, ui's with uncommitted work.
    let states = |listed: &Ran| -> Vec<(String, String)> {
        listed.json()["worktrees"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["task_id"].as_str().unwrap().to_owned(),
                    w["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let listed = lead(&["worktree", "list", "--json"]);
    assert_eq!(listed.status, 0, "{listed}");
    let pair = |t: &str, s: &str| (t.to_owned(), s.to_owned());
    assert_eq!(
        states(&listed),
        [pair("api", "commits"), pair("ui", "uncommitted")]
    );
    let plain = lead(&["worktree", "list"]);
    assert!(plain.stdout.contains("web/ui #1  uncommitted"), "{plain}");
    let dry = lead(&["worktree", "gc", "--dry-run"]);
    assert!(
        dry.stdout
            .starts_with("Would remove 1 worktree, would save the work of 1 worktree"),
        "{dry}"
    );
    assert!(api.exists());
    // gc records both ends and tidies: api's clean worktree goes (its
    // branch stays), ui's work is saved on a ref and the folder stays.
    let gc = lead(&["worktree", "gc"]);
    assert_eq!(gc.status, 0, "{gc}");
    assert!(
        gc.stdout
            .starts_with("Removed 1 worktree, saved the work of 1 worktree"),
        "{gc}"
    );
    assert!(!api.exists() && ui.join("draft.txt").exists());
    assert_eq!(
        git(&repo, &["show", "orch/web/api/1:api.rs"]),
        "fn login() {}"
    );
    assert_eq!(
        git(&repo, &["show", "refs/orch/wip/web/ui/1:draft.txt"]),
        "half"
    );
    let listed = lead(&["worktree", "list", "--json"]);
    assert_eq!(
        states(&listed),
        [pair("api", "removed"), pair("ui", "saved")]
    );
    // The leader's checkout never sees the worktrees.
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

/// Each line of a skill that runs `inbox` or `orch` must be a real command
/// with real flags: every flag it uses is in that command's `--help`.
fn assert_skill_commands_are_real(env: &TestEnv, skill: &str) {
    let mut checked = 0;
    for line in skill.lines().map(str::trim_start) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (binary, rest) = match words.first() {
            Some(&"inbox") => (inbox_bin(), &words[1..]),
            Some(&"orch") => (orch_bin(), &words[1..]),
            _ => continue,
        };
        let command: Vec<&str> = rest
            .iter()
            .take_while(|w| !w.starts_with('-'))
            .copied()
            .collect();
        let mut args = command.clone();
        args.push("--help");
        let help = ran(env.dir(), binary, "lead", &args);
        assert_eq!(
            help.status, 0,
            "the skill uses an unknown command: {line}\n{help}"
        );
        for flag in rest.iter().filter(|w| w.starts_with("--")) {
            assert!(
                help.stdout.contains(flag),
                "the skill uses `{flag}`, which `{command:?}` lacks: {line}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 4, "the skill shows only {checked} commands");
}

#[test]
fn orch_skill_council_review_teaches_reviewers_with_real_commands() {
    let env = TestEnv::new();
    let printed = env.orch(&["skill", "council-review"]);
    assert_eq!(printed.status, 0, "{printed}");
    assert!(
        printed.stdout.starts_with("---\nname: council-review\n"),
        "{printed}"
    );
    for needle in [
        "\"council_review\": 1",
        "\"council_ballot\": 1",
        "invalid_answer",
        "blocker",
    ] {
        assert!(printed.stdout.contains(needle), "the skill lacks {needle}");
    }
    assert_skill_commands_are_real(&env, &printed.raw_stdout);
    let installed = env.orch_json(&["skill", "council-review", "--install", "skills"], 0);
    let path = env.dir().join("skills/council-review/SKILL.md");
    assert_eq!(installed["installed"], path.display().to_string());
    assert_eq!(std::fs::read_to_string(path).unwrap(), printed.raw_stdout);
    // The leader's skill mentions the council, and its commands are real too.
    let leader = env.orch(&["skill"]);
    assert!(leader.stdout.contains("orch council"), "{leader}");
    assert_skill_commands_are_real(&env, &leader.raw_stdout);
}

/// A reviewer's claim, the thread it got, and its first message.
fn claim_seat(env: &TestEnv, reviewer: &str) -> (String, Value) {
    let claim = env.json(&["claim", "--agent", reviewer, "--next"], 0);
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let show = env.json(&["show", "--thread", &thread], 0);
    (thread, show["messages"][0].clone())
}

fn finish_seat(env: &TestEnv, t: &mut String, reviewer: &str, thread: &str, payload: &str) -> i32 {
    let args = [
        "done",
        "--agent",
        reviewer,
        "--thread",
        thread,
        "--summary",
        "answered",
        "--payload-json",
        payload,
    ];
    env.step(t, &args).status
}

/// A council end to end with real processes: the leader starts it, three
/// reviewers answer through `inbox done --payload-json` (one corrects a
/// refused answer), the ballot round votes, `orch wait` wakes on the
/// council's completion, and the report reads well, plain and as JSON.
#[test]
fn a_council_of_three_reviews_votes_and_reports() {
    let env = TestEnv::initialized();
    let mut t = String::new();
    env.orch_json(
        &[
            "--agent",
            "lead",
            "run",
            "create",
            "--goal",
            "Ship login",
            "--id",
            "r",
        ],
        0,
    );
    std::fs::write(
        env.dir().join("change.diff"),
        "--- a/src/login.rs\n+++ b/src/login.rs\n+    failures = 0;\n",
    )
    .unwrap();
    let start = [
        "--agent",
        "lead",
        "council",
        "--id",
        "cr",
        "--title",
        "Review the login API",
        "--revision",
        "3f2c1e0",
        "--file",
        "src/login.rs",
        "--diff-file",
        "change.diff",
        "--reviewer",
        "alice,bob",
        "--reviewer",
        "carol",
        "--ballot",
    ];
    assert_eq!(env.orch_step(&mut t, &start).status, 0, "{t}");

    let reviewers = ["alice", "bob", "carol"];
    let mut threads = Vec::new();
    for (i, reviewer) in reviewers.iter().enumerate() {
        let (thread, first) = claim_seat(&env, reviewer);
        let seat = ["A", "B", "C"][i];
        assert_eq!(first["payload"]["council"]["seat"], seat, "{first}");
        assert_eq!(first["payload"]["subject"]["revision"], "3f2c1e0");
        assert!(
            first["body"].as_str().unwrap().contains("failures = 0"),
            "{first}"
        );
        // Anonymous: nothing a reviewer is sent names another reviewer.
        for other in reviewers.iter().filter(|o| *o != reviewer) {
            assert!(
                !first.to_string().contains(other),
                "{reviewer} was told of {other}: {first}"
            );
        }
        threads.push(thread);
    }
    let wrong = r#"{"council_review": 1, "verdict": "changes", "findings": [{"anchor": {"path": "src/login.rs", "lines": [40, 52]}, "category": "security", "severity": "huge", "claim": "the counter resets"}]}"#;
    assert_eq!(
        finish_seat(&env, &mut t, "alice", &threads[0], wrong),
        30,
        "{t}"
    );
    let refused = env.json(
        &[
            "done",
            "--agent",
            "alice",
            "--thread",
            &threads[0],
            "--summary",
            "x",
            "--payload-json",
            wrong,
        ],
        30,
    );
    assert_eq!(refused["error"]["code"], "invalid_answer");
    let still = env.json(&["show", "--thread", &threads[0]], 0);
    assert_eq!(
        still["thread"]["status"], "claimed",
        "a refused answer changed the thread"
    );
    let answers = [
        r#"{"council_review": 1, "verdict": "changes", "findings": [{"anchor": {"path": "src/login.rs", "lines": [40, 52]}, "category": "security", "severity": "blocker", "claim": "the counter resets on success", "action": "reset after the window", "evidence": "line 47"}]}"#,
        r#"{"council_review": 1, "verdict": "block", "findings": [{"anchor": {"path": "src/login.rs", "lines": [50, 55]}, "category": "security", "severity": "major", "claim": "a success wipes the failures"}, {"anchor": {"topic": "tests"}, "category": "testing", "severity": "minor", "claim": "no lockout test"}]}"#,
        r#"{"council_review": 1, "verdict": "approve", "findings": [{"anchor": {"path": "src/login.rs", "lines": [200, 210]}, "category": "bug", "severity": "minor", "claim": "the error hides the cause"}]}"#,
    ];
    for ((reviewer, thread), answer) in reviewers.iter().zip(&threads).zip(answers) {
        assert_eq!(
            finish_seat(&env, &mut t, reviewer, thread, answer),
            0,
            "{t}"
        );
    }

    // Every seat answered: the ballot tasks are ready and wake the leader.
    let woke = env.orch_json(&["wait", "--timeout-seconds", "5"], 0);
    assert_eq!(woke["actionable"][0]["task_id"], "cr-A-ballot", "{woke}");
    let cursor = woke["next_event_id"].to_string();
    env.orch_json(&["--agent", "lead", "dispatch", "--all-ready"], 0);
    for reviewer in reviewers {
        let (thread, first) = claim_seat(&env, reviewer);
        assert_eq!(
            first["payload"]["groups"].as_array().map(Vec::len),
            Some(3),
            "{first}"
        );
        let vote = if reviewer == "carol" {
            "disagree"
        } else {
            "agree"
        };
        let ballot = format!(
            r#"{{"council_ballot": 1, "votes": [{{"group": "G1", "vote": "{vote}"}}, {{"group": "G2", "vote": "agree"}}, {{"group": "G3", "vote": "agree", "comment": "seen it"}}]}}"#
        );
        assert_eq!(
            finish_seat(&env, &mut t, reviewer, &thread, &ballot),
            0,
            "{t}"
        );
    }
    let done = env.orch_json(
        &["wait", "--after-event", &cursor, "--timeout-seconds", "5"],
        0,
    );
    let types: Vec<&str> = done["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"council_completed"), "{done}");

    env.orch_step(&mut t, &["council", "show"]);
    insta::assert_snapshot!(t);
    let json = env.orch(&["council", "show", "cr", "--json"]);
    assert_eq!(json.status, 0, "{json}");
    let report = json.json();
    assert_eq!(report["council"]["stage"], "complete");
    assert_eq!(report["council"]["groups"][0]["count"], 2);
    assert_eq!(report["council"]["groups"][0]["ballot"]["disagree"], 1);
    insta::assert_snapshot!("a_council_report_as_json", json.stdout);
}

/// Without git on `PATH`, a run with a repository cannot dispatch: the
/// refusal says so and what git it needs (exit 50, `git_unavailable`), and
/// nothing is left behind.
#[test]
fn a_dispatch_without_git_is_refused_and_leaves_nothing() {
    let env = TestEnv::initialized();
    let repo = env.dir().join("project");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    lead(&[
        "task",
        "add",
        "--task",
        "api",
        "--title",
        "api",
        "--assignee",
        "w",
    ]);
    let output = std::process::Command::new(orch_bin())
        .args(["dispatch", "--all-ready", "--json"])
        .current_dir(env.dir())
        .env_remove("INBOX_DB")
        .env_remove("INBOX_NOW")
        .env("INBOX_AGENT", "lead")
        .env("PATH", env.dir().join("no-such-bin"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(50), "{output:?}");
    let refused: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(refused["error"]["code"], "git_unavailable");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("2.17"), "{message}");
    let shown = lead(&["task", "show", "api", "--json"]).json();
    assert_eq!(shown["task"]["status"], "ready");
    assert_eq!(shown["attempts"], serde_json::json!([]));
    assert_eq!(git(&repo, &["branch", "--list", "orch/*"]), "");
}

/// A repository of one commit in `env`'s folder, at `project`.
fn project(env: &TestEnv) -> std::path::PathBuf {
    let repo = env.dir().join("project");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    repo
}

/// One task never blocks a run: an id that could never be a worktree is
/// refused when it is added, and a task whose worktree git refuses waits
/// with the reason while `orch dispatch --all-ready` dispatches the rest.
#[test]
fn one_task_git_refuses_never_holds_back_the_others() {
    let env = TestEnv::initialized();
    let repo = project(&env);
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    let created = lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    assert_eq!(created.status, 0, "{created}");
    // 128 `/`-heavy characters fit an id but not a folder name once encoded.
    let long = format!("a{}", "/".repeat(127));
    let refused = lead(&[
        "task",
        "add",
        "--task",
        &long,
        "--title",
        "t",
        "--assignee",
        "w",
        "--json",
    ]);
    assert_eq!(refused.status, 30, "{refused}");
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "invalid_value");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("382 bytes") && message.contains("255"),
        "{message}"
    );
    let cased = |id: &str| {
        lead(&[
            "task",
            "add",
            "--task",
            id,
            "--title",
            "t",
            "--assignee",
            "w",
        ])
    };
    assert_eq!(cased("api").status, 0);
    let twin = cased("API");
    assert_eq!(twin.status, 30, "{twin}");
    assert!(twin.stderr.contains("error[task_exists]"), "{twin}");
    for id in ["ui", "db"] {
        assert_eq!(cased(id).status, 0);
    }
    // Someone already has the branch ui's first attempt would get.
    git(&repo, &["branch", "orch/web/ui/1"]);
    let dispatched = lead(&["dispatch", "--all-ready"]);
    assert_eq!(dispatched.status, 0, "{dispatched}");
    assert!(
        dispatched.stdout.starts_with("Dispatched 2 tasks:"),
        "{dispatched}"
    );
    assert!(
        dispatched.stdout.contains("Not dispatched: 1 task")
            && dispatched.stdout.contains("ui           worktree_failed:"),
        "{dispatched}"
    );
    let status = lead(&["status"]);
    assert!(
        status
            .stdout
            .contains("why: attempt 1 could not start: could not make the worktree"),
        "{status}"
    );
    // Still refused while the branch is there; the JSON lists it.
    let again = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(again.status, 10, "{again}");
    assert_eq!(again.json()["refused"][0]["task_id"], "ui");
    git(&repo, &["branch", "-D", "orch/web/ui/1"]);
    let last = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(last.status, 0, "{last}");
    assert_eq!(last.json()["dispatched"][0]["task"]["task_id"], "ui");
}

/// A `PATH` whose `git` is the real one, logging the branch of every
/// `git worktree add` orch runs to the file returned: which tasks git was
/// asked to make a worktree for.
fn logging_git(env: &TestEnv) -> (String, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let real_git = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = env.dir().join("logging-bin");
    std::fs::create_dir(&bin).unwrap();
    let log = env.dir().join("worktree-adds");
    // orch runs `git -C DIR -c core.hooksPath=/dev/null worktree add -b BRANCH ...`.
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$5\" = worktree ] && [ \"$6\" = add ]; then echo \"$8\" >>\"{log}\"; fi\n\
         exec \"{git}\" \"$@\"\n",
        log = log.display(),
        git = real_git.trim(),
    );
    std::fs::write(bin.join("git"), script).unwrap();
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    (path, log)
}

/// One task never blocks a run, whatever refuses it: with
/// `--agent-registration required`, a ready task whose assignee has since
/// unregistered is listed under `refused` with `unknown_recipient` while
/// `orch dispatch --all-ready` dispatches the others. git is never asked
/// for its worktree, a refusal found again records nothing new, the task
/// dispatched alone still fails, and once its assignee is back the next
/// dispatch starts it.
#[test]
fn an_assignee_that_left_holds_back_only_its_own_task() {
    let env = TestEnv::initialized();
    let repo = project(&env);
    let (path, log) = logging_git(&env);
    let lead = |args: &[&str]| ran_with(env.dir(), orch_bin(), "lead", args, &[("PATH", &path)]);
    let inbox = |agent: &str, args: &[&str]| {
        let done = ran(env.dir(), inbox_bin(), agent, args);
        assert_eq!(done.status, 0, "{done}");
    };
    for agent in ["lead", "w", "gone"] {
        inbox(agent, &["agent", "register"]);
    }
    inbox("lead", &["settings", "--agent-registration", "required"]);
    let created = lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    assert_eq!(created.status, 0, "{created}");
    for (id, assignee) in [("api", "gone"), ("ui", "w"), ("db", "w")] {
        let added = lead(&[
            "task",
            "add",
            "--task",
            id,
            "--title",
            "t",
            "--assignee",
            assignee,
        ]);
        assert_eq!(added.status, 0, "{added}");
    }
    inbox("gone", &["agent", "unregister"]);

    let first = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(first.status, 0, "{first}");
    let out = first.json();
    let dispatched: Vec<&str> = out["dispatched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["task"]["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(dispatched, ["ui", "db"], "{first}");
    assert_eq!(out["refused"].as_array().unwrap().len(), 1, "{first}");
    assert_eq!(out["refused"][0]["task_id"], "api");
    assert_eq!(out["refused"][0]["code"], "unknown_recipient");
    let message = out["refused"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("task api's assignee") && message.contains("gone"),
        "{message}"
    );
    let shown = lead(&["task", "show", "api", "--json"]).json();
    assert_eq!(shown["task"]["status"], "ready", "{shown:#}");
    let reason = shown["task"]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("attempt 1 could not start"), "{reason}");
    let recorded = shown["task"]["last_event_id"].clone();

    // Found so again: listed (exit 10, nothing dispatched), nothing recorded.
    let again = lead(&["dispatch", "--all-ready"]);
    assert_eq!(again.status, 10, "{again}");
    assert!(
        again.stdout.contains("Not dispatched: 1 task")
            && again.stdout.contains("api          unknown_recipient:"),
        "{again}"
    );
    let shown = lead(&["task", "show", "api", "--json"]).json();
    assert_eq!(shown["task"]["last_event_id"], recorded, "{shown:#}");
    assert_eq!(shown["task"]["reason"], reason.as_str());
    // Alone, it still fails, and changes nothing.
    let alone = lead(&["dispatch", "--task", "api", "--json"]);
    assert_eq!(alone.status, 40, "{alone}");
    assert_eq!(alone.json()["error"]["code"], "unknown_recipient");
    // git was never asked for api's worktree.
    let adds = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        adds, "orch/web/ui/1\norch/web/db/1\n",
        "git worktree add for: {adds}"
    );
    assert_eq!(git(&repo, &["branch", "--list", "orch/web/api/*"]), "");

    // Back in the registry: the next dispatch starts it.
    inbox("gone", &["agent", "register"]);
    let last = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(last.status, 0, "{last}");
    assert_eq!(last.json()["dispatched"][0]["task"]["task_id"], "api");
    assert!(repo.join(".agents/worktrees/web/api/1/README.md").exists());
}

/// More than a hundred refused tasks at the head of the queue never hide
/// the tasks behind them: the dispatch goes through the whole ready queue,
/// dispatches the good task, lists a hundred refusals in full and says how
/// many more there were. A refusal found again records nothing new, and a
/// git refusal is tried again: once its cause is gone, the task starts.
#[test]
fn more_than_a_hundred_refused_tasks_never_hide_a_good_one() {
    let env = TestEnv::initialized();
    let repo = project(&env);
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    let created = lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    assert_eq!(created.status, 0, "{created}");
    let ids: Vec<String> = (0..105).map(|i| format!("t{i:03}")).collect();
    let mut tasks: Vec<Value> = ids
        .iter()
        .map(|id| serde_json::json!({"task_id": id, "title": "t", "assignee": "w"}))
        .collect();
    tasks.push(serde_json::json!({"task_id": "good", "title": "t", "assignee": "w"}));
    let plan = env.dir().join("plan.json");
    std::fs::write(&plan, serde_json::json!({ "tasks": tasks }).to_string()).unwrap();
    let planned = lead(&["plan", "--file", plan.to_str().unwrap()]);
    assert_eq!(planned.status, 0, "{planned}");
    // Someone already has the branch of each first attempt but good's.
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let refs: String = ids
        .iter()
        .map(|id| format!("create refs/heads/orch/web/{id}/1 {head}\n"))
        .collect();
    let mut update = std::process::Command::new("git")
        .args(["-C", repo.to_str().unwrap(), "update-ref", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    update
        .stdin
        .take()
        .unwrap()
        .write_all(refs.as_bytes())
        .unwrap();
    assert!(update.wait().unwrap().success());

    let first = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(first.status, 0, "{first}");
    let out = first.json();
    assert_eq!(out["dispatched"].as_array().unwrap().len(), 1, "{out:#}");
    assert_eq!(out["dispatched"][0]["task"]["task_id"], "good");
    let refused = out["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 100);
    assert_eq!(out["refused_more"], 5, "{out:#}");
    assert_eq!(refused[0]["task_id"], "t000");
    assert_eq!(refused[99]["task_id"], "t099");
    assert!(refused.iter().all(|r| r["code"] == "worktree_failed"));
    // Every refused task waits, ready, with its reason.
    let t104 = lead(&["task", "show", "t104", "--json"]).json();
    assert_eq!(t104["task"]["status"], "ready");
    assert!(
        t104["task"]["reason"]
            .as_str()
            .unwrap()
            .contains("orch/web/t104/1"),
        "{t104:#}"
    );

    // Again: the same refusals, nothing recorded (no event), and the text
    // says how many were not listed.
    let again = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(again.status, 10, "{again}");
    assert_eq!(again.json()["event_id"], 0, "{again}");
    assert_eq!(again.json()["refused_more"], 5);
    let text = lead(&["dispatch", "--all-ready"]);
    assert_eq!(text.status, 10, "{text}");
    assert!(
        text.stdout
            .starts_with("Dispatched nothing.\nNot dispatched: 105 tasks")
            && text
                .stdout
                .contains("... and 5 more refused, not listed here"),
        "{text}"
    );
    // A git refusal is tried again: once the branch is gone, it starts.
    git(&repo, &["branch", "-D", "orch/web/t104/1"]);
    let last = lead(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(last.status, 0, "{last}");
    assert_eq!(last.json()["dispatched"][0]["task"]["task_id"], "t104");
    assert_eq!(last.json()["refused_more"], 4);
}

/// A run holds at most 10000 tasks (what bounds a dispatch's walk through
/// the ready queue): one more is refused, naming the bound, and nothing is
/// added.
#[test]
fn a_run_holds_at_most_ten_thousand_tasks() {
    let env = TestEnv::initialized();
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    lead(&["run", "create", "--goal", "g", "--id", "big"]);
    let tasks: Vec<Value> = (0..10_000)
        .map(|i| serde_json::json!({"task_id": format!("t{i}"), "title": "t", "assignee": "w"}))
        .collect();
    let plan = env.dir().join("plan.json");
    std::fs::write(&plan, serde_json::json!({ "tasks": tasks }).to_string()).unwrap();
    let planned = lead(&["plan", "--file", plan.to_str().unwrap()]);
    assert_eq!(planned.status, 0, "{planned}");
    let one_more = lead(&[
        "task",
        "add",
        "--task",
        "extra",
        "--title",
        "t",
        "--assignee",
        "w",
        "--json",
    ]);
    assert_eq!(one_more.status, 30, "{one_more}");
    let error = &one_more.json()["error"];
    assert_eq!(error["code"], "invalid_value");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already holds 10000 tasks"),
        "{one_more}"
    );
    let status = lead(&["status", "--json"]).json();
    assert_eq!(status["run"]["tasks_added"], 10_000);
}

/// orch never writes outside the repository through a link: a repository
/// that commits `.agents` as a symbolic link gets no worktree and no
/// `.gitignore` where the link points, and the refusal names the link.
#[test]
fn a_repository_s_agents_link_is_never_followed() {
    let env = TestEnv::initialized();
    let repo = project(&env);
    let outside = env.dir().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, repo.join(".agents")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "agents"]);
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    lead(&[
        "task",
        "add",
        "--task",
        "api",
        "--title",
        "t",
        "--assignee",
        "w",
    ]);
    let alone = lead(&["dispatch", "--task", "api", "--json"]);
    assert_eq!(alone.status, 30, "{alone}");
    let error = &alone.json()["error"];
    assert_eq!(error["code"], "worktree_failed");
    let link = repo.join(".agents").display().to_string();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{link} is a symbolic link")),
        "{alone}"
    );
    let all = lead(&["dispatch", "--all-ready"]);
    assert!(all.stdout.contains("Not dispatched: 1 task"), "{all}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(git(&repo, &["branch", "--list", "orch/*"]), "");
    // Named explicitly, the same folder is the leader's choice.
    let named = repo.join(".agents/worktrees").display().to_string();
    let created = lead(&[
        "run",
        "create",
        "--goal",
        "g",
        "--id",
        "named",
        "--repo",
        "project",
        "--worktrees",
        &named,
    ]);
    assert_eq!(created.status, 0, "{created}");
    lead(&[
        "task",
        "add",
        "--run",
        "named",
        "--task",
        "api",
        "--title",
        "t",
        "--assignee",
        "w",
    ]);
    let ok = lead(&["dispatch", "--run", "named", "--all-ready"]);
    assert_eq!(ok.status, 0, "{ok}");
    assert!(outside.join("worktrees/named/api/1/README.md").exists());
}

/// orch names the cause: a task skipped two or more steps below a failed
/// task names that task, and `orch retry` of it says which task to retry.
#[test]
fn a_skipped_task_names_the_task_that_failed_and_the_one_to_retry() {
    let env = TestEnv::initialized();
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    lead(&["run", "create", "--goal", "g", "--id", "chain"]);
    lead(&[
        "task",
        "add",
        "--task",
        "root",
        "--title",
        "t",
        "--assignee",
        "w",
        "--max-attempts",
        "1",
    ]);
    lead(&[
        "task",
        "add",
        "--task",
        "mid",
        "--title",
        "t",
        "--assignee",
        "w",
        "--needs",
        "root",
    ]);
    lead(&[
        "task",
        "add",
        "--task",
        "leaf",
        "--title",
        "t",
        "--assignee",
        "w",
        "--needs",
        "mid",
    ]);
    let waited = lead(&["wait", "--json"]).json();
    let cursor = waited["next_event_id"].to_string();
    lead(&["dispatch", "--all-ready"]);
    let claim = ran(env.dir(), inbox_bin(), "w", &["claim", "--next", "--json"]).json();
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let failed = ran(
        env.dir(),
        inbox_bin(),
        "w",
        &["fail", "--thread", &thread, "--summary", "broke"],
    );
    assert_eq!(failed.status, 0, "{failed}");
    let shown = lead(&["task", "show", "leaf", "--json"]).json();
    assert_eq!(shown["task"]["status"], "skipped");
    assert_eq!(shown["task"]["skipped_by"], "root");
    let woke = lead(&["wait", "--after-event", &cursor]);
    assert!(
        woke.stdout
            .contains("leaf: skipped, needs mid, which is skipped because root failed"),
        "{woke}"
    );
    let retry = lead(&["retry", "leaf"]);
    assert_eq!(retry.status, 30, "{retry}");
    assert!(retry.stderr.contains("error[task_not_failed]"), "{retry}");
    assert!(
        retry.stderr.contains("`orch retry root` brings leaf back"),
        "{retry}"
    );
    let retried = lead(&["retry", "root"]);
    assert_eq!(retried.status, 0, "{retried}");
    let shown = lead(&["task", "show", "leaf", "--json"]).json();
    assert_eq!(shown["task"]["status"], "pending");
}

/// `orch dispatch` runs git while no transaction holds the database: a
/// `git` that, while making a worktree, has another process write to the
/// same database sees that write go through at once, not wait out the
/// writer's lock (10 s, then `storage_busy`).
#[test]
fn dispatch_runs_git_while_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::initialized();
    project(&env);
    let real_git = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = env.dir().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let probe = env.dir().join("probe");
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$5\" = worktree ] && [ \"$6\" = add ]; then\n\
           \"{inbox}\" send --from probe --to someone --subject 'during git' >/dev/null 2>>\"{probe}.err\"\n\
           echo $? >>\"{probe}\"\n\
         fi\n\
         exec \"{git}\" \"$@\"\n",
        inbox = inbox_bin(),
        probe = probe.display(),
        git = real_git.trim(),
    );
    std::fs::write(bin.join("git"), script).unwrap();
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
    lead(&[
        "run", "create", "--goal", "g", "--id", "web", "--repo", "project",
    ]);
    for id in ["api", "ui"] {
        lead(&[
            "task",
            "add",
            "--task",
            id,
            "--title",
            "t",
            "--assignee",
            "w",
            "--max-attempts",
            "2",
            "--backoff-seconds",
            "0",
        ]);
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let with_probe = |args: &[&str]| {
        std::process::Command::new(orch_bin())
            .args(args)
            .current_dir(env.dir())
            .env_remove("INBOX_DB")
            .env_remove("INBOX_NOW")
            .env("INBOX_AGENT", "lead")
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let output = with_probe(&["dispatch", "--all-ready", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let dispatched: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(dispatched["dispatched"].as_array().unwrap().len(), 2);
    // A failed attempt's retry, started by the leader's `orch wait`.
    let claim = ran(env.dir(), inbox_bin(), "w", &["claim", "--next", "--json"]).json();
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let failed = ran(
        env.dir(),
        inbox_bin(),
        "w",
        &["fail", "--thread", &thread, "--summary", "x"],
    );
    assert_eq!(failed.status, 0, "{failed}");
    let cursor = dispatched["event_id"].to_string();
    let waited = with_probe(&["wait", "--after-event", &cursor, "--json"]);
    assert_eq!(waited.status.code(), Some(0), "{waited:?}");
    let task = claim["thread"]["task_id"].as_str().unwrap().to_owned();
    let shown = lead(&["task", "show", &task, "--json"]).json();
    assert_eq!(shown["task"]["attempts"], 2, "{shown:#}");
    let probed = std::fs::read_to_string(&probe).unwrap();
    let errors = std::fs::read_to_string(probe.with_extension("err")).unwrap_or_default();
    assert_eq!(
        probed, "0\n0\n0\n",
        "the writes during git: {probed}{errors}"
    );
}

#[test]
fn orch_reads_and_waits_take_no_write_lock_unless_they_have_something_to_record() {
    let env = TestEnv::initialized();
    fn lead<'a>(args: &[&'a str]) -> Vec<&'a str> {
        [&["--agent", "lead"][..], args].concat()
    }
    env.orch_json(&lead(&["run", "create", "--goal", "Locks", "--id", "r"]), 0);
    env.orch_json(
        &lead(&[
            "task",
            "add",
            "--task",
            "a",
            "--title",
            "A",
            "--assignee",
            "w",
        ]),
        0,
    );
    env.orch_json(
        &lead(&[
            "task",
            "add",
            "--task",
            "b",
            "--title",
            "B",
            "--assignee",
            "w",
        ]),
        0,
    );
    env.orch_json(&lead(&["dispatch", "--task", "a"]), 0);
    let claim = env.json(&["claim", "--agent", "w", "--next"], 0);
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    env.json(
        &[
            "done",
            "--agent",
            "w",
            "--thread",
            &thread,
            "--summary",
            "ok",
        ],
        0,
    );
    // The worker's `done` is not yet recorded in the run: the first read
    // records it, in one short write, and says so.
    let first = env.orch_json(&["status"], 0);
    assert_eq!(first["run"]["counts"]["done"], 1, "{first}");

    // Another process holds SQLite's write lock: a write would wait out its
    // 10 s budget and fail with storage_busy. Reads with nothing left to
    // record, and a wait's looks, answer from a read transaction.
    let holder = rusqlite::Connection::open(env.db()).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let status = env.orch_json(&["status"], 0);
    assert_eq!(status["run"]["counts"]["done"], 1, "{status}");
    let ready = env.orch_json(&["ready"], 0);
    assert_eq!(ready["tasks"][0]["task_id"], "b", "{ready}");
    let shown = env.orch_json(&["task", "show", "a"], 0);
    assert_eq!(shown["task"]["status"], "done", "{shown}");
    env.orch_json(&["worktree", "list"], 0);
    // `b` is ready: a wait without a cursor wakes at once; one after it
    // looks again and again for a second, and times out (exit 10).
    let woke = env.orch_json(&["wait", "--timeout-seconds", "5"], 0);
    assert_eq!(woke["woke"], true, "{woke}");
    let next = woke["next_event_id"].to_string();
    let waited = env.orch_json(
        &["wait", "--after-event", &next, "--timeout-seconds", "1"],
        10,
    );
    assert_eq!(waited["woke"], false, "{waited}");
    let refused = env.orch_json(&lead(&["dispatch", "--task", "b"]), 50);
    assert_eq!(refused["error"]["code"], "storage_busy", "{refused}");
    holder.execute_batch("ROLLBACK").unwrap();
}

/// `orch dispatch` killed at each of its steps (the attempt reserved, git's
/// worktree made, an unused worktree discarded) leaves only what the next
/// command finishes or undoes: `orch worktree list` names the reservation,
/// the next dispatch (or `orch worktree gc`) undoes it at once since its
/// process has ended, and the task is dispatched once, with one worktree
/// and one branch; no attempt without its worktree, no worktree or branch
/// without its attempt.
#[test]
fn a_dispatcher_killed_at_any_step_leaves_nothing_half_made() {
    for (step, cancel_first) in [
        ("reserved", false),
        ("made", false),
        ("made,discarded", true),
    ] {
        let env = TestEnv::initialized();
        let repo = project(&env);
        let lead = |args: &[&str]| ran(env.dir(), orch_bin(), "lead", args);
        let created = lead(&[
            "run", "create", "--goal", "g", "--id", "r", "--repo", "project",
        ]);
        assert_eq!(created.status, 0, "{created}");
        for id in ["a", "b"] {
            let added = lead(&[
                "task",
                "add",
                "--task",
                id,
                "--title",
                "t",
                "--assignee",
                "w",
            ]);
            assert_eq!(added.status, 0, "{added}");
        }
        let mut dispatcher = std::process::Command::new(orch_bin())
            .args(["dispatch", "--task", "a", "--json"])
            .current_dir(env.dir())
            .env_remove("INBOX_DB")
            .env_remove("INBOX_NOW")
            .env("INBOX_AGENT", "lead")
            .env("INBOX_TEST_DISPATCH_STALL", step)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = dispatcher.id();
        wait_stopped(pid);
        if cancel_first {
            // The task changes while git works: the dispatch cannot take
            // its worktree, and is killed as it undoes it.
            let cancelled = lead(&["cancel", "a"]);
            assert_eq!(cancelled.status, 0, "{cancelled}");
            signal(pid, "CONT");
            wait_stopped(pid);
        }
        dispatcher.kill().unwrap();
        dispatcher.wait().unwrap();

        let listed = lead(&["worktree", "list", "--json"]).json();
        let worktrees = listed["worktrees"].as_array().unwrap();
        assert_eq!(worktrees.len(), 1, "{step}: {listed:#}");
        assert_eq!(worktrees[0]["state"], "reserved", "{step}: {listed:#}");
        assert_eq!(worktrees[0]["attempt_status"], "reserved");
        assert_eq!(worktrees[0]["task_id"], "a");
        let status = lead(&["status", "--json"]).json();
        assert_eq!(
            status["run"]["counts"]["dispatched"], 0,
            "{step}: {status:#}"
        );

        // The next command that makes worktrees undoes it, then does its own.
        let next = match cancel_first {
            false => lead(&["dispatch", "--all-ready", "--json"]),
            true => lead(&["worktree", "gc", "--json"]),
        };
        assert_eq!(next.status, 0, "{step}: {next}");
        let listed = lead(&["worktree", "list", "--json"]).json();
        let states: Vec<(String, String)> = listed["worktrees"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["task_id"].as_str().unwrap().into(),
                    w["state"].as_str().unwrap().into(),
                )
            })
            .collect();
        let branches = git(
            &repo,
            &["branch", "--list", "orch/*", "--format=%(refname:short)"],
        );
        let git_worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
        let folders: Vec<String> = std::fs::read_dir(repo.join(".agents/worktrees/r"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if cancel_first {
            assert!(states.is_empty(), "{step}: {listed:#}");
            assert_eq!(branches.trim(), "", "{step}");
            assert_eq!(
                git_worktrees.matches("worktree ").count(),
                1,
                "{step}: {git_worktrees}"
            );
            assert!(folders.is_empty(), "{step}: {folders:?}");
        } else {
            let dispatched = next.json();
            assert_eq!(
                dispatched["dispatched"].as_array().unwrap().len(),
                2,
                "{step}: {dispatched:#}"
            );
            let live = [("a".into(), "live".into()), ("b".into(), "live".into())];
            assert_eq!(states, live, "{step}: {listed:#}");
            assert_eq!(branches.trim(), "orch/r/a/1\norch/r/b/1", "{step}");
            assert_eq!(
                git_worktrees.matches("worktree ").count(),
                3,
                "{step}: {git_worktrees}"
            );
            assert_eq!(folders.len(), 2, "{step}: {folders:?}");
            let shown = lead(&["task", "show", "a", "--json"]).json();
            assert_eq!(shown["task"]["attempts"], 1, "{step}: {shown:#}");
        }
    }
}

/// Waits until process `pid` is stopped (SIGSTOP at a stall point).
fn wait_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.split_whitespace().next());
        if state == Some("T") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never stopped: {stat}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends `signal` (a name `kill` knows) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
