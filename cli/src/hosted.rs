//! What the server programs `inbox` starts (`inbox-mcp`, `inbox-serve`)
//! share before and around serving: reading their arguments with `inbox`'s
//! own parser, refusing to start in the JSON contract's shape, and lines
//! for people on stderr, made safe for a terminal. This module must never
//! serve anything or decide what a request means.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use inbox_engine::{EngineError, Response};

use crate::args::Cli;

/// The command line of a server started as `inbox COMMAND ARGS` (`inbox`
/// passes `ARGS` on) or run by hand with the flags alone, read with
/// `inbox`'s parser. Help and usage errors are answered here, and the exit
/// code to end with is returned instead.
pub fn arguments(command: &str, json: bool) -> Result<Cli, ExitCode> {
    let given: Vec<OsString> = std::env::args_os().skip(1).collect();
    let parse = |subcommand: Option<&str>| {
        let argv = std::iter::once(OsString::from("inbox"))
            .chain(subcommand.map(OsString::from))
            .chain(given.iter().cloned());
        Cli::command()
            .try_get_matches_from(argv)
            .and_then(|matches| {
                let named = matches.subcommand_name() == Some(command);
                Cli::from_arg_matches(&matches).map(|cli| (cli, named))
            })
    };
    let parsed = match parse(None) {
        Ok((cli, true)) => Ok(cli),
        _ => parse(Some(command)).map(|(cli, _)| cli),
    };
    match parsed {
        Ok(mut cli) => {
            if let Err(error) = cli.global.resolve_agent_token() {
                return Err(refuse(command, error, json));
            }
            if given.iter().any(|a| on_command_line(a, "--agent-token")) {
                log(&format!(
                    "warning: --agent-token puts the token in this process's command line, which every local user can read with `ps` while it runs; give it with --agent-token-file or $INBOX_AGENT_TOKEN instead (`inbox {command}` does that for you)"
                ));
            }
            Ok(cli)
        }
        Err(error) if !error.use_stderr() => {
            // Help, asked for by hand: nothing else is on stdout yet.
            let _ = error.print();
            Err(ExitCode::SUCCESS)
        }
        Err(error) => {
            let text = error.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            Err(refuse(
                command,
                EngineError::InvalidRequest {
                    message: format!(
                        "{}; see `inbox {command} --help`",
                        first.strip_prefix("error: ").unwrap_or(first)
                    ),
                },
                json,
            ))
        }
    }
}

/// Whether `word` is the flag `flag`, alone or with its value after `=`.
pub(crate) fn on_command_line(word: &OsString, flag: &str) -> bool {
    word.to_str().is_some_and(|word| {
        word == flag
            || word
                .strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// Says why the server cannot run or stopped, in the JSON contract's
/// shape, and exits with its code: on stdout with `--json` (nothing else is
/// on stdout then), on stderr otherwise.
pub fn refuse(command: &str, error: EngineError, json: bool) -> ExitCode {
    use std::io::Write as _;
    let response = Response::failure(Some(command.into()), error);
    if json {
        let _ = writeln!(std::io::stdout().lock(), "{}", response.to_json());
    } else {
        log(&response.to_json());
    }
    ExitCode::from(response.exit_code())
}

/// A line for people, on stderr, with control characters and bidi
/// overrides shown as visible escapes: servers log what agents wrote
/// (subjects, names), which may hold anything.
pub fn log(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{}", crate::terminal::safe(line));
}

/// Makes a call's acting field (the command table's: `from_agent` for
/// `send`, `agent` for `cancel`...) the server's own agent: filled in when
/// absent, refused when it names another, so a server only ever acts as
/// the one agent it was started as. `acts_as` says who that is and how it
/// was chosen, for the refusal ("this board writes as `human` (inbox
/// serve --as human)").
pub fn act_as(
    command: inbox_engine::Command,
    agent: &str,
    arguments: &mut serde_json::Map<String, serde_json::Value>,
    acts_as: &str,
) -> Result<(), EngineError> {
    use serde_json::Value;
    let Some(field) = command.acting_field() else {
        return Ok(());
    };
    match arguments.get(field) {
        None | Some(Value::Null) => {}
        Some(Value::String(given)) if given == agent => {}
        Some(given) => {
            return Err(EngineError::InvalidValue {
                field: field.into(),
                problem: format!("is {given}, but {acts_as}; leave it out"),
            });
        }
    }
    arguments.insert(field.into(), agent.into());
    Ok(())
}
