//! Finding, creating and opening the database file of a native process.
//!
//! - Which file: `--db`, else `$INBOX_DB`, else the nearest `.agents/coord.db`
//!   walking up from the current directory, else `.agents/coord.db` here
//!   (a `postgres://` URL there is the native host's to tell apart first).
//! - New files and folders are created owner-only (0600 / 0700).
//! - Every connection gets the settings that make one-process-per-command
//!   cheap and safe: WAL (set once, at `init`), `synchronous` from the
//!   database's durability setting, foreign keys, no checkpoint on close, and a
//!   busy handler with short jittered sleeps instead of SQLite's 100 ms ladder.
//!
//! This module must never apply inbox rules; it only produces a
//! [`SqliteStore`].

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inbox_engine::{StoreError, StoreErrorKind};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::checkpointer::Checkpointer;
use crate::file;
use crate::store::SqliteStore;
use crate::store::durability::apply_durability;
pub use crate::store::durability::{BUSY_BUDGET, Durability, stored_durability};

/// The default database, relative to a project folder.
pub const DEFAULT_DB: &str = ".agents/coord.db";

/// Where the database path came from, for messages and `init` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbSource {
    /// `--db`.
    Flag,
    /// `$INBOX_DB`.
    Env,
    /// An existing `.agents/coord.db` in this folder or an ancestor.
    Found,
    /// Nothing found: `.agents/coord.db` in the current folder.
    Default,
}

/// The database a command uses: its path (symbolic links followed once,
/// here, so SQLite, the companion files and a wait's watch all agree), where
/// the choice came from, and what the user should know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbPath {
    /// The file.
    pub path: PathBuf,
    /// Where the choice came from.
    pub source: DbSource,
    /// Databases passed over while looking around, and why.
    pub notes: Vec<String>,
}

/// Picks the database file: `flag`, else `env`, else the nearest
/// `.agents/coord.db` from `cwd` upwards that this user owns and nobody else
/// may write (others are skipped, with a note), else `cwd/.agents/coord.db`.
pub fn resolve_db_path(flag: Option<&Path>, env: Option<&Path>, cwd: &Path) -> DbPath {
    let named = |path: &Path, source| DbPath {
        path: real(cwd.join(path)),
        source,
        notes: Vec::new(),
    };
    if let Some(path) = flag {
        return named(path, DbSource::Flag);
    }
    if let Some(path) = env.filter(|p| !p.as_os_str().is_empty()) {
        return named(path, DbSource::Env);
    }
    let mut notes = Vec::new();
    for dir in cwd.ancestors() {
        let candidate = dir.join(DEFAULT_DB);
        if !candidate.is_file() {
            continue;
        }
        match file::untrusted(&candidate) {
            Some(why) => notes.push(format!("passed over {}: {why}", candidate.display())),
            None => {
                return DbPath {
                    path: real(candidate),
                    source: DbSource::Found,
                    notes,
                };
            }
        }
    }
    DbPath {
        path: cwd.join(DEFAULT_DB),
        source: DbSource::Default,
        notes,
    }
}

/// `path` with symbolic links followed, or, if it does not exist, as it is
/// without its `.` parts and repeated slashes (`/p/./x.db` is `/p/x.db`,
/// whatever the links), so that messages name it as people would. Never
/// resolves `..` or a link there: a file still to be created is checked
/// for planted links where it is made.
fn real(path: PathBuf) -> PathBuf {
    std::fs::canonicalize(&path).unwrap_or_else(|_| path.components().collect())
}

/// Opens an existing inbox database for commands, applying its durability
/// setting (or `durability`, which overrides it). Refuses a file that
/// cannot be one (see [`file::check_database_file`]) or that another user
/// owns, and records the files' identities so that a long-lived connection
/// stops before writing if they are replaced.
pub fn open_existing(
    path: &Path,
    durability: Option<Durability>,
) -> Result<(SqliteStore, Durability), StoreError> {
    let location = path.display().to_string();
    if !path.exists() {
        return Err(StoreError::new(
            StoreErrorKind::NotInitialized,
            format!(
                "no inbox database at {location}; create one with `inbox init` (or pass --db / set INBOX_DB)"
            ),
        ));
    }
    file::check_database_file(path)?;
    file::check_owned(path)?;
    let in_wal_mode = file::check_log_belongs(path)?;
    // Before SQLite opens it, which creates a missing log again.
    let log_deleted = file::log_deleted(path);
    let mut store = connect(path, false)?;
    if !in_wal_mode {
        // A self-contained copy (exported bytes): inbox databases use WAL.
        let _mode: String = store
            .connection()
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|e| crate::error::store_error(e, &location))?;
    }
    store.ensure_schema().map_err(|e| match &log_deleted {
        Some(log) if e.kind == StoreErrorKind::NotInitialized => StoreError::new(
            StoreErrorKind::NotInitialized,
            format!(
                "{location} has no inbox schema: its log {} was missing while its index (-shm) \
                 remained, so the log was deleted while agents ran and the commits it held, the \
                 schema among them, are lost. Stop every agent, then restore a copy (`inbox \
                 import --sqlite COPY`) or start over with `inbox init`",
                log.display()
            ),
        ),
        _ => e,
    })?;
    let durability = match durability {
        Some(d) => d,
        None => stored_durability(&store)?,
    };
    apply_durability(&store, durability)?;
    guard(&mut store, path);
    Ok((store, durability))
}

/// Checks the database's files before every write from now on, and begins
/// the store's writes behind the database's writer gate.
fn guard(store: &mut SqliteStore, path: &Path) {
    store.guard_files(file::FileIdentity::record(path));
    store.gate_writers(Some(crate::writer_gate::WriterGate::new(path)));
}

/// Creates the database (and its folder) if needed, owner-only, and opens it
/// for `init`. The schema itself is created by `init` through the engine.
/// Never follows a symbolic link it did not expect (see
/// [`file::check_creatable`]).
pub fn open_or_create(path: &Path) -> Result<SqliteStore, StoreError> {
    let location = path.display().to_string();
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent).map_err(|e| {
            StoreError::other(format!(
                "cannot create the folder {}: {e}",
                parent.display()
            ))
        })?;
    }
    file::check_database_file(path)?;
    file::check_creatable(path)?;
    file::check_log_belongs(path)?;
    create_private_file(path)
        .map_err(|e| StoreError::other(format!("cannot create {location}: {e}")))?;
    let mut store = connect(path, true)?;
    guard(&mut store, path);
    Ok(store)
}

/// `inbox init`: creates or upgrades the database at `path` and records
/// `durability` (if given), holding a lock on its folder so that any number
/// of `init`s may run at once: each waits for the one before it, then
/// finds the database made. Returns the store and the durability in force.
pub fn init(
    path: &Path,
    durability: Option<Durability>,
) -> Result<(SqliteStore, Durability), StoreError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent).map_err(|e| {
            StoreError::other(format!(
                "cannot create the folder {}: {e}",
                parent.display()
            ))
        })?;
    }
    let _lock = FolderLock::take(path)?;
    let mut store = open_or_create(path)?;
    inbox_engine::Store::initialize(&mut store)?;
    let durability = match durability {
        Some(chosen) => {
            set_durability(&store, chosen)?;
            chosen
        }
        None => stored_durability(&store)?,
    };
    guard(&mut store, path);
    Ok((store, durability))
}

/// An exclusive `flock` on the database's folder while `init` runs. On the
/// folder, not the database: SQLite's own locks are POSIX locks on the
/// database file, which closing any other descriptor of that file would
/// drop.
struct FolderLock {
    _folder: std::fs::File,
}

impl FolderLock {
    fn take(path: &Path) -> Result<FolderLock, StoreError> {
        use rustix::fs::{FlockOperation, flock};
        let folder_path = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let shown = folder_path.display();
        let folder = std::fs::File::open(folder_path)
            .map_err(|e| StoreError::other(format!("cannot open the folder {shown}: {e}")))?;
        let started = Instant::now();
        loop {
            match flock(&folder, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(FolderLock { _folder: folder }),
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < BUSY_BUDGET => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(StoreError::new(
                        StoreErrorKind::Busy,
                        format!(
                            "another `inbox init` held {shown} for {} s; retry",
                            BUSY_BUDGET.as_secs()
                        ),
                    ));
                }
                Err(e) => {
                    return Err(StoreError::other(format!(
                        "cannot lock the folder {shown}: {e}"
                    )));
                }
            }
        }
    }
}

/// What a database file records that decides how commands run on it: its
/// schema version and its durability. A host that keeps a store open
/// across commands (`inbox daemon`) reads it before each one and reopens
/// the file when it changed (`inbox init` of this inbox or a newer one), so
/// that every command runs as it would on a freshly opened file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// `PRAGMA user_version`.
    pub schema: i64,
    /// [`stored_durability`].
    pub durability: Durability,
}

/// Reads [`Recorded`], with statements kept prepared between calls.
pub fn recorded(store: &SqliteStore) -> Result<Recorded, StoreError> {
    let schema = store
        .connection()
        .prepare_cached("PRAGMA user_version")
        .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
        .map_err(|e| crate::error::store_error(e, store.location()))?;
    Ok(Recorded {
        schema,
        durability: stored_durability(store)?,
    })
}

/// Records the durability every process should use, and applies it here.
pub fn set_durability(store: &SqliteStore, durability: Durability) -> Result<(), StoreError> {
    store.set_setting("durability", durability.as_str())?;
    apply_durability(store, durability)
}

fn connect(path: &Path, create: bool) -> Result<SqliteStore, StoreError> {
    let location = path.display().to_string();
    SqliteStore::new(connection(path, create)?, location)
}

/// A connection to the database file at `path` with the settings every
/// native connection gets.
fn connection(path: &Path, create: bool) -> Result<Connection, StoreError> {
    let location = path.display().to_string();
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let error = |e| crate::error::store_error(e, &location);
    // SQLite's own VFS for the platform: every byte of the database, its
    // WAL and its index is written by SQLite.
    let mut conn = Connection::open_with_flags(path, flags).map_err(error)?;
    conn.busy_handler(Some(busy_wait)).map_err(error)?;
    // The last connection to close would otherwise checkpoint the WAL into
    // the database and delete it, with several fsyncs: the bulk of a short
    // command's cost. Instead, the commit that takes the WAL past
    // CHECKPOINT_FRAMES checkpoints and truncates it (see checkpoint_hook);
    // set_lifetime switches a long-lived connection to a checkpoint thread.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(error)?;
    conn.wal_hook(Some(checkpoint_hook)).map_err(error)?;
    // mmap_size: reads of the database file become memory accesses instead of
    // a pread per page missing from SQLite's small page cache. A `show` of a
    // random thread in a database of a million messages took 256-666 us at
    // the median without it and 24-34 us with it. Mapped pages are page
    // cache, shared and reclaimable, not private memory.
    conn.execute_batch(crate::store::PORTABLE_PRAGMAS)
        .map_err(error)?;
    conn.execute_batch(
        "PRAGMA journal_size_limit = 16777216;
         PRAGMA mmap_size = 1073741824;",
    )
    .map_err(error)?;
    Ok(conn)
}

/// How long the process that opened a store will keep it open, which
/// decides when it checkpoints the WAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Lifetime {
    /// One command, then exit, like the CLI: the store truncates the WAL
    /// every [`CHECKPOINT_FRAMES`] frames, because the next process to open
    /// the database has to read the whole WAL first (the default).
    #[default]
    OneCommand,
    /// Many commands, like an embedding host or a benchmark: a connection
    /// that stays open recovers the WAL once, and while it is open no other
    /// process has to recover it at all, so frequent checkpoints (two fsyncs
    /// each) would be pure cost. It checkpoints every 1000 frames: in
    /// `normal` durability on a thread of the store's own, so that no
    /// command waits for it (see [`crate::checkpointer`]); in `full`, where
    /// every commit waits for the disk anyway, in the commit, as SQLite's
    /// own policy does.
    LongLived,
}

/// Switches the store's checkpoint policy to suit how long it stays open.
pub fn set_lifetime(store: &mut SqliteStore, lifetime: Lifetime) -> Result<(), StoreError> {
    let location = store.location().to_owned();
    let error = |e| crate::error::store_error(e, &location);
    let checkpointer = match (lifetime, store.files()) {
        (Lifetime::LongLived, Some(files)) if !syncs_every_commit(store)? => {
            let conn = connection(files.database(), false)?;
            let thread = Checkpointer::start(conn, Some(files.clone())).map_err(|e| {
                StoreError::other(format!(
                    "cannot start a checkpoint thread for {location}: {e}"
                ))
            })?;
            Some(thread)
        }
        _ => None,
    };
    let conn = store.connection_mut();
    match (lifetime, &checkpointer) {
        (Lifetime::OneCommand, _) => conn.wal_hook(Some(checkpoint_hook)).map_err(error)?,
        (Lifetime::LongLived, Some(thread)) => conn.wal_hook(Some(thread.hook())).map_err(error)?,
        // No file to open a second connection on (an in-memory
        // database), or an fsync per commit: SQLite's own policy, which
        // installs its WAL hook. When every commit waits for the disk, a
        // checkpoint running beside it flushes the database file to that
        // same disk and stretches every commit's fsync: measured in
        // process, `send` ran at 2.6k-3.2k/s with the thread and 3.2k-3.8k/s
        // without, in alternating runs.
        (Lifetime::LongLived, None) => conn
            .pragma_update(
                None,
                "wal_autocheckpoint",
                crate::checkpointer::CHECKPOINT_FRAMES,
            )
            .map_err(error)?,
    }
    store.keep_checkpointer(checkpointer);
    Ok(())
}

/// WAL frames after which a committing process checkpoints and truncates
/// the WAL.
///
/// Every process that opens the database first has to rebuild the WAL index
/// by reading the whole WAL ("recovery"), and a process that recovered can no
/// longer restart the WAL from the top, so left alone it only grows and every
/// command gets slower. Truncating keeps recovery short; each truncation
/// costs one checkpoint (two fsyncs with `synchronous = NORMAL`, and the
/// next writer's fsync of the new WAL header). Commands write 10 to 15
/// frames, so this truncates every ten or so writes. 128 frames was
/// measured against 64, 256 and 512 in alternating runs of CLI commands: a
/// `send` 6 % faster than at 64 (fewer fsyncs), a `fetch`, which only
/// recovers, within 1.5 % (see docs/lab-log.md). (A PASSIVE
/// checkpoint cannot replace it: with one process per command, each
/// recovery forgets what was copied back, so the WAL is never started over
/// and grew to 12 MB in 400 sends.)
pub const CHECKPOINT_FRAMES: std::os::raw::c_int = 128;

/// How long a checkpoint waits for readers and writers before giving up. The
/// command has already committed; a checkpoint is housekeeping that a later
/// commit retries, so it must never hold a command up for long.
const CHECKPOINT_BUDGET: Duration = Duration::from_millis(5);

/// Called by SQLite after each commit with the WAL's length in frames: past
/// [`CHECKPOINT_FRAMES`], checkpoints the WAL and truncates it.
fn checkpoint_hook(
    wal: &mut rusqlite::hooks::Wal,
    frames: std::os::raw::c_int,
) -> rusqlite::Result<()> {
    if frames >= CHECKPOINT_FRAMES {
        // Busy (a reader on an old snapshot, another writer) is fine: a later
        // commit retries.
        crate::checkpointer::as_checkpoint(|| {
            let _ = wal.checkpoint_v2(rusqlite::wal::CheckpointMode::TRUNCATE);
        });
    }
    Ok(())
}

/// Whether the store's connection fsyncs every commit (`full`
/// durability, or anything stronger a host set).
fn syncs_every_commit(store: &SqliteStore) -> Result<bool, StoreError> {
    let level: i64 = store
        .connection()
        .query_row("PRAGMA synchronous", [], |row| row.get(0))
        .map_err(|e| crate::error::store_error(e, store.location()))?;
    // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
    Ok(level >= 2)
}

thread_local! {
    static BUSY_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    static JITTER: Cell<u64> = Cell::new(seed());
}

/// A seed for the busy handler's jitter that differs between processes:
/// std's `RandomState` keys come from the OS's random source.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish() | 1
}

/// SQLite's busy handler: called with the number of earlier calls for the
/// same lock attempt. Sleeps 50 µs, doubling to 2 ms, each time jittered to
/// ±50% so that waiting writers do not retry in lockstep, until
/// [`BUSY_BUDGET`] is spent, counted for a beginning write from when it
/// began to wait for the gate and turn. A beginning write that holds the
/// writer gate tries again sooner, and any other waits while the gate is
/// closed (see [`crate::writer_gate`]).
fn busy_wait(attempt: i32) -> bool {
    let now = Instant::now();
    let since = BUSY_SINCE.with(|since| {
        if attempt == 0 {
            since.set(Some(now));
        }
        since.get().unwrap_or(now)
    });
    let since = crate::writer_gate::began_waiting().map_or(since, |began| began.min(since));
    let budget = if crate::checkpointer::in_checkpoint() {
        CHECKPOINT_BUDGET
    } else {
        BUSY_BUDGET
    };
    if now.duration_since(since) > budget {
        return false;
    }
    let base = (50u64 << attempt.clamp(0, 6)).min(2000);
    // xorshift64: cheap, and quality does not matter for jitter.
    let random = JITTER.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    });
    let pause = if crate::writer_gate::holding() {
        crate::writer_gate::HOLDER_PAUSE
    } else {
        Duration::from_micros(base / 2 + random % base)
    };
    std::thread::sleep(pause);
    // After the pause, not before it: the gate may have closed meanwhile.
    crate::writer_gate::hold_back();
    true
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

#[cfg(unix)]
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let no_follow = i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(no_follow)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn create_private_file(path: &Path) -> std::io::Result<()> {
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_database_behind_a_link_resolves_to_the_real_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let real = dir.path().join("real.db");
        std::fs::write(&real, b"").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&real, dir.path().join("link.db"))
            .unwrap_or_else(|e| panic!("{e}"));
        let resolved = resolve_db_path(Some(Path::new("link.db")), None, dir.path());
        let expected = std::fs::canonicalize(&real).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resolved.path, expected);
        assert_eq!(resolved.source, DbSource::Flag);
    }

    #[test]
    fn a_missing_database_is_named_without_dots_but_with_its_parents() {
        let cwd = Path::new("/no/such/project");
        for (named, expected) in [
            ("./x.db", "/no/such/project/x.db"),
            ("a/.//b/./x.db", "/no/such/project/a/b/x.db"),
            ("../x.db", "/no/such/project/../x.db"),
        ] {
            let resolved = resolve_db_path(Some(Path::new(named)), None, cwd);
            // As text: `Path`'s own equality already skips `.` parts.
            assert_eq!(resolved.path.to_str(), Some(expected), "{named}");
        }
    }
}
