//! Help text is user interface: the root help must explain the worker loop,
//! and each command's help when to use it, with copyable examples. Every
//! help screen is snapshotted so a change to it is a reviewed change.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::TestEnv;

#[test]
fn root_help_explains_the_worker_loop() {
    let env = TestEnv::new();
    let run = env.run(&["--help"]);
    assert_eq!(run.status, 0);
    assert!(run.stdout.contains("fetch") && run.stdout.contains("wait-reply"));
    insta::assert_snapshot!(run.to_string());
}

#[test]
fn every_command_has_help_that_says_when_to_use_it() {
    let env = TestEnv::new();
    for command in [
        "init",
        "send",
        "fetch",
        "claim",
        "renew",
        "update",
        "reply",
        "done",
        "fail",
        "cancel",
        "list",
        "show",
        "watch",
        "wait-reply",
        "skill",
        "script",
    ] {
        let run = env.run(&[command, "--help"]);
        assert_eq!(run.status, 0, "{command}: {run}");
        insta::assert_snapshot!(format!("help_{command}"), run.to_string());
    }
}

#[test]
fn list_show_and_watch_help_draw_the_distinctions_users_ask_about() {
    let env = TestEnv::new();
    let list = env.run(&["list", "--help"]).stdout;
    assert!(list.contains("Unlike fetch"), "{list}");
    let show = env.run(&["show", "--help"]).stdout;
    assert!(show.contains("thread-history"), "{show}");
    let watch = env.run(&["watch", "--help"]).stdout;
    assert!(watch.contains("wait-reply follows one thread"), "{watch}");
}

#[test]
fn short_help_lists_every_command() {
    let env = TestEnv::new();
    let run = env.run(&["-h"]);
    assert_eq!(run.status, 0);
    insta::assert_snapshot!(run.to_string());
}

#[test]
fn no_command_is_a_usage_error() {
    let env = TestEnv::new();
    let run = env.run(&[]);
    assert_eq!(run.status, 30, "{run}");
}
