//! Running a command on a PostgreSQL database (`--db postgres://...`, the
//! `postgres` feature; docs/postgres.md): the store opened (its schema
//! created or migrated by `init`), the built-in engine over it, and a wait
//! asleep on the process's one listening connection (`pg::listen`). It
//! is `execute_on` for a URL, so every command, `orch` and `inbox mcp`
//! reach PostgreSQL the same way. Without the feature it refuses the URL
//! with the command that installs an inbox that has it, rather than take
//! it for a file name. This module must never decide anything about a
//! command.

use inbox_engine::{Call, EngineError};
use inbox_host_native::HostClock;

use crate::{Executed, Target};

/// What `init`'s message says of durability: on PostgreSQL it is the
/// server's `synchronous_commit`, not a setting of inbox's.
#[cfg(feature = "postgres")]
const DURABILITY: &str = "the server's synchronous_commit";

/// Runs `call` on the PostgreSQL database `url` names: see `execute_on`.
#[cfg(feature = "postgres")]
pub(crate) fn execute_on(
    url: &str,
    on: Target<'_>,
    call: Call,
    clock: HostClock,
    stop: Option<&dyn Fn() -> bool>,
) -> Result<Option<Executed>, EngineError> {
    use inbox_engine::Effect;
    use inbox_host_native::{open, pg::listen};
    refuse_options(&on)?;
    let store = open::open_postgres(url, on.init.is_some()).map_err(EngineError::Store)?;
    // A wait listens before its first look, so that no commit between the
    // look and the first sleep goes unnoticed.
    let hub = match call.request.effect() {
        Effect::Wait => Some(store.hub().map_err(EngineError::Store)?),
        _ => None,
    };
    let mut engine = inbox_engine::Engine::new(store, clock, inbox_host_native::host_ids())
        // Runs no git until a run with a repository asks.
        .with_workspace(Box::new(inbox_host_native::git::GitWorkspace::new()));
    let response = match &hub {
        Some(hub) => match listen::wait(&mut engine, call, hub, stop) {
            Some(response) => response,
            None => return Ok(None),
        },
        None => engine.execute_call(call),
    };
    Ok(Some(Executed {
        response,
        now: engine.now(),
        durability: DURABILITY,
    }))
}

/// What PostgreSQL cannot honour: `init --durability` (the server's
/// `synchronous_commit` decides) and `--engine` (a component runs over
/// the SQLite store only).
#[cfg(feature = "postgres")]
fn refuse_options(on: &Target<'_>) -> Result<(), EngineError> {
    if let Some(Some(_)) = on.init {
        return Err(EngineError::InvalidValue {
            field: "durability".into(),
            problem: "a PostgreSQL database's durability is the server's synchronous_commit \
                      setting; leave --durability out and set that on the server (ALTER \
                      DATABASE ... SET synchronous_commit)"
                .into(),
        });
    }
    if on.engine.is_some() {
        return Err(EngineError::InvalidValue {
            field: "engine".into(),
            problem: "an engine component runs over an SQLite database only; leave --engine out \
                      for a PostgreSQL one"
                .into(),
        });
    }
    Ok(())
}

/// Checks that commands can run on the PostgreSQL database `url` names:
/// it can be reached and holds an inbox schema this inbox can use.
#[cfg(feature = "postgres")]
pub(crate) fn check(url: &str) -> Result<(), EngineError> {
    inbox_host_native::open::open_postgres(url, false)
        .map(drop)
        .map_err(EngineError::Store)
}

/// Without the `postgres` feature: refused, saying how to get it.
#[cfg(not(feature = "postgres"))]
pub(crate) fn execute_on(
    _url: &str,
    _on: Target<'_>,
    _call: Call,
    _clock: HostClock,
    _stop: Option<&dyn Fn() -> bool>,
) -> Result<Option<Executed>, EngineError> {
    Err(EngineError::Store(
        inbox_host_native::open::postgres_unavailable(),
    ))
}

/// Without the `postgres` feature: refused, saying how to get it.
#[cfg(not(feature = "postgres"))]
pub(crate) fn check(_url: &str) -> Result<(), EngineError> {
    Err(EngineError::Store(
        inbox_host_native::open::postgres_unavailable(),
    ))
}
