//! Which engine runs the command: the built-in one, or, with `--engine
//! PATH.wasm` in a build with the `plugin` feature, an engine component in
//! wasmtime over the same SQLite store. Both are [`Executor`]s, so waiting,
//! rendering and exit codes are the same code path. This module must never
//! decide anything about a command.

use std::path::Path;

use crate::{HostClock, NativeEngine};
use inbox_engine::{Call, EngineError, Executor, Response, Timestamp};
use inbox_sqlite::SqliteStore;

/// The engine chosen on the command line, loaded before the database is
/// opened: a component that cannot be used is refused before anything (even
/// `init`) touches the file.
pub enum EngineChoice {
    /// The engine compiled into this binary.
    BuiltIn,
    /// An engine component, compiled and checked against our world.
    #[cfg(feature = "plugin")]
    Component(inbox_plugin_host::Plugin),
}

/// The chosen engine over the command's store, ready to run it.
pub enum Runner {
    /// The engine compiled into this binary.
    BuiltIn(Box<NativeEngine>),
    /// An engine component, sandboxed.
    #[cfg(feature = "plugin")]
    Component(Box<inbox_plugin_host::PluginEngine<SqliteStore, HostClock>>),
}

impl EngineChoice {
    /// The built-in engine, or the component at `component`.
    pub fn load(component: Option<&Path>) -> Result<EngineChoice, EngineError> {
        match component {
            None => Ok(EngineChoice::BuiltIn),
            Some(path) => load_component(path),
        }
    }

    /// The engine over `store`, ready to run a command.
    pub fn start(self, store: SqliteStore, clock: HostClock) -> Result<Runner, EngineError> {
        match self {
            EngineChoice::BuiltIn => Ok(Runner::BuiltIn(Box::new(
                inbox_engine::Engine::new(store, clock, crate::host_ids())
                    // Runs no git until a run with a repository asks.
                    .with_workspace(Box::new(crate::git_workspace())),
            ))),
            #[cfg(feature = "plugin")]
            EngineChoice::Component(plugin) => {
                let mut engine = plugin
                    .instantiate(store, clock, crate::os_seed())
                    .map_err(refused)?;
                engine.set_secrets(crate::clock::secret_bytes);
                Ok(Runner::Component(Box::new(engine)))
            }
        }
    }
}

impl Runner {
    /// The SQLite store the command runs on (watched by waits).
    pub fn store(&self) -> &SqliteStore {
        match self {
            Runner::BuiltIn(engine) => engine.store(),
            #[cfg(feature = "plugin")]
            Runner::Component(engine) => engine.store(),
        }
    }

    /// Ends the runner in a process that exits next: the built-in engine's
    /// store is left for the exit to close
    /// ([`SqliteStore::leave_for_exit`]); a component is dropped as usual.
    pub fn leave_for_exit(self) {
        match self {
            Runner::BuiltIn(engine) => engine.into_parts().0.leave_for_exit(),
            #[cfg(feature = "plugin")]
            Runner::Component(engine) => drop(engine),
        }
    }
}

/// A component that cannot be used is a bad value of `--engine`.
#[cfg(feature = "plugin")]
fn refused(error: inbox_plugin_host::PluginError) -> EngineError {
    EngineError::InvalidValue {
        field: "engine".into(),
        problem: error.to_string(),
    }
}

#[cfg(feature = "plugin")]
fn load_component(path: &Path) -> Result<EngineChoice, EngineError> {
    use inbox_plugin_host::{Limits, Plugin};
    match cache_dir() {
        Some(dir) => Plugin::from_file_cached(path, Limits::default(), &dir),
        None => Plugin::from_file(path, Limits::default()),
    }
    .map(EngineChoice::Component)
    .map_err(refused)
}

/// Where compiled components are kept: `$INBOX_ENGINE_CACHE`, else
/// `$XDG_CACHE_HOME/inbox/engines`, else `~/.cache/inbox/engines`. Each
/// `inbox` process is new, and compiling the engine costs most of a second;
/// loading it from the cache costs milliseconds. `INBOX_ENGINE_CACHE=off`
/// compiles every time.
#[cfg(feature = "plugin")]
fn cache_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    match std::env::var_os("INBOX_ENGINE_CACHE") {
        Some(dir) if dir == "off" => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .map(|base| base.join("inbox").join("engines")),
    }
}

#[cfg(not(feature = "plugin"))]
fn load_component(_: &Path) -> Result<EngineChoice, EngineError> {
    Err(EngineError::InvalidValue {
        field: "engine".into(),
        problem: "needs an inbox built with plugin support; install one with `cargo install --path cli --features plugin`".into(),
    })
}

impl Executor for Runner {
    fn execute_call(&mut self, call: Call) -> Response {
        match self {
            Runner::BuiltIn(engine) => engine.execute_call(call),
            #[cfg(feature = "plugin")]
            Runner::Component(engine) => Executor::execute_call(engine.as_mut(), call),
        }
    }

    fn now(&mut self) -> Timestamp {
        match self {
            Runner::BuiltIn(engine) => engine.now(),
            #[cfg(feature = "plugin")]
            Runner::Component(engine) => Executor::now(engine.as_mut()),
        }
    }

    fn ticks(&mut self) -> u64 {
        match self {
            Runner::BuiltIn(engine) => Executor::ticks(engine.as_mut()),
            #[cfg(feature = "plugin")]
            Runner::Component(engine) => Executor::ticks(engine.as_mut()),
        }
    }
}
