//! The file `inbox import --sqlite FILE` reads, taken as data and nothing
//! else: [`read`] copies its bytes (and its `-wal`'s) into a folder of the
//! import's own and checks that the copy is exactly an inbox database,
//! all before the destination is locked or written.
//!
//! The file is a stranger's. It may be a FIFO or a link; a database of
//! another program or of a newer inbox; one whose `threads` is a view over
//! an endless query, or that holds triggers, virtual tables, generated
//! columns, indexes on expressions or tables of other columns; a `-wal`
//! beside it that adds any of these; or simply huge. So:
//!
//! - SQLite never opens it, nor anything beside it: no lock is taken on
//!   it, no `-shm` made beside it, no open waits on a FIFO. Its bytes are
//!   read through descriptors of this module (the name resolved once, each
//!   descriptor checked to be a regular file), at most [`Limits::bytes`]
//!   of them, and a file written to while it was read is refused.
//! - The copy is opened with SQLite's defences for untrusted files
//!   (defensive mode, `trusted_schema` off, views and triggers disabled,
//!   cell size checks, no memory map, `query_only`), and its schema,
//!   `sqlite_schema` read as a plain table, must be exactly what inbox's
//!   migrations make for its version: each of inbox's tables and indexes
//!   with inbox's own definition, and nothing else. Only then is anything
//!   in it evaluated: the integrity check, the row count (at most
//!   [`Limits::rows`]), the migration to this build's schema.
//!
//! So the destination's write transaction copies rows of plain tables
//! whose number is known beforehand, and nothing the file says runs.
//!
//! This module must never write the file given or anything beside it,
//! and never close a descriptor on a file SQLite holds locks on in this
//! process (that drops them): the destination's own files are refused by
//! name before any is opened.

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use inbox_engine::{StoreError, StoreErrorKind};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::file::companion;
use crate::schema::{self, SchemaObject, SchemaState};

/// Why a transfer did not happen, by who must act: the file given, the
/// destination's state, or the store.
#[derive(Debug)]
pub enum TransferError {
    /// The file named is unusable (exists, not a database, corrupt...).
    File(String),
    /// The destination holds data and `--replace` was not given.
    NotEmpty(String),
    /// The file named holds more than an import reads ([`Limits`]).
    TooLarge(String),
    /// The store failed (including `schema_too_new`).
    Store(StoreError),
}

impl From<StoreError> for TransferError {
    fn from(error: StoreError) -> Self {
        TransferError::Store(error)
    }
}

/// How much of a file an import reads: bytes (the file and its `-wal`)
/// and rows (of every table). Past either, it is refused before the
/// destination is locked: its rows are copied inside the destination's
/// write transaction, which every other writer waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the file and its `-wal`, together.
    pub bytes: u64,
    /// Rows of all its tables, together.
    pub rows: u64,
}

impl Default for Limits {
    /// 2 GiB and 10 million rows: about a million tasks with retention off
    /// (docs/BENCHMARKS.md, 9: 100,000 tasks take 191 MiB), hundreds of
    /// times what seed 004's limits keep.
    fn default() -> Limits {
        Limits {
            bytes: 2 << 30,
            rows: 10_000_000,
        }
    }
}

/// The first bytes of every SQLite database file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The bytes of a `-wal`'s header: a writer that starts the log over
/// rewrites them (new salts), so they tell whether it did while read.
const WAL_HEADER: usize = 32;

/// A checked copy of an import's source, in a folder of its own (removed
/// with it), at this build's schema.
#[derive(Debug)]
pub struct Source {
    folder: Folder,
    /// The copy, a plain SQLite file (no `-wal`).
    pub file: PathBuf,
    /// Rows of each of its tables, counted before it was migrated (a table
    /// the migration added holds none).
    pub rows: BTreeMap<String, u64>,
}

impl Source {
    /// Rows `table` holds.
    pub fn rows_of(&self, table: &str) -> u64 {
        self.rows.get(table).copied().unwrap_or(0)
    }

    /// The folder the copy is in.
    pub fn folder(&self) -> &Path {
        &self.folder.0
    }
}

/// A folder only this user may enter, made new beside a file: what is
/// written in it cannot be swapped for a link or a FIFO by anyone else.
/// Removed, with what it holds, when dropped.
#[derive(Debug)]
pub struct Folder(PathBuf);

impl Folder {
    /// A new owner-only folder beside `path`, named for `what`.
    pub fn beside(path: &Path, what: &str) -> Result<Folder, TransferError> {
        use std::os::unix::fs::DirBuilderExt;
        let name = path
            .file_name()
            .map_or_else(|| "inbox".to_owned(), |n| n.to_string_lossy().into_owned());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let folder = path.with_file_name(format!(
            ".{name}.{what}-{}-{nanos:09}.tmp",
            std::process::id()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&folder)
            .map_err(|e| TransferError::File(format!("cannot create {}: {e}", folder.display())))?;
        Ok(Folder(folder))
    }

    /// A path inside it.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies `source` beside `destination` (the database the import writes
/// to) and checks the copy; see the module docs.
pub fn read(source: &Path, destination: &Path, limits: Limits) -> Result<Source, TransferError> {
    let shown = source.display().to_string();
    let real = std::fs::canonicalize(source)
        .map_err(|e| TransferError::File(format!("{shown} cannot be read: {e}")))?;
    let own = Own::of(destination);
    if let Ok(meta) = std::fs::metadata(&real) {
        own.refuse(&meta, &shown)?;
    }
    let opened = Opened::open(&real, &own, limits, &shown)?;
    let folder = Folder::beside(destination, "import")?;
    let file = folder.join("source.db");
    opened.copy_to(&file, &shown)?;
    let rows = check_copy(&file, limits, &shown)?;
    Ok(Source { folder, file, rows })
}

/// The destination's files SQLite may hold locks on in this process, by
/// device and inode: an import never reads them, and never closes a
/// descriptor it opened on one (see the module docs).
struct Own(Vec<(u64, u64)>);

impl Own {
    fn of(destination: &Path) -> Own {
        Own(["", "-wal", "-shm"]
            .iter()
            .filter_map(|suffix| std::fs::metadata(companion(destination, suffix)).ok())
            .map(|meta| (meta.dev(), meta.ino()))
            .collect())
    }

    fn refuse(&self, meta: &Metadata, shown: &str) -> Result<(), TransferError> {
        if self.0.contains(&(meta.dev(), meta.ino())) {
            return Err(TransferError::File(format!(
                "{shown} is the database this import writes to (or one of its files); name a \
                 copy of another database (`inbox --db OTHER.db export --sqlite COPY.db`)"
            )));
        }
        Ok(())
    }
}

/// Opens `path` to read it, never waiting (a FIFO opens at once), never
/// through a link (the name was resolved once, by the caller). Refuses
/// what is not a regular file, and a file of the destination's (which
/// it then keeps open rather than close).
fn open_regular(path: &Path, own: &Own, shown: &str) -> Result<(File, Metadata), TransferError> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(flags.bits()).unwrap_or(0))
        .open(path)
        .map_err(|e| TransferError::File(format!("{shown} cannot be read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| TransferError::File(format!("{shown} cannot be read: {e}")))?;
    if let Err(refused) = own.refuse(&meta, shown) {
        // Swapped in since it was looked at: closing this descriptor
        // would drop this process's locks on it.
        std::mem::forget(file);
        return Err(refused);
    }
    if !meta.is_file() {
        return Err(TransferError::File(format!(
            "{shown} is not a regular file; name an inbox database file"
        )));
    }
    Ok((file, meta))
}

/// The `-wal` beside `real`, if there is one with anything in it. A
/// rollback journal left by an interrupted write is refused: SQLite would
/// roll it back into the file, which an import never writes.
fn companions(
    real: &Path,
    own: &Own,
    shown: &str,
) -> Result<Option<(File, Metadata)>, TransferError> {
    let journal = companion(real, "-journal");
    if std::fs::symlink_metadata(&journal).is_ok_and(|m| !m.is_file() || m.len() > 0) {
        return Err(TransferError::File(format!(
            "{} is beside {shown}: a write to it was interrupted, and only the program that \
             wrote it (or sqlite3) may roll it back; nothing was imported",
            journal.display()
        )));
    }
    let wal = companion(real, "-wal");
    let wal_shown = wal.display().to_string();
    match std::fs::symlink_metadata(&wal) {
        Err(_) => return Ok(None),
        Ok(meta) if !meta.is_file() => {
            return Err(TransferError::File(format!(
                "{wal_shown} is beside {shown} and is not a regular file (a link, a FIFO or a \
                 folder): a database's log is never read through one; nothing was imported"
            )));
        }
        Ok(_) => {}
    }
    let (file, meta) = open_regular(&wal, own, &wal_shown)?;
    Ok((meta.len() > 0).then_some((file, meta)))
}

/// What of a file tells whether it was written to: a write changes its
/// size or modification time (or its status change time).
fn stamp(meta: &Metadata) -> (u64, i64, i64, i64, i64) {
    (
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    )
}

/// The file given and its `-wal`, open, checked to be regular files of
/// SQLite within the limits, not yet copied.
struct Opened {
    file: File,
    meta: Metadata,
    wal: Option<(File, Metadata)>,
    wal_header: Option<[u8; WAL_HEADER]>,
}

impl Opened {
    fn open(real: &Path, own: &Own, limits: Limits, shown: &str) -> Result<Opened, TransferError> {
        let (file, meta) = open_regular(real, own, shown)?;
        let wal = companions(real, own, shown)?;
        let size = meta.len() + wal.as_ref().map_or(0, |(_, m)| m.len());
        if size > limits.bytes {
            return Err(too_large_bytes(shown, size, limits));
        }
        let mut magic = [0u8; 16];
        if meta.len() > 0 && (file.read_exact_at(&mut magic, 0).is_err() || &magic != MAGIC) {
            return Err(TransferError::File(not_sqlite(shown)));
        }
        let wal_header = wal.as_ref().and_then(|(f, _)| header(f));
        Ok(Opened {
            file,
            meta,
            wal,
            wal_header,
        })
    }

    /// Copies the file to `copy` (and its `-wal` beside it), as many
    /// bytes as each had when opened (so no more than the limit, even of
    /// a file that says it is empty and never ends); refuses them if
    /// either was written to meanwhile (a checkpoint, a log started over
    /// or cut short). What a writer appends to the log meanwhile is left
    /// out: a log is read up to any frame, and a frame cut short ends it.
    fn copy_to(&self, copy: &Path, shown: &str) -> Result<(), TransferError> {
        let mut whole = copy_file(&self.file, self.meta.len(), copy, shown)?;
        if let Some((wal, meta)) = &self.wal {
            whole &= copy_file(wal, meta.len(), &companion(copy, "-wal"), shown)?;
        }
        let now = self.file.metadata().map(|m| stamp(&m)).ok();
        let wal_now = self.wal.as_ref().and_then(|(f, _)| header(f));
        if !whole || now != Some(stamp(&self.meta)) || wal_now != self.wal_header {
            return Err(TransferError::File(format!(
                "{shown} was written to while it was read (a program has it open); import a \
                 copy made while agents run (`inbox --db {shown} export --sqlite COPY.db`); \
                 nothing was imported"
            )));
        }
        Ok(())
    }
}

fn header(wal: &File) -> Option<[u8; WAL_HEADER]> {
    let mut bytes = [0u8; WAL_HEADER];
    wal.read_exact_at(&mut bytes, 0).ok().map(|()| bytes)
}

/// Copies the first `len` bytes of `from` into the new file `to`;
/// whether there were as many.
fn copy_file(from: &File, len: u64, to: &Path, shown: &str) -> Result<bool, TransferError> {
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| TransferError::File(format!("cannot copy {shown}: {e}"));
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(cannot)?;
    let copied = std::io::copy(&mut from.take(len), &mut out).map_err(cannot)?;
    out.flush().map_err(cannot)?;
    Ok(copied == len)
}

fn too_large_bytes(shown: &str, size: u64, limits: Limits) -> TransferError {
    TransferError::TooLarge(format!(
        "{shown} (with its -wal) is {size} bytes, more than an import reads ({} bytes); remove \
         old threads from it first (`inbox --db {shown} gc`), then import a compact copy \
         (`inbox --db {shown} export --sqlite COPY.db`); nothing was imported",
        limits.bytes
    ))
}

pub(crate) fn not_sqlite(shown: &str) -> String {
    format!("{shown} is not an SQLite database; name a file made by `inbox export` or `inbox init`")
}

/// Opens the copy with SQLite's defences for a file of unknown origin.
fn open_defended(file: &Path, shown: &str) -> Result<Connection, TransferError> {
    let damaged =
        |e: rusqlite::Error| TransferError::File(format!("{shown} cannot be opened: {e}"));
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(file, flags).map_err(damaged)?;
    for (setting, on) in [
        (DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true),
        (DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false),
        (DbConfig::SQLITE_DBCONFIG_ENABLE_VIEW, false),
    ] {
        conn.set_db_config(setting, on).map_err(damaged)?;
    }
    conn.execute_batch(
        "PRAGMA trusted_schema = OFF; PRAGMA cell_size_check = ON; PRAGMA mmap_size = 0; \
         PRAGMA query_only = ON;",
    )
    .map_err(|e| file_error(e, shown))?;
    Ok(conn)
}

/// Checks the copy (schema, then damage, then rows) and brings it to
/// this build's schema; returns the rows of each table.
fn check_copy(
    file: &Path,
    limits: Limits,
    shown: &str,
) -> Result<BTreeMap<String, u64>, TransferError> {
    let conn = open_defended(file, shown)?;
    let version = version(&conn, shown)?;
    exactly_inbox(&conn, "main", version, shown)?;
    let verdict: String = conn
        .query_row("PRAGMA integrity_check(1)", [], |row| row.get(0))
        .map_err(|e| file_error(e, shown))?;
    if verdict != "ok" {
        return Err(TransferError::File(format!(
            "{shown} is damaged (SQLite's integrity check: {}); nothing was imported",
            quoted(&verdict)
        )));
    }
    let rows = count_rows(&conn, version, limits, shown)?;
    // Now it may be written: one file, no -wal, at this build's schema.
    conn.execute_batch("PRAGMA query_only = OFF; PRAGMA journal_mode = DELETE;")
        .map_err(|e| file_error(e, shown))?;
    schema::migrate(&conn, shown).map_err(TransferError::Store)?;
    exactly_inbox(&conn, "main", schema::SCHEMA_VERSION, shown)?;
    Ok(rows)
}

/// The copy's schema version: refuses another program's file, a newer
/// inbox's, and one that holds no inbox database.
fn version(conn: &Connection, shown: &str) -> Result<u32, TransferError> {
    let empty = || {
        TransferError::File(format!(
            "{shown} holds no inbox database (it is empty); name a file made by `inbox export` \
             or `inbox init`"
        ))
    };
    match schema::inspect(conn, shown) {
        Ok(SchemaState::Version(0) | SchemaState::Empty) => {
            let objects = schema::objects(conn, "main").map_err(|e| file_error(e, shown))?;
            if objects.is_empty() {
                Err(empty())
            } else {
                Ok(0)
            }
        }
        Ok(SchemaState::Version(version)) => Ok(version),
        Err(e) if e.kind == StoreErrorKind::SchemaTooNew => Err(TransferError::Store(e)),
        Err(e) => Err(TransferError::File(problem(shown, &e.message))),
    }
}

/// Refuses `schema` of `conn` unless its objects are exactly those of an
/// inbox database of `version`.
pub(crate) fn exactly_inbox(
    conn: &Connection,
    schema: &str,
    version: u32,
    shown: &str,
) -> Result<(), TransferError> {
    let found = schema::objects(conn, schema).map_err(|e| file_error(e, shown))?;
    let expected = schema::objects_of_version(version).map_err(TransferError::Store)?;
    match first_difference(&found, &expected) {
        None => Ok(()),
        Some(difference) => Err(TransferError::File(format!(
            "{shown} is not an inbox database as inbox writes it: {difference}. An import reads \
             inbox's own tables only, never views, triggers or definitions of another program; \
             nothing was imported"
        ))),
    }
}

/// The first object that is not inbox's, or that inbox's schema has and
/// `found` lacks, said for people (names quoted and cut short: the file
/// chose them).
fn first_difference(found: &[SchemaObject], expected: &[SchemaObject]) -> Option<String> {
    let name = |o: &SchemaObject| quoted(&o.name);
    if let Some(extra) = found.iter().find(|o| !expected.contains(o)) {
        let same_name = expected.iter().find(|e| e.name == extra.name);
        return Some(match same_name {
            Some(ours) if ours.kind == extra.kind => format!(
                "its {} {} is defined otherwise than inbox's (other columns, types, constraints \
                 or expressions)",
                ours.kind,
                name(extra)
            ),
            Some(ours) => format!(
                "its {} is {} where inbox has {}",
                name(extra),
                a_kind(&extra.kind),
                a_kind(&ours.kind)
            ),
            None => format!(
                "it holds {} {} that inbox's schema has not",
                a_kind(&extra.kind),
                name(extra)
            ),
        });
    }
    expected
        .iter()
        .find(|o| !found.contains(o))
        .map(|missing| format!("it lacks inbox's {} {}", missing.kind, name(missing)))
}

/// "a table", "an index"... (the kind is the file's: anything else quoted).
fn a_kind(kind: &str) -> String {
    match kind {
        "index" => "an index".to_owned(),
        "table" | "view" | "trigger" => format!("a {kind}"),
        other => format!("an object of type {}", quoted(other)),
    }
}

/// Counts the rows of each of inbox's tables; refuses more than
/// `limits.rows` in all.
fn count_rows(
    conn: &Connection,
    version: u32,
    limits: Limits,
    shown: &str,
) -> Result<BTreeMap<String, u64>, TransferError> {
    let mut rows = BTreeMap::new();
    let mut total: u64 = 0;
    let tables = schema::objects_of_version(version).map_err(TransferError::Store)?;
    for table in tables.iter().filter(|o| o.kind == "table") {
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM main.\"{}\"", table.name),
                [],
                |row| row.get(0),
            )
            .map_err(|e| file_error(e, shown))?;
        let n = u64::try_from(n).unwrap_or(0);
        total = total.saturating_add(n);
        rows.insert(table.name.clone(), n);
    }
    if total > limits.rows {
        return Err(TransferError::TooLarge(format!(
            "{shown} holds {total} rows, more than an import copies ({}): every other writer \
             waits while they are copied; remove old threads from it first (`inbox --db \
             {shown} gc`); nothing was imported",
            limits.rows
        )));
    }
    Ok(rows)
}

/// Text the file chose, for a message: quoted, its control characters
/// escaped, cut short.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 200;
    let cut: String = text.chars().take(SHOWN).collect();
    let more = if text.chars().count() > SHOWN {
        "..."
    } else {
        ""
    };
    format!("{cut:?}{more}")
}

/// An SQLite error on the copy, said of the file given.
fn file_error(error: rusqlite::Error, shown: &str) -> TransferError {
    let message = error.to_string();
    TransferError::File(problem(shown, &message))
}

fn problem(shown: &str, message: &str) -> String {
    if message.contains("not a database") || message.contains("is not an SQLite database") {
        not_sqlite(shown)
    } else if message.contains("of another program") {
        format!(
            "{shown} is an SQLite database of another program, not an inbox database; nothing \
             was imported"
        )
    } else if message.contains("malformed") || message.contains("corrupt") {
        format!(
            "{shown} is damaged ({}); nothing was imported",
            quoted(message)
        )
    } else {
        format!(
            "{shown} cannot be read as an inbox database ({}); nothing was imported",
            quoted(message)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real inbox database with a few rows, made by `init`.
    fn database(dir: &Path) -> PathBuf {
        let path = dir.join("source.db");
        let (store, _) = crate::open::init(&path, None).unwrap();
        store
            .connection()
            .execute_batch(
                "INSERT INTO settings VALUES ('a', '1'), ('b', '2'), ('c', '3'); \
                 PRAGMA wal_checkpoint(TRUNCATE);",
            )
            .unwrap();
        drop(store);
        path
    }

    fn refusal(result: Result<Source, TransferError>) -> String {
        match result {
            Err(TransferError::TooLarge(message)) => message,
            other => panic!("not refused as too large: {other:?}"),
        }
    }

    #[test]
    fn a_file_past_the_limits_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let source = database(dir.path());
        let destination = dir.path().join("dest.db");
        let size = std::fs::metadata(&source).unwrap().len()
            + std::fs::metadata(companion(&source, "-wal")).map_or(0, |m| m.len());

        let read_with = |bytes, rows| read(&source, &destination, Limits { bytes, rows });
        let fits = read_with(size, 3).unwrap();
        assert_eq!(fits.rows_of("settings"), 3, "{:?}", fits.rows);
        let folder = fits.folder().to_path_buf();
        drop(fits);
        assert!(!folder.exists(), "the copy's folder is removed with it");

        let message = refusal(read_with(size - 1, 3));
        assert!(
            message.contains("bytes, more than an import reads"),
            "{message}"
        );
        let message = refusal(read_with(size, 2));
        assert!(message.contains("holds 3 rows"), "{message}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_schema_difference_is_said_with_the_names_escaped() {
        let expected = schema::objects_of_version(schema::SCHEMA_VERSION).unwrap();
        let mut found = expected.clone();
        found.push(SchemaObject {
            kind: "trigger".into(),
            name: "x\u{1b}[2J".into(),
            table: "threads".into(),
            sql: Some("CREATE TRIGGER ...".into()),
        });
        let said = first_difference(&found, &expected).unwrap();
        assert!(said.contains("a trigger \"x\\u{1b}[2J\""), "{said}");
        assert!(!said.contains('\u{1b}'));
        assert_eq!(first_difference(&expected, &expected), None);
        let said = first_difference(&expected[1..], &expected).unwrap();
        assert!(said.starts_with("it lacks inbox's"), "{said}");
    }
}
