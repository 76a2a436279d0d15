//! Help text is user interface: the root help must explain the worker loop,
//! and each command's help when to use it, with copyable examples. Every
//! help screen is snapshotted so a change to it is a reviewed change.

use crate::common::TestEnv;
use clap::CommandFactory;
use inbox_cli::args::Cli;
use inbox_engine::Command as EngineCommand;

#[test]
fn root_help_explains_the_worker_loop() {
    let env = TestEnv::new();
    let run = env.run(&["--help"]);
    assert_eq!(run.status, 0);
    assert!(run.stdout.contains("fetch") && run.stdout.contains("wait-reply"));
    insta::assert_snapshot!(run.to_string());
}

/// The subcommands, as the command line defines them.
/// Every command's name as the JSON contract spells it: a group's
/// commands joined to it (`agent register` is `agent-register`).
fn subcommands() -> Vec<String> {
    paths().iter().map(|words| words.join("-")).collect()
}

/// Every command as typed (`["agent", "register"]`), groups included.
fn paths() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // Subcommands are deferred: build the whole tree to see them all.
    let mut cli = Cli::command();
    cli.build();
    for c in cli.get_subcommands() {
        let group = c.get_name().to_owned();
        let mut nested = c
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .peekable();
        if nested.peek().is_none() {
            out.push(vec![group.clone()]);
        }
        for sub in nested {
            out.push(vec![group.clone(), sub.get_name().to_owned()]);
        }
    }
    out
}

#[test]
fn every_command_has_help_that_says_when_to_use_it() {
    let env = TestEnv::new();
    let mut cli = Cli::command();
    cli.build();
    let groups = cli
        .get_subcommands()
        .filter(|c| c.has_subcommands())
        .map(|c| vec![c.get_name().to_owned()])
        .collect::<Vec<_>>();
    for words in paths().into_iter().chain(groups) {
        let command = words.join("-");
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let run = env.run(&args);
        assert_eq!(run.status, 0, "{command}: {run}");
        assert!(
            run.stdout.contains("Examples:"),
            "{command} has no examples"
        );
        insta::assert_snapshot!(format!("help_{command}"), run.to_string());
    }
}

/// Every inbox command a person runs has a subcommand of the same name;
/// the engine's `sweep` (every write does it) and `version` (`inbox
/// --version`) are for hosts, and the `orch-*` commands are `orch`'s (see
/// `orch.rs`). The command line's own tools are the rest.
#[test]
fn the_subcommands_are_the_engine_s_commands_and_the_tools() {
    let names = subcommands();
    let missing: Vec<&str> = EngineCommand::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|name| !name.starts_with("orch-"))
        .filter(|name| !names.iter().any(|n| n == name))
        .collect();
    assert_eq!(missing, ["sweep", "version"]);
    let tools: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| EngineCommand::parse(name).is_none())
        .collect();
    assert_eq!(
        tools,
        [
            "skill",
            "script",
            "export",
            "import",
            "bridge-file-drop",
            "bridge-teams",
            "mcp",
            "serve",
            "daemon",
            "completions",
            "man"
        ]
    );
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
