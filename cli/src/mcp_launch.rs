//! `inbox mcp`: starts the MCP server, `inbox-mcp`, installed beside this
//! binary, with the arguments `inbox` was given.
//!
//! The server lives in a program of its own so that its async runtime and
//! the MCP SDK are never linked into `inbox`: every plain command is a
//! process of its own, and what it loads is what it costs. This module only
//! finds that program and hands the process over to it (on Unix, by
//! replacing this process, so the agent runtime talks to the server
//! directly and signals reach it). It must never serve anything itself.

use std::ffi::OsString;
use std::path::PathBuf;

use inbox_engine::{EngineError, Response};

use crate::args::Global;

/// The server program's file name.
pub(crate) const SERVER: &str = "inbox-mcp";

/// Replaces this process with `inbox-mcp` and this process's arguments.
/// Returns only when that cannot be done: the exit code of the refusal,
/// which says how to install the server.
pub(crate) fn launch(global: &Global) -> u8 {
    let arguments: Vec<OsString> = std::env::args_os().skip(1).collect();
    let server = match sibling() {
        Some(server) if server.is_file() => server,
        looked => return refuse(global, looked, None),
    };
    let mut command = std::process::Command::new(&server);
    command.args(&arguments);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let error = command.exec();
        refuse(global, Some(server), Some(error))
    }
    #[cfg(not(unix))]
    match command.status() {
        Ok(status) => status
            .code()
            .and_then(|code| u8::try_from(code).ok())
            .unwrap_or(50),
        Err(error) => refuse(global, Some(server), Some(error)),
    }
}

/// `inbox-mcp` in the folder of the running `inbox`, where `cargo install`
/// puts both.
fn sibling() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let name = format!("{SERVER}{}", std::env::consts::EXE_SUFFIX);
    Some(exe.parent()?.join(name))
}

/// The refusal when the server cannot be started: like `--engine` in a
/// build without plugins, a value this installation cannot honour, with
/// the command that installs what is missing.
fn refuse(global: &Global, looked: Option<PathBuf>, error: Option<std::io::Error>) -> u8 {
    let place = looked.map_or_else(
        || "beside this inbox".to_owned(),
        |path| format!("at {}", path.display()),
    );
    let problem = match error {
        None => format!(
            "needs the MCP server, {SERVER}, installed {place}, and it is not there; install it with `cargo install --path cli --locked`, which installs inbox, orch and {SERVER} together"
        ),
        Some(error) => format!("could not start {SERVER} {place}: {error}"),
    };
    let response = Response::failure(
        Some("mcp".to_owned()),
        EngineError::InvalidValue {
            field: "mcp".into(),
            problem,
        },
    );
    crate::finish(&response, global.json, None, &[])
}
