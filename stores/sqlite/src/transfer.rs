//! Moving a whole database between files: [`export`] writes a consistent,
//! self-contained copy (`inbox export --sqlite FILE`), [`import`] brings
//! one into a live database (`inbox import --sqlite FILE`).
//!
//! A copy is one snapshot (`VACUUM INTO`, a read transaction, so it holds
//! what is still in the `-wal` too) with no `-wal` or `-shm` beside it,
//! written in an owner-only folder of its own (nobody can swap it for a
//! link or a FIFO there), and never put over an existing file unless asked
//! (then renamed over it: a link or FIFO there is replaced, never opened).
//!
//! An import never replaces the database file: agents may be running on it,
//! and replacing a file under them is how data gets lost. The file given is
//! a stranger's and only ever read, as bytes: [`crate::import_source`]
//! copies it, checks the copy is exactly an inbox database (no view,
//! trigger or definition of its own runs), within [`Limits`], and migrates
//! it, all before the destination is locked. Then its rows are copied in
//! one ordinary write transaction of the destination's own connection (the
//! same `BEGIN IMMEDIATE` every command takes, so it waits for writers and
//! checks that the files are still the ones opened), exactly as many as were
//! counted, and waiters see it as any commit.
//!
//! This module must never apply an inbox rule; it moves rows.

use std::path::{Path, PathBuf};

use inbox_engine::store::TxMode;
use inbox_engine::{Store, StoreError, StoreErrorKind};
use rusqlite::{Connection, OpenFlags};

use crate::SqliteStore;
use crate::error::store_error;
use crate::file::companion;
pub use crate::import_source::Limits;
use crate::import_source::{self, Folder, Source};
use crate::schema;

pub use crate::import_source::TransferError;

/// What an export wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    /// The copy.
    pub file: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Threads in it.
    pub threads: u64,
}

/// What an import brought in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// Threads now in the destination.
    pub threads: u64,
    /// Messages now in the destination.
    pub messages: u64,
    /// Events now in the destination.
    pub events: u64,
    /// Where the destination's previous content was saved (`--replace`).
    pub backup: Option<PathBuf>,
}

/// The table an import leaves as the destination's: its settings
/// (durability is a property of where the database runs).
const KEPT: &str = "settings";

/// The newest event id of `main`, inbox's or orch's (one sequence): a
/// backup is current while it is unchanged.
const LATEST_EVENT: &str = "SELECT max(coalesce((SELECT max(event_id) FROM main.events), 0), \
                                    coalesce((SELECT max(event_id) FROM main.orch_events), 0))";

/// What a destination holds that an import would replace: its threads and
/// orch's runs (a run may have no thread yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    threads: u64,
    runs: u64,
}

impl Held {
    fn of(conn: &Connection) -> Result<Held, StoreError> {
        Ok(Held {
            threads: count(conn, "main", "threads")?,
            runs: count(conn, "main", "runs")?,
        })
    }

    fn is_empty(self) -> bool {
        self.threads == 0 && self.runs == 0
    }
}

/// Writes a self-contained copy of `store`'s database to `target`.
pub fn export(store: &SqliteStore, target: &Path, force: bool) -> Result<Exported, TransferError> {
    let shown = target.display().to_string();
    let exists = std::fs::symlink_metadata(target).is_ok();
    if exists && !force {
        return Err(TransferError::File(format!(
            "{shown} already exists; pass --force to replace it, or name a new file"
        )));
    }
    if let Some(live) = ["-wal", "-shm"]
        .iter()
        .map(|s| companion(target, s))
        .find(|c| std::fs::symlink_metadata(c).is_ok())
    {
        return Err(TransferError::File(format!(
            "{} is beside {shown}: that is a database in use (or it was), and a copy must not \
             take its place; name another file",
            live.display()
        )));
    }
    let folder = Folder::beside(target, "export")?;
    let temporary = folder.join("copy.db");
    create_empty(&temporary)?;
    vacuum_into(store.connection(), store.location(), &temporary)?;
    sync(&temporary)?;
    let bytes = std::fs::metadata(&temporary).map_or(0, |m| m.len());
    place(&temporary, target, force)?;
    drop(folder);
    let threads = count(store.connection(), "main", "threads").map_err(TransferError::Store)?;
    Ok(Exported {
        file: target.to_path_buf(),
        bytes,
        threads,
    })
}

/// Copies the database in `source` into `store`'s, replacing what it
/// holds only if `replace` (after saving it beside the database), within
/// the default [`Limits`].
pub fn import(
    store: &mut SqliteStore,
    source: &Path,
    replace: bool,
    now: &str,
) -> Result<Imported, TransferError> {
    import_within(store, source, replace, now, Limits::default())
}

/// [`import`], reading at most `limits` of `source`.
pub fn import_within(
    store: &mut SqliteStore,
    source: &Path,
    replace: bool,
    now: &str,
    limits: Limits,
) -> Result<Imported, TransferError> {
    let checked = import_source::read(source, Path::new(store.location()), limits)?;
    copy_rows(store, &checked, replace, now)
}

/// The copy's rows in place of the destination's, in one write transaction.
fn copy_rows(
    store: &mut SqliteStore,
    source: &Source,
    replace: bool,
    now: &str,
) -> Result<Imported, TransferError> {
    let location = store.location().to_owned();
    let error = |e| TransferError::Store(store_error(e, &location));
    // ATTACH cannot run inside a transaction.
    store
        .connection()
        .execute(
            "ATTACH DATABASE ?1 AS source",
            [source.file.to_string_lossy()],
        )
        .map_err(error)?;
    // What is attached is what was checked (its folder is this user's
    // alone): said again where the rows are read from, before the lock.
    let shown = source.file.display().to_string();
    let result =
        import_source::exactly_inbox(store.connection(), "source", schema::SCHEMA_VERSION, &shown)
            .and_then(|()| copy_with_backup(store, source, replace, now));
    let _ = store.connection().execute_batch("DETACH DATABASE source");
    result
}

/// How often an import saves the destination again because a command
/// wrote between the save and the import's transaction.
const BACKUP_TRIES: usize = 5;

/// Saves the destination if it holds threads or runs (VACUUM cannot run
/// inside the import's transaction, so the save comes first and the
/// transaction checks that no event, inbox's or orch's, was written
/// since), then copies in one transaction.
fn copy_with_backup(
    store: &mut SqliteStore,
    source: &Source,
    replace: bool,
    now: &str,
) -> Result<Imported, TransferError> {
    let location = store.location().to_owned();
    for _ in 0..BACKUP_TRIES {
        let held = Held::of(store.connection())?;
        let backup = if !held.is_empty() {
            if !replace {
                return Err(not_empty(&location, held));
            }
            let target = PathBuf::from(format!("{location}.before-import-{now}"));
            let _ = std::fs::remove_file(&target);
            export(store, &target, false)?;
            Some((target.clone(), latest_event(&target)?))
        } else {
            None
        };
        store.begin(TxMode::Write)?;
        let copied = copy_in_transaction(store, source, backup.as_ref(), replace);
        match copied {
            Ok(Some(imported)) => {
                return store
                    .commit()
                    .map(|()| imported)
                    .map_err(TransferError::Store);
            }
            Ok(None) => {
                // Written to since the save: save again.
                let _ = store.rollback();
            }
            Err(e) => {
                let _ = store.rollback();
                return Err(e);
            }
        }
    }
    Err(TransferError::Store(StoreError::new(
        StoreErrorKind::Busy,
        format!(
            "{location} kept changing while its content was saved; retry when agents are quieter"
        ),
    )))
}

fn not_empty(location: &str, held: Held) -> TransferError {
    let what = match held {
        Held { threads, runs: 0 } => format!("{threads} thread(s)"),
        Held { threads, runs } => format!("{threads} thread(s) and {runs} orch run(s)"),
    };
    TransferError::NotEmpty(format!(
        "{location} already holds {what}; pass --replace to replace them (the current \
         content is saved beside it first), or import into a new database (--db NEW.db)"
    ))
}

/// The newest event id in a saved copy.
fn latest_event(file: &Path) -> Result<i64, TransferError> {
    let conn = Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| TransferError::Store(store_error(e, &file.display().to_string())))?;
    conn.query_row(LATEST_EVENT, [], |row| row.get(0))
        .map_err(|e| TransferError::Store(store_error(e, &file.display().to_string())))
}

/// Inside the write transaction: `None` if the destination changed since
/// `backup` was saved (or gained threads or runs without one).
fn copy_in_transaction(
    store: &mut SqliteStore,
    source: &Source,
    backup: Option<&(PathBuf, i64)>,
    replace: bool,
) -> Result<Option<Imported>, TransferError> {
    let conn = store.connection();
    let location = store.location().to_owned();
    let error = |e| TransferError::Store(store_error(e, &location));
    let latest: i64 = conn
        .query_row(LATEST_EVENT, [], |row| row.get(0))
        .map_err(error)?;
    match backup {
        Some((_, saved)) if *saved != latest => return Ok(None),
        None => {
            let held = Held::of(conn)?;
            if !held.is_empty() {
                return if replace {
                    Ok(None)
                } else {
                    Err(not_empty(&location, held))
                };
            }
        }
        _ => {}
    }
    // Every table of the schema but the settings, whatever the schema
    // version adds (orch's tables too: the copy was migrated to this
    // build's schema, so both sides have the same tables and columns);
    // foreign keys are checked once, at the commit, so the order of the
    // tables does not matter.
    conn.execute_batch("PRAGMA defer_foreign_keys = ON")
        .map_err(error)?;
    let tables = tables(conn).map_err(error)?;
    for table in &tables {
        conn.execute(&format!("DELETE FROM main.\"{table}\""), [])
            .map_err(error)?;
    }
    // Exactly the rows counted when the copy was checked: plain tables of
    // a file only this process writes, so anything else is a fault.
    for table in &tables {
        let columns = columns(conn, table).map_err(error)?;
        let copied = conn
            .execute(
                &format!(
                    "INSERT INTO main.\"{table}\" ({columns}) SELECT {columns} FROM source.\"{table}\""
                ),
                [],
            )
            .map_err(error)?;
        let counted = source.rows_of(table);
        if u64::try_from(copied).ok() != Some(counted) {
            return Err(TransferError::Store(StoreError::other(format!(
                "the checked copy of the import's file held {copied} rows of {table} where \
                 {counted} were counted; nothing was imported"
            ))));
        }
    }
    let counted = |table| count(conn, "main", table).map_err(TransferError::Store);
    Ok(Some(Imported {
        threads: counted("threads")?,
        messages: counted("messages")?,
        events: counted("events")?,
        backup: backup.map(|(path, _)| path.clone()),
    }))
}

/// The destination's tables, but for [`KEPT`] and SQLite's own.
fn tables(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> ?1 ORDER BY name",
    )?;
    stmt.query_map([KEPT], |row| row.get::<_, String>(0))?
        .collect()
}

/// The destination table's columns, quoted, in its order.
fn columns(conn: &Connection, table: &str) -> rusqlite::Result<String> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
    let names: Vec<String> = stmt
        .query_map([table], |row| row.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(names
        .iter()
        .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(", "))
}

fn count(conn: &Connection, schema: &str, table: &str) -> Result<u64, StoreError> {
    conn.query_row(
        &format!("SELECT count(*) FROM {schema}.{table}"),
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| u64::try_from(n).unwrap_or(0))
    .map_err(|e| store_error(e, schema))
}

/// `VACUUM INTO` an existing empty file (SQLite accepts an empty target).
fn vacuum_into(conn: &Connection, shown: &str, target: &Path) -> Result<(), TransferError> {
    conn.execute("VACUUM INTO ?1", [target.to_string_lossy()])
        .map(|_| ())
        .map_err(|e| TransferError::Store(store_error(e, shown)))
}

/// A temporary file's path beside `path`, unique to this process.
fn beside(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "inbox".to_owned(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{what}-{}.tmp", std::process::id()))
}

/// Creates `path` empty and owner-only, never through a link.
fn create_empty(path: &Path) -> Result<(), TransferError> {
    create_private(path).map(drop)
}

/// Creates `path` new and owner-only for writing, never through a link.
fn create_private(path: &Path) -> Result<std::fs::File, TransferError> {
    use std::os::unix::fs::OpenOptionsExt;
    let no_follow = i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(no_follow)
        .open(path)
        .map_err(|e| TransferError::File(format!("cannot create {}: {e}", path.display())))
}

/// Writes a file of its own at `target` with `write`, as `export` writes
/// its copy: into a temporary file beside it (owner-only, created new,
/// never through a link), synced, then put in place; never over an
/// existing file unless `force` (a link there is then replaced, not
/// followed). If `write` fails, nothing is left behind and `target` is as
/// it was. For the exports that are not database files (`inbox export
/// --format jsonl FILE`).
///
/// # Errors
///
/// `write`'s, and [`TransferError::File`] when the file cannot be made.
pub fn write_file<T, E: From<TransferError>>(
    target: &Path,
    force: bool,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<T, E>,
) -> Result<T, E> {
    if !force && std::fs::symlink_metadata(target).is_ok() {
        return Err(E::from(TransferError::File(format!(
            "{} already exists; pass --force to replace it, or name a new file",
            target.display()
        ))));
    }
    let temporary = beside(target, "export");
    let mut out = std::io::BufWriter::new(create_private(&temporary)?);
    let result = write(&mut out).and_then(|value| {
        finish_file(out, &temporary)?;
        place(&temporary, target, force)?;
        Ok(value)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Flushes and syncs a file `write_file` wrote.
fn finish_file(out: std::io::BufWriter<std::fs::File>, path: &Path) -> Result<(), TransferError> {
    let failed =
        |e: std::io::Error| TransferError::File(format!("cannot write {}: {e}", path.display()));
    let file = out.into_inner().map_err(|e| failed(e.into_error()))?;
    file.sync_all().map_err(failed)
}

fn sync(path: &Path) -> Result<(), TransferError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| TransferError::File(format!("cannot write {}: {e}", path.display())))
}

/// Renames the finished copy into place: over an existing file only when
/// `force` (a link there is replaced, not followed), never over one that
/// appeared meanwhile otherwise.
fn place(temporary: &Path, target: &Path, force: bool) -> Result<(), TransferError> {
    let failed = |e: std::io::Error| {
        TransferError::File(if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} already exists; pass --force to replace it",
                target.display()
            )
        } else {
            format!("cannot write {}: {e}", target.display())
        })
    };
    if force {
        return std::fs::rename(temporary, target).map_err(failed);
    }
    // A second name, then drop the first: link() never replaces a file.
    std::fs::hard_link(temporary, target).map_err(failed)?;
    std::fs::remove_file(temporary).map_err(failed)
}
