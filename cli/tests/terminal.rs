//! Text agents write reaches people's terminals as visible text, never as
//! escape sequences: run on a real pseudo-terminal (so colours are on and
//! the command believes it talks to a person), every command that prints an
//! agent's words shows the hostile bytes escaped. `--json` stays exact.

use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::process::Stdio;

use crate::common::TestEnv;

/// Escape sequences an agent might plant: retitle the window, write the
/// clipboard (OSC 52), clear the screen, return to the line start.
const HOSTILE_BODY: &str =
    "fine\u{1b}]0;pwned\u{7}\u{1b}]52;c;ZWNobyBwd25lZA==\u{7}\u{1b}[2J\rrewritten\u{9b}31m";
/// A right-to-left override, allowed in one-line text (it is not a control).
const REVERSED: &str = "Fix \u{202e}gnitset";

/// Runs `inbox args` with stdout and stderr on a fresh pseudo-terminal and
/// returns every byte it printed there.
pub(crate) fn on_a_terminal(env: &TestEnv, args: &[&str]) -> Vec<u8> {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    let mut command = env.command(args);
    command
        .env_remove("NO_COLOR")
        .env("TERM", "xterm-256color")
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = command.spawn().unwrap();
    drop(command);
    let status = child.wait().unwrap();
    assert!(status.code().is_some(), "{args:?} was killed");
    let mut out = Vec::new();
    let mut master = std::fs::File::from(master.as_fd().try_clone_to_owned().unwrap());
    let mut buf = [0; 4096];
    // After the child exits, reading the master ends with EIO (or 0).
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// The hostile bytes that must never reach a terminal from an agent's text.
fn assert_defused(printed: &[u8], what: &str) {
    let text = String::from_utf8_lossy(printed);
    for planted in [
        "\u{1b}]",
        "\u{1b}[2J",
        "\u{7}",
        "\u{9b}",
        "\u{202e}",
        "\rrewritten",
    ] {
        assert!(
            !text.contains(planted),
            "{what} printed {planted:?} raw:\n{text:?}"
        );
    }
}

#[test]
fn agents_text_is_escaped_on_a_terminal_and_exact_in_json() {
    let env = TestEnv::initialized();
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            REVERSED,
            "--body",
            HOSTILE_BODY,
        ],
        0,
    );
    assert_eq!(sent["message"]["body"], HOSTILE_BODY, "--json is exact");
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    env.json(&["claim", "--agent", "w", "--thread", &thread], 0);
    env.json(
        &[
            "update",
            "--agent",
            "w",
            "--thread",
            &thread,
            "--status",
            "blocked",
            "--summary",
            REVERSED,
            "--body",
            HOSTILE_BODY,
        ],
        0,
    );
    env.json(
        &[
            "reply",
            "--from",
            "lead",
            "--thread",
            &thread,
            "--summary",
            REVERSED,
            "--body",
            HOSTILE_BODY,
        ],
        0,
    );

    for args in [
        vec!["show", "--thread", &thread],
        vec!["list"],
        vec![
            "wait-reply",
            "--agent",
            "w",
            "--thread",
            &thread,
            "--after-event",
            "0",
            "--timeout-seconds",
            "0",
        ],
        vec!["watch", "--after-event", "0", "--timeout-seconds", "0"],
        vec!["show", "--thread", "thr_\u{1b}]0;pwned\u{7}"],
        vec!["fetch", "--agent", "w", "--status", "pending,\u{1b}[2J"],
    ] {
        let printed = on_a_terminal(&env, &args);
        assert_defused(&printed, &args.join(" "));
    }

    // The escapes are visible instead, and colours still work.
    let shown = on_a_terminal(&env, &["show", "--thread", &thread]);
    let text = String::from_utf8_lossy(&shown);
    assert!(text.contains("\\x1b]0;pwned\\x07"), "{text}");
    assert!(text.contains("\\u{202e}gnitset"), "{text}");
    assert!(
        text.contains("\u{1b}[1m"),
        "no colours on a terminal: {text:?}"
    );
}
