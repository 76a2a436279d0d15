//! What the server programs `inbox` starts (`inbox-mcp`, `inbox-serve`)
//! share before and around serving: refusing to start in the JSON
//! contract's shape, lines for people on stderr made safe for a terminal,
//! and acting as the one agent a server was started as. (Their arguments
//! are read with `inbox`'s own parser: `inbox_cli::serving`.) This module
//! must never serve anything or decide what a request means.

use std::ffi::OsString;
use std::process::ExitCode;

use inbox_engine::{EngineError, Response};

/// Whether `word` is the flag `flag`, alone or with its value after `=`.
pub fn on_command_line(word: &OsString, flag: &str) -> bool {
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
