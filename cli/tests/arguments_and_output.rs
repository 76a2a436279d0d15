//! What a careless or hostile command line meets: text that starts with a
//! dash, an environment that is not text, `--json` with `--help` and
//! `--version`, a result that cannot be written (stdout on a full device),
//! and a planted symbolic link where the skill is installed. Real
//! processes, real files, `/dev/full`.

use std::os::unix::ffi::OsStrExt as _;

use crate::common::TestEnv;

#[test]
fn text_may_start_with_a_dash() {
    let env = TestEnv::initialized();
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "- fix the -5% regression",
            "--body",
            "--- a/x.rs\n+++ b/x.rs",
        ],
        0,
    );
    assert_eq!(sent["thread"]["subject"], "- fix the -5% regression");
    assert_eq!(sent["message"]["body"], "--- a/x.rs\n+++ b/x.rs");
}

#[test]
fn an_agent_name_in_the_environment_that_is_not_text_is_named() {
    let env = TestEnv::initialized();
    let mut command = env.command(&["fetch", "--json"]);
    command.env("INBOX_AGENT", std::ffi::OsStr::from_bytes(b"w\xff"));
    let run = env.run_command(command);
    assert_eq!(run.status, 30, "{run}");
    let json = run.json();
    assert_eq!(json["error"]["code"], "invalid_value");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`INBOX_AGENT` is not valid UTF-8")
    );
}

#[test]
fn help_and_version_with_json_are_json() {
    let env = TestEnv::new();
    let version = env.json(&["--version"], 0);
    assert_eq!(version["ok"], true);
    assert_eq!(version["command"], "version");
    assert_eq!(version["wire_version"], 1);
    let help = env.json(&["send", "--help"], 0);
    assert_eq!(help["command"], "send");
    assert!(help["help"].as_str().unwrap().contains("--subject"));
    let root = env.json(&["--help"], 0);
    assert_eq!(root["command"], serde_json::Value::Null);
    assert!(root["help"].as_str().unwrap().contains("The worker loop"));
}

/// A claim whose result cannot be written still took the lease: the exit
/// is 50, not 0, and stderr carries the result, so the token is not lost.
#[test]
fn a_result_that_cannot_be_written_fails_and_says_what_happened() {
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "w", "--subject", "s"],
        0,
    );
    let mut command = env.command(&["claim", "--agent", "w", "--next", "--json"]);
    command.stdout(std::fs::File::create("/dev/full").unwrap());
    let run = env.run_command(command);
    assert_eq!(run.status, 50, "{run}");
    assert!(
        run.stderr.contains("could not be written to stdout"),
        "{run}"
    );
    assert!(run.stderr.contains("the command took effect"), "{run}");
    assert!(run.stderr.contains(r#""lease_token":1"#), "{run}");
    let listed = env.json(&["list"], 0);
    assert_eq!(listed["threads"][0]["status"], "claimed");
}

#[test]
fn a_closed_pipe_is_the_reader_s_choice_not_a_failure() {
    let env = TestEnv::initialized();
    let mut command = env.command(&["skill"]);
    command.stdout(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// A command started with stdout and stderr closed still runs, and its
/// result lands in none of the files it opened (its database, its lock
/// files): the standard descriptors it finds closed are opened on
/// `/dev/null` before `main` (the Rust runtime does it), and SQLite never
/// opens a database on them either.
#[test]
fn a_command_started_with_stdout_and_stderr_closed_writes_only_its_database() {
    let env = TestEnv::initialized();
    let inbox = env.command(&[
        "send",
        "--from",
        "lead",
        "--to",
        "w",
        "--subject",
        "closed",
        "--json",
    ]);
    // `sh` closes the descriptors and then becomes inbox.
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", r#"exec "$0" "$@" >&- 2>&-"#])
        .arg(inbox.get_program())
        .args(inbox.get_args())
        .env_clear()
        .envs(inbox.get_envs().filter_map(|(k, v)| Some((k, v?))));
    if let Some(dir) = inbox.get_current_dir() {
        command.current_dir(dir);
    }
    let run = env.run_command(command);
    assert_eq!(run.status, 0, "{run}");

    let listed = env.json(&["list"], 0);
    assert_eq!(listed["threads"][0]["subject"], "closed");
    let agents = env.db().parent().unwrap().to_path_buf();
    for entry in std::fs::read_dir(&agents).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(r#"{"ok":true"#),
            "{} holds the result",
            path.display()
        );
    }
}

/// A reader that went away before a claim's result arrived (a parser that
/// crashed) must not take the lease token with it: stderr says what the
/// command did, and the exit code stays the command's.
#[test]
fn a_claim_whose_reader_closed_the_pipe_still_says_which_lease_it_took() {
    let env = TestEnv::initialized();
    env.json(
        &["send", "--from", "lead", "--to", "w", "--subject", "s"],
        0,
    );
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = env.command(&["claim", "--agent", "w", "--next", "--json"]);
    command.stdout(writer);
    let run = env.run_command(command);
    assert_eq!(run.status, 0, "{run}");
    assert!(run.stderr.contains("closed it before the result"), "{run}");
    assert!(run.stderr.contains("the command took effect"), "{run}");
    assert!(run.stderr.contains(r#""lease_token":1"#), "{run}");
}

#[test]
fn installing_the_skill_replaces_a_planted_link_instead_of_following_it() {
    let env = TestEnv::new();
    let victim = env.dir().join("victim.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let skills = env.dir().join("skills");
    std::fs::create_dir_all(skills.join("inbox")).unwrap();
    std::os::unix::fs::symlink(&victim, skills.join("inbox/SKILL.md")).unwrap();

    let run = env.run(&["skill", "--install", skills.to_str().unwrap()]);
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let installed = skills.join("inbox/SKILL.md");
    assert!(
        !installed
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::read_to_string(installed)
            .unwrap()
            .contains("inbox")
    );

    // A planted `inbox` folder link is refused outright.
    let elsewhere = env.dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let other = env.dir().join("other-skills");
    std::fs::create_dir_all(&other).unwrap();
    std::os::unix::fs::symlink(&elsewhere, other.join("inbox")).unwrap();
    let run = env.run(&["skill", "--install", other.to_str().unwrap(), "--json"]);
    assert_eq!(run.status, 30, "{run}");
    assert_eq!(run.json()["error"]["code"], "invalid_value");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
}
