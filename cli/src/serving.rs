//! What `inbox` gives the server programs it starts (`inbox-mcp`,
//! `inbox-serve`): their command line, read with `inbox`'s own parser, so
//! that `inbox mcp --help` and `inbox-mcp --help` say the same and a flag
//! means the same everywhere. This module must never serve anything.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use inbox_engine::EngineError;
use inbox_host_native::hosted;

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
                return Err(hosted::refuse(command, error, json));
            }
            if given
                .iter()
                .any(|a| hosted::on_command_line(a, "--agent-token"))
            {
                hosted::log(&format!(
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
            Err(hosted::refuse(
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
