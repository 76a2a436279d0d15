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
//! The `file` store (Node) keeps a copy of a database file in wasm memory
//! and synchronizes it with the file around every transaction, so that it
//! shares the file with the CLI safely (see
//! [`inbox_host_native::shared_file`] for the protocol).

use std::cell::RefCell;
use std::collections::BTreeSet;

use inbox_engine::{Store, StoreError, StoreErrorKind};
use inbox_host_native::SqliteStore;
use inbox_host_native::shared_file::{self, SharedFile, SharedFileHooks};
use inbox_host_native::store::{PORTABLE_PRAGMAS, store_error};
use inbox_host_native::wal;
use rusqlite::{Connection, MAIN_DB, OpenFlags};
use sqlite_wasm_vfs::sahpool::{OpfsSAHError, OpfsSAHPoolCfgBuilder, OpfsSAHPoolUtil, install};
use wasm_bindgen::JsValue;

use crate::js;
use crate::node_files::NodeFiles;

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

/// A new database in wasm memory, or a copy of `bytes`.
pub fn open_in_memory(bytes: Option<&[u8]>) -> Result<SqliteStore, JsValue> {
    let mut conn =
        Connection::open_in_memory().map_err(|e| js::store_failure(store_error(e, ":memory:")))?;
    if let Some(bytes) = bytes {
        import(&mut conn, bytes)?;
    }
    prepare(conn, ":memory:")
}

/// The database `path` in this origin's OPFS, created if new.
pub async fn open_opfs(path: &str) -> Result<(SqliteStore, OpfsFile), JsValue> {
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
    let store = prepare(conn, &location)?;
    // A database created before this setting (or imported) may still use a
    // rollback journal; switching is a no-op for one in WAL mode.
    let _mode: String = store
        .connection()
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(error)?;
    Ok((store, file))
}

/// The database file at `path`, shared with the CLI and any other process
/// (Node only): a copy in wasm memory, synchronized with the file around
/// every transaction (see [`inbox_host_native::shared_file`]). A file that
/// does not exist yet is created, owner-only, as a new inbox database.
pub fn open_file(path: &str) -> Result<SqliteStore, JsValue> {
    let files = NodeFiles::new().map_err(|e| js::store_failure(StoreError::other(e)))?;
    let path = files
        .resolve(path)
        .map_err(|e| js::store_failure(StoreError::other(e)))?;
    let (mut shared, image) = SharedFile::open(files, &path).map_err(js::store_failure)?;
    let error = |e| js::store_failure(store_error(e, &path));
    let mut conn = Connection::open_in_memory().map_err(error)?;
    if let Some(image) = &image {
        shared_file::load(&mut conn, image).map_err(js::store_failure)?;
    }
    let mut store = prepare(conn, &path)?;
    // A new database (schema just created) or an older one (just migrated)
    // differs from the file: write it before anything else happens.
    let now = shared_file::save(store.connection_mut()).map_err(js::store_failure)?;
    match image {
        None => shared.create(&now).map_err(js::store_failure)?,
        Some(image) if !same_database(&image, &now) => {
            shared.before().map_err(js::store_failure)?;
            let written = shared.after_write(&now);
            shared.release();
            written.map_err(js::store_failure)?;
        }
        Some(_) => {}
    }
    store.set_hooks(Box::new(SharedFileHooks::new(shared)));
    Ok(store)
}

/// Whether two images hold the same database, whatever their header says
/// about the journal mode (bytes 18 and 19).
fn same_database(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.len() >= 100 && a[..18] == b[..18] && a[20..] == b[20..]
}

/// The whole database as the bytes of a file the native CLI opens.
pub fn export(store: &mut SqliteStore) -> Result<Vec<u8>, JsValue> {
    let location = store.location().to_owned();
    let data = store
        .connection_mut()
        .serialize(MAIN_DB)
        .map_err(|e| js::store_failure(store_error(e, &location)))?;
    let mut bytes = data.to_vec();
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
    Ok(bytes)
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
    // The bytes of a database file in WAL mode (header bytes 18 and 19 are
    // 2: every database the CLI uses) are only part of it: its recent
    // commits are in its -wal, which these bytes lack, and writing a copy
    // back over the file would lose them. Self-contained copies
    // (exportBytes, `inbox export`) say 1.
    if wal::is_wal_mode(bytes) {
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
