//! Running one call on the database a command names, the way every
//! surface runs it (`inbox`, `orch`, `inbox daemon`, `inbox-mcp`,
//! `inbox-serve`): the engine chosen, the database opened (an SQLite file,
//! created only by `init`, or PostgreSQL by URL), and a wait blocked until
//! it wakes, times out or is stopped. One home for this sequence. This
//! module must never decide anything about a command: that is the engine's.

use std::path::Path;

use inbox_engine::{Call, Effect, EngineError, Executor as _, Response, StoreError};
use inbox_sqlite::{Durability, SqliteStore, open, watch};

use crate::database::Database;
use crate::{Global, HostClock, postgres, runner};

/// Where a request runs: the database, the engine (`--engine`), for
/// `init` the durability to record, and whether the process exits after
/// this one request (a command line's, not a server's).
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// The database.
    pub db: &'a Database,
    /// The engine component to run instead of the built-in engine.
    pub engine: Option<&'a Path>,
    /// For `init`: the durability to record, if one was chosen.
    pub init: Option<Option<Durability>>,
    /// The store is then left for the exit to close
    /// ([`inbox_sqlite::SqliteStore::leave_for_exit`]).
    pub exits_after: bool,
}

/// What running a request gave: its response, the engine's time when it
/// ended, and the durability of the database it ran on, for people.
pub struct Executed {
    /// The engine's response.
    pub response: Response,
    /// The engine's time when it answered.
    pub now: inbox_engine::Timestamp,
    /// The durability of the database it ran on, for people.
    pub durability: &'static str,
}

/// Runs one request over a database the way every command runs it: the
/// engine chosen, the database opened (created only by `init`), and a wait
/// blocked until it wakes, times out or `stop` says to stop (`Ok(None)`).
/// One home for this sequence: `inbox`, `orch` and `inbox-mcp` all run it.
pub fn execute_on(
    on: Target<'_>,
    call: Call,
    clock: HostClock,
    stop: Option<&dyn Fn() -> bool>,
) -> Result<Option<Executed>, EngineError> {
    match on.db {
        Database::File(db) => execute_on_file(&db.path, on, call, clock, stop),
        Database::Postgres { url, .. } => postgres::execute_on(url, on, call, clock, stop),
    }
}

/// [`execute_on`] for an SQLite file.
fn execute_on_file(
    path: &Path,
    on: Target<'_>,
    call: Call,
    clock: HostClock,
    stop: Option<&dyn Fn() -> bool>,
) -> Result<Option<Executed>, EngineError> {
    // A wait arms its watch before it opens the database, so that no commit
    // between the first query and the first sleep goes unnoticed.
    let waits = call.request.effect() == Effect::Wait;
    let mut watcher = waits.then(|| watch::ChangeWatcher::arm(path));
    let engine = runner::EngineChoice::load(on.engine)?;
    let (mut store, durability) = open_store(on.init, path).map_err(EngineError::Store)?;
    // A wait keeps its connection open and may write while it waits
    // (heartbeats, lapses, orch's reconcile): like an embedding host, it
    // leaves truncating the WAL to the one-command writers, so a wake is
    // never held up by a checkpoint's fsyncs.
    if waits {
        inbox_sqlite::set_lifetime(&mut store, inbox_sqlite::Lifetime::LongLived)
            .map_err(EngineError::Store)?;
    }
    let mut engine = engine.start(store, clock)?;
    let response = match (watcher.as_mut(), stop) {
        (Some(watcher), None) => watch::wait(&mut engine, runner::Runner::store, call, watcher),
        (Some(watcher), Some(stop)) => {
            match watch::wait_or_stop(&mut engine, runner::Runner::store, call, watcher, stop) {
                Some(response) => response,
                None => return Ok(None),
            }
        }
        (None, _) => engine.execute_call(call),
    };
    let executed = Executed {
        response,
        now: engine.now(),
        durability: durability.as_str(),
    };
    if on.exits_after {
        engine.leave_for_exit();
    }
    Ok(Some(executed))
}

/// Why a wait ended without an answer: it was stopped.
pub fn stopped() -> EngineError {
    EngineError::Internal {
        message: "the wait was stopped before it answered".into(),
    }
}

/// Runs one engine request for a host that serves many in one process
/// (`inbox-mcp`), exactly as the command line runs it: over the database
/// `global` names (`--db`, `$INBOX_DB`, or found), with the engine it names,
/// on the host clock, a wait blocking until it wakes or times out. Returns
/// `None` when `stop` ended a wait (its client cancelled the call). The
/// response is the one `--json` prints; nothing is printed. A wait with a
/// `stop` looks at it every [`inbox_sqlite::watch::STOP_CHECK`]; a
/// host that never cancels passes `None`, and its waits sleep until woken.
pub fn execute(global: &Global, call: Call, stop: Option<&dyn Fn() -> bool>) -> Option<Response> {
    let command = call.request.command().as_str().to_owned();
    let fail = |error: EngineError| Some(Response::failure(Some(command.clone()), error));
    let clock = match HostClock::from_env() {
        Ok(clock) => clock,
        Err(e) => {
            return fail(EngineError::InvalidValue {
                field: crate::clock::NOW_ENV.into(),
                problem: e.to_string(),
            });
        }
    };
    let (db, _) = Database::resolve(global);
    let on = Target {
        db: &db,
        engine: global.engine.as_deref(),
        init: None,
        exits_after: false,
    };
    match execute_on(on, call, clock, stop) {
        Ok(executed) => executed.map(|executed| executed.response),
        Err(error) => fail(error),
    }
}

/// The database `global` names, opened once to check that commands can
/// run on it (it exists, is initialized, is ours): what a long-running host
/// checks before it starts serving. Returns the line saying which database
/// it is and why, as commands say it on stderr.
pub fn check_database(global: &Global) -> Result<String, EngineError> {
    let (db, cwd) = Database::resolve(global);
    match &db {
        Database::File(file) => {
            open::open_existing(&file.path, None).map_err(EngineError::Store)?;
        }
        Database::Postgres { url, .. } => postgres::check(url)?,
    }
    Ok(db.line(&cwd))
}

/// Opens the database: created by `init` (`init` is `Some`, with the
/// durability to record, if given), otherwise it must already exist.
fn open_store(
    init: Option<Option<Durability>>,
    path: &Path,
) -> Result<(SqliteStore, Durability), StoreError> {
    match init {
        Some(chosen) => open::init(path, chosen),
        None => open::open_existing(path, None),
    }
}

/// Whether a response is a successful write: what its table row says it
/// does; `show` with `mark_read` only moves a cursor, which a rerun moves
/// again.
pub fn changed(response: &Response) -> bool {
    matches!(response, Response::Success(output) if output.command().effect() == Effect::Write)
}
