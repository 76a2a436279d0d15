//! A database file that a host without SQLite's locks (the wasm package in
//! Node) shares with processes that use SQLite itself (the CLI), without
//! losing a commit on either side.
//!
//! Such a host keeps the database in memory and synchronizes with the file
//! around every transaction ([`SharedFile`], driven by
//! [`crate::store::TxHooks`] through [`SharedFileHooks`]):
//!
//! 1. it takes the writer lock (`<db>-lock`, see [`crate::writer_lock`]),
//!    which every inbox writer honours, and waits until no process holds
//!    SQLite's write, checkpoint or recovery lock (on Linux, `/proc/locks`
//!    shows them); from then on nothing writes the log;
//! 2. if the files changed since it last looked, it reads the `-wal` and
//!    the main file, in that order and again if a checkpoint moved pages
//!    meanwhile, and applies the committed frames ([`crate::wal`]): the
//!    transaction sees every commit any process made;
//! 3. after a write, it appends the pages that changed to the `-wal` as one
//!    commit, exactly as SQLite would, syncs it, and clears the log index's
//!    header in `-shm`, so that every connection rebuilds its index from
//!    the log (SQLite's recovery) and sees the commit; once no rebuild that
//!    began before the append runs, it clears the header again (such a
//!    rebuild would leave an index that ends before the commit);
//! 4. it removes the lock.
//!
//! The file is never replaced, so running waiters and open connections
//! carry on. A host that crashes mid-append leaves frames without a commit
//! frame, which SQLite's recovery ignores. A checkpoint that truncates the
//! log just as a commit is appended can cut it off; the host reads the file
//! again once no checkpoint runs and appends the commit again if it is
//! missing ([`SharedFile::after_write`]).
//!
//! The host must be a process of its own, with no SQLite connection to the
//! same database: POSIX locks belong to a process, and closing any
//! descriptor of a file drops all of the process's locks on it. Each time
//! the host reads `-shm` it would drop such a connection's SQLite locks, so
//! `/proc/locks` would no longer show the write it must wait for, and the
//! two would write over each other's commits.
//!
//! This module holds the protocol, over a [`Files`] trait the host
//! implements (Node's `fs`, or `std::fs` in tests). It must never open the
//! database with SQLite (the host's connection is in memory) and never hold
//! the lock between transactions.

use inbox_engine::store::TxMode;
use inbox_engine::{StoreError, StoreErrorKind};
use rusqlite::{Connection, MAIN_DB};

use crate::store::TxHooks;
use crate::wal::{self, Log};
use crate::writer_lock::{self, Holder, Me, Verdict};

/// What the host tells of a file (`lstat`: a link is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The inode.
    pub ino: u64,
    /// Bytes.
    pub size: u64,
    /// Last change, in nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// The owner's user id.
    pub uid: u32,
    /// A regular file (not a link, folder or device).
    pub is_file: bool,
}

/// The file operations the protocol needs, as the host provides them. Paths
/// are absolute. Errors are messages naming the file and the cause.
pub trait Files {
    /// `lstat`, or `None` if there is no such file.
    fn stat(&mut self, path: &str) -> Result<Option<Stat>, String>;
    /// The whole file, or `None` if there is no such file.
    fn read(&mut self, path: &str) -> Result<Option<Vec<u8>>, String>;
    /// Creates `path` with `bytes`, owner-only (0600), only if it does not
    /// exist (`O_EXCL`, no link followed); `false` if it existed.
    fn create_new(&mut self, path: &str, bytes: &[u8]) -> Result<bool, String>;
    /// Writes `bytes` at `offset`, creating the file owner-only if needed.
    fn write_at(&mut self, path: &str, offset: u64, bytes: &[u8]) -> Result<(), String>;
    /// Flushes the file to stable storage.
    fn sync(&mut self, path: &str) -> Result<(), String>;
    /// Removes the file.
    fn remove(&mut self, path: &str) -> Result<(), String>;
    /// `/proc/locks`, or `None` where the system has no such list.
    fn proc_locks(&mut self) -> Option<String>;
    /// Sleeps.
    fn pause(&mut self, millis: u64);
    /// Milliseconds on a monotonic clock.
    fn ticks(&mut self) -> u64;
    /// The wall clock, in nanoseconds since the epoch (for a lock's age).
    fn now_ns(&mut self) -> i128;
    /// This process: id, namespace, host name, user id.
    fn me(&mut self) -> (u32, Me, u32);
    /// Whether process `pid` of this namespace runs.
    fn process_runs(&mut self, pid: u32) -> bool;
    /// Random bits (nonces, log salts).
    fn random(&mut self) -> u64;
}

/// How long a host waits for the lock, or for SQLite's writers to finish,
/// before it reports `storage_busy`: the CLI's busy budget.
const BUSY_BUDGET_MS: u64 = 10_000;

/// How many times a commit is appended again after a checkpoint cut it off
/// before the host gives up (each needs a checkpoint to begin in the
/// microseconds before the log index is cleared).
const APPEND_TRIES: usize = 5;

/// A host that writes back to back retakes the lock within microseconds of
/// letting it go, and native writers look for it every 0.5 to 2 ms
/// ([`crate::file::LockWait`]): without a pause they can miss every gap
/// and run out of their busy budget. So once a host has held the lock
/// back to back for [`FAIR_STREAK_MS`], it leaves it free for
/// [`FAIR_GAP_MS`], longer than a waiting writer's longest pause, before
/// taking it again. That costs a host writing without a break at most
/// 3 ms in 23.
const FAIR_GAP_MS: u64 = 3;

/// See [`FAIR_GAP_MS`].
const FAIR_STREAK_MS: u64 = 20;

/// The bytes of SQLite's locks in `-shm` a writer of the log must not run
/// beside: the write lock, the checkpoint lock and the recovery lock.
const SHM_WRITE_LOCKS: std::ops::RangeInclusive<u64> = 120..=122;

/// One database file, shared.
pub struct SharedFile<F: Files> {
    files: F,
    db: String,
    wal: String,
    shm: String,
    lock: String,
    /// The database as the file held it when last synchronized (with its
    /// header saying WAL, as on disk).
    base: Vec<u8>,
    /// The log as it was then.
    log: Log,
    /// What the files looked like then, to skip reading them when nothing
    /// changed.
    seen: Option<Fingerprint>,
    /// The lock's nonce and when it was taken, while held.
    held: Option<(String, u64)>,
    /// When the lock was last let go, and when the current run of holds
    /// taken back to back began (see [`FAIR_GAP_MS`]).
    released: Option<u64>,
    streak: u64,
}

/// The state of the three files, cheaply compared.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    db: Option<Stat>,
    wal: Option<Stat>,
    shm_header: Option<Vec<u8>>,
}

fn failure(message: impl Into<String>) -> StoreError {
    StoreError::other(message)
}

impl<F: Files> SharedFile<F> {
    /// Opens the database at `db` (an absolute path): reads its committed
    /// state under the lock. Returns the database's bytes, or `None` when
    /// there is no file yet (then [`SharedFile::create`] makes it).
    pub fn open(files: F, db: &str) -> Result<(SharedFile<F>, Option<Vec<u8>>), StoreError> {
        let mut shared = SharedFile {
            files,
            wal: format!("{db}-wal"),
            shm: format!("{db}-shm"),
            lock: format!("{db}{}", writer_lock::SUFFIX),
            db: db.to_owned(),
            base: Vec::new(),
            log: Log::parse(&[], 4096),
            seen: None,
            held: None,
            released: None,
            streak: 0,
        };
        shared.check_trusted()?;
        shared.locked(|s| s.refresh().map(|_| ()))?;
        let image = (!shared.base.is_empty()).then(|| shared.base.clone());
        Ok((shared, image))
    }

    /// Writes a new database, `image` (from SQLite in memory), as the file,
    /// owner-only; fails if a file appeared meanwhile.
    pub fn create(&mut self, image: &[u8]) -> Result<(), StoreError> {
        let mut bytes = image.to_vec();
        set_wal_header(&mut bytes);
        self.locked(|s| {
            let created = s.files.create_new(&s.db, &bytes).map_err(failure)?;
            if !created {
                return Err(failure(format!(
                    "{} was created by another process while this one prepared it; open it again",
                    s.db
                )));
            }
            s.files.sync(&s.db).map_err(failure)?;
            s.seen = None;
            s.refresh().map(|_| ())
        })
    }

    /// The database file.
    pub fn path(&self) -> &str {
        &self.db
    }

    /// Whether the files changed since the last synchronization, by a
    /// cheap look (no lock, no read of the database): for a host that
    /// polls on behalf of waiting callers.
    pub fn changed(&mut self) -> bool {
        self.fingerprint().ok() != self.seen
    }

    /// Before a transaction: takes the lock, waits for SQLite's writers,
    /// and returns the database's bytes if they changed since the last
    /// synchronization (the host loads them before it begins).
    pub fn before(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        self.acquire()?;
        let refreshed = self.quiesce().and_then(|()| self.refresh());
        if refreshed.is_err() {
            self.release();
        }
        refreshed.map(|changed| changed.then(|| self.base.clone()))
    }

    /// After a committed write: appends what changed between the last
    /// synchronized bytes and `image` (the host's database now) to the log
    /// as one commit. On error nothing counts as written: the host must
    /// load [`SharedFile::base`] again.
    ///
    /// A checkpoint of another process that began before the log index was
    /// cleared works from the old index and may truncate the log, frames
    /// just appended included; one that begins after it recovers the index
    /// from the log and copies them. So once no checkpoint runs, the file
    /// is read again: if the commit is not there, it is appended again
    /// (the difference to what the file holds, so a second append converges
    /// on the same database).
    ///
    /// A connection that found the index cleared before the append rebuilds
    /// it from the log, under SQLite's write lock; if it read the log before
    /// the new frames and writes the index after it was cleared, that index
    /// is valid and ends before the commit, and the next native writer,
    /// trusting it, would write over the commit. So once no such rebuild
    /// runs the index is cleared again: a rebuild after that reads the whole
    /// commit.
    pub fn after_write(&mut self, image: &[u8]) -> Result<(), StoreError> {
        let mut new = image.to_vec();
        set_wal_header(&mut new);
        for _ in 0..APPEND_TRIES {
            if !self.append(&new)? {
                return Ok(());
            }
            self.quiesce()?;
            self.invalidate_index()?;
            self.seen = None;
            self.refresh()?;
            if self.base == new {
                return Ok(());
            }
        }
        Err(failure(format!(
            "the commit to {} was cut off by checkpoints {APPEND_TRIES} times in a row; nothing was written, retry",
            self.db
        )))
    }

    /// Appends the difference between [`SharedFile::base`] and `new` to
    /// the log, syncs it and clears the log index; `false` if there was
    /// no difference.
    fn append(&mut self, new: &[u8]) -> Result<bool, StoreError> {
        let salt = self.files.random();
        let salts = [(salt >> 32) as u32, salt as u32];
        let Some((offset, bytes)) = self.log.append(&self.base, new, salts) else {
            return Ok(false);
        };
        self.check_hold_limit()?;
        let offset = u64::try_from(offset).unwrap_or(u64::MAX);
        self.files
            .write_at(&self.wal, offset, &bytes)
            .map_err(failure)?;
        self.files.sync(&self.wal).map_err(failure)?;
        self.invalidate_index()?;
        Ok(true)
    }

    /// The database's bytes as last synchronized (WAL header bytes).
    pub fn base(&self) -> &[u8] {
        &self.base
    }

    /// Removes the lock, if held. Never fails: a lock left behind stops
    /// counting by itself ([`writer_lock::STALE_AFTER_MS`]).
    pub fn release(&mut self) {
        let Some((nonce, _)) = self.held.take() else {
            return;
        };
        // Only our own file: if we overstayed and it went stale, another
        // holder's file may be there now.
        let ours = self
            .files
            .read(&self.lock)
            .ok()
            .flatten()
            .and_then(|bytes| Holder::parse(&bytes))
            .is_some_and(|holder| holder.nonce == nonce);
        if ours {
            let _ = self.files.remove(&self.lock);
        }
        self.released = Some(self.files.ticks());
    }

    /// Before taking the lock: when this host has held it back to back for
    /// [`FAIR_STREAK_MS`], leaves it free for [`FAIR_GAP_MS`], so that
    /// native writers waiting for it get in.
    fn leave_a_gap(&mut self) {
        let now = self.files.ticks();
        let back_to_back = self
            .released
            .is_some_and(|at| now.saturating_sub(at) < FAIR_GAP_MS);
        if !back_to_back {
            // A new run of holds begins.
            self.streak = now;
        } else if now.saturating_sub(self.streak) >= FAIR_STREAK_MS {
            // The whole gap, not its rest: ticks are whole milliseconds,
            // so "since the release" can read 1 ms early.
            self.files.pause(FAIR_GAP_MS);
            self.streak = self.files.ticks();
        }
    }

    /// Runs `step` holding the lock (and with SQLite's writers quiet).
    fn locked<T>(
        &mut self,
        step: impl FnOnce(&mut Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.acquire()?;
        let result = self.quiesce().and_then(|()| step(self));
        self.release();
        result
    }

    /// Refuses a database this user does not own, or a path that is a link
    /// or not a regular file, before reading or writing anything.
    fn check_trusted(&mut self) -> Result<(), StoreError> {
        let (_, _, uid) = self.files.me();
        for path in [&self.db, &self.wal, &self.shm] {
            let Some(stat) = self.files.stat(path).map_err(failure)? else {
                continue;
            };
            if !stat.is_file {
                return Err(failure(format!(
                    "{path} is not a regular file (a link, folder or device); open the database by its real path"
                )));
            }
            if stat.uid != uid {
                return Err(failure(format!(
                    "{path} belongs to another user (uid {}, you are {uid}); inbox never writes into a database someone else controls",
                    stat.uid
                )));
            }
        }
        Ok(())
    }

    /// Creates the lock file, waiting while a live holder has it.
    fn acquire(&mut self) -> Result<(), StoreError> {
        self.leave_a_gap();
        let (pid, me, _) = self.files.me();
        let nonce = format!("{:016x}", self.files.random());
        let holder = Holder {
            pid,
            pid_ns: me.pid_ns.clone(),
            host: me.host.clone(),
            nonce: nonce.clone(),
            by: "the inbox-wasm package".into(),
        };
        let started = self.files.ticks();
        loop {
            if self
                .files
                .create_new(&self.lock, &holder.to_bytes())
                .map_err(failure)?
            {
                self.held = Some((nonce, self.files.ticks()));
                return Ok(());
            }
            let (verdict, seen) = self.judge_lock(&me);
            match verdict {
                Verdict::Stale => {
                    // Remove it only if it is still the file judged.
                    if self.files.read(&self.lock).ok().flatten() == seen {
                        let _ = self.files.remove(&self.lock);
                    }
                }
                Verdict::Held(holder) => {
                    if self.files.ticks().saturating_sub(started) > BUSY_BUDGET_MS {
                        return Err(StoreError::new(
                            StoreErrorKind::Busy,
                            writer_lock::still_held(&self.db, holder.as_ref()),
                        ));
                    }
                    self.files.pause(1);
                }
            }
        }
    }

    /// Judges the lock file there now, returning what it held.
    fn judge_lock(&mut self, me: &Me) -> (Verdict, Option<Vec<u8>>) {
        let content = self.files.read(&self.lock).ok().flatten();
        let Some(bytes) = &content else {
            // Gone meanwhile: try again at once.
            return (Verdict::Stale, None);
        };
        let age_ns = match self.files.stat(&self.lock) {
            Ok(Some(stat)) => self.files.now_ns().saturating_sub(stat.mtime_ns).max(0),
            _ => 0,
        };
        let age_ms = u64::try_from(age_ns / 1_000_000).unwrap_or(u64::MAX);
        let files = &mut self.files;
        let verdict = writer_lock::judge(bytes, age_ms, me, |pid| files.process_runs(pid));
        (verdict, content)
    }

    /// `storage_busy`, saying the database `what`, once the busy budget
    /// since `started` is spent.
    fn within_budget(&mut self, started: u64, what: &str) -> Result<(), StoreError> {
        if self.files.ticks().saturating_sub(started) <= BUSY_BUDGET_MS {
            return Ok(());
        }
        Err(StoreError::new(
            StoreErrorKind::Busy,
            format!("{} {what} for {} s; retry", self.db, BUSY_BUDGET_MS / 1000),
        ))
    }

    /// Waits until no process holds SQLite's write, checkpoint or recovery
    /// lock on the database: one that took it before the lock file
    /// existed finishes its write first.
    fn quiesce(&mut self) -> Result<(), StoreError> {
        let started = self.files.ticks();
        loop {
            if !self.sqlite_busy()? {
                return Ok(());
            }
            self.within_budget(started, "stayed busy with SQLite writers")?;
            self.files.pause(1);
        }
    }

    /// Reads the files if they changed since last time; `true` if the
    /// database's content changed.
    ///
    /// No writer runs (the lock is held and [`SharedFile::quiesce`] waited
    /// for SQLite's), but another process's checkpoint may begin at any
    /// moment: it copies the log's pages into the main file, then a
    /// truncating one empties the log. The log is therefore read before
    /// the main file: pages copied meanwhile are the log's own, so the two
    /// still make the committed database. A log cut off while it was read
    /// would not (its last commits missing, the main file holding them), so
    /// the read counts only if the files look the same afterwards (a
    /// truncating checkpoint rewrites the log index's header before it cuts
    /// the log); otherwise it is read again. A checkpoint still running then
    /// does no harm: it has not cut the log that was read.
    fn refresh(&mut self) -> Result<bool, StoreError> {
        let started = self.files.ticks();
        loop {
            let now = self.fingerprint()?;
            if self.seen.as_ref() == Some(&now) {
                return Ok(false);
            }
            let read = self.read_files()?;
            if self.fingerprint()? == now {
                return self.adopt(read, now);
            }
            self.within_budget(started, "kept changing under checkpoints while it was read")?;
            self.quiesce()?;
        }
    }

    /// The log, then the main file (see [`SharedFile::refresh`] for why in
    /// that order); `None` for the main file when there is none.
    fn read_files(&mut self) -> Result<(Vec<u8>, Option<Vec<u8>>), StoreError> {
        let wal = self
            .files
            .read(&self.wal)
            .map_err(failure)?
            .unwrap_or_default();
        let db = self.files.read(&self.db).map_err(failure)?;
        Ok((wal, db))
    }

    /// Takes what [`SharedFile::read_files`] read, seen as `now`, as the
    /// file's state; `true` if the database's content changed.
    fn adopt(
        &mut self,
        (wal, db): (Vec<u8>, Option<Vec<u8>>),
        now: Fingerprint,
    ) -> Result<bool, StoreError> {
        let Some(db) = db else {
            if self.seen.is_some() || !self.base.is_empty() {
                return Err(failure(format!(
                    "{} was deleted or moved while this Inbox had it open; open it again",
                    self.db
                )));
            }
            self.seen = Some(now);
            return Ok(false);
        };
        let (image, log) = wal::committed_image(&db, &wal)
            .map_err(|e| failure(format!("{} is not an inbox database: {e}", self.db)))?;
        if !wal::is_wal_mode(&image) {
            return Err(failure(format!(
                "{} is not in WAL mode, as inbox databases are; run `inbox --db {} init` once",
                self.db, self.db
            )));
        }
        let changed = image != self.base;
        self.base = image;
        self.log = log;
        self.seen = Some(now);
        Ok(changed)
    }

    /// Whether some process holds SQLite's write, checkpoint or recovery
    /// lock on the database now (none can where no connection has it open
    /// in WAL mode: there is no `-shm`).
    fn sqlite_busy(&mut self) -> Result<bool, StoreError> {
        let Some(shm) = self.files.stat(&self.shm).map_err(failure)? else {
            return Ok(false);
        };
        let Some(locks) = self.files.proc_locks() else {
            return Err(failure(format!(
                "{} cannot be shared safely here: this system does not list SQLite's locks \
                 (/proc/locks, Linux only). Copy it with `inbox export --sqlite FILE` and \
                 open the copy's bytes instead",
                self.db
            )));
        };
        Ok(write_locked(&locks, shm.ino))
    }

    fn fingerprint(&mut self) -> Result<Fingerprint, StoreError> {
        let shm_header = self
            .files
            .read(&self.shm)
            .map_err(failure)?
            .map(|bytes| bytes.get(..48).unwrap_or(&bytes).to_vec());
        Ok(Fingerprint {
            db: self.files.stat(&self.db).map_err(failure)?,
            wal: self.files.stat(&self.wal).map_err(failure)?,
            shm_header,
        })
    }

    /// Clears the log index's header, so that each connection rebuilds the
    /// index from the log before its next transaction.
    fn invalidate_index(&mut self) -> Result<(), StoreError> {
        if self
            .files
            .stat(&self.shm)
            .map_err(failure)?
            .is_some_and(|s| s.size >= 136)
        {
            let zeros = vec![0u8; wal::INDEX_HEADER.len()];
            self.files.write_at(&self.shm, 0, &zeros).map_err(failure)?;
        }
        Ok(())
    }

    /// Refuses to write after holding the lock so long that writers may
    /// have stopped honouring it.
    fn check_hold_limit(&mut self) -> Result<(), StoreError> {
        let since = self.held.as_ref().map_or(0, |(_, at)| *at);
        if self.files.ticks().saturating_sub(since) > writer_lock::HOLD_LIMIT_MS {
            return Err(failure(format!(
                "synchronizing {} took longer than {} s, after which other writers may no longer wait for it; nothing was written, retry",
                self.db,
                writer_lock::HOLD_LIMIT_MS / 1000
            )));
        }
        Ok(())
    }
}

/// Header bytes 18 and 19 say WAL (2), as every inbox database on disk does;
/// SQLite in memory writes 1 (rollback journal).
fn set_wal_header(image: &mut [u8]) {
    if image.len() >= 100 {
        image[18] = 2;
        image[19] = 2;
    }
}

/// Whether `/proc/locks` shows a process holding an exclusive lock on any
/// of SQLite's log-writing bytes of the `-shm` with inode `ino`. Waiters
/// (`->` lines) hold nothing. Matched by inode alone: the device numbers
/// `/proc/locks` prints differ from `stat`'s on some file systems, and a
/// false match only makes this wait longer.
pub fn write_locked(locks: &str, ino: u64) -> bool {
    locks.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&"->") || fields.len() < 8 {
            return false;
        }
        let (kind, id, start, end) = (fields[3], fields[5], fields[6], fields[7]);
        let inode = id.rsplit(':').next().and_then(|i| i.parse::<u64>().ok());
        let start = start.parse::<u64>().unwrap_or(0);
        let end = if end == "EOF" {
            u64::MAX
        } else {
            end.parse::<u64>().unwrap_or(u64::MAX)
        };
        kind == "WRITE"
            && inode == Some(ino)
            && start <= *SHM_WRITE_LOCKS.end()
            && end >= *SHM_WRITE_LOCKS.start()
    })
}

/// [`SharedFile`] around the transactions of a store over an in-memory
/// connection: loads the file's state before each, writes each commit back.
pub struct SharedFileHooks<F: Files> {
    shared: SharedFile<F>,
}

impl<F: Files> SharedFileHooks<F> {
    /// Hooks for `shared`.
    pub fn new(shared: SharedFile<F>) -> SharedFileHooks<F> {
        SharedFileHooks { shared }
    }

    /// The shared file.
    pub fn shared(&mut self) -> &mut SharedFile<F> {
        &mut self.shared
    }
}

/// Loads `image` (WAL header bytes) as the connection's database.
pub fn load(conn: &mut Connection, image: &[u8]) -> Result<(), StoreError> {
    let mut bytes = image.to_vec();
    if bytes.len() >= 100 {
        bytes[18] = 1;
        bytes[19] = 1;
    }
    let size = bytes.len();
    conn.deserialize_read_exact(MAIN_DB, bytes.as_slice(), size, false)
        .map_err(|e| failure(format!("cannot load the database into memory: {e}")))
}

/// The connection's database as bytes.
pub fn save(conn: &mut Connection) -> Result<Vec<u8>, StoreError> {
    conn.serialize(MAIN_DB)
        .map(|data| data.to_vec())
        .map_err(|e| failure(format!("cannot read the database from memory: {e}")))
}

impl<F: Files> TxHooks for SharedFileHooks<F> {
    fn before_begin(&mut self, conn: &mut Connection, _mode: TxMode) -> Result<(), StoreError> {
        if let Some(image) = self.shared.before()?
            && let Err(e) = load(conn, &image)
        {
            self.shared.release();
            return Err(e);
        }
        Ok(())
    }

    fn after_commit(&mut self, conn: &mut Connection, mode: TxMode) -> Result<(), StoreError> {
        if mode != TxMode::Write {
            return Ok(());
        }
        let written = save(conn).and_then(|image| self.shared.after_write(&image));
        if written.is_err() {
            // The file did not take the commit: neither may memory.
            let _ = load(conn, self.shared.base());
        }
        written
    }

    fn after_end(&mut self) {
        self.shared.release();
    }

    fn outside_changed(&mut self) -> bool {
        self.shared.changed()
    }
}
