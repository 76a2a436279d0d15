//! Which engine runs the command: the built-in one, or, with `--engine
//! PATH.wasm` in a build with the `plugin` feature, an engine component in
//! wasmtime over the same SQLite store. Both are [`Executor`]s, so waiting,
//! rendering and exit codes are the same code path. This module must never
//! decide anything about a command.

use std::path::Path;

use inbox_engine::{EngineError, Executor, Request, Response, Timestamp};
use inbox_host_native::{HostClock, NativeEngine, SqliteStore};

/// The engine a command runs on.
pub(crate) enum Runner {
    /// The engine compiled into this binary.
    Native(Box<NativeEngine>),
    /// An engine component, sandboxed.
    #[cfg(feature = "plugin")]
    Plugin(Box<inbox_plugin_host::PluginEngine<SqliteStore, HostClock>>),
}

/// The engine chosen on the command line, loaded before the database is
/// opened: a component that cannot be used is refused before anything (even
/// `init`) touches the file.
pub(crate) enum Loaded {
    /// The engine compiled into this binary.
    BuiltIn,
    /// An engine component, compiled and checked against our world.
    #[cfg(feature = "plugin")]
    Component(inbox_plugin_host::Plugin),
}

impl Loaded {
    /// The built-in engine, or the component at `component`.
    pub(crate) fn load(component: Option<&Path>) -> Result<Loaded, EngineError> {
        match component {
            None => Ok(Loaded::BuiltIn),
            Some(path) => load_component(path),
        }
    }

    /// The engine over `store`, ready to run a command.
    pub(crate) fn start(self, store: SqliteStore, clock: HostClock) -> Result<Runner, EngineError> {
        match self {
            Loaded::BuiltIn => Ok(Runner::Native(Box::new(inbox_engine::Engine::new(
                store,
                clock,
                inbox_host_native::host_ids(),
            )))),
            #[cfg(feature = "plugin")]
            Loaded::Component(plugin) => plugin
                .instantiate(store, clock, inbox_host_native::os_seed())
                .map(|engine| Runner::Plugin(Box::new(engine)))
                .map_err(refused),
        }
    }
}

impl Runner {
    /// The SQLite store the command runs on (watched by waits).
    pub(crate) fn store(&self) -> &SqliteStore {
        match self {
            Runner::Native(engine) => engine.store(),
            #[cfg(feature = "plugin")]
            Runner::Plugin(engine) => engine.store(),
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
fn load_component(path: &Path) -> Result<Loaded, EngineError> {
    use inbox_plugin_host::{Limits, Plugin};
    match cache_dir() {
        Some(dir) => Plugin::from_file_cached(path, Limits::default(), &dir),
        None => Plugin::from_file(path, Limits::default()),
    }
    .map(Loaded::Component)
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
fn load_component(_: &Path) -> Result<Loaded, EngineError> {
    Err(EngineError::InvalidValue {
        field: "engine".into(),
        problem: "needs an inbox built with plugin support; install one with `cargo install --path cli --features plugin`".into(),
    })
}

impl Executor for Runner {
    fn execute(&mut self, request: Request) -> Response {
        match self {
            Runner::Native(engine) => engine.execute(request),
            #[cfg(feature = "plugin")]
            Runner::Plugin(engine) => Executor::execute(engine.as_mut(), request),
        }
    }

    fn now(&mut self) -> Timestamp {
        match self {
            Runner::Native(engine) => engine.now(),
            #[cfg(feature = "plugin")]
            Runner::Plugin(engine) => Executor::now(engine.as_mut()),
        }
    }
}
