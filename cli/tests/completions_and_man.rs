//! `inbox completions SHELL`, `inbox man` and their `orch` twins are
//! generated from the command definitions, so they must cover every command
//! the binary has: each test walks the clap tree (`Cli::command()`,
//! `OrchCli::command()`) rather than a list of its own, and a new command is
//! checked without touching this file. The scripts and pages are run through
//! the real tools that read them when those are installed (bash, zsh, fish,
//! groff, mandoc), and skipped with a message when not. None of these
//! commands may need a database.

use std::path::Path;
use std::process::Command;

use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;
use inbox_cli::args::Cli;
use inbox_cli::orch_args::OrchCli;

use crate::common::{Run, TestEnv};

/// The two binaries: the name to run, and its command definition.
fn binaries() -> [(&'static str, clap::Command); 2] {
    [("inbox", Cli::command()), ("orch", OrchCli::command())]
}

/// Every command of `command` as typed (`["agent", "register"]`), groups
/// and their subcommands alike, but not the `help` that clap adds to each
/// group.
fn paths(command: clap::Command) -> Vec<Vec<String>> {
    fn walk(command: &clap::Command, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        for sub in command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
        {
            at.push(sub.get_name().to_owned());
            out.push(at.clone());
            walk(sub, at, out);
            at.pop();
        }
    }
    // Subcommands are deferred: build the whole tree to see them all.
    let mut command = command;
    command.build();
    let mut out = Vec::new();
    walk(&command, &mut Vec::new(), &mut out);
    out
}

/// Runs `binary args...` in `env`'s folder, which has no database.
fn run(env: &TestEnv, binary: &str, args: &[&str]) -> Run {
    match binary {
        "inbox" => env.run(args),
        _ => env.orch(args),
    }
}

/// Whether `text` has `word` standing alone: not inside a longer name
/// (`man` in `command`, `run` in `run-list` or `orch__run`).
fn has_word(text: &str, word: &str) -> bool {
    let pattern = format!(
        "(^|[^A-Za-z0-9_-]){}($|[^A-Za-z0-9_-])",
        regex::escape(word)
    );
    regex::Regex::new(&pattern).unwrap().is_match(text)
}

/// Whether a program is installed, for the checks that need it.
fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn every_shell_s_completions_name_every_command_without_a_database() {
    for (binary, command) in binaries() {
        let paths = paths(command);
        for shell in Shell::value_variants() {
            let env = TestEnv::new();
            let run = run(&env, binary, &["completions", &shell.to_string()]);
            assert_eq!(run.status, 0, "{binary} completions {shell}: {run}");
            assert!(run.stderr.is_empty(), "{binary} completions {shell}: {run}");
            for path in &paths {
                for word in path {
                    assert!(
                        has_word(&run.raw_stdout, word),
                        "{binary} completions {shell} does not mention `{}`",
                        path.join(" ")
                    );
                }
            }
            // A nested command is completed after its group: PowerShell's
            // script spells each command's full path.
            if *shell == Shell::PowerShell {
                for path in &paths {
                    let full = format!("'{binary};{}'", path.join(";"));
                    assert!(run.raw_stdout.contains(&full), "no {full}");
                }
            }
            // Nothing was created: no database, no folder for one.
            assert!(std::fs::read_dir(env.dir()).unwrap().next().is_none());
        }
    }
}

/// `completions` works when `$INBOX_DB` names a database that is not there.
#[test]
fn completions_and_man_ignore_a_database_that_is_not_there() {
    let env = TestEnv::new();
    for args in [&["completions", "zsh"][..], &["man"]] {
        let mut command = env.command(args);
        command.env("INBOX_DB", env.dir().join("missing/coord.db"));
        let run = env.run_command(command);
        assert_eq!(run.status, 0, "{args:?}: {run}");
        assert!(!env.dir().join("missing").exists());
    }
}

/// The bash script is valid bash, registers the completion, and completes
/// every group's commands after the group's name, as a user's tab would.
#[test]
fn bash_completes_every_command_after_its_group() {
    if !installed("bash") {
        eprintln!("skipped: bash is not installed");
        return;
    }
    for (binary, command) in binaries() {
        let env = TestEnv::new();
        let script = run(&env, binary, &["completions", "bash"]);
        assert_eq!(script.status, 0, "{script}");
        let file = env.dir().join("completion.bash");
        std::fs::write(&file, &script.raw_stdout).unwrap();
        let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
        assert!(syntax.status.success(), "{binary}: {syntax:?}");

        let paths = paths(command);
        // The groups, the binary itself first, with the commands under each.
        let mut groups: Vec<Vec<String>> = vec![Vec::new()];
        groups.extend(
            paths
                .iter()
                .filter(|p| {
                    paths
                        .iter()
                        .any(|q| q.len() == p.len() + 1 && q.starts_with(p))
                })
                .cloned(),
        );
        for group in groups {
            let offered = bash_complete(&file, binary, &group);
            let expected = paths
                .iter()
                .filter(|p| p.len() == group.len() + 1 && p.starts_with(&group))
                .map(|p| p[group.len()].clone());
            for name in expected {
                assert!(
                    offered.contains(&name),
                    "`{binary} {} <TAB>` does not offer {name}: {offered:?}",
                    group.join(" ")
                );
            }
        }
    }
}

/// What bash offers for `binary words... <TAB>`, with the script at `file`
/// sourced and its function called as `complete -F` calls it.
fn bash_complete(file: &Path, binary: &str, words: &[String]) -> Vec<String> {
    let words = words.join(" ");
    let script = format!(
        r#"source "$1" || exit 3
complete -p {binary} >/dev/null || exit 4
COMP_WORDS=({binary} {words} "")
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="{binary} {words} "
COMP_POINT=${{#COMP_LINE}}
prev=${{COMP_WORDS[COMP_CWORD-1]}}
_{binary} {binary} "" "$prev"
printf '%s\n' "${{COMPREPLY[@]}}""#
    );
    let output = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script, "bash"])
        .arg(file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{binary} {words}: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// zsh and fish check their scripts' syntax, where they are installed.
#[test]
fn zsh_and_fish_accept_their_scripts() {
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"])] {
        if !installed(shell) {
            eprintln!("skipped: {shell} is not installed, so its script's syntax is not checked");
            continue;
        }
        for (binary, _) in binaries() {
            let env = TestEnv::new();
            let script = run(&env, binary, &["completions", shell]);
            assert_eq!(script.status, 0, "{script}");
            let file = env.dir().join("completion");
            std::fs::write(&file, &script.raw_stdout).unwrap();
            let output = Command::new(shell).args(check).arg(&file).output().unwrap();
            assert!(output.status.success(), "{binary} {shell}: {output:?}");
        }
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    for (binary, _) in binaries() {
        let env = TestEnv::new();
        let run = run(&env, binary, &["completions", "tcsh"]);
        assert_eq!(run.status, 30, "{run}");
        assert!(run.stdout.is_empty(), "{run}");
        assert!(run.stderr.contains("possible values: bash"), "{run}");

        let json = self::run(&env, binary, &["completions", "tcsh", "--json"]);
        assert_eq!(json.status, 30, "{json}");
        let json = json.json();
        assert_eq!(json["ok"], false);
        let command = if binary == "inbox" {
            "completions"
        } else {
            "orch-completions"
        };
        assert_eq!(json["command"], command);
        assert_eq!(json["error"]["code"], "invalid_request");
        let message = json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("see `{binary} completions --help`")),
            "{message}"
        );
    }
}

#[test]
fn with_json_the_script_and_the_page_are_fields_of_one_object() {
    for (binary, _) in binaries() {
        let env = TestEnv::new();
        let prefix = if binary == "inbox" { "" } else { "orch-" };
        let plain = run(&env, binary, &["completions", "fish"]).raw_stdout;
        let json = run(&env, binary, &["completions", "fish", "--json"]).json();
        assert_eq!(json["command"], format!("{prefix}completions"));
        assert_eq!(json["completions"], plain);
        let plain = run(&env, binary, &["man"]).raw_stdout;
        let json = run(&env, binary, &["man", "--json"]).json();
        assert_eq!(json["command"], format!("{prefix}man"));
        assert_eq!(json["man"], plain);
    }
}

/// Roff escapes a name's hyphens (`inbox\-agent\-register`); the checks read
/// names as a reader of the page sees them.
fn unescaped(roff: &str) -> String {
    roff.replace("\\-", "-")
}

#[test]
fn the_man_page_lists_every_command_and_renders() {
    for (binary, command) in binaries() {
        let env = TestEnv::new();
        let run = run(&env, binary, &["man"]);
        assert_eq!(run.status, 0, "{run}");
        assert!(run.stderr.is_empty(), "{run}");
        let page = unescaped(&run.raw_stdout);
        assert!(page.contains(&format!("\n.TH {binary} 1 ")), "{page}");
        // Its commands, each by the name of its own page.
        for path in paths(command).iter().filter(|p| p.len() == 1) {
            let reference = format!("{binary}-{}(1)", path[0]);
            assert!(page.contains(&reference), "{binary} man lacks {reference}");
        }
        assert_renders(&env, binary, &run.raw_stdout);
        assert!(std::fs::read_dir(env.dir()).unwrap().next().is_none());
    }
}

#[test]
fn man_dir_writes_one_page_per_command() {
    for (binary, command) in binaries() {
        let env = TestEnv::new();
        let json = match binary {
            "inbox" => env.json(&["man", "--dir", "man/man1"], 0),
            _ => env.orch_json(&["man", "--dir", "man/man1"], 0),
        };
        let dir = env.dir().join("man/man1");
        let paths = paths(command);
        let mut expected: Vec<String> = paths
            .iter()
            .map(|path| format!("{binary}-{}.1", path.join("-")))
            .collect();
        expected.push(format!("{binary}.1"));
        expected.sort();
        let mut written: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        written.sort();
        assert_eq!(written, expected);
        let mut reported: Vec<String> = json["installed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|path| path.as_str().unwrap().to_owned())
            .collect();
        reported.sort();
        let full: Vec<String> = expected
            .iter()
            .map(|file| dir.join(file).display().to_string())
            .collect();
        assert_eq!(reported, full);

        // Each page is the command's own: its title, and its synopsis as
        // typed (`inbox agent register`).
        for path in &paths {
            let title = format!("{binary}-{}", path.join("-"));
            let page = std::fs::read_to_string(dir.join(format!("{title}.1"))).unwrap();
            assert!(
                unescaped(&page).contains(&format!("\n.TH {title} 1 ")),
                "{title}"
            );
            let typed = format!("\\fB{binary} {}\\fR", path.join(" "));
            assert!(
                unescaped(&page).contains(&unescaped(&typed)),
                "{title}: {page}"
            );
            assert_renders(&env, &title, &page);
        }
    }
}

/// A page left where `man --dir` writes is replaced, and a symbolic link
/// there is replaced rather than followed, as for `skill --install`.
#[test]
fn man_dir_replaces_a_planted_link_instead_of_following_it() {
    let env = TestEnv::new();
    let victim = env.dir().join("victim.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let dir = env.dir().join("man1");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("inbox-send.1")).unwrap();
    let run = env.run(&["man", "--dir", "man1"]);
    assert_eq!(run.status, 0, "{run}");
    assert!(
        run.stdout.contains("Installed $TEST_DIR/man1/inbox-send.1"),
        "{run}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    let page = dir.join("inbox-send.1");
    assert!(!page.symlink_metadata().unwrap().file_type().is_symlink());

    // A file where the folder should be is refused, in the JSON contract.
    std::fs::write(env.dir().join("not-a-folder"), "").unwrap();
    let run = env.run(&["man", "--dir", "not-a-folder", "--json"]);
    assert_eq!(run.status, 30, "{run}");
    assert_eq!(run.json()["error"]["code"], "invalid_value");
    assert_eq!(run.json()["command"], "man");
}

/// The page renders without an error or a warning about its roff in
/// whichever of groff and mandoc is installed (both, where both are).
fn assert_renders(env: &TestEnv, name: &str, roff: &str) {
    let file = env.dir().join(format!("{name}.render.1"));
    std::fs::write(&file, roff).unwrap();
    let mut checked = false;
    if installed("groff") {
        let output = Command::new("groff")
            // Every warning but `break`: a long example line that cannot be
            // adjusted to the page's width is typography, not bad roff.
            .args(["-man", "-Tutf8", "-ww", "-Wbreak", "-z"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            output.status.success() && output.stderr.is_empty(),
            "groff on {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        checked = true;
    }
    if installed("mandoc") {
        let output = Command::new("mandoc")
            // Errors only: its style warnings (a page with no date) are
            // opinions clap_mangen does not share.
            .args(["-T", "lint", "-W", "error"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "mandoc on {name}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        checked = true;
    }
    if !checked {
        eprintln!(
            "skipped: neither groff nor mandoc is installed, so {name}'s page is not rendered"
        );
    }
    std::fs::remove_file(file).unwrap();
}
