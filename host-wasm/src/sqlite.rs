//! The SQLite stores of the wasm build: the native host's [`SqliteStore`]
//! over SQLite compiled to wasm, in wasm memory or in OPFS, and the bytes of
//! a database in and out.
//!
//! OPFS goes through the `opfs-sahpool` VFS: a pool of files in one OPFS
//! folder, held open with synchronous access handles, which browsers give
//! only to dedicated workers and only to one worker at a time. The pool is
//! installed on the first open in a worker; when the last OPFS inbox of the
//! worker closes, the pool is paused, which lets go of the handles so that
//! another worker (or tab) can take them, and the next open here resumes it.
//! One `Inbox` per file: a second open of the same file in the same worker
//! is refused rather than given a second connection.
//!
//! The `file` store (Node) is the same store over Node's own SQLite
//! ([`crate::node_sqlite`]), which shares the file with the CLI and any
//! other SQLite client through SQLite's own locks.

use std::cell::RefCell;
use std::collections::BTreeSet;

use inbox_engine::{Store, StoreError, StoreErrorKind};
use inbox_sqlite::SqliteStore;
use inbox_sqlite::error::{sql_store_error, store_error};
use inbox_sqlite::format::is_wal_header;
use inbox_sqlite::sql::{Flow, Param, Sql, SqlError, SqlRow};
use inbox_sqlite::store::PORTABLE_PRAGMAS;
use inbox_sqlite::store::durability::{BUSY_BUDGET, apply_durability, stored_durability};
use rusqlite::{Connection, MAIN_DB, OpenFlags};
use sqlite_wasm_rs::vfs::VfsFilesManager;
use sqlite_wasm_vfs::sahpool::{OpfsSAHError, OpfsSAHPoolCfgBuilder, OpfsSAHPoolUtil, install};
use wasm_bindgen::JsValue;

use crate::js;
use crate::node_files::NodeFiles;
use crate::node_sqlite::NodeSqlite;

/// The VFS name under which the OPFS pool is registered.
const OPFS_VFS: &str = "inbox-opfs";
/// The OPFS folder that holds the pool's files.
const OPFS_DIRECTORY: &str = ".inbox-opfs";

thread_local! {
    /// This worker's OPFS pool, once installed.
    static POOL: RefCell<Option<OpfsSAHPoolUtil>> = const { RefCell::new(None) };
    /// The OPFS files an `Inbox` of this worker has open.
    static OPEN: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// An open OPFS file: while it lives, the file is taken in this worker; when
/// the last one is dropped (after its connection), the pool lets go of its
/// access handles.
#[derive(Debug)]
pub struct OpfsFile {
    path: String,
}

impl Drop for OpfsFile {
    fn drop(&mut self) {
        let none_left = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            open.remove(&self.path);
            open.is_empty()
        });
        if none_left {
            POOL.with(|pool| {
                if let Some(pool) = pool.borrow().as_ref() {
                    // Fails only while a file is still open, which cannot be
                    // the case here; then the handles stay held, as before.
                    let _ = pool.pause();
                }
            });
        }
    }
}

/// The SQLite under a store of this module: the one compiled into it
/// (rusqlite, in wasm memory or OPFS) or Node's own (`node:sqlite`, the
/// `file` store). One binding type for both, so that the store's code is in
/// the module once rather than once per binding.
pub enum WasmSql {
    /// SQLite compiled into this module.
    Wasm(Connection),
    /// Node's own SQLite.
    Node(NodeSqlite),
}

impl Sql for WasmSql {
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<usize, SqlError> {
        match self {
            WasmSql::Wasm(conn) => Sql::execute(conn, sql, params),
            WasmSql::Node(conn) => Sql::execute(conn, sql, params),
        }
    }

    fn each_row(
        &self,
        sql: &str,
        params: &[Param<'_>],
        row: &mut dyn FnMut(&dyn SqlRow) -> Result<Flow, SqlError>,
    ) -> Result<(), SqlError> {
        match self {
            WasmSql::Wasm(conn) => Sql::each_row(conn, sql, params, row),
            WasmSql::Node(conn) => Sql::each_row(conn, sql, params, row),
        }
    }

    fn execute_batch(&self, sql: &str) -> Result<(), SqlError> {
        match self {
            WasmSql::Wasm(conn) => Sql::execute_batch(conn, sql),
            WasmSql::Node(conn) => Sql::execute_batch(conn, sql),
        }
    }

    fn in_transaction(&self) -> bool {
        match self {
            WasmSql::Wasm(conn) => Sql::in_transaction(conn),
            WasmSql::Node(conn) => Sql::in_transaction(conn),
        }
    }
}

/// The store of this module, over either SQLite ([`WasmSql`]).
pub type WasmStore = SqliteStore<WasmSql>;

/// A new database in wasm memory, or a copy of `bytes`.
pub fn open_in_memory(bytes: Option<&[u8]>) -> Result<WasmStore, JsValue> {
    let mut conn =
        Connection::open_in_memory().map_err(|e| js::store_failure(store_error(e, ":memory:")))?;
    if let Some(bytes) = bytes {
        import(&mut conn, bytes)?;
    }
    prepare(WasmSql::Wasm(conn), ":memory:")
}

impl OpfsFile {
    /// Removes the database and whatever journal SQLite left beside it from
    /// the pool, once its connection is closed, so its slot serves the next
    /// file (the pool has a fixed number of them, and this package has no
    /// other way to delete an OPFS database).
    pub fn remove(self) -> Result<(), JsValue> {
        let location = format!("opfs:{}", self.path);
        POOL.with(|pool| {
            let pool = pool.borrow();
            let Some(pool) = pool.as_ref() else {
                return Ok(());
            };
            for name in companions(&self.path) {
                pool.remove(&name).map_err(|e| {
                    js::store_failure(StoreError::other(format!(
                        "cannot remove {location} from the OPFS pool: {e}"
                    )))
                })?;
            }
            Ok(())
        })
        // Dropping `self` now releases the path, and the pool if it was the
        // last open file.
    }
}

/// The names a database `path` may have in the pool: the file, and the
/// journals SQLite makes beside it.
fn companions(path: &str) -> [String; 3] {
    [
        path.to_owned(),
        format!("{path}-wal"),
        format!("{path}-journal"),
    ]
}

/// Whether an open takes the database already at its path, or makes a new
/// one only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Existing {
    /// Open it (migrating an older schema), or create it if missing.
    Open,
    /// Refuse a path that holds anything, so nothing there is touched.
    Refuse,
}

/// The database `path` in this origin's OPFS, created if new.
pub async fn open_opfs(path: &str) -> Result<(WasmStore, OpfsFile), JsValue> {
    opfs(path, Existing::Open).await
}

/// A new database `path` in this origin's OPFS, for a run that must start
/// empty (`runScriptOn`): refused when the pool already holds that name (or
/// a journal of it), which is left untouched.
pub async fn create_opfs(path: &str) -> Result<(WasmStore, OpfsFile), JsValue> {
    opfs(path, Existing::Refuse).await
}

async fn opfs(path: &str, existing: Existing) -> Result<(WasmStore, OpfsFile), JsValue> {
    let location = format!("opfs:{path}");
    if OPEN.with(|open| open.borrow().contains(path)) {
        return Err(js::store_failure(StoreError::other(format!(
            "{location} is already open in this worker; use that Inbox (the wasm build has one connection per database), or close() it first"
        ))));
    }
    ensure_pool().await?;
    OPEN.with(|open| open.borrow_mut().insert(path.to_owned()));
    // From here on, dropping `file` releases the path (and the pool, if it
    // was the only one), also when opening fails.
    let file = OpfsFile {
        path: path.to_owned(),
    };
    if existing == Existing::Refuse {
        let held = POOL.with(|pool| {
            let pool = pool.borrow();
            let Some(pool) = pool.as_ref() else {
                return Ok(None);
            };
            for name in companions(path) {
                if pool.contains(&name)? {
                    return Ok(Some(name));
                }
            }
            Ok(None)
        });
        let held = held.map_err(|e: OpfsSAHError| {
            js::store_failure(StoreError::other(format!(
                "cannot look for {location} in the OPFS pool: {e}"
            )))
        })?;
        if let Some(held) = held {
            return Err(js::store_failure(StoreError::other(format!(
                "opfs:{held} already exists, and a script starts from an empty database; pass a new path (the file there is left as it is)"
            ))));
        }
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    let error = |e| js::store_failure(store_error(e, &location));
    let conn = Connection::open_with_flags_and_vfs(path, flags, OPFS_VFS).map_err(error)?;
    // The file is this connection's alone (the pool holds it exclusively),
    // so SQLite may keep the WAL index in its own memory instead of the
    // shared memory OPFS lacks: with EXCLUSIVE locking set before the first
    // read, WAL works here. A commit then appends to the WAL instead of
    // rewriting pages through a rollback journal, and with synchronous
    // NORMAL (the CLI's default durability) it does not flush every time:
    // measured in Chromium, 409 -> ~2.4k sends/s. A commit survives the tab
    // or worker dying; the last ones may not survive a power loss.
    conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE; PRAGMA synchronous = NORMAL;")
        .map_err(error)?;
    // A database created before this setting (or imported) may still use a
    // rollback journal; switching is a no-op for one in WAL mode.
    let _mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(error)?;
    let store = prepare(WasmSql::Wasm(conn), &location)?;
    Ok((store, file))
}

/// The database file at `path`, shared with the CLI and every other SQLite
/// client (Node only): opened with Node's own SQLite, so the file, its WAL
/// and their locks are SQLite's alone (see [`crate::node_sqlite`]). A file
/// that does not exist yet is created, owner-only, as a new inbox database.
pub fn open_file(path: &str) -> Result<WasmStore, JsValue> {
    let failure = |message: String| js::store_failure(StoreError::other(message));
    // Before anything is made on disk: a runtime that cannot open it
    // leaves no empty file behind.
    let sqlite = NodeSqlite::runtime().map_err(failure)?;
    let files = NodeFiles::new().map_err(failure)?;
    let path = files.resolve(path).map_err(failure)?;
    files.create_private(&path).map_err(failure)?;
    let busy_ms = u32::try_from(BUSY_BUDGET.as_millis()).unwrap_or(u32::MAX);
    let conn = NodeSqlite::open(&sqlite, &path, busy_ms)
        .map_err(|e| js::store_failure(sql_store_error(&e, &path)))?;
    let store = prepare(WasmSql::Node(conn), &path)?;
    stored_durability(&store)
        .and_then(|durability| apply_durability(&store, durability))
        .map_err(js::store_failure)?;
    Ok(store)
}

/// A new database file at `path` (Node), for a run that must start empty
/// (`runScriptOn`): refused when anything is there already (a file with
/// bytes in it, or a `-wal` or `-journal` beside it), which is left
/// untouched; an empty file (as `mkstemp` makes) is taken. The database
/// stays when the run ends, for the CLI (`inbox --db FILE`) to look at.
pub fn create_file(path: &str) -> Result<WasmStore, JsValue> {
    let failure = |message: String| js::store_failure(StoreError::other(message));
    NodeSqlite::runtime().map_err(failure)?;
    let files = NodeFiles::new().map_err(failure)?;
    let real = files.resolve(path).map_err(failure)?;
    for name in companions(&real) {
        if files
            .size(&name)
            .map_err(failure)?
            .is_some_and(|size| size > 0.0)
        {
            return Err(failure(format!(
                "{name} already exists, and a script starts from an empty database; pass a new path (the file there is left as it is)"
            )));
        }
    }
    open_file(path)
}

/// The whole database as the bytes of a file the native CLI opens.
pub fn export(store: &mut WasmStore) -> Result<Vec<u8>, JsValue> {
    let location = store.location().to_owned();
    let data = match store.connection_mut() {
        WasmSql::Wasm(conn) => conn
            .serialize(MAIN_DB)
            .map_err(|e| js::store_failure(store_error(e, &location)))?,
        WasmSql::Node(_) => return export_file(store),
    };
    let mut bytes = data.to_vec();
    self_contained(&mut bytes);
    Ok(bytes)
}

/// Marks a copy's header as a rollback-journal database.
fn self_contained(bytes: &mut [u8]) {
    // Bytes 18 and 19 of the header are the file format's write and read
    // versions: 1 is a rollback journal, 2 WAL. The bytes are a
    // self-contained copy, so they say 1, as `inbox export` and SQLite's
    // `VACUUM INTO` write: the CLI switches such a file to WAL when it
    // opens it, and refuses it if it finds it written over a database whose
    // -wal still holds commits (which would mix the two).
    if bytes.len() >= 100 {
        bytes[18] = 1;
        bytes[19] = 1;
    }
}

/// The `data_version` of the database under `store`: it changes whenever
/// another connection commits.
pub fn data_version<C: Sql>(store: &SqliteStore<C>) -> Result<i64, StoreError> {
    let mut version = 0;
    store
        .connection()
        .each_row("PRAGMA data_version", &[], &mut |row| {
            version = row.int(0)?.unwrap_or(0);
            Ok(Flow::Stop)
        })
        .map_err(|e| sql_store_error(&e, store.location()))?;
    Ok(version)
}

/// A self-contained copy of the `file` store's database, as bytes: SQLite
/// writes it (`VACUUM INTO`) in a private scratch folder, whose file is read
/// back and removed.
pub fn export_file(store: &WasmStore) -> Result<Vec<u8>, JsValue> {
    let failure = |message: String| js::store_failure(StoreError::other(message));
    let files = NodeFiles::new().map_err(failure)?;
    let mut bytes = files
        .scratch_file(|path| {
            store
                .connection()
                .execute("VACUUM INTO ?1", &[Param::from(path)])
                .map(drop)
                .map_err(|e| sql_store_error(&e, store.location()).message)
        })
        .map_err(failure)?;
    self_contained(&mut bytes);
    Ok(bytes)
}

/// Applies the settings every host uses and makes sure the schema is there:
/// created in a new database, migrated in an older one, refused in a newer
/// one or in a file that is not an inbox database.
fn prepare<C: Sql>(conn: C, location: &str) -> Result<SqliteStore<C>, JsValue> {
    conn.execute_batch(PORTABLE_PRAGMAS)
        .map_err(|e| js::store_failure(sql_store_error(&e, location)))?;
    let mut store = SqliteStore::over(conn, location).map_err(js::store_failure)?;
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
    // The bytes of a database file in WAL mode (header bytes 18 and 19 are
    // 2: every database the CLI uses) are only part of it: its recent
    // commits are in its -wal, which these bytes lack, and writing a copy
    // back over the file would lose them. Self-contained copies
    // (exportBytes, `inbox export`) say 1.
    if is_wal_header(bytes) {
        return Err(js::store_failure(StoreError::other(
            "these are the bytes of a database file in WAL mode, whose latest commits are in its -wal file, which the bytes leave out (and writing them back over the file would lose those commits). To use a database file the CLI also uses, open it with {store: \"file\", path}; to carry a database elsewhere, pass the bytes of exportBytes() or of `inbox export --sqlite FILE`",
        )));
    }
    let bytes = bytes.to_vec();
    let size = bytes.len();
    conn.deserialize_read_exact(MAIN_DB, bytes.as_slice(), size, false)
        .map_err(|e| js::store_failure(store_error(e, "the imported bytes")))
}

/// Installs this worker's pool, or resumes it after the last close paused it.
async fn ensure_pool() -> Result<(), JsValue> {
    let pool = POOL.with(|pool| pool.borrow().clone());
    let result = match pool {
        Some(pool) if pool.is_paused() => pool.resume().await,
        Some(_) => Ok(()),
        None => {
            let config = OpfsSAHPoolCfgBuilder::new()
                .vfs_name(OPFS_VFS)
                .directory(OPFS_DIRECTORY)
                .build();
            install::<sqlite_wasm_rs::WasmOsCallback>(&config, false)
                .await
                .map(|pool| POOL.with(|slot| *slot.borrow_mut() = Some(pool)))
        }
    };
    result.map_err(|e| {
        let advice = match e {
            OpfsSAHError::NotSupported => {
                "store: \"opfs\" runs only in a dedicated Web Worker of a browser with OPFS (use store: \"sqlite\" with exportBytes() elsewhere)"
            }
            _ => {
                "the inbox's OPFS files can be held by one worker at a time: close() the Inbox of the other worker or tab (or end that worker), then open again"
            }
        };
        js::store_failure(StoreError::other(format!(
            "cannot open the OPFS store: {e}; {advice}"
        )))
    })
}
