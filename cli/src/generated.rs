//! What the command line generates about itself from its own clap
//! definition: shell completion scripts (`inbox completions SHELL`) and man
//! pages (`inbox man`), for `inbox` and `orch` alike, written once and
//! generic over the binary's `clap::Command`. This module must never open a
//! database, nor describe a command from anything but that definition: what
//! it prints cannot then drift from what the binary parses.

use std::path::Path;

use clap_complete::Shell;
use clap_mangen::Man;
use inbox_engine::EngineError;

use crate::{output, tools};

/// `completions SHELL`: print the script that completes `command` in
/// `shell`. `name` is the command as the JSON contract spells it
/// (`completions`, `orch-completions`).
pub(crate) fn completions(command: clap::Command, shell: Shell, name: &str, json: bool) -> u8 {
    let mut command = built(command);
    let bin = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, bin, &mut script);
    let script = String::from_utf8_lossy(&script).into_owned();
    let out = if json {
        output::success_json(Some(name), serde_json::json!({ "completions": script }))
    } else {
        script
    };
    output::deliver(&out, "", 0, output::Effect::Read, || {
        "the completion script was not printed".to_owned()
    })
}

/// `man`: print the binary's own page (its overview, global options and
/// the list of its commands), or with `dir` write it and every command's
/// page there, named as `man` looks them up (`inbox-agent-register.1`).
pub(crate) fn man(command: clap::Command, dir: Option<&Path>, name: &str, json: bool) -> u8 {
    let command = built(command);
    let Some(dir) = dir else {
        let page = String::from_utf8_lossy(&render(&Man::new(command))).into_owned();
        let out = if json {
            output::success_json(Some(name), serde_json::json!({ "man": page }))
        } else {
            page
        };
        return output::deliver(&out, "", 0, output::Effect::Read, || {
            "the man page was not printed".to_owned()
        });
    };
    // Every page names the binary and its version at its foot, as the
    // binary's own does (a subcommand has no version of its own).
    let source = format!(
        "{} {}",
        command.get_name(),
        command.get_version().unwrap_or("")
    );
    let mut pages = Vec::new();
    every_page(&command, &source, &mut pages);
    match install(dir, &pages) {
        Ok(installed) => {
            let shown: Vec<String> = installed
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            let out = if json {
                output::success_json(Some(name), serde_json::json!({ "installed": shown }))
            } else {
                shown
                    .iter()
                    .map(|path| format!("Installed {path}\n"))
                    .collect()
            };
            output::deliver(&out, "", 0, output::Effect::Changed, || {
                format!("the man pages were installed: {}", shown.join(", "))
            })
        }
        Err(problem) => tools::fail(
            name,
            EngineError::InvalidValue {
                field: "dir".into(),
                problem,
            },
            json,
        ),
    }
}

/// The binary's command with every subcommand built: they are deferred
/// (built only when parsed), and their names as typed (`inbox agent
/// register`) and as pages (`inbox-agent-register`) are set by building
/// from the root's name.
fn built(command: clap::Command) -> clap::Command {
    let bin = command.get_name().to_owned();
    let mut command = command.bin_name(bin);
    command.build();
    command
}

/// One page per command, `command`'s first, then each subcommand's (and
/// theirs), as file name and roff.
fn every_page(command: &clap::Command, source: &str, pages: &mut Vec<(String, Vec<u8>)>) {
    let man = Man::new(command.clone()).source(source);
    pages.push((man.get_filename(), render(&man)));
    // clap adds a `help` subcommand to each group (`inbox agent help`): it
    // prints the others' help, which their own pages already are.
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        every_page(sub, source, pages);
    }
}

/// A page's roff.
fn render(man: &Man) -> Vec<u8> {
    let mut page = Vec::new();
    // Writing to a Vec cannot fail; the Result is the writer's signature.
    let _ = man.render(&mut page);
    page
}

/// Writes `pages` into `dir`, created if missing, and returns their paths.
fn install(dir: &Path, pages: &[(String, Vec<u8>)]) -> Result<Vec<std::path::PathBuf>, String> {
    let folder = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    // Said plainly: create_dir_all's own words for it are "File exists".
    if folder.exists() && !folder.is_dir() {
        return Err(format!("{} exists and is not a folder", folder.display()));
    }
    std::fs::create_dir_all(&folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    pages
        .iter()
        .map(|(file, roff)| {
            tools::replace_file(&folder, file, roff)?;
            Ok(folder.join(file))
        })
        .collect()
}
