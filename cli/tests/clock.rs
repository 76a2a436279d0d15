//! One clock for every process on the machine: a process whose own clock
//! is wrong (run under `faketime`, the usual way to give one process another
//! time) neither expires other agents' leases nor stamps its records with
//! its invented time, because inbox reads the kernel's clock, not the C
//! library's (see `stores/sqlite/src/clock.rs`).
//!
//! Needs Debian's `faketime` (`.ci/run` installs it). Without it the test
//! says so and passes, except under CI (`CI` set), where it fails: a skipped
//! test must not read as a passing one there.

use std::process::Command;

use crate::common::TestEnv;

/// `faketime OFFSET inbox args... --json` on the real clock, or `None`
/// when `faketime` is not installed.
fn skewed(env: &TestEnv, offset: &str, args: &[&str]) -> Option<Command> {
    let found = Command::new("faketime").arg("--version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "faketime is not installed (apt-get install faketime)"
        );
        eprintln!("skipped: faketime is not installed");
        return None;
    }
    let mut command = Command::new("faketime");
    command
        .args(["-f", offset, crate::common::inbox_bin()])
        .args(args)
        .arg("--json")
        .current_dir(env.dir())
        .env_remove("INBOX_DB")
        .env_remove("INBOX_AGENT")
        .env_remove("INBOX_NOW");
    Some(command)
}

/// `inbox args... --json` on the real clock; the parsed stdout.
fn run(env: &TestEnv, args: &[&str]) -> serde_json::Value {
    let mut command = env.command(args);
    command.arg("--json").env_remove("INBOX_NOW");
    env.run_command(command).json()
}

#[test]
fn a_process_two_days_ahead_expires_no_lease_and_stamps_the_machine_s_time() {
    let env = TestEnv::initialized();
    run(
        &env,
        &["send", "--from", "lead", "--to", "w", "--subject", "Held"],
    );
    let claim = run(&env, &["claim", "--agent", "w", "--next"]);
    let thread = claim["thread"]["thread_id"].as_str().unwrap().to_owned();
    let expires_at = claim["lease"]["expires_at"].as_str().unwrap().to_owned();

    let Some(mut ahead) = skewed(
        &env,
        "+2d",
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "From the future",
        ],
    ) else {
        return;
    };
    // Proof that the shim works on this machine: `date` under it is ahead.
    let date = |offset: Option<&str>| {
        let mut command = Command::new(if offset.is_some() { "faketime" } else { "date" });
        if let Some(offset) = offset {
            command.args(["-f", offset, "date"]);
        }
        command.arg("+%Y-%m-%d").output().unwrap().stdout
    };
    assert_ne!(
        date(Some("+2d")),
        date(None),
        "faketime did not move `date`"
    );

    let sent = env.run_command({
        ahead.stdin(std::process::Stdio::null());
        ahead
    });
    assert_eq!(sent.status, 0, "{sent}");
    let sent = sent.json();

    // The skewed process wrote, so it swept: the lease must still be live.
    let shown = run(&env, &["show", "--thread", &thread]);
    assert_eq!(shown["thread"]["status"], "claimed", "{shown}");
    assert_eq!(shown["thread"]["lease"]["expires_at"], expires_at.as_str());
    // And its records carry the machine's time, not two days later.
    let stamped = sent["message"]["created_at"].as_str().unwrap();
    assert!(
        stamped[..10] <= expires_at[..10],
        "stamped {stamped}, lease ends {expires_at}"
    );
}
