//! [`Backend`]: the engine over the store chosen at open time, and the bytes
//! of an SQLite database in and out.
//!
//! Four stores, one engine (over [`Stores`], so that the engine is in the
//! module once):
//! - `memory`: the engine's own in-memory store; smallest and fastest, gone
//!   when the page or process ends;
//! - `sqlite`: the native host's [`SqliteStore`] (the same code, not a copy)
//!   over SQLite compiled to wasm, in wasm memory; [`Backend::export`] and
//!   the `bytes` open option move the whole database in and out, so a Node or
//!   VS Code host can persist it through its own storage API;
//! - `opfs`: the same store persisted to the browser's Origin Private File
//!   System through the `opfs-sahpool` VFS, which needs synchronous access
//!   handles and so only runs in a dedicated worker;
//! - `file` (Node): the same store over Node's own SQLite (`node:sqlite`),
//!   on a database file that the CLI and any other SQLite client use at the
//!   same time, through SQLite's own locks; its busy timeout waits for
//!   their writes as the CLI does.
//!
//! The wasm build's own SQLite has one connection per database: this module
//! must never open a second one on the same memory or OPFS file.

#[cfg(feature = "sqlite")]
use crate::sqlite::WasmStore;
use inbox_engine::{
    Call, Engine, EngineError, Executor, MemoryStore, Response, Store, StoreError, Timestamp,
    UlidIds,
};
use wasm_bindgen::JsValue;

use crate::js::{self, JsClock};

/// Which store an `Inbox` keeps its records in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The engine's in-memory store.
    Memory,
    /// SQLite in wasm memory.
    Sqlite,
    /// SQLite persisted to OPFS (dedicated worker only).
    Opfs,
    /// A database file shared with other processes (Node only).
    File,
}

impl StoreKind {
    /// The spelling in open options and `Inbox.store`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Opfs => "opfs",
            StoreKind::File => "file",
        }
    }

    /// Reads the `store` option.
    pub fn parse(text: &str) -> Option<StoreKind> {
        match text {
            "memory" => Some(StoreKind::Memory),
            "sqlite" => Some(StoreKind::Sqlite),
            "opfs" => Some(StoreKind::Opfs),
            "file" => Some(StoreKind::File),
            _ => None,
        }
    }
}

/// What `Inbox.open` was asked for, checked.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The store.
    pub store: StoreKind,
    /// The database file: its name inside the OPFS pool (`opfs`), or its
    /// path (`file`).
    pub path: String,
    /// A whole database to start from (`sqlite` only).
    pub bytes: Option<Vec<u8>>,
    /// Start the clock at this instant instead of the wall clock.
    pub now: Option<Timestamp>,
}

inbox_engine::store_enum! {
    /// The store an inbox keeps its records in. The engine runs over this
    /// enum, so its code is in the module once, not once per store.
    pub enum Stores {
        /// The engine's in-memory store.
        Memory(MemoryStore),
        /// SQLite compiled to wasm, in wasm memory or OPFS.
        #[cfg(feature = "sqlite")]
        Sqlite(WasmStore),
        /// Node's own SQLite, on a database file other processes share.
        #[cfg(feature = "sqlite")]
        File(WasmStore),
    }
}

/// The engine over the store chosen at open time.
pub struct Backend {
    /// The engine, over [`Stores`].
    engine: Engine<Stores, JsClock, UlidIds>,
    /// Which store it is (`sqlite` and `opfs` are both [`Stores::Sqlite`]).
    kind: StoreKind,
    /// The OPFS file the connection holds: kept, never read, and released
    /// after the connection closes (fields drop in order).
    #[cfg(feature = "sqlite")]
    _opfs: Option<crate::sqlite::OpfsFile>,
    /// The `file` store's `data_version` when this inbox last looked (it
    /// changes with every commit of another connection).
    #[cfg(feature = "sqlite")]
    seen: i64,
}

impl Backend {
    /// Opens the store, creating the schema of a new database and migrating
    /// an older one. Async because installing the OPFS pool is.
    pub async fn open(options: &OpenOptions) -> Result<Backend, JsValue> {
        let clock = options
            .now
            .map_or_else(JsClock::system, JsClock::starting_at);
        let ids = UlidIds::from_seed(js::random_seed()).with_secrets(js::secret_bytes);
        #[cfg(feature = "sqlite")]
        let (mut opfs, mut seen) = (None, 0);
        let store = match options.store {
            StoreKind::Memory => {
                let mut store = MemoryStore::new();
                store.initialize().map_err(js::store_failure)?;
                Stores::Memory(store)
            }
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite => {
                Stores::Sqlite(crate::sqlite::open_in_memory(options.bytes.as_deref())?)
            }
            #[cfg(feature = "sqlite")]
            StoreKind::Opfs => {
                let (store, file) = crate::sqlite::open_opfs(&options.path).await?;
                opfs = Some(file);
                Stores::Sqlite(store)
            }
            #[cfg(feature = "sqlite")]
            StoreKind::File => {
                let store = crate::sqlite::open_file(&options.path)?;
                seen = crate::sqlite::data_version(&store).map_err(js::store_failure)?;
                Stores::File(store)
            }
            #[cfg(not(feature = "sqlite"))]
            StoreKind::Sqlite | StoreKind::Opfs | StoreKind::File => {
                return Err(js::invalid(format!(
                    "store \"{}\" needs SQLite, which this memory-only build leaves out; use the full inbox-wasm package",
                    options.store.as_str()
                )));
            }
        };
        Ok(Backend {
            engine: Engine::new(store, clock, ids),
            kind: options.store,
            #[cfg(feature = "sqlite")]
            _opfs: opfs,
            #[cfg(feature = "sqlite")]
            seen,
        })
    }

    /// Whether another connection committed since this inbox last looked
    /// (the `file` store; the others have no outside): waits poll it. A
    /// failed look counts as a change, so the waits look for themselves.
    pub fn outside_changed(&mut self) -> bool {
        match self.engine.store() {
            #[cfg(feature = "sqlite")]
            Stores::File(store) => {
                let now = crate::sqlite::data_version(store).ok();
                let changed = now != Some(self.seen);
                if let Some(now) = now {
                    self.seen = now;
                }
                changed
            }
            _ => false,
        }
    }

    /// Which store this is.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// The whole SQLite database as bytes: a file the native `inbox` opens
    /// with `--db`, and that `Inbox.open({store: "sqlite", bytes})` reads
    /// back. The memory store has no such form.
    pub fn export(&mut self) -> Result<Vec<u8>, JsValue> {
        match self.engine.store_mut() {
            #[cfg(feature = "sqlite")]
            Stores::Sqlite(store) | Stores::File(store) => crate::sqlite::export(store),
            Stores::Memory(_) => Err(js::invalid(
                "exportBytes needs an SQLite store; open the inbox with store: \"sqlite\" or \"opfs\"",
            )),
        }
    }
}

impl Executor for Backend {
    fn execute_call(&mut self, call: Call) -> Response {
        self.engine.execute_call(call)
    }

    fn now(&mut self) -> Timestamp {
        self.engine.now()
    }

    fn ticks(&mut self) -> u64 {
        Executor::ticks(&mut self.engine)
    }
}

/// The engine error for a command on a closed inbox.
pub fn closed() -> EngineError {
    EngineError::Store(StoreError::other(
        "this inbox is closed; open a new one with Inbox.open",
    ))
}
