//! The stores the in-process engine workloads run over, one row of
//! [`StoreKind`] each, every one new for every measurement and set up the
//! way its host sets it up: a SQLite file as `inbox init` creates it and an
//! embedding host opens it, SQLite in memory as the wasm package opens it,
//! the engine's `MemoryStore`.
//!
//! Adding a store (PostgreSQL, say) is a row of [`StoreKind`], a variant of
//! [`AnyStore`] and its constructor here. This module must never touch a
//! store after handing it over: setup happens before, through the store's
//! own `initialize`, as `inbox init` does.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use inbox_engine::{Engine, Executor, MemoryStore, Store};
use inbox_host_native::{HostClock, host_ids};
use inbox_sqlite::store::PORTABLE_PRAGMAS;
use inbox_sqlite::{Durability, Lifetime, SqliteStore, open};
use serde::Serialize;

/// A kind of store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// The native SQLite store on a file, as `inbox init` creates it with
    /// the default durability, `normal` (WAL, `synchronous = NORMAL`: no
    /// fsync per commit), opened with the long-lived checkpoint policy of an
    /// embedding host.
    SqliteFile,
    /// The same with `--durability full` (an fsync per commit).
    SqliteFileFull,
    /// Native SQLite in memory (`:memory:`) with the settings the wasm
    /// package's `sqlite` store applies (`host-wasm/src/backend.rs`).
    SqliteMemory,
    /// The engine's `MemoryStore`.
    Memory,
}

impl StoreKind {
    /// The name in raw results.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::SqliteFile => "sqlite-file",
            StoreKind::SqliteFileFull => "sqlite-file-full",
            StoreKind::SqliteMemory => "sqlite-memory",
            StoreKind::Memory => "memory",
        }
    }

    /// The name in a report's tables.
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::SqliteFile => "SQLite file (WAL, normal durability)",
            StoreKind::SqliteFileFull => "SQLite file (WAL, full durability)",
            StoreKind::SqliteMemory => "SQLite in memory",
            StoreKind::Memory => "`MemoryStore`",
        }
    }

    /// A new store of this kind; the file stores are the file `name.db`
    /// under `dir` (replacing one left there).
    pub fn open(self, dir: &Path, name: &str) -> Result<AnyStore> {
        let file = |durability| -> Result<AnyStore> {
            let path = dir.join(format!("{name}.db"));
            create_sqlite(&path, durability)?;
            Ok(AnyStore::Sqlite(open_sqlite(&path)?))
        };
        match self {
            StoreKind::SqliteFile => file(Durability::Normal),
            StoreKind::SqliteFileFull => file(Durability::Full),
            StoreKind::SqliteMemory => Ok(AnyStore::Sqlite(sqlite_in_memory()?)),
            StoreKind::Memory => Ok(AnyStore::Memory(memory()?)),
        }
        .with_context(|| format!("cannot open the {} store", self.name()))
    }

    /// Removes what [`StoreKind::open`] left under `dir` for `name` (the
    /// file stores' files); call it once the store is dropped.
    pub fn remove(self, dir: &Path, name: &str) -> Result<()> {
        match self {
            StoreKind::SqliteFile | StoreKind::SqliteFileFull => {
                remove_sqlite(&dir.join(format!("{name}.db")))
            }
            StoreKind::SqliteMemory | StoreKind::Memory => Ok(()),
        }
    }
}

/// A new store of one of the kinds, for a host that needs the store itself
/// (the engine component is instantiated over one).
// One per benchmarked store, made once and never moved in a hot loop:
// boxing the memory store would only add an indirection to every call.
#[allow(clippy::large_enum_variant)]
pub enum AnyStore {
    /// A SQLite store, on a file or in memory.
    Sqlite(SqliteStore),
    /// The engine's in-memory store.
    Memory(MemoryStore),
}

impl AnyStore {
    /// The built-in engine over the store, on the system clock with
    /// production ids, as the CLI makes it.
    pub fn engine(self) -> Box<dyn Executor> {
        match self {
            AnyStore::Sqlite(store) => {
                Box::new(Engine::new(store, HostClock::system(), host_ids()))
            }
            AnyStore::Memory(store) => {
                Box::new(Engine::new(store, HostClock::system(), host_ids()))
            }
        }
    }
}

/// Creates a new database at `path` (removing an old one and its WAL) with
/// `durability`, as `inbox init --durability` does.
pub fn create_sqlite(path: &Path, durability: Durability) -> Result<()> {
    remove_sqlite(path)?;
    let mut store =
        open::open_or_create(path).map_err(|e| anyhow!("cannot create {}: {e}", path.display()))?;
    store.initialize().map_err(|e| anyhow!("{e}"))?;
    open::set_durability(&store, durability).map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// The existing database at `path`, with its recorded durability, opened
/// as a process that runs many commands opens it (an embedding host, the
/// harnesses' producers, workers and waiters): with the long-lived
/// checkpoint policy, not the CLI's one-command policy (see
/// docs/lab-log.md).
pub fn open_sqlite(path: &Path) -> Result<SqliteStore> {
    let (mut store, _) = open::open_existing(path, None)
        .map_err(|e| anyhow!("cannot open {}: {e}", path.display()))?;
    open::set_lifetime(&mut store, Lifetime::LongLived).map_err(|e| anyhow!("{e}"))?;
    Ok(store)
}

/// Removes the database at `path` and its WAL files, if any.
pub fn remove_sqlite(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// SQLite in memory as the wasm package opens its `sqlite` store.
pub fn sqlite_in_memory() -> Result<SqliteStore> {
    let conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch(PORTABLE_PRAGMAS)?;
    let mut store = SqliteStore::new(conn, ":memory:").map_err(|e| anyhow!("{e}"))?;
    store.initialize().map_err(|e| anyhow!("{e}"))?;
    Ok(store)
}

/// A new, initialized `MemoryStore`.
pub fn memory() -> Result<MemoryStore> {
    let mut store = MemoryStore::new();
    store.initialize().map_err(|e| anyhow!("{e}"))?;
    Ok(store)
}

/// The version of the SQLite library every SQLite store here runs on (the
/// one rusqlite bundles).
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}
