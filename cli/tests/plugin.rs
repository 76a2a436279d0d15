//! `inbox --engine PATH.wasm`: the same commands through the engine
//! component in wasmtime, against a real database, as separate processes.
//! Only in builds with the `plugin` feature (`cargo test -p inbox-cli
//! --features plugin --test cli plugin::`, run by scripts/test).

#![cfg(feature = "plugin")]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::TestEnv;

fn component() -> &'static str {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        inbox_plugin_build::build(inbox_plugin_build::Guest::Engine)
            .unwrap_or_else(|e| panic!("building the engine component: {e}"))
    })
    .to_str()
    .unwrap()
}

/// `inbox args...` through the component, with the compiled-code cache
/// under `target/` rather than the user's home.
fn through_component(env: &TestEnv, args: &[&str]) -> std::process::Command {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--engine", component()]);
    let mut command = env.command(&all);
    command.env(
        "INBOX_ENGINE_CACHE",
        inbox_plugin_build::out_dir().join("engine-cache"),
    );
    command
}

/// Seconds differ between two runs of the same session (the clock is real
/// from `INBOX_NOW` on); the rest must not.
fn without_seconds(transcript: &str) -> String {
    let times = regex::Regex::new(r"T\d\d:\d\d:\d\d\.mmmZ").unwrap();
    let ago = regex::Regex::new(r"\b\d+s ago").unwrap();
    let transcript = times.replace_all(transcript, "Thh:mm:ss.mmmZ");
    ago.replace_all(&transcript, "Ns ago").into_owned()
}

/// One session a leader and a worker run, in JSON and as people read it,
/// with the built-in engine or through the component.
fn session(through: bool) -> String {
    let env = TestEnv::new();
    let mut transcript = String::new();
    let mut step = |args: &[&str]| {
        let run = if through {
            env.run_command(through_component(&env, args))
        } else {
            env.run(args)
        };
        transcript.push_str(&format!(
            "$ inbox {}\n{run}\n",
            env.normalize(&args.join(" "))
        ));
        run
    };
    step(&["init"]);
    let sent = step(&[
        "send",
        "--from",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Add login",
        "--json",
    ]);
    let thread = sent.json()["thread"]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    step(&["fetch", "--agent", "worker"]);
    step(&["claim", "--agent", "worker", "--thread", &thread, "--json"]);
    step(&["claim", "--agent", "worker", "--thread", &thread]);
    step(&[
        "update",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--status",
        "blocked",
        "--summary",
        "Email or username?",
    ]);
    step(&[
        "reply",
        "--from",
        "lead",
        "--thread",
        &thread,
        "--summary",
        "Email.",
        "--json",
    ]);
    step(&[
        "wait-reply",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--timeout-seconds",
        "5",
        "--json",
    ]);
    step(&[
        "done",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--summary",
        "Login added",
    ]);
    step(&["show", "--thread", &thread, "--json"]);
    step(&["show", "--thread", "thr_nope"]);
    step(&["list", "--agent", "lead"]);
    without_seconds(&transcript)
}

#[test]
fn a_session_through_the_component_prints_exactly_what_the_built_in_engine_prints() {
    let native = session(false);
    let plugin = session(true);
    assert!(
        native.contains("exit: 20"),
        "the session covers a conflict:\n{native}"
    );
    assert!(
        native.contains("exit: 40"),
        "the session covers a missing thread:\n{native}"
    );
    assert_eq!(plugin, native);
}

#[test]
fn a_wait_through_the_component_is_woken_by_another_process() {
    let env = TestEnv::initialized();
    let sent = env.json(
        &["send", "--from", "lead", "--to", "worker", "--subject", "s"],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let waiter = through_component(
        &env,
        &[
            "wait-reply",
            "--agent",
            "lead",
            "--thread",
            &thread,
            "--after-event",
            "1",
            "--timeout-seconds",
            "20",
            "--json",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    env.json(
        &[
            "reply",
            "--from",
            "worker",
            "--thread",
            &thread,
            "--summary",
            "Started",
        ],
        0,
    );
    let output = waiter.wait_with_output().unwrap();
    let woke: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{woke}");
    assert_eq!(woke["woke"], true);
    assert_eq!(woke["message"]["summary"], "Started");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "it did not wake on the reply"
    );
}

#[test]
fn an_engine_that_cannot_be_loaded_is_refused_with_exit_30_and_nothing_changes() {
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "worker", "--subject", "s"],
        0,
    );
    let not_wasm = env.dir().join("engine.wasm");
    std::fs::write(&not_wasm, b"not a component").unwrap();
    let mut transcript = String::new();
    for path in ["missing.wasm", "engine.wasm"] {
        env.step(&mut transcript, &["list", "--engine", path]);
        env.step(
            &mut transcript,
            &[
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                "t",
                "--engine",
                path,
                "--json",
            ],
        );
    }
    insta::assert_snapshot!(transcript);
    let listed = env.json(&["list"], 0);
    assert_eq!(listed["threads"].as_array().unwrap().len(), 1);
}

#[test]
fn init_with_an_engine_that_cannot_be_loaded_creates_no_database() {
    let env = TestEnv::new();
    // An empty component: valid WebAssembly, but not our engine.
    let other = env.dir().join("other.wasm");
    std::fs::write(&other, b"\0asm\x0d\0\x01\0").unwrap();
    let run = env.run(&["init", "--engine", other.to_str().unwrap(), "--json"]);
    assert_eq!(run.status, 30, "{run}");
    assert_eq!(run.json()["error"]["code"], "invalid_value", "{run}");
    assert!(run.stdout.contains("inbox:engine/plugin@0.5.0"), "{run}");
    assert!(
        !env.db().exists(),
        "a refused engine must not create the database"
    );
}

#[test]
fn help_shows_the_engine_flag_in_plugin_builds() {
    let run = TestEnv::new().run(&["--help"]);
    assert!(run.stdout.contains("--engine <PATH>"), "{run}");
}

/// The component draws an agent's token from the host's random source
/// (the WIT `secret-bytes` import), never from its seeded id generator:
/// two registrations get different real tokens, and each works only for
/// its own agent, whichever engine checks it.
#[test]
fn tokens_issued_through_the_component_are_real_secrets_that_work_everywhere() {
    let env = TestEnv::initialized();
    env.json(&["settings", "--agent-tokens", "required"], 0);
    // The lead joins first (no agent holds a token yet) and vouches for
    // the others with its token.
    let register = |agent: &str, voucher: Option<&str>| {
        let mut args = vec!["agent", "register", "--agent", agent, "--json"];
        if let Some(token) = voucher {
            args.extend(["--agent-token", token]);
        }
        let run = env.run_command(through_component(&env, &args));
        assert_eq!(run.status, 0, "{run}");
        run.json()["agent_token"].as_str().unwrap().to_owned()
    };
    let lead = register("lead", None);
    let (a, b) = (register("a", Some(&lead)), register("b", Some(&lead)));
    for token in [&lead, &a, &b] {
        assert!(token.starts_with("tok_") && token.len() == 68, "{token}");
    }
    assert_ne!(a, b);
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "a",
            "--subject",
            "s",
            "--agent-token",
            &lead,
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let claim = |token: &str| {
        let args = [
            "claim",
            "--agent",
            "a",
            "--thread",
            &thread,
            "--agent-token",
            token,
            "--json",
        ];
        env.run_command(through_component(&env, &args))
    };
    let refused = claim(&b);
    assert_eq!(refused.status, 30, "{refused}");
    assert_eq!(refused.json()["error"]["code"], "agent_token_invalid");
    let claimed = claim(&a);
    assert_eq!(claimed.status, 0, "{claimed}");
    // The built-in engine accepts the component's token: one hash, one rule.
    let renew = [
        "renew",
        "--agent",
        "a",
        "--thread",
        &thread,
        "--agent-token",
        &a,
    ];
    env.json(&renew, 0);
}
