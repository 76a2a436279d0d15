//! The two engines under comparison, behind one call that takes a request
//! in the JSON wire format and gives back the exit code and the JSON
//! response, and the fresh stores they run over.
//!
//! Both sides do the same work a `--json` caller gets: request text in,
//! response text out. The built-in engine decodes with
//! `Engine::execute_json` and encodes with `Response::to_json`; the
//! component does both inside wasm and the host copies the text across.
//! Every store is opened the same way for either engine, so a difference
//! between them is the engine's. This module must never touch a store
//! after handing it to an engine: setup happens before, through the
//! store's own `initialize`, as `inbox init` does.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use inbox_engine::{Clock, Engine, IdSource, MemoryStore, Store};
use inbox_host_native::{Durability, HostClock, Lifetime, SqliteStore, host_ids, open, os_seed};
use inbox_plugin_host::{Plugin, PluginEngine};
use serde::Serialize;

/// One command's outcome, as a `--json` caller sees it.
pub(crate) struct Answer {
    /// The contract's exit code.
    pub(crate) exit_code: u8,
    /// The JSON response text.
    pub(crate) json: String,
}

/// An engine driven through the JSON wire format.
pub(crate) trait JsonEngine {
    /// Executes one request; an error only when the engine itself failed
    /// (a trap in the component), never for a refusal, which is an answer.
    fn call(&mut self, request: &str) -> Result<Answer>;

    /// [`JsonEngine::call`], where anything but exit code `expected` is an
    /// error quoting the response.
    fn expect_exit(&mut self, request: &str, expected: u8) -> Result<Answer> {
        let answer = self.call(request)?;
        if answer.exit_code != expected {
            bail!(
                "expected exit {expected} for {request}, got {}: {}",
                answer.exit_code,
                answer.json
            );
        }
        Ok(answer)
    }
}

impl<S: Store, C: Clock, I: IdSource> JsonEngine for Engine<S, C, I> {
    fn call(&mut self, request: &str) -> Result<Answer> {
        let response = self.execute_json(request);
        Ok(Answer {
            exit_code: response.exit_code(),
            json: response.to_json(),
        })
    }
}

impl<S: Store + 'static, C: Clock + 'static> JsonEngine for PluginEngine<S, C> {
    fn call(&mut self, request: &str) -> Result<Answer> {
        let response = self
            .execute_json(request)
            .with_context(|| format!("the component failed on {request}"))?;
        Ok(Answer {
            exit_code: response.exit_code,
            json: response.json,
        })
    }
}

/// Which engine runs the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum EngineKind {
    /// `inbox_engine::Engine`, compiled into this process.
    BuiltIn,
    /// The engine component in wasmtime (`inbox_plugin_host::PluginEngine`).
    Component,
}

impl EngineKind {
    /// Both, the baseline first.
    pub(crate) const ALL: [EngineKind; 2] = [EngineKind::BuiltIn, EngineKind::Component];

    /// The name in the raw results and the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            EngineKind::BuiltIn => "built-in",
            EngineKind::Component => "component",
        }
    }
}

/// Which kind of store the engine runs over; each measurement gets a new
/// one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum StoreKind {
    /// The native SQLite store on a file, as `inbox init` creates it.
    SqliteFile,
    /// `inbox_engine::MemoryStore`.
    Memory,
}

impl StoreKind {
    /// Both, the file first (what agents run on).
    pub(crate) const ALL: [StoreKind; 2] = [StoreKind::SqliteFile, StoreKind::Memory];

    /// The name in the raw results and the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::SqliteFile => "sqlite-file",
            StoreKind::Memory => "memory",
        }
    }
}

/// A new database file at `path` (removing an old one), created as `inbox
/// init` creates it with the default durability, `normal` (WAL,
/// `synchronous = NORMAL`: no fsync per commit), then opened as an
/// embedding host that runs many commands opens it: with the long-lived
/// checkpoint policy (`Lifetime::LongLived`), as the repository's other
/// in-process benchmarks do.
pub(crate) fn sqlite_file(path: &Path) -> Result<SqliteStore> {
    remove_database(path)?;
    let mut created =
        open::open_or_create(path).map_err(|e| anyhow!("cannot create {}: {e}", path.display()))?;
    created.initialize().map_err(|e| anyhow!("{e}"))?;
    open::set_durability(&created, Durability::Normal).map_err(|e| anyhow!("{e}"))?;
    drop(created);
    sqlite_file_existing(path)
}

/// The existing database at `path`, with its recorded durability and the
/// long-lived checkpoint policy.
pub(crate) fn sqlite_file_existing(path: &Path) -> Result<SqliteStore> {
    let (mut store, _) = open::open_existing(path, None)
        .map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    open::set_lifetime(&mut store, Lifetime::LongLived).map_err(|e| anyhow!("{e}"))?;
    Ok(store)
}

/// A new, initialized in-memory store.
pub(crate) fn memory() -> Result<MemoryStore> {
    let mut store = MemoryStore::new();
    store.initialize().map_err(|e| anyhow!("{e}"))?;
    Ok(store)
}

/// Removes the database at `path` and its WAL files, if any.
pub(crate) fn remove_database(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(PathBuf::from(file)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A new store of kind `store` (a file `name.db` under `dir` for the
/// SQLite store) under a new engine of kind `engine`, on the system clock,
/// with production ids: `host_ids()` for the built-in engine, an OS seed
/// for the component, as the CLI gives them.
pub(crate) fn fresh(
    engine: EngineKind,
    store: StoreKind,
    plugin: &Plugin,
    dir: &Path,
    name: &str,
) -> Result<Box<dyn JsonEngine>> {
    let clock = HostClock::system();
    Ok(match (engine, store) {
        (EngineKind::BuiltIn, StoreKind::SqliteFile) => Box::new(Engine::new(
            sqlite_file(&dir.join(format!("{name}.db")))?,
            clock,
            host_ids(),
        )),
        (EngineKind::BuiltIn, StoreKind::Memory) => {
            Box::new(Engine::new(memory()?, clock, host_ids()))
        }
        (EngineKind::Component, StoreKind::SqliteFile) => Box::new(plugin.instantiate(
            sqlite_file(&dir.join(format!("{name}.db")))?,
            clock,
            os_seed(),
        )?),
        (EngineKind::Component, StoreKind::Memory) => {
            Box::new(plugin.instantiate(memory()?, clock, os_seed())?)
        }
    })
}

/// The SQLite library's version, asked of a connection (the same bundled
/// library the store uses).
pub(crate) fn sqlite_version(dir: &Path) -> Result<String> {
    let path = dir.join("version-probe.db");
    let store = sqlite_file(&path)?;
    let version = store
        .connection()
        .query_row("SELECT sqlite_version()", [], |row| row.get::<_, String>(0))?;
    drop(store);
    remove_database(&path)?;
    Ok(version)
}
