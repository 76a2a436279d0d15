//! `inbox bridge`: long-running processes that keep a file-based system
//! other tools already use (seed 001's drop folder, ...) working, with the
//! database as the durable, leased store behind it.
//!
//! What every bridge shares lives here: the engine it runs its requests on
//! (one connection for its whole life, opened like every command opens
//! one), the stop asked by SIGINT or SIGTERM (seen between two files, never
//! in the middle of one), and the lines it prints, one per action (with
//! `--json`, one JSON object per line). Each bridge's own module maps its
//! files to inbox requests; the engine applies every rule. This module must
//! never interpret a file.

mod descriptor;
mod file_drop;
mod sent;
mod teams;
mod teams_hint;
mod teams_line;

use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::net::UnixStream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use inbox_engine::{Call, EngineError, ErrorCode, Output, Request, Response};
use inbox_host_native::folder::Folder;
use inbox_host_native::{HostClock, NativeEngine};
use inbox_sqlite::{Lifetime, open};
use serde_json::Value;

use crate::args::{BridgeArgs, BridgeCommand};
use inbox_host_native::Global;
use inbox_host_native::terminal;

/// Runs the bridge `args` names until it is stopped (or, with `--once`,
/// until what is there is processed); returns the exit code.
pub(crate) fn run(global: &Global, args: BridgeArgs) -> u8 {
    match args.command {
        BridgeCommand::FileDrop(args) => file_drop::run(global, &args),
        BridgeCommand::Teams(args) => teams::run(global, &args),
    }
}

/// The engine a bridge runs its requests on, with the caller's token.
pub(crate) struct Bus {
    engine: NativeEngine,
    token: Option<String>,
    /// Which database, for people.
    pub(crate) database: String,
}

impl Bus {
    /// Opens the database the command line names (it must exist and be
    /// initialized, as for every command but `init`).
    pub(crate) fn open(global: &Global) -> Result<Bus, EngineError> {
        let (db, cwd) = inbox_host_native::database::resolve_db(global);
        let clock = HostClock::from_env().map_err(|e| EngineError::InvalidValue {
            field: inbox_host_native::clock::NOW_ENV.into(),
            problem: e.to_string(),
        })?;
        let (mut store, _) = open::open_existing(&db.path, None).map_err(EngineError::Store)?;
        // A bridge runs for hours: like a wait, it leaves truncating the WAL
        // to the one-command writers.
        inbox_sqlite::set_lifetime(&mut store, Lifetime::LongLived).map_err(EngineError::Store)?;
        Ok(Bus {
            engine: inbox_engine::Engine::new(store, clock, inbox_host_native::host_ids()),
            token: global.agent_token.clone(),
            database: inbox_host_native::database::database_line(&db, &cwd),
        })
    }

    /// Runs `request`, under `key` if given (a retried or replayed action
    /// then returns what the first one did, and writes nothing again).
    pub(crate) fn execute(
        &mut self,
        request: Request,
        key: Option<String>,
    ) -> Result<Output, EngineError> {
        self.execute_keyed(request, key).map(|(output, _)| output)
    }

    /// [`Bus::execute`], saying whether the answer is a replay (the key's
    /// first outcome, nothing written now).
    pub(crate) fn execute_keyed(
        &mut self,
        request: Request,
        key: Option<String>,
    ) -> Result<(Output, bool), EngineError> {
        let mut call = Call::from(request);
        call.idempotency_key = key;
        call.agent_token.clone_from(&self.token);
        match inbox_host_native::execute_call(&mut self.engine, call) {
            Response::Success(output) => Ok((output, false)),
            Response::Replayed(output) => Ok((output, true)),
            Response::Failure { error, .. } => Err(error),
        }
    }

    /// The engine's time now, as RFC 3339 (what `.result` files say).
    pub(crate) fn now(&mut self) -> String {
        self.engine.now().to_string()
    }
}

/// SIGINT and SIGTERM, turned into a descriptor that becomes readable (so a
/// sleeping bridge wakes at once) and a flag checked between two files.
pub(crate) struct Stop {
    read: UnixStream,
    asked: Arc<AtomicBool>,
}

impl Stop {
    /// Registers the handlers. Before this, the signals end the process as
    /// usual (nothing has been done yet).
    pub(crate) fn register() -> std::io::Result<Stop> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        let asked = Arc::new(AtomicBool::new(false));
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&asked))?;
            signal_hook::low_level::pipe::register(signal, write.try_clone()?)?;
        }
        Ok(Stop { read, asked })
    }

    /// Whether a stop was asked for.
    pub(crate) fn asked(&self) -> bool {
        self.asked.load(Ordering::SeqCst)
    }

    /// The descriptor to sleep on: readable once a signal arrived (its
    /// bytes are never read, so every later sleep ends at once too).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

/// Where a bridge says what it did: one line per action.
pub(crate) struct Lines {
    json: bool,
}

impl Lines {
    pub(crate) fn new(json: bool) -> Lines {
        Lines { json }
    }

    /// One action: `fields` (with `"action"` first) as a JSON line, or
    /// `human` (already made terminal-safe by [`Lines::safe`]) as text.
    pub(crate) fn action(&self, action: &str, fields: Value, human: &str) {
        let line = if self.json {
            let mut object = serde_json::Map::new();
            object.insert("action".into(), action.into());
            if let Value::Object(fields) = fields {
                object.extend(fields);
            }
            format!("{}\n", Value::Object(object))
        } else {
            format!("{human}\n")
        };
        let mut stdout = std::io::stdout().lock();
        // A reader that went away does not stop the bridge: its files are
        // the record of what it did.
        let _ = stdout.write_all(line.as_bytes());
        let _ = stdout.flush();
    }

    /// Text from a file or an agent, safe to show on a terminal.
    pub(crate) fn safe(text: &str) -> String {
        terminal::safe(text).into_owned()
    }

    /// A refusal to start (or a failure that stops the bridge), in the JSON
    /// contract's error shape, with its exit code.
    pub(crate) fn fail(&self, command: &str, error: EngineError) -> u8 {
        let response = Response::failure(Some(command.to_owned()), error);
        crate::finish(&response, self.json, None, &[])
    }
}

/// Whether an error inbox returned is the bridge's own (its token, the
/// agent it acts as not registered where only registered agents act, the
/// database): it stops the bridge and leaves the file where it is for the
/// next start, once that is fixed. Any other error (an address nobody
/// registered included) is the file's fault and is reported for it.
pub(crate) fn bridge_s_own(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::AgentTokenRequired
            | ErrorCode::AgentTokenInvalid
            | ErrorCode::AgentNotRegistered
    ) || code.exit_code() >= 50
}

pub(crate) fn io_error(what: &str, error: &std::io::Error) -> EngineError {
    EngineError::Store(inbox_engine::StoreError::other(format!("{what}: {error}")))
}

/// An answer of another command than the one asked: a bug.
pub(crate) fn unexpected(output: &Output) -> EngineError {
    EngineError::Internal {
        message: format!(
            "bridge: answered {} unexpectedly",
            output.command().as_str()
        ),
    }
}

/// The SHA-256 of `parts` one after another, in hex: what a bridge's
/// idempotency keys are made of (bounded in length, whatever the file).
pub(crate) fn sha256_hex(parts: &[&[u8]]) -> String {
    use sha2::{Digest as _, Sha256};
    let mut digest = Sha256::new();
    for part in parts {
        digest.update(part);
    }
    digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Takes `folder`'s bridge lock, held while the bridge runs: one bridge
/// per folder.
pub(crate) fn lock(folder: &Folder) -> Result<std::fs::File, EngineError> {
    match folder.lock() {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => Err(EngineError::Relayed {
            code: ErrorCode::InvalidState,
            message: format!(
                "another bridge is running on {}; one bridge per folder (stop it first)",
                folder.path().display()
            ),
        }),
        Err(e) => Err(folder_error(folder.path(), &e)),
    }
}

/// A folder (or a file in it) the bridge could not use: refused (exit 30)
/// when it is not the user's or not a folder, a storage error otherwise.
pub(crate) fn folder_error(path: &std::path::Path, error: &std::io::Error) -> EngineError {
    use std::io::ErrorKind;
    let (code, message) = match error.kind() {
        // A folder's own refusals (`Folder::ensure`) name the folder already.
        ErrorKind::InvalidInput => (ErrorCode::InvalidValue, error.to_string()),
        ErrorKind::PermissionDenied => (
            ErrorCode::InvalidValue,
            format!("{}: {error}", path.display()),
        ),
        _ => (
            ErrorCode::StorageError,
            format!("{}: {error}", path.display()),
        ),
    };
    EngineError::Relayed { code, message }
}

/// The folder the database is in, watched for its commits.
pub(crate) fn database_folder(global: &Global) -> std::path::PathBuf {
    let (db, _) = inbox_host_native::database::resolve_db(global);
    match db.path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    }
}

impl Bus {
    /// The newest event id now: what happens after it is new.
    pub(crate) fn latest_event(&mut self) -> Result<inbox_engine::EventId, EngineError> {
        let look = Request::Watch(inbox_engine::wire::WatchRequest {
            timeout_seconds: Some(0),
            limit: Some(1),
            ..inbox_engine::wire::WatchRequest::default()
        });
        match self.execute(look, None)? {
            Output::Watch(watched) => Ok(watched.next_event_id),
            other => Err(unexpected(&other)),
        }
    }
}
