//! Running a command on a PostgreSQL database (`--db postgres://...`;
//! docs/postgres.md): the store opened (its schema
//! created or migrated by `init`), the built-in engine over it, and a wait
//! asleep on the process's one listening connection (`pg::listen`). It
//! is `execute_on` for a URL, so every command, `orch` and `inbox mcp`
//! reach PostgreSQL the same way. This module must never decide anything about a
//! command.

use crate::HostClock;
use inbox_engine::{Call, Effect, EngineError};
use inbox_postgres::listen;

use crate::run::{Executed, Target};

/// What `init`'s message says of durability: on PostgreSQL it is the
/// server's `synchronous_commit`, not a setting of inbox's.
const DURABILITY: &str = "the server's synchronous_commit";

/// Runs `call` on the PostgreSQL database `url` names: see `execute_on`.
pub fn execute_on(
    url: &str,
    on: Target<'_>,
    call: Call,
    clock: HostClock,
    stop: Option<&dyn Fn() -> bool>,
) -> Result<Option<Executed>, EngineError> {
    refuse_options(&on)?;
    let store = inbox_postgres::open(url, on.init.is_some()).map_err(EngineError::Store)?;
    // A wait listens before its first look, so that no commit between the
    // look and the first sleep goes unnoticed.
    let hub = match call.request.effect() {
        Effect::Wait => Some(store.hub().map_err(EngineError::Store)?),
        _ => None,
    };
    let mut engine = inbox_engine::Engine::new(store, clock, crate::host_ids())
        // Runs no git until a run with a repository asks.
        .with_workspace(Box::new(crate::git_workspace()));
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
pub fn check(url: &str) -> Result<(), EngineError> {
    inbox_postgres::open(url, false)
        .map(drop)
        .map_err(EngineError::Store)
}
