//! orch's git worktrees with the real git, on real repositories made in
//! temporary folders, through the engine over a SQLite file as the `orch`
//! command line runs it: each attempt works in a worktree of its own, made
//! at dispatch; work is never lost when an attempt ends; a dispatch git
//! refuses leaves no thread, no attempt, no folder and no branch behind,
//! and holds back only its own task; no folder on the way to a worktree is
//! ever reached through a symbolic link the leader did not name.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use inbox_engine::{Engine, ManualClock, SequentialIds, Store};
use inbox_git::GitWorkspace;
use inbox_sqlite::{SqliteStore, open_or_create};
use serde_json::{Value, json};

type TestEngine = Engine<SqliteStore, ManualClock, SequentialIds>;

/// A folder with a git repository of one commit on `main`, and a database.
struct Setup {
    dir: tempfile::TempDir,
    engine: TestEngine,
}

/// `git ARGS` in `dir`, which must succeed; its stdout, trimmed.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=Tester", "-c", "user.email=t@example.com"])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "hello\n").unwrap();
        // Like a project using inbox: its database folder is not tracked.
        std::fs::write(repo.join(".gitignore"), ".agents/\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        let mut store = open_or_create(&dir.path().join("coord.db")).unwrap();
        store.initialize().unwrap();
        let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
        let engine = Engine::new(store, clock, SequentialIds::new())
            .with_workspace(Box::new(GitWorkspace::new()));
        Setup { dir, engine }
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Runs one request; its JSON response, which must have the exit code.
    fn run(&mut self, request: Value, exit: u8) -> Value {
        let response = self.engine.execute_json(&request.to_string());
        let json: Value = serde_json::from_str(&response.to_json()).unwrap();
        assert_eq!(response.exit_code(), exit, "{request}\n{json:#}");
        json
    }

    /// A run over the repository with `tasks`, as the leader `lead`.
    fn run_with(&mut self, extra: Value, tasks: Value) {
        let mut create = json!({
            "command": "orch-run-create", "agent": "lead", "run_id": "r", "goal": "Ship",
            "repo": self.repo().display().to_string(),
        });
        for (key, value) in extra.as_object().unwrap() {
            create[key] = value.clone();
        }
        self.run(create, 0);
        self.run(
            json!({"command": "orch-plan", "agent": "lead", "tasks": tasks}),
            0,
        );
    }

    fn dispatch_all(&mut self, exit: u8) -> Value {
        self.run(
            json!({"command": "orch-dispatch", "agent": "lead", "all_ready": true}),
            exit,
        )
    }

    /// The worktree of a task's current attempt.
    fn worktree(&mut self, task: &str) -> Value {
        let shown = self.run(json!({"command": "orch-task-show", "task_id": task}), 0);
        shown["attempts"].as_array().unwrap().last().unwrap()["worktree"].clone()
    }

    fn thread(&mut self, task: &str) -> String {
        let shown = self.run(json!({"command": "orch-task-show", "task_id": task}), 0);
        shown["task"]["thread_id"].as_str().unwrap().to_owned()
    }

    fn claim(&mut self, thread: &str) {
        self.run(
            json!({"command": "claim", "agent": "w", "thread_id": thread}),
            0,
        );
    }

    fn finish(&mut self, thread: &str, command: &str) {
        self.run(
            json!({"command": command, "agent": "w", "thread_id": thread, "summary": "ok"}),
            0,
        );
    }

    fn branches(&self) -> Vec<String> {
        let list = git(
            &self.repo(),
            &["branch", "--list", "orch/*", "--format=%(refname:short)"],
        );
        list.lines().map(str::to_owned).collect()
    }

    fn states(&mut self) -> Vec<(String, String)> {
        let listed = self.run(json!({"command": "orch-worktree-list"}), 0);
        listed["worktrees"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                let name = format!("{}#{}", w["task_id"].as_str().unwrap(), w["attempt"]);
                (name, w["state"].as_str().unwrap().to_owned())
            })
            .collect()
    }

    /// Nothing of a refused dispatch is left: the task is ready with no
    /// attempt, no thread exists, no orch branch or worktree folder.
    fn nothing_left(&mut self, task: &str) {
        let shown = self.run(json!({"command": "orch-task-show", "task_id": task}), 0);
        assert_eq!(shown["task"]["status"], "ready", "{shown:#}");
        assert_eq!(shown["attempts"], json!([]), "{shown:#}");
        let threads = self.run(json!({"command": "list"}), 0);
        assert_eq!(threads["threads"], json!([]));
        assert_eq!(self.branches(), Vec::<String>::new());
        let worktrees = self.repo().join(".agents/worktrees/r");
        assert!(!worktrees.join(task).exists(), "{}", worktrees.display());
    }
}

fn task(id: &str, extra: Value) -> Value {
    let mut task = json!({"task_id": id, "title": format!("Do {id}"), "assignee": "w"});
    for (key, value) in extra.as_object().unwrap() {
        task[key] = value.clone();
    }
    task
}

#[test]
fn each_dispatched_attempt_gets_a_worktree_and_a_branch_of_its_own() {
    let mut s = Setup::new();
    let head = git(&s.repo(), &["rev-parse", "HEAD"]);
    let tasks = json!([
        task("api", json!({})),
        task("ui", json!({})),
        task("db/schema", json!({}))
    ]);
    s.run_with(json!({}), tasks);
    let dispatched = s.dispatch_all(0);
    assert_eq!(dispatched["dispatched"].as_array().unwrap().len(), 3);
    let mut paths = Vec::new();
    for (task, component) in [("api", "api"), ("ui", "ui"), ("db/schema", "db%2Fschema")] {
        let w = s.worktree(task);
        let path = PathBuf::from(w["path"].as_str().unwrap());
        assert_eq!(
            path,
            s.repo()
                .join(".agents/worktrees/r")
                .join(component)
                .join("1")
        );
        assert_eq!(w["branch"], format!("orch/r/{component}/1"));
        assert_eq!(w["base"], "HEAD");
        assert_eq!(w["base_commit"], head.as_str());
        assert_eq!(
            git(&path, &["rev-parse", "--abbrev-ref", "HEAD"]),
            format!("orch/r/{component}/1")
        );
        assert!(path.join("README.md").exists());
        // The worker is told where to work, in the body and the payload.
        let thread = s.thread(task);
        let shown = s.run(json!({"command": "show", "thread_id": thread}), 0);
        let first = &shown["messages"][0];
        assert_eq!(first["payload"]["worktree"]["path"], w["path"]);
        assert!(
            first["body"]
                .as_str()
                .unwrap()
                .contains(w["path"].as_str().unwrap())
        );
        paths.push(path);
    }
    paths.dedup();
    assert_eq!(paths.len(), 3);
    // The leader's checkout does not see the worktrees as untracked files.
    assert_eq!(git(&s.repo(), &["status", "--porcelain"]), "");
}

#[test]
fn a_worker_s_commits_stay_on_its_branch_and_the_clean_worktree_goes() {
    let mut s = Setup::new();
    s.run_with(json!({}), json!([task("api", json!({"review": true}))]));
    s.dispatch_all(0);
    let w = s.worktree("api");
    let path = PathBuf::from(w["path"].as_str().unwrap());
    let thread = s.thread("api");
    s.claim(&thread);
    std::fs::write(path.join("api.rs"), "fn login() {}\n").unwrap();
    git(&path, &["add", "api.rs"]);
    git(&path, &["commit", "-q", "-m", "login"]);
    s.finish(&thread, "done");
    // The next orch command records the attempt's end, then tidies.
    s.run(json!({"command": "orch-reconcile"}), 0);
    assert!(
        !path.exists(),
        "a clean worktree is removed once its attempt ends"
    );
    assert_eq!(s.branches(), ["orch/r/api/1"]);
    assert_eq!(s.states(), [("api#1".to_owned(), "removed".to_owned())]);
    s.run(
        json!({"command": "orch-accept", "agent": "lead", "task_id": "api"}),
        0,
    );
    let tip = git(&s.repo(), &["show", "orch/r/api/1:api.rs"]);
    assert_eq!(tip, "fn login() {}");
}

#[test]
fn uncommitted_and_untracked_work_is_saved_when_an_attempt_is_reassigned() {
    let mut s = Setup::new();
    s.run_with(json!({}), json!([task("api", json!({}))]));
    s.dispatch_all(0);
    let w = s.worktree("api");
    let path = PathBuf::from(w["path"].as_str().unwrap());
    let thread = s.thread("api");
    s.claim(&thread);
    std::fs::write(path.join("README.md"), "hello, edited\n").unwrap();
    std::fs::write(path.join("notes.txt"), "half done\n").unwrap();
    let reassigned = s.run(
        json!({"command": "orch-reassign", "agent": "lead", "task_id": "api", "to": "w2"}),
        0,
    );
    assert_eq!(reassigned["task"]["attempts"], 2);
    // Nothing was lost: the saved ref holds both files; the folder stays.
    assert_eq!(
        git(&s.repo(), &["show", "refs/orch/wip/r/api/1:README.md"]),
        "hello, edited"
    );
    assert_eq!(
        git(&s.repo(), &["show", "refs/orch/wip/r/api/1:notes.txt"]),
        "half done"
    );
    assert!(path.join("notes.txt").exists());
    assert_eq!(
        git(&path, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "orch/r/api/1"
    );
    let states = s.states();
    assert_eq!(states[0], ("api#1".to_owned(), "saved".to_owned()));
    assert_eq!(states[1], ("api#2".to_owned(), "live".to_owned()));
    // The new attempt starts afresh, told where the old work is.
    let second = s.worktree("api");
    assert_eq!(second["branch"], "orch/r/api/2");
    let thread = s.thread("api");
    let shown = s.run(json!({"command": "show", "thread_id": thread}), 0);
    let body = shown["messages"][0]["body"].as_str().unwrap();
    assert!(body.contains("refs/orch/wip/r/api/1"), "{body}");
    // gc keeps what it would lose; once the leader discards the changes,
    // the worktree is clean and gc removes it.
    let gc = s.run(json!({"command": "orch-worktree-gc"}), 0);
    assert_eq!(gc["removed"], json!([]));
    git(&path, &["checkout", "--", "README.md"]);
    std::fs::remove_file(path.join("notes.txt")).unwrap();
    let gc = s.run(json!({"command": "orch-worktree-gc", "dry_run": true}), 0);
    assert_eq!(gc["removed"][0]["task_id"], "api");
    assert!(path.exists(), "a dry run removes nothing");
    let gc = s.run(json!({"command": "orch-worktree-gc"}), 0);
    assert_eq!(gc["removed"].as_array().unwrap().len(), 1);
    assert_eq!(gc["kept"][0]["state"], "live");
    assert!(!path.exists());
    assert!(PathBuf::from(second["path"].as_str().unwrap()).exists());
}

#[test]
fn a_dependent_task_starts_from_the_accepted_branch() {
    let mut s = Setup::new();
    let tasks = json!([
        task("api", json!({"review": true})),
        task("ui", json!({"needs": ["api"], "base": "task:api"})),
    ]);
    s.run_with(json!({}), tasks);
    s.dispatch_all(0);
    let path = PathBuf::from(s.worktree("api")["path"].as_str().unwrap());
    let thread = s.thread("api");
    s.claim(&thread);
    std::fs::write(path.join("api.rs"), "fn login() {}\n").unwrap();
    git(&path, &["add", "api.rs"]);
    git(&path, &["commit", "-q", "-m", "login"]);
    s.finish(&thread, "done");
    s.run(
        json!({"command": "orch-accept", "agent": "lead", "task_id": "api"}),
        0,
    );
    s.dispatch_all(0);
    let ui = s.worktree("ui");
    assert_eq!(ui["base"], "orch/r/api/1");
    assert_eq!(
        ui["base_commit"],
        git(&s.repo(), &["rev-parse", "orch/r/api/1"]).as_str()
    );
    assert!(
        PathBuf::from(ui["path"].as_str().unwrap())
            .join("api.rs")
            .exists()
    );
}

#[test]
fn strict_mode_refuses_a_dirty_checkout_and_leaves_nothing() {
    let mut s = Setup::new();
    s.run_with(json!({"strict": true}), json!([task("api", json!({}))]));
    std::fs::write(s.repo().join("wip.rs"), "unfinished\n").unwrap();
    let refused = s.dispatch_all(30);
    assert_eq!(refused["error"]["code"], "checkout_dirty");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("wip.rs")
    );
    s.nothing_left("api");
}

#[test]
fn outside_strict_mode_a_dispatch_says_what_it_left_out() {
    let mut s = Setup::new();
    s.run_with(json!({}), json!([task("api", json!({}))]));
    std::fs::write(s.repo().join("wip.rs"), "unfinished\n").unwrap();
    let dispatched = s.dispatch_all(0);
    let worktree = &dispatched["dispatched"][0]["attempt"]["worktree"];
    assert_eq!(worktree["left_out"], json!(["wip.rs"]));
    assert_eq!(worktree["left_out_count"], 1);
    assert!(
        !PathBuf::from(worktree["path"].as_str().unwrap())
            .join("wip.rs")
            .exists()
    );
}

#[test]
fn a_base_that_is_not_a_commit_is_refused_and_leaves_nothing() {
    let mut s = Setup::new();
    s.run_with(
        json!({"base": "no-such-branch"}),
        json!([task("api", json!({}))]),
    );
    // With --all-ready the task waits with the reason; nothing is made.
    let out = s.dispatch_all(10);
    assert_eq!(out["refused"][0]["code"], "invalid_base", "{out:#}");
    s.nothing_left("api");
    let refused = s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "task_id": "api"}),
        30,
    );
    assert_eq!(refused["error"]["code"], "invalid_base");
    // A tree is not a commit either.
    let tree = git(&s.repo(), &["rev-parse", "HEAD^{tree}"]);
    s.run(
        json!({"command": "orch-task-add", "agent": "lead", "task": task("ui", json!({"base": tree}))}),
        0,
    );
    let refused = s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "task_id": "ui"}),
        30,
    );
    assert_eq!(refused["error"]["code"], "invalid_base");
}

#[test]
fn a_missing_repository_is_refused_and_leaves_nothing() {
    let mut s = Setup::new();
    let gone = s.dir.path().join("not-a-repo");
    std::fs::create_dir(&gone).unwrap();
    s.run(
        json!({"command": "orch-run-create", "agent": "lead", "run_id": "r", "goal": "g",
               "repo": gone.display().to_string()}),
        0,
    );
    s.run(
        json!({"command": "orch-plan", "agent": "lead", "tasks": [task("api", json!({}))]}),
        0,
    );
    let refused = s.dispatch_all(40);
    assert_eq!(refused["error"]["code"], "repository_not_found");
    let shown = s.run(json!({"command": "orch-task-show", "task_id": "api"}), 0);
    assert_eq!(shown["attempts"], json!([]));
}

#[test]
fn a_branch_name_collision_holds_back_only_its_own_task() {
    let mut s = Setup::new();
    s.run_with(
        json!({}),
        json!([
            task("api", json!({})),
            task("ui", json!({})),
            task("db", json!({}))
        ]),
    );
    // Someone already has the branch the second task's attempt would get.
    git(&s.repo(), &["branch", "orch/r/ui/1"]);
    let out = s.dispatch_all(0);
    let dispatched: Vec<&str> = out["dispatched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["task"]["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(dispatched, ["api", "db"], "{out:#}");
    assert_eq!(out["refused"][0]["task_id"], "ui", "{out:#}");
    assert_eq!(out["refused"][0]["code"], "worktree_failed");
    let message = out["refused"][0]["message"].as_str().unwrap();
    assert!(message.contains("orch/r/ui/1"), "{message}");
    // ui waits, ready, with the reason, and a task_refused event wakes the
    // leader; no thread, attempt or folder of its own was left.
    let shown = s.run(json!({"command": "orch-task-show", "task_id": "ui"}), 0);
    assert_eq!(shown["task"]["status"], "ready");
    assert_eq!(shown["attempts"], json!([]));
    let reason = shown["task"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("could not start") && reason.contains("orch/r/ui/1"),
        "{reason}"
    );
    let status = s.run(json!({"command": "orch-status"}), 0);
    let ui = status["actionable"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == "ui")
        .unwrap();
    assert_eq!(ui["reason"], reason);
    let woke = s.run(
        json!({"command": "orch-wait", "after_event": 0, "limit": 50}),
        0,
    );
    assert!(
        woke["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event_type"] == "task_refused" && e["task_id"] == "ui"),
        "{woke:#}"
    );
    assert!(!s.repo().join(".agents/worktrees/r/ui").exists());
    let threads = s.run(json!({"command": "list"}), 0);
    assert_eq!(threads["threads"].as_array().unwrap().len(), 2);
    // Dispatching ui alone fails with git's reason and changes nothing.
    let alone = s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "task_id": "ui"}),
        30,
    );
    assert_eq!(alone["error"]["code"], "worktree_failed");
    // --limit counts tasks dispatched: a refused task at the head of the
    // queue does not use it up.
    s.run(
        json!({"command": "orch-task-add", "agent": "lead", "task": task("web", json!({}))}),
        0,
    );
    let limited = s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "all_ready": true, "limit": 1}),
        0,
    );
    assert_eq!(limited["refused"][0]["task_id"], "ui", "{limited:#}");
    assert_eq!(
        limited["dispatched"][0]["task"]["task_id"], "web",
        "{limited:#}"
    );
    // Once the branch is gone, the next dispatch starts it.
    git(&s.repo(), &["branch", "-D", "orch/r/ui/1"]);
    let again = s.dispatch_all(0);
    assert_eq!(again["dispatched"][0]["task"]["task_id"], "ui");
    assert_eq!(again["dispatched"][0]["task"]["reason"], Value::Null);
    assert!(again.get("refused").is_none(), "{again:#}");
}

#[test]
fn a_retry_whose_worktree_git_refuses_waits_and_blocks_nothing_else() {
    let mut s = Setup::new();
    s.run_with(
        json!({}),
        json!([
            task("api", json!({"max_attempts": 3, "backoff_seconds": 0})),
            task("ui", json!({"needs": ["api"]})),
            task("db", json!({}))
        ]),
    );
    s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "task_id": "api"}),
        0,
    );
    // The second attempt's branch is taken before the first attempt fails.
    git(&s.repo(), &["branch", "orch/r/api/2"]);
    let thread = s.thread("api");
    s.claim(&thread);
    s.finish(&thread, "fail");
    // Every orch write records the failure and comes due for the retry:
    // none of them fails because of it.
    let recorded = s.run(json!({"command": "orch-reconcile"}), 0);
    let refused = recorded["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_type"] == "task_refused")
        .unwrap_or_else(|| panic!("{recorded:#}"));
    assert_eq!(refused["task_id"], "api");
    let shown = s.run(json!({"command": "orch-task-show", "task_id": "api"}), 0);
    assert_eq!(shown["task"]["status"], "retry_wait");
    let reason = shown["task"]["reason"].as_str().unwrap();
    assert!(reason.contains("attempt 2 could not start"), "{reason}");
    assert!(shown["task"]["retry_at"].is_string());
    let db = s.run(
        json!({"command": "orch-dispatch", "agent": "lead", "task_id": "db"}),
        0,
    );
    assert_eq!(db["dispatched"][0]["task"]["task_id"], "db");
    s.run(
        json!({"command": "orch-task-add", "agent": "lead", "task": task("docs", json!({}))}),
        0,
    );
    // Tried again once its wait is over: the branch is gone by then.
    git(&s.repo(), &["branch", "-D", "orch/r/api/2"]);
    s.engine.clock_mut().advance_millis(120_000);
    s.run(json!({"command": "orch-reconcile"}), 0);
    let shown = s.run(json!({"command": "orch-task-show", "task_id": "api"}), 0);
    assert_eq!(shown["task"]["status"], "dispatched", "{shown:#}");
    assert_eq!(shown["attempts"][1]["worktree"]["branch"], "orch/r/api/2");
    // The new attempt is told why the one before failed, not why it waited.
    let thread = s.thread("api");
    let first = &s.run(json!({"command": "show", "thread_id": thread}), 0)["messages"][0];
    assert_eq!(first["payload"]["previous"]["reason"], "ok", "{first:#}");
}

/// A repository that commits `.agents` as a symbolic link (or has one
/// planted anywhere on the way to the worktrees) never gets a worktree or
/// a `.gitignore` written where the link points.
#[test]
fn a_symbolic_link_on_the_way_to_the_worktrees_is_refused() {
    for link_at in [".agents", ".agents/worktrees", ".agents/worktrees/r"] {
        let mut s = Setup::new();
        let outside = s.dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let link = s.repo().join(link_at);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        if link_at == ".agents" {
            // Committed, as a repository from elsewhere would have it.
            std::fs::write(s.repo().join(".gitignore"), "").unwrap();
            git(&s.repo(), &["add", "-A"]);
            git(&s.repo(), &["commit", "-q", "-m", "link"]);
        }
        s.run_with(
            json!({}),
            json!([task("api", json!({})), task("ui", json!({}))]),
        );
        let out = s.dispatch_all(10);
        assert_eq!(out["dispatched"], json!([]), "{link_at}: {out:#}");
        for refused in out["refused"].as_array().unwrap() {
            assert_eq!(refused["code"], "worktree_failed");
            let message = refused["message"].as_str().unwrap();
            assert!(
                message.contains(&format!("{} is a symbolic link", link.display())),
                "{link_at}: {message}"
            );
        }
        let alone = s.run(
            json!({"command": "orch-dispatch", "agent": "lead", "task_id": "api"}),
            30,
        );
        assert_eq!(alone["error"]["code"], "worktree_failed");
        let written: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
        assert!(written.is_empty(), "{link_at}: wrote {written:?}");
        assert_eq!(s.branches(), Vec::<String>::new());
    }
}

/// A link planted on the way to a worktree after the run started, above
/// orch's own folders (at `.agents` or `.agents/worktrees`, pointing at
/// where those folders were moved), is refused by the next operation there:
/// the ended attempt's clean worktree is not removed through it, the failed
/// one's uncommitted work is not saved through it, and `orch worktree gc`
/// keeps both, though git would follow the link.
#[test]
fn a_link_planted_above_the_worktrees_after_dispatch_is_refused() {
    for link_at in [".agents", ".agents/worktrees"] {
        let mut s = Setup::new();
        s.run_with(
            json!({}),
            json!([
                task("api", json!({})),
                task("ui", json!({"max_attempts": 1}))
            ]),
        );
        s.dispatch_all(0);
        let api = PathBuf::from(s.worktree("api")["path"].as_str().unwrap());
        let ui = PathBuf::from(s.worktree("ui")["path"].as_str().unwrap());
        let outside = s.dir.path().join("outside");
        std::fs::rename(s.repo().join(link_at), &outside).unwrap();
        std::os::unix::fs::symlink(&outside, s.repo().join(link_at)).unwrap();
        // Through the link, the worktrees look as they were.
        assert!(api.join("README.md").exists(), "{link_at}");
        std::fs::write(ui.join("notes.txt"), "half done\n").unwrap();
        let moved_api = outside.join(api.strip_prefix(s.repo().join(link_at)).unwrap());
        for (id, end) in [("api", "done"), ("ui", "fail")] {
            let thread = s.thread(id);
            s.claim(&thread);
            s.finish(&thread, end);
        }
        // The next orch command records both ends, then tidies: refused.
        s.run(json!({"command": "orch-reconcile"}), 0);
        assert!(
            moved_api.join("README.md").exists(),
            "{link_at}: a worktree was removed through a link"
        );
        let saved = Command::new("git")
            .arg("-C")
            .arg(s.repo())
            .args(["rev-parse", "--verify", "--quiet", "refs/orch/wip/r/ui/1"])
            .output()
            .unwrap();
        assert!(
            !saved.status.success(),
            "{link_at}: work was saved through a link"
        );
        let gc = s.run(json!({"command": "orch-worktree-gc"}), 0);
        assert_eq!(gc["removed"], json!([]), "{link_at}: {gc:#}");
        assert_eq!(gc["saved"], json!([]), "{link_at}: {gc:#}");
        assert_eq!(gc["kept"].as_array().unwrap().len(), 2, "{gc:#}");
        assert!(moved_api.join("README.md").exists(), "{link_at}");
        assert_eq!(
            s.states(),
            [
                ("api#1".to_owned(), "unknown".to_owned()),
                ("ui#1".to_owned(), "unknown".to_owned())
            ],
            "{link_at}"
        );
    }
}

/// A worktrees folder the leader names is used as named, links and all;
/// orch's own folders below it are still never links.
#[test]
fn a_worktrees_folder_named_through_a_link_is_the_leader_s_choice() {
    let mut s = Setup::new();
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir(s.repo().join(".agents")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.repo().join(".agents/worktrees")).unwrap();
    let named = s.repo().join(".agents/worktrees").display().to_string();
    s.run_with(json!({"worktrees": named}), json!([task("api", json!({}))]));
    let out = s.dispatch_all(0);
    assert_eq!(out["dispatched"][0]["task"]["task_id"], "api", "{out:#}");
    assert!(elsewhere.join("r/api/1/README.md").exists());
    // A link planted for a run's folder below it is refused all the same.
    std::fs::create_dir(s.dir.path().join("planted")).unwrap();
    std::os::unix::fs::symlink(s.dir.path().join("planted"), elsewhere.join("r/ui")).unwrap();
    s.run(
        json!({"command": "orch-task-add", "agent": "lead", "task": task("ui", json!({}))}),
        0,
    );
    let out = s.dispatch_all(10);
    assert_eq!(out["refused"][0]["task_id"], "ui", "{out:#}");
    assert_eq!(
        std::fs::read_dir(s.dir.path().join("planted"))
            .unwrap()
            .count(),
        0
    );
}

/// The longest task id the engine takes in a run with a repository works
/// with the real git, and every orch branch is a valid ref name.
#[test]
fn the_longest_id_orch_takes_gets_a_worktree_and_valid_refs() {
    let mut s = Setup::new();
    // 1 + 84 × 3 = 253 bytes once encoded.
    let longest = format!("a{}", ".".repeat(84));
    let odd = "x.lock/@{-1}:..//-/HEAD";
    s.run_with(
        json!({}),
        json!([task(&longest, json!({})), task("api", json!({}))]),
    );
    let out = s.dispatch_all(0);
    assert_eq!(out["dispatched"].as_array().unwrap().len(), 2, "{out:#}");
    for id in [longest.as_str(), odd, "HEAD", "-x", "a..b"] {
        let branch = inbox_engine::orch::workspace::branch_name("r", id, 4_294_967_295);
        let ok = Command::new("git")
            .args(["check-ref-format", "--branch", &branch])
            .output()
            .unwrap();
        assert!(ok.status.success(), "{branch}");
    }
    // One more character does not fit in a file name, and is refused.
    let refused = s.run(
        json!({"command": "orch-task-add", "agent": "lead",
               "task": task(&format!("a{}", ".".repeat(85)), json!({}))}),
        30,
    );
    assert_eq!(refused["error"]["code"], "invalid_value");
}

#[test]
fn a_failed_attempt_s_worktree_is_tidied_and_the_retry_gets_a_new_one() {
    let mut s = Setup::new();
    s.run_with(
        json!({}),
        json!([task(
            "api",
            json!({"max_attempts": 2, "backoff_seconds": 0})
        )]),
    );
    s.dispatch_all(0);
    let first = PathBuf::from(s.worktree("api")["path"].as_str().unwrap());
    let thread = s.thread("api");
    s.claim(&thread);
    s.finish(&thread, "fail");
    // The reconcile ends attempt 1 (clean: removed) and starts attempt 2.
    s.run(json!({"command": "orch-reconcile"}), 0);
    assert!(!first.exists());
    let second = s.worktree("api");
    assert_eq!(second["branch"], "orch/r/api/2");
    assert!(PathBuf::from(second["path"].as_str().unwrap()).exists());
    // An orch read shows the truth but makes and removes nothing.
    s.run(json!({"command": "orch-status"}), 0);
    assert_eq!(s.branches(), ["orch/r/api/1", "orch/r/api/2"]);
}

#[test]
fn a_run_without_a_repository_has_no_worktrees() {
    let mut s = Setup::new();
    s.run(
        json!({"command": "orch-run-create", "agent": "lead", "run_id": "r", "goal": "g"}),
        0,
    );
    s.run(
        json!({"command": "orch-plan", "agent": "lead", "tasks": [task("api", json!({}))]}),
        0,
    );
    s.dispatch_all(0);
    assert_eq!(s.worktree("api"), Value::Null);
    let listed = s.run(json!({"command": "orch-worktree-list"}), 0);
    assert_eq!(listed["worktrees"], json!([]));
    let stray = s.run(
        json!({"command": "orch-run-create", "agent": "lead", "goal": "g", "strict": true}),
        30,
    );
    assert_eq!(stray["error"]["code"], "invalid_value");
    let relative = s.run(
        json!({"command": "orch-run-create", "agent": "lead", "goal": "g", "repo": "repo"}),
        30,
    );
    assert!(
        relative["error"]["message"]
            .as_str()
            .unwrap()
            .contains("absolute")
    );
}

/// The real git, which also tries SQLite's write lock on the database
/// (with no wait) each time it is asked to do anything, and remembers what
/// it was asked and whether the lock was free: git must never run while
/// an orch write holds it.
struct LockWatch {
    git: GitWorkspace,
    db: PathBuf,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(&'static str, bool)>>>,
}

impl LockWatch {
    fn watch(&self, call: &'static str) {
        let probe = rusqlite::Connection::open(&self.db).unwrap();
        let free = probe.execute_batch("BEGIN IMMEDIATE; ROLLBACK").is_ok();
        self.seen.lock().unwrap().push((call, free));
    }
}

impl inbox_engine::orch::workspace::Workspace for LockWatch {
    fn look(
        &mut self,
        repo: &str,
        base: &str,
    ) -> Result<
        inbox_engine::orch::workspace::RepoLook,
        inbox_engine::orch::workspace::WorkspaceError,
    > {
        self.watch("look");
        self.git.look(repo, base)
    }

    fn create(
        &mut self,
        worktree: &inbox_engine::orch::model::Worktree,
        place: &inbox_engine::orch::workspace::Place,
    ) -> Result<(), inbox_engine::orch::workspace::WorkspaceError> {
        self.watch("create");
        self.git.create(worktree, place)
    }

    fn discard(
        &mut self,
        worktree: &inbox_engine::orch::model::Worktree,
        place: &inbox_engine::orch::workspace::Place,
    ) -> Result<(), inbox_engine::orch::workspace::WorkspaceError> {
        self.watch("discard");
        self.git.discard(worktree, place)
    }

    fn inspect(
        &mut self,
        worktree: &inbox_engine::orch::model::Worktree,
        place: &inbox_engine::orch::workspace::Place,
        wip_ref: &str,
    ) -> Result<
        inbox_engine::orch::workspace::WorktreeLook,
        inbox_engine::orch::workspace::WorkspaceError,
    > {
        self.watch("inspect");
        self.git.inspect(worktree, place, wip_ref)
    }

    fn save(
        &mut self,
        worktree: &inbox_engine::orch::model::Worktree,
        place: &inbox_engine::orch::workspace::Place,
        wip_ref: &str,
    ) -> Result<String, inbox_engine::orch::workspace::WorkspaceError> {
        self.watch("save");
        self.git.save(worktree, place, wip_ref)
    }

    fn remove(
        &mut self,
        worktree: &inbox_engine::orch::model::Worktree,
        place: &inbox_engine::orch::workspace::Place,
    ) -> Result<(), inbox_engine::orch::workspace::WorkspaceError> {
        self.watch("remove");
        self.git.remove(worktree, place)
    }
}

/// Every git call of every orch command runs with SQLite's write lock free:
/// the dispatch, reject, reassign and retry that make worktrees, the
/// retry that comes due during another write (`orch accept` leaves it to
/// `orch wait`), the tidying after an attempt ends, and `orch worktree
/// list` and `gc`.
#[test]
fn every_orch_command_runs_git_with_the_write_lock_free() {
    let mut s = Setup::new();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (store, clock, ids) = std::mem::replace(
        &mut s.engine,
        Engine::new(
            open_or_create(&s.dir.path().join("other.db")).unwrap(),
            ManualClock::new(ManualClock::SCRIPT_EPOCH),
            SequentialIds::new(),
        ),
    )
    .into_parts();
    let watch = LockWatch {
        git: GitWorkspace::new(),
        db: s.dir.path().join("coord.db"),
        seen: seen.clone(),
    };
    s.engine = Engine::new(store, clock, ids).with_workspace(Box::new(watch));
    let review = json!({"review": true, "max_attempts": 3});
    s.run_with(
        json!({}),
        json!([
            task("api", review.clone()),
            task("ui", json!({"max_attempts": 1})),
            task("web", json!({"max_attempts": 2, "backoff_seconds": 0}))
        ]),
    );
    s.dispatch_all(0);
    // api: reviewed, rejected (a new attempt), then reassigned (another).
    let thread = s.thread("api");
    s.claim(&thread);
    s.finish(&thread, "done");
    s.run(
        json!({"command": "orch-reject", "agent": "lead", "task_id": "api", "summary": "again"}),
        0,
    );
    s.run(
        json!({"command": "orch-reassign", "agent": "lead", "task_id": "api", "to": "w2"}),
        0,
    );
    // ui: failed for good, then retried by hand.
    let thread = s.thread("ui");
    s.claim(&thread);
    s.finish(&thread, "fail");
    s.run(
        json!({"command": "orch-retry", "agent": "lead", "task_id": "ui"}),
        0,
    );
    // web fails, and its retry comes due at once: `orch accept` of api
    // leaves it waiting, and the leader's `orch wait` starts it.
    let thread = s.thread("api");
    s.run(
        json!({"command": "claim", "agent": "w2", "thread_id": thread}),
        0,
    );
    s.run(
        json!({"command": "done", "agent": "w2", "thread_id": thread, "summary": "ok"}),
        0,
    );
    let thread = s.thread("web");
    s.claim(&thread);
    s.finish(&thread, "fail");
    let made = |seen: &std::sync::Mutex<Vec<(&str, bool)>>| {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|(call, _)| *call == "create")
            .count()
    };
    let before = made(&seen);
    s.run(
        json!({"command": "orch-accept", "agent": "lead", "task_id": "api"}),
        0,
    );
    assert_eq!(made(&seen), before, "orch accept made a worktree");
    let shown = s.run(json!({"command": "orch-task-show", "task_id": "web"}), 0);
    assert_eq!(shown["task"]["status"], "retry_wait", "{shown:#}");
    s.run(json!({"command": "orch-wait", "after_event": 0}), 0);
    assert_eq!(
        made(&seen),
        before + 1,
        "orch wait made the retry's worktree"
    );
    assert_eq!(s.worktree("web")["branch"], "orch/r/web/2");
    s.run(json!({"command": "orch-worktree-list"}), 0);
    s.run(json!({"command": "orch-worktree-gc"}), 0);
    let seen = seen.lock().unwrap().clone();
    // Three at dispatch, one each for the reject, the reassign, the retry
    // and web's retry; and every look, tidy and discard.
    assert_eq!(seen.iter().filter(|(call, _)| *call == "create").count(), 7);
    assert!(seen.iter().any(|(call, _)| *call == "inspect"));
    let held: Vec<_> = seen.iter().filter(|(_, free)| !free).collect();
    assert!(
        held.is_empty(),
        "git ran while the write lock was held: {held:?}"
    );
    assert_eq!(s.worktree("api")["branch"], "orch/r/api/3");
    assert_eq!(s.worktree("ui")["branch"], "orch/r/ui/2");
}
