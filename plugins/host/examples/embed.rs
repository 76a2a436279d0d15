//! Embedding the inbox engine in a Rust agent runtime, sandboxed: the
//! runtime keeps the database (here a SQLite file it opens itself), loads
//! the engine from a `.wasm` file, and drives a leader and a worker through
//! one task with the CLI's JSON requests. What README.md's "Embed the engine
//! in a sandbox" shows; scripts/test runs it.
//!
//! ```sh
//! cargo run -p inbox-plugin-host --example embed -- target/plugins/inbox-engine.wasm
//! ```
//!
//! Without an argument it builds the component first (scripts/build-plugin).

// An example prints what it does.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use inbox_engine::Store as _;
use inbox_host_native::{HostClock, os_seed};
use inbox_plugin_host::{Limits, Plugin, PluginEngine, PluginError};
use inbox_sqlite::open;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let component = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => inbox_plugin_build::build(inbox_plugin_build::Guest::Engine)?,
    };

    // Compile once per process (the costly step; `from_file_cached` keeps
    // the machine code on disk for the next process)...
    let plugin = Plugin::from_file(&component, Limits::default())?;

    // ...then instantiate over storage the runtime owns. Any
    // `inbox_engine::Store` will do: the native SQLite store, the in-memory
    // one, or your own.
    let dir = tempfile::tempdir()?;
    let mut store = open::open_or_create(&dir.path().join("inbox.db"))?;
    store.initialize()?;
    let mut engine = plugin.instantiate(store, HostClock::system(), os_seed())?;

    // The leader opens a thread; the worker claims it and finishes it.
    let sent = call(
        &mut engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login"}"#,
    )?;
    let thread_id = field(&sent, &["thread", "thread_id"])?;
    let claimed = call(
        &mut engine,
        r#"{"command":"claim","agent":"worker","next":true}"#,
    )?;
    let token = field(&claimed, &["lease", "lease_token"])?;
    call(
        &mut engine,
        &format!(
            r#"{{"command":"done","agent":"worker","thread_id":"{thread_id}","lease_token":{token},"summary":"Shipped."}}"#
        ),
    )?;
    let shown = call(
        &mut engine,
        &format!(r#"{{"command":"show","thread_id":"{thread_id}"}}"#),
    )?;
    println!(
        "thread {thread_id}: {}, {} fuel units for the last command",
        field(&shown, &["thread", "status"])?,
        engine.fuel_used()
    );

    // A refusal is a response, not an error: same JSON and exit code as the
    // CLI's `--json`.
    let refused = engine.execute_json(r#"{"command":"claim","agent":"worker"}"#)?;
    println!(
        "claim without a thread: exit {}, {}",
        refused.exit_code, refused.json
    );
    Ok(())
}

/// Executes one request and insists it succeeded. `PluginError` is the
/// sandbox speaking: the component trapped, ran out of fuel or memory; the
/// transaction was rolled back and the next call gets a fresh instance.
fn call<C: inbox_engine::Clock>(
    engine: &mut PluginEngine<inbox_sqlite::SqliteStore, C>,
    request: &str,
) -> Result<serde_json::Value, Error> {
    let response = engine
        .execute_json(request)
        .map_err(|e: PluginError| format!("the engine component failed ({}): {e}", e.code()))?;
    let json: serde_json::Value = serde_json::from_str(&response.json)?;
    if response.exit_code != 0 {
        return Err(format!("refused with exit {}: {json}", response.exit_code).into());
    }
    Ok(json)
}

/// A field of a response, as text.
fn field(json: &serde_json::Value, path: &[&str]) -> Result<String, Error> {
    let value = path
        .iter()
        .try_fold(json, |value, key| value.get(*key))
        .ok_or_else(|| format!("no {} in {json}", path.join(".")))?;
    Ok(value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned))
}
