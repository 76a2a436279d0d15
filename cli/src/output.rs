//! Writing a result where the caller reads it, and saying so when that
//! fails.
//!
//! A command's effect is committed before its result is printed. If stdout
//! cannot take the result (a full disk behind `> file`, an I/O error), the
//! command must not exit 0 as if the caller had it: the result goes to
//! stderr instead, with what happened, and the exit is 50. A closed pipe
//! (`inbox list | head`) is the reader's choice, not a failure: the exit
//! code stays the command's. This module must never decide anything about
//! a command; it only delivers text.

use std::io::{ErrorKind, Write as _};

/// The exit code of a result that could not be delivered.
const UNDELIVERED: u8 = 50;

/// Whether a command's result is worth telling when its reader has gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// It only read: a closed pipe means the reader had enough.
    Read,
    /// It changed something (a lease taken, a file written): if the reader
    /// closed the pipe, stderr still says what happened, e.g. which lease
    /// token the caller now holds, since nothing else will.
    Changed,
}

/// Writes `out` to stdout and `err` to stderr, then returns `exit`; if
/// stdout fails, returns 50 after telling stderr what `lost` says was lost
/// (computed only then). A closed pipe keeps `exit`, and is told on stderr
/// only for a command that changed something.
pub(crate) fn deliver(
    out: &str,
    err: &str,
    exit: u8,
    effect: Effect,
    lost: impl FnOnce() -> String,
) -> u8 {
    let written = write_stdout(out);
    stderr(err);
    match written {
        Ok(()) => exit,
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            if effect == Effect::Changed {
                stderr(&format!(
                    "inbox: the reader of stdout closed it before the result; {}\n",
                    inbox_host_native::terminal::safe(&lost())
                ));
            }
            exit
        }
        Err(e) => {
            stderr(&format!(
                "inbox: the result could not be written to stdout ({e}); {}\n",
                inbox_host_native::terminal::safe(&lost())
            ));
            UNDELIVERED
        }
    }
}

/// A success in the JSON contract's shape for what only the command line
/// answers (help, the tools): `{"ok": true, "command": ..., <fields>}` on
/// one line, `ok` and `command` first as in every response.
pub(crate) fn success_json(command: Option<&str>, fields: serde_json::Value) -> String {
    #[derive(serde::Serialize)]
    struct Success<'a> {
        ok: bool,
        command: Option<&'a str>,
        #[serde(flatten)]
        fields: serde_json::Value,
    }
    let body = Success {
        ok: true,
        command,
        fields,
    };
    format!("{}\n", serde_json::to_string(&body).unwrap_or_default())
}

/// Writes `text` to stderr; a failure there has nowhere left to be told.
pub(crate) fn stderr(text: &str) {
    if text.is_empty() {
        return;
    }
    let mut stderr = anstream::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.flush();
}

/// Writes all of `text` to stdout and flushes it, so a failure is seen here
/// rather than lost at exit.
pub(crate) fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = anstream::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}
