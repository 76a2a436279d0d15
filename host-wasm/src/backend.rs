//! [`Backend`]: the engine over the store chosen at open time, and the bytes
//! of an SQLite database in and out.
//!
//! Three stores, one engine:
//! - `memory`: the engine's own in-memory store; smallest and fastest, gone
//!   when the page or process ends;
//! - `sqlite`: the native host's [`SqliteStore`] (the same code, not a copy)
//!   over SQLite compiled to wasm, in wasm memory; [`Backend::export`] and
//!   the `bytes` open option move the whole database in and out, so a Node or
//!   VS Code host can persist it through its own storage API;
//! - `opfs`: the same store persisted to the browser's Origin Private File
//!   System through the `opfs-sahpool` VFS, which needs synchronous access
//!   handles and so only runs in a dedicated worker.
//!
//! The wasm build has one connection per database: this module must never
//! open a second one on the same file, and never retries on busy (there is no
//! other writer to wait for).

use inbox_engine::{
    Engine, EngineError, Executor, MemoryStore, Request, Response, Store, StoreError,
    StoreErrorKind, Timestamp, UlidIds,
};
use inbox_host_native::SqliteStore;
use inbox_host_native::store::{PORTABLE_PRAGMAS, store_error};
use rusqlite::{Connection, MAIN_DB, OpenFlags};
use wasm_bindgen::JsValue;

use crate::js::{self, JsClock};

/// The VFS name under which the OPFS pool is registered.
const OPFS_VFS: &str = "inbox-opfs";
/// The OPFS folder that holds the pool's files.
const OPFS_DIRECTORY: &str = ".inbox-opfs";

/// Which store an `Inbox` keeps its records in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The engine's in-memory store.
    Memory,
    /// SQLite in wasm memory.
    Sqlite,
    /// SQLite persisted to OPFS (dedicated worker only).
    Opfs,
}

impl StoreKind {
    /// The spelling in open options and `Inbox.store`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Opfs => "opfs",
        }
    }

    /// Reads the `store` option.
    pub fn parse(text: &str) -> Option<StoreKind> {
        match text {
            "memory" => Some(StoreKind::Memory),
            "sqlite" => Some(StoreKind::Sqlite),
            "opfs" => Some(StoreKind::Opfs),
            _ => None,
        }
    }
}

/// What `Inbox.open` was asked for, checked.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The store.
    pub store: StoreKind,
    /// The database file name inside the OPFS pool (`opfs` only).
    pub path: String,
    /// A whole database to start from (`sqlite` only).
    pub bytes: Option<Vec<u8>>,
    /// Start the clock at this instant instead of the wall clock.
    pub now: Option<Timestamp>,
}

/// The engine over one of the stores.
pub enum Backend {
    /// Over [`MemoryStore`].
    Memory(Engine<MemoryStore, JsClock, UlidIds>),
    /// Over [`SqliteStore`], in wasm memory or OPFS.
    Sqlite(Engine<SqliteStore, JsClock, UlidIds>, StoreKind),
}

impl Backend {
    /// Opens the store, creating the schema of a new database and migrating
    /// an older one. Async because installing the OPFS pool is.
    pub async fn open(options: &OpenOptions) -> Result<Backend, JsValue> {
        let clock = options
            .now
            .map_or_else(JsClock::system, JsClock::starting_at);
        let ids = UlidIds::from_seed(js::random_seed());
        match options.store {
            StoreKind::Memory => {
                let mut engine = Engine::new(MemoryStore::new(), clock, ids);
                engine.store_mut().initialize().map_err(js::store_failure)?;
                Ok(Backend::Memory(engine))
            }
            StoreKind::Sqlite => {
                let mut conn = Connection::open_in_memory()
                    .map_err(|e| js::store_failure(store_error(e, ":memory:")))?;
                if let Some(bytes) = &options.bytes {
                    import(&mut conn, bytes)?;
                }
                let store = prepare(conn, ":memory:")?;
                Ok(Backend::Sqlite(
                    Engine::new(store, clock, ids),
                    StoreKind::Sqlite,
                ))
            }
            StoreKind::Opfs => {
                install_opfs().await?;
                let location = format!("opfs:{}", options.path);
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
                let conn = Connection::open_with_flags_and_vfs(&options.path, flags, OPFS_VFS)
                    .map_err(|e| js::store_failure(store_error(e, &location)))?;
                let store = prepare(conn, &location)?;
                Ok(Backend::Sqlite(
                    Engine::new(store, clock, ids),
                    StoreKind::Opfs,
                ))
            }
        }
    }

    /// Which store this is.
    pub fn kind(&self) -> StoreKind {
        match self {
            Backend::Memory(_) => StoreKind::Memory,
            Backend::Sqlite(_, kind) => *kind,
        }
    }

    /// The whole SQLite database as bytes: a file the native `inbox` opens
    /// with `--db`, and that `Inbox.open({store: "sqlite", bytes})` reads
    /// back. The memory store has no such form.
    pub fn export(&mut self) -> Result<Vec<u8>, JsValue> {
        let Backend::Sqlite(engine, _) = self else {
            return Err(js::invalid(
                "exportBytes needs an SQLite store; open the inbox with store: \"sqlite\" or \"opfs\"",
            ));
        };
        let location = engine.store().location().to_owned();
        let conn = engine.store_mut().connection_mut();
        let data = conn
            .serialize(MAIN_DB)
            .map_err(|e| js::store_failure(store_error(e, &location)))?;
        let mut bytes = data.to_vec();
        // Bytes 18 and 19 of the header are the file format's write and read
        // versions: 2 means WAL. A database in wasm memory cannot use WAL
        // (there is no shared memory for its index), but the native CLI
        // expects an inbox database to be in WAL mode, so the exported file
        // says WAL, exactly as `inbox init` would have made it.
        if bytes.len() >= 100 {
            bytes[18] = 2;
            bytes[19] = 2;
        }
        Ok(bytes)
    }
}

impl Executor for Backend {
    fn execute(&mut self, request: Request) -> Response {
        match self {
            Backend::Memory(engine) => engine.execute(request),
            Backend::Sqlite(engine, _) => engine.execute(request),
        }
    }

    fn now(&mut self) -> Timestamp {
        match self {
            Backend::Memory(engine) => engine.now(),
            Backend::Sqlite(engine, _) => engine.now(),
        }
    }
}

/// Applies the settings every host uses and makes sure the schema is there:
/// created in a new database, migrated in an older one, refused in a newer
/// one or in a file that is not an inbox database.
fn prepare(conn: Connection, location: &str) -> Result<SqliteStore, JsValue> {
    conn.execute_batch(PORTABLE_PRAGMAS)
        .map_err(|e| js::store_failure(store_error(e, location)))?;
    let mut store = SqliteStore::new(conn, location).map_err(js::store_failure)?;
    match store.ensure_schema() {
        Ok(_) => Ok(store),
        Err(e) if e.kind == StoreErrorKind::NotInitialized => {
            store.initialize().map_err(js::store_failure)?;
            Ok(store)
        }
        Err(e) => Err(js::store_failure(e)),
    }
}

/// Loads `bytes` as the connection's main database.
fn import(conn: &mut Connection, bytes: &[u8]) -> Result<(), JsValue> {
    if bytes.len() < 100 || !bytes.starts_with(b"SQLite format 3\0") {
        return Err(js::store_failure(StoreError::other(format!(
            "the {} bytes given are not an SQLite database (no SQLite header); pass the bytes of an inbox database file or of exportBytes()",
            bytes.len()
        ))));
    }
    let mut bytes = bytes.to_vec();
    // A database written by the native CLI is in WAL mode (header bytes 18
    // and 19 are 2), which an in-memory database cannot open; 1 is the
    // rollback journal. Nothing else in the file depends on it.
    bytes[18] = 1;
    bytes[19] = 1;
    let size = bytes.len();
    conn.deserialize_read_exact(MAIN_DB, bytes.as_slice(), size, false)
        .map_err(|e| js::store_failure(store_error(e, "the imported bytes")))
}

/// Installs the OPFS pool once per worker (later calls reuse it).
async fn install_opfs() -> Result<(), JsValue> {
    use sqlite_wasm_vfs::sahpool::{OpfsSAHPoolCfgBuilder, install};
    let config = OpfsSAHPoolCfgBuilder::new()
        .vfs_name(OPFS_VFS)
        .directory(OPFS_DIRECTORY)
        .build();
    install::<sqlite_wasm_rs::WasmOsCallback>(&config, false)
        .await
        .map(|_| ())
        .map_err(|e| {
            js::store_failure(StoreError::other(format!(
                "cannot open the OPFS store: {e}; store: \"opfs\" runs only in a dedicated Web Worker of a browser with OPFS (use store: \"sqlite\" with exportBytes() elsewhere)"
            )))
        })
}

/// The engine error for a command on a closed inbox.
pub fn closed() -> EngineError {
    EngineError::Store(StoreError::other(
        "this inbox is closed; open a new one with Inbox.open",
    ))
}
