//! `inbox mcp` and `inbox serve`: start the MCP server (`inbox-mcp`) or the
//! board's server (`inbox-serve`), installed beside this binary, with the
//! arguments `inbox` was given.
//!
//! Each server lives in a program of its own so that its async runtime,
//! the MCP SDK and the HTTP stack are never linked into `inbox`: every
//! plain command is a process of its own, and what it loads is what it
//! costs. This module only finds that program and hands the process over
//! to it (on Unix, by replacing this process, so the agent runtime or the
//! terminal talks to the server directly and signals reach it). It must
//! never serve anything itself.
//!
//! A server runs for hours, and its command line is there for every local
//! user to read (`ps`, `/proc/PID/cmdline`): so the agent token never goes
//! on it. The token `inbox` was given (`--agent-token`, or read from
//! `--agent-token-file`) is handed over in the server's environment,
//! which only its own user can read, and the flags are left out.

use std::ffi::OsString;
use std::path::PathBuf;

use inbox_engine::{EngineError, Response};

use inbox_host_native::Global;

/// A server program `inbox` starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Server {
    /// The command that starts it (`mcp`), as the JSON contract names it.
    command: &'static str,
    /// The program's file name (`inbox-mcp`).
    program: &'static str,
    /// What it is, for people.
    what: &'static str,
}

/// `inbox mcp`.
pub(crate) const MCP: Server = Server {
    command: "mcp",
    program: "inbox-mcp",
    what: "the MCP server",
};

/// `inbox serve`.
pub(crate) const SERVE: Server = Server {
    command: "serve",
    program: "inbox-serve",
    what: "the board's server",
};

/// Replaces this process with `server`'s program and this process's
/// arguments. Returns only when that cannot be done: the exit code of the
/// refusal, which says how to install the server.
pub(crate) fn launch(server: Server, global: &Global) -> u8 {
    let arguments = without_token(std::env::args_os().skip(1));
    let program = match sibling(server) {
        Some(program) if program.is_file() => program,
        looked => return refuse(server, global, looked, None),
    };
    let mut command = std::process::Command::new(&program);
    command.args(&arguments).env_remove(TOKEN_FILE_ENV);
    match &global.agent_token {
        Some(token) => command.env(TOKEN_ENV, token),
        None => command.env_remove(TOKEN_ENV),
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let error = command.exec();
        refuse(server, global, Some(program), Some(error))
    }
    #[cfg(not(unix))]
    match command.status() {
        Ok(status) => status
            .code()
            .and_then(|code| u8::try_from(code).ok())
            .unwrap_or(50),
        Err(error) => refuse(server, global, Some(program), Some(error)),
    }
}

/// Where a server finds the agent token `inbox` resolved.
const TOKEN_ENV: &str = "INBOX_AGENT_TOKEN";

/// Not passed on: the token it named is in [`TOKEN_ENV`] already.
const TOKEN_FILE_ENV: &str = "INBOX_AGENT_TOKEN_FILE";

/// The flags that give the token, left off the server's command line.
const TOKEN_FLAGS: [&str; 2] = ["--agent-token", "--agent-token-file"];

/// The arguments without the token flags and their values. clap took
/// every such word as the flag (a value may not start with `--`), up to a
/// `--`, after which the words are passed on as they are.
fn without_token(arguments: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut kept = Vec::new();
    let mut arguments = arguments;
    while let Some(word) = arguments.next() {
        if word == "--" {
            kept.push(word);
            kept.extend(arguments);
            break;
        }
        if TOKEN_FLAGS.iter().any(|flag| word == *flag) {
            arguments.next();
        } else if !TOKEN_FLAGS
            .iter()
            .any(|flag| inbox_host_native::hosted::on_command_line(&word, flag))
        {
            kept.push(word);
        }
    }
    kept
}

/// The server's program in the folder of the running `inbox`, where
/// `cargo install` puts them all.
fn sibling(server: Server) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let name = format!("{}{}", server.program, std::env::consts::EXE_SUFFIX);
    Some(exe.parent()?.join(name))
}

/// The refusal when the server cannot be started: like `--engine` in a
/// build without plugins, a value this installation cannot honour, with
/// the command that installs what is missing.
fn refuse(
    server: Server,
    global: &Global,
    looked: Option<PathBuf>,
    error: Option<std::io::Error>,
) -> u8 {
    let Server {
        command,
        program,
        what,
    } = server;
    let place = looked.map_or_else(
        || "beside this inbox".to_owned(),
        |path| format!("at {}", path.display()),
    );
    let problem = match error {
        None => format!(
            "needs {what}, {program}, installed {place}, and it is not there; install it with `cargo install --path cli --locked`, which installs inbox, orch, inbox-mcp and inbox-serve together"
        ),
        Some(error) => format!("could not start {program} {place}: {error}"),
    };
    let response = Response::failure(
        Some(command.to_owned()),
        EngineError::InvalidValue {
            field: command.into(),
            problem,
        },
    );
    crate::finish(&response, global.json, None, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_flags_are_left_off_the_servers_command_line() {
        let line = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let given = line(&[
            "mcp",
            "--agent-token",
            "secret1",
            "--agent",
            "w1",
            "--agent-token=secret2",
            "--agent-token-file",
            "/t",
            "--agent-token-file=/u",
            "--json",
        ]);
        let kept = without_token(given.into_iter());
        assert_eq!(kept, line(&["mcp", "--agent", "w1", "--json"]));
        let after = line(&["serve", "--", "--agent-token", "x"]);
        assert_eq!(without_token(after.clone().into_iter()), after);
    }
}
