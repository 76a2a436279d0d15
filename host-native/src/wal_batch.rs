//! A transaction's WAL frames written with one `write`: an SQLite VFS that
//! is the platform's own (`unix`) in everything but how the WAL is written,
//! and in keeping its memory mapping of the database file when SQLite
//! would drop it although the file kept its length (see `db_unfetch`).
//!
//! SQLite appends a transaction to the WAL one frame at a time, and each
//! frame with two `pwrite`s (its 24-byte header, then its page). A claim
//! writes about ten frames and a `done` about twelve, so most of a write
//! transaction's time went into some twenty system calls, each paying the
//! kernel's fixed cost (the inode lock, a timestamp update, a page-cache
//! lookup) for a few bytes. Here the frames of a transaction are gathered
//! in memory as SQLite hands them over and written with one `pwrite` when
//! its commit frame arrives: claim + done in process went from about 5.5k
//! to 8.6k a second (docs/durability-and-speed.md).
//!
//! Why this keeps every guarantee. SQLite commits in this order
//! (`sqlite3WalFrames`): it writes the frames, the commit frame last (the
//! only one whose header carries the database size); then, in `full`
//! durability, it syncs; only then does it publish the frames to other
//! connections, in the WAL index (`-shm`, memory, no call on the WAL
//! file). So:
//! - the gathered bytes are written when the commit frame's page arrives,
//!   inside that `xWrite`, whose error SQLite sees and rolls back on: a
//!   transaction is never published, so never acknowledged, before its
//!   frames are in the file, and a process killed before then loses only
//!   a transaction nobody was told of;
//! - any other call on the WAL file (a read, a sync, a size, a truncate, a
//!   write somewhere else, close) writes what is gathered first, so every
//!   call sees the file as the plain VFS would have left it: SQLite's own
//!   re-reads of frames it spilled, its in-place rewrites of a frame
//!   written earlier in the same transaction, and its syncs;
//! - a 24-byte write right after a read at the same offset is SQLite
//!   rewriting the checksum of a frame after the commit frame was written
//!   (`walRewriteChecksums`): it is never gathered, since no commit frame
//!   would follow to write it;
//! - frames a transaction spilled before its commit (a transaction larger
//!   than the page cache) and then rolled back have no commit frame
//!   either: the database file's lock calls write what its WAL gathered
//!   first, so they are written while the connection still holds the WAL's
//!   write lock, as the platform VFS would have written them, and never
//!   later over another connection's frames ([`late_writes`] counts them);
//! - the database file, the `-shm` index and every lock are the platform
//!   VFS's own, called through unchanged, so other processes (an older
//!   inbox, the `sqlite3` shell) share the file exactly as before.
//!
//! `host-native/tests/wal_batch.rs` checks that every acknowledged commit
//! survives a SIGKILL right after it, small ones and one whose checksums
//! SQLite rewrote after the commit frame; that large transactions
//! (spilled, overwritten in place, past the gathering cap) recover intact
//! in `normal` and `full`; that a rolled-back transaction's spilled
//! frames never land on another connection's later commits; and that
//! plain SQLite connections write the same file alongside. The first two
//! fail when the commit rule or the checksum rule is taken out (their
//! writers check that no commit left anything for the lock to write). The
//! lock's write is a backstop no test reaches: in every rolled-back
//! transaction tried, SQLite read from the WAL, which writes what is
//! gathered, before it let go of the lock.
//!
//! It may use `unsafe` because a VFS is a table of C callbacks over memory
//! SQLite allocates. It must never change what reaches the file or in
//! which order relative to any other call, nor what a read returns; only
//! how many system calls carry them.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use rusqlite::ffi;

/// The VFS's name, as `open_with_flags_and_vfs` takes it.
pub const VFS_NAME: &CStr = c"inbox-wal-batch";

/// A WAL frame's header, in bytes.
const FRAME_HEADER: usize = 24;

/// The WAL file's own header, written at offset 0 when the WAL starts over.
const WAL_HEADER: usize = 32;

/// Bytes gathered at most before they are written without waiting for the
/// commit frame: 31 frames of 2 KiB, more than a command writes. It must
/// stay under 128 KiB: the unix VFS writes at most 17 bits' worth of bytes
/// per call (`seekAndWriteFd` masks the length with `0x1ffff`), so a longer
/// write would be cut short and fail as "disk full".
const GATHER_CAP: usize = 64 * 1024;

/// Registers the VFS (once per process) and returns its name.
pub fn vfs() -> &'static CStr {
    PARENT.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS, which lives
        // for the whole process; it is read once, copied, and the copy is
        // leaked so that it lives as long. Registration takes SQLite's own
        // mutex.
        unsafe {
            let parent = ffi::sqlite3_vfs_find(std::ptr::null());
            if parent.is_null() {
                return Parent(std::ptr::null_mut());
            }
            let mut ours: ffi::sqlite3_vfs = std::ptr::read(parent);
            ours.szOsFile = c_int::try_from(inner_offset())
                .unwrap_or(c_int::MAX)
                .saturating_add((*parent).szOsFile);
            ours.zName = VFS_NAME.as_ptr();
            ours.pNext = std::ptr::null_mut();
            ours.xOpen = Some(x_open);
            let ours = Box::into_raw(Box::new(ours));
            if ffi::sqlite3_vfs_register(ours, 0) != ffi::SQLITE_OK {
                drop(Box::from_raw(ours));
                return Parent(std::ptr::null_mut());
            }
            Parent(parent)
        }
    });
    VFS_NAME
}

/// The platform's VFS, which does all the work (null if registering
/// failed, and then opening with [`VFS_NAME`] fails with SQLite's error).
struct Parent(*mut ffi::sqlite3_vfs);

// SAFETY: the pointer is to SQLite's default VFS, an immutable static
// object that SQLite itself shares between threads.
unsafe impl Send for Parent {}
// SAFETY: as above.
unsafe impl Sync for Parent {}

static PARENT: OnceLock<Parent> = OnceLock::new();

/// An open WAL file: the platform VFS's file, which SQLite's allocation
/// holds right after this struct, and the frames gathered for it.
#[repr(C)]
struct WalFile {
    /// What SQLite sees: its `pMethods` are [`METHODS`].
    base: ffi::sqlite3_file,
    /// The platform VFS's file, at [`inner_offset`] in the same allocation.
    inner: *mut ffi::sqlite3_file,
    gathered: *mut Gathered,
    /// The database file whose WAL this is (null if it was not found).
    db: *mut DbFile,
}

/// An open main database file: the platform VFS's file, as for
/// [`WalFile`], and its WAL, whose gathered frames every lock call writes
/// first.
#[repr(C)]
struct DbFile {
    /// What SQLite sees: its `pMethods` are [`DB_METHODS`].
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// Its WAL, once open (null before and after).
    wal: *mut WalFile,
    /// What is known of the platform file's mapping of it (`mmap_size`).
    mapping: Mapping,
    /// How many of SQLite's requests to drop the mapping were declined
    /// because the file kept its length ([`kept_mappings`]).
    kept: u64,
}

/// The platform file's memory mapping of a database, as far as this VFS
/// knows it (see [`db_unfetch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mapping {
    /// Nothing mapped: the next fetch maps the file at its current length.
    None,
    /// Mapped when the file was this many bytes long (at most that many
    /// bytes are mapped: SQLite caps a mapping at `mmap_size`).
    Of(i64),
    /// Possibly mapped, to a length not known here (a size hint, a new
    /// `mmap_size` or a truncation may have remapped it): the next request
    /// to drop it goes through.
    Unknown,
}

/// The main database files open through this VFS, by the address of the
/// name SQLite opened them by: SQLite opens a WAL by a name from which
/// `sqlite3_filename_database` gives back that same address, which is how
/// a WAL finds its database file.
static OPEN_DATABASES: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn open_databases() -> MutexGuard<'static, Vec<(usize, usize)>> {
    // The list stays consistent whatever a panicking holder did: each
    // change is one push or one removal.
    OPEN_DATABASES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Frames waiting to be written, and what the last call was.
struct Gathered {
    bytes: Vec<u8>,
    /// Where `bytes` go in the file.
    at: i64,
    /// Whether the last frame header gathered is a commit frame's.
    commit: bool,
    /// The offset of the last call if it was a read, for the checksum
    /// rewrite rule.
    read_at: Option<i64>,
}

/// Where the platform VFS's file starts in SQLite's allocation: after our
/// structs, 16-byte aligned.
fn inner_offset() -> usize {
    std::mem::size_of::<WalFile>()
        .max(std::mem::size_of::<DbFile>())
        .next_multiple_of(16)
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Parent(parent)) = PARENT.get() else {
        return ffi::SQLITE_ERROR;
    };
    let parent = *parent;
    // SAFETY: SQLite passes an allocation of our szOsFile bytes (at least
    // the parent's) for `file`; `parent` is the live default VFS.
    unsafe {
        let Some(open) = (*parent).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        let wal = flags & ffi::SQLITE_OPEN_WAL != 0;
        let main = flags & ffi::SQLITE_OPEN_MAIN_DB != 0 && !name.is_null();
        if !wal && !main {
            // Journals and temporary files are the parent's file, in place.
            return open(parent, name, file, flags, out_flags);
        }
        let inner = file
            .cast::<u8>()
            .add(inner_offset())
            .cast::<ffi::sqlite3_file>();
        // SQLite calls xClose only on a file whose pMethods is set.
        (*file).pMethods = std::ptr::null();
        let rc = open(parent, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        if main {
            let db = file.cast::<DbFile>();
            db.write(DbFile {
                base: ffi::sqlite3_file {
                    pMethods: &DB_METHODS,
                },
                inner,
                wal: std::ptr::null_mut(),
                mapping: Mapping::None,
                kept: 0,
            });
            open_databases().push((name as usize, db as usize));
            return rc;
        }
        let db = if name.is_null() {
            0
        } else {
            let db_name = ffi::sqlite3_filename_database(name) as usize;
            open_databases()
                .iter()
                .find(|(name, _)| *name == db_name)
                .map_or(0, |(_, db)| *db)
        } as *mut DbFile;
        let wal = file.cast::<WalFile>();
        wal.write(WalFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            inner,
            gathered: Box::into_raw(Box::new(Gathered {
                // Reserved once: growing by doubling would copy and touch
                // twice the memory, and a fresh process pays a page fault
                // for each page it touches. Untouched pages cost nothing.
                bytes: Vec::with_capacity(GATHER_CAP),
                at: 0,
                commit: false,
                read_at: None,
            })),
            db,
        });
        if !db.is_null() {
            (*db).wal = wal;
        }
        rc
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    // A WAL file is never memory-mapped or given a WAL index of its own:
    // SQLite calls these on the database file only (version 1 tells it).
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// The platform file and its methods.
///
/// # Safety
/// `file` must be a [`WalFile`] opened by [`x_open`] and not yet closed.
unsafe fn parts<'a>(
    file: *mut ffi::sqlite3_file,
) -> (
    *mut ffi::sqlite3_file,
    &'a ffi::sqlite3_io_methods,
    &'a mut Gathered,
) {
    // SAFETY: per the contract, `inner` was opened by the parent (so its
    // methods are set) and `gathered` is live until x_close.
    unsafe {
        let wal = file.cast::<WalFile>();
        let inner = (*wal).inner;
        (inner, &*(*inner).pMethods, &mut *(*wal).gathered)
    }
}

/// Writes what is gathered, if anything; forgets it either way, since
/// SQLite rolls back a transaction whose write failed.
///
/// # Safety
/// As [`parts`].
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as `parts`; the bytes are ours and outlive the call.
    unsafe {
        let (inner, methods, gathered) = parts(file);
        gathered.commit = false;
        if gathered.bytes.is_empty() {
            return ffi::SQLITE_OK;
        }
        let rc = match (methods.xWrite, c_int::try_from(gathered.bytes.len())) {
            (Some(write), Ok(len)) => {
                write(inner, gathered.bytes.as_ptr().cast(), len, gathered.at)
            }
            _ => ffi::SQLITE_IOERR_WRITE,
        };
        gathered.bytes.clear();
        rc
    }
}

/// Writes what is gathered before any other call, so that the call sees
/// the file as the platform VFS would have left it.
macro_rules! after_flush {
    ($file:expr, $method:ident, |$call:ident, $inner:ident| $body:expr) => {{
        // SAFETY: SQLite calls our methods only on files x_open set up.
        unsafe {
            let rc = flush($file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            let ($inner, methods, gathered) = parts($file);
            gathered.read_at = None;
            match methods.$method {
                Some($call) => $body,
                None => ffi::SQLITE_IOERR,
            }
        }
    }};
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    if amount <= 0 || data.is_null() {
        // Nothing to gather (SQLite never writes nothing to a WAL).
        return after_flush!(file, xWrite, |write, inner| write(
            inner, data, amount, offset
        ));
    }
    let len = amount.unsigned_abs() as usize;
    // SAFETY: SQLite passes a file x_open set up and `amount` readable
    // bytes at `data`, valid for this call (they are copied if gathered).
    unsafe {
        let (inner, methods, gathered) = parts(file);
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
        let end = gathered.at + gathered.bytes.len() as i64;
        let fits = gathered.bytes.len() + len <= GATHER_CAP;
        let extends = !gathered.bytes.is_empty() && offset == end && fits;
        if !gathered.bytes.is_empty() && !extends {
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let (_, _, gathered) = parts(file);
        let rewrite = gathered.read_at == Some(offset);
        gathered.read_at = None;
        let starts = (len == WAL_HEADER && offset == 0) || (len == FRAME_HEADER && !rewrite);
        if !extends && !starts {
            return match methods.xWrite {
                Some(write) => write(inner, data, amount, offset),
                None => ffi::SQLITE_IOERR_WRITE,
            };
        }
        if gathered.bytes.is_empty() {
            gathered.at = offset;
        }
        gathered.bytes.extend_from_slice(bytes);
        if len == FRAME_HEADER {
            // Bytes 4..8 of a frame header: the database's size in pages
            // after a commit frame, zero in every other frame.
            gathered.commit = bytes[4..8] != [0; 4];
            return ffi::SQLITE_OK;
        }
        if gathered.commit {
            return flush(file);
        }
        ffi::SQLITE_OK
    }
}

unsafe extern "C" fn x_read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let rc = after_flush!(file, xRead, |read, inner| read(inner, data, amount, offset));
    // SAFETY: as in after_flush.
    unsafe { parts(file).2.read_at = Some(offset) };
    rc
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file once, after its last call; the gathered
    // state is freed here and never touched again.
    unsafe {
        let flushed = flush(file);
        let (inner, methods, _) = parts(file);
        let closed = methods.xClose.map_or(ffi::SQLITE_OK, |close| close(inner));
        let wal = file.cast::<WalFile>();
        drop(Box::from_raw((*wal).gathered));
        (*wal).gathered = std::ptr::null_mut();
        if !(*wal).db.is_null() {
            (*(*wal).db).wal = std::ptr::null_mut();
        }
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            closed
        }
    }
}

unsafe extern "C" fn x_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    after_flush!(file, xTruncate, |truncate, inner| truncate(inner, size))
}

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    after_flush!(file, xSync, |sync, inner| sync(inner, flags))
}

unsafe extern "C" fn x_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    after_flush!(file, xFileSize, |file_size, inner| file_size(inner, size))
}

unsafe extern "C" fn x_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    after_flush!(file, xLock, |lock, inner| lock(inner, level))
}

unsafe extern "C" fn x_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    after_flush!(file, xUnlock, |unlock, inner| unlock(inner, level))
}

unsafe extern "C" fn x_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    after_flush!(file, xCheckReservedLock, |check, inner| check(inner, out))
}

unsafe extern "C" fn x_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    after_flush!(file, xFileControl, |control, inner| control(inner, op, arg))
}

unsafe extern "C" fn x_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as in after_flush; a property, not a look at the file.
    unsafe {
        let (inner, methods, _) = parts(file);
        methods.xSectorSize.map_or(4096, |size| size(inner))
    }
}

unsafe extern "C" fn x_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as in after_flush; a property, not a look at the file.
    unsafe {
        let (inner, methods, _) = parts(file);
        methods
            .xDeviceCharacteristics
            .map_or(0, |characteristics| characteristics(inner))
    }
}

/// How many times a lock call of a database file found frames still
/// gathered for its WAL (see [`late_writes`]).
static LATE_WRITES: AtomicU64 = AtomicU64::new(0);

/// How many times, in this process, frames were still gathered when their
/// database file's lock was next taken or released. That happens only for
/// a rolled-back transaction that had spilled frames; every commit writes
/// its frames itself, before SQLite publishes them, so after commits alone
/// this stays 0 (`host-native/tests/wal_batch.rs` checks it).
pub fn late_writes() -> u64 {
    LATE_WRITES.load(Ordering::Relaxed)
}

static DB_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(db_close),
    xRead: Some(db_read),
    xWrite: Some(db_write),
    xTruncate: Some(db_truncate),
    xSync: Some(db_sync),
    xFileSize: Some(db_file_size),
    xLock: Some(db_lock),
    xUnlock: Some(db_unlock),
    xCheckReservedLock: Some(db_check_reserved_lock),
    xFileControl: Some(db_file_control),
    xSectorSize: Some(db_sector_size),
    xDeviceCharacteristics: Some(db_device_characteristics),
    xShmMap: Some(db_shm_map),
    xShmLock: Some(db_shm_lock),
    xShmBarrier: Some(db_shm_barrier),
    xShmUnmap: Some(db_shm_unmap),
    xFetch: Some(db_fetch),
    xUnfetch: Some(db_unfetch),
};

/// Calls the platform file's `$method` for a database file, `$missing` if
/// it has none; with `flush_wal`, after writing what its WAL gathered.
macro_rules! on_db {
    ($file:expr, $method:ident, $missing:expr, |$call:ident, $inner:ident| $body:expr) => {
        on_db!($file, $method, $missing, false, |$call, $inner| $body)
    };
    ($file:expr, $method:ident, $missing:expr, $flush_wal:expr, |$call:ident, $inner:ident| $body:expr) => {{
        // SAFETY: SQLite calls these methods only on database files x_open
        // set up, whose WAL (if linked) is open until it unlinks itself.
        unsafe {
            let db = $file.cast::<DbFile>();
            if $flush_wal && !(*db).wal.is_null() && !(*(*(*db).wal).gathered).bytes.is_empty() {
                LATE_WRITES.fetch_add(1, Ordering::Relaxed);
                let rc = flush((*db).wal.cast());
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
            }
            let $inner = (*db).inner;
            match (*(*$inner).pMethods).$method {
                Some($call) => $body,
                None => $missing,
            }
        }
    }};
}

unsafe extern "C" fn db_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file once, after its last call (and after
    // closing its WAL).
    unsafe {
        let db = file.cast::<DbFile>();
        open_databases().retain(|(_, open)| *open != db as usize);
        if !(*db).wal.is_null() {
            (*(*db).wal).db = std::ptr::null_mut();
        }
        let inner = (*db).inner;
        (*(*inner).pMethods)
            .xClose
            .map_or(ffi::SQLITE_OK, |close| close(inner))
    }
}

unsafe extern "C" fn db_read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    on_db!(file, xRead, ffi::SQLITE_IOERR_READ, |read, inner| read(
        inner, data, amount, offset
    ))
}

unsafe extern "C" fn db_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    on_db!(file, xWrite, ffi::SQLITE_IOERR_WRITE, |write, inner| write(
        inner, data, amount, offset
    ))
}

unsafe extern "C" fn db_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: a database file x_open set up (see `on_db!`).
    unsafe { (*file.cast::<DbFile>()).mapping = Mapping::Unknown };
    on_db!(
        file,
        xTruncate,
        ffi::SQLITE_IOERR_TRUNCATE,
        |truncate, inner| { truncate(inner, size) }
    )
}

unsafe extern "C" fn db_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    on_db!(file, xSync, ffi::SQLITE_IOERR_FSYNC, |sync, inner| sync(
        inner, flags
    ))
}

unsafe extern "C" fn db_file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    on_db!(
        file,
        xFileSize,
        ffi::SQLITE_IOERR_FSTAT,
        |file_size, inner| { file_size(inner, size) }
    )
}

unsafe extern "C" fn db_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    on_db!(file, xLock, ffi::SQLITE_IOERR_LOCK, true, |lock, inner| {
        lock(inner, level)
    })
}

unsafe extern "C" fn db_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    on_db!(
        file,
        xUnlock,
        ffi::SQLITE_IOERR_UNLOCK,
        true,
        |unlock, inner| { unlock(inner, level) }
    )
}

unsafe extern "C" fn db_check_reserved_lock(
    file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    on_db!(
        file,
        xCheckReservedLock,
        ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        |check, inner| { check(inner, out) }
    )
}

unsafe extern "C" fn db_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SQLite sends its `mmap_size` at the start of many transactions; only
    // a new one remaps, and the platform file answers with the old.
    let limit = (op == ffi::SQLITE_FCNTL_MMAP_SIZE && !arg.is_null())
        // SAFETY: for this op `arg` points to an i64.
        .then(|| unsafe { *arg.cast::<i64>() });
    let rc = on_db!(
        file,
        xFileControl,
        ffi::SQLITE_NOTFOUND,
        |control, inner| { control(inner, op, arg) }
    );
    // SAFETY: as above; a database file x_open set up (see `on_db!`).
    let remapped = op == ffi::SQLITE_FCNTL_SIZE_HINT
        || limit.is_some_and(|limit| unsafe { *arg.cast::<i64>() } != limit);
    if remapped {
        // The file may be mapped anew, to a length this VFS does not see.
        // SAFETY: a database file x_open set up (see `on_db!`).
        unsafe { (*file.cast::<DbFile>()).mapping = Mapping::Unknown };
    }
    rc
}

unsafe extern "C" fn db_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    on_db!(file, xSectorSize, 4096, |size, inner| size(inner))
}

unsafe extern "C" fn db_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    on_db!(file, xDeviceCharacteristics, 0, |characteristics, inner| {
        characteristics(inner)
    })
}

unsafe extern "C" fn db_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    on_db!(file, xShmMap, ffi::SQLITE_IOERR_SHMMAP, |map, inner| {
        map(inner, region, size, extend, out)
    })
}

/// The WAL's write lock is released here: what the WAL gathered (a
/// rolled-back transaction's spilled frames) is written before, while the
/// lock is still held, as the platform VFS would have written it.
unsafe extern "C" fn db_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    on_db!(
        file,
        xShmLock,
        ffi::SQLITE_IOERR_SHMLOCK,
        true,
        |lock, inner| { lock(inner, offset, n, flags) }
    )
}

unsafe extern "C" fn db_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: as in on_db.
    unsafe {
        let inner = (*file.cast::<DbFile>()).inner;
        if let Some(barrier) = (*(*inner).pMethods).xShmBarrier {
            barrier(inner);
        }
    }
}

unsafe extern "C" fn db_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    on_db!(file, xShmUnmap, ffi::SQLITE_OK, |unmap, inner| unmap(
        inner, delete
    ))
}

unsafe extern "C" fn db_fetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    // SAFETY: `out` is SQLite's; a file that cannot map pages says so
    // with a null page, and SQLite reads instead.
    let unmapped = || unsafe {
        *out = std::ptr::null_mut();
        ffi::SQLITE_OK
    };
    let db = file.cast::<DbFile>();
    // With nothing mapped, this fetch maps the file at its length: learn
    // that length, unless the file changed length meanwhile.
    // SAFETY: a database file x_open set up (see `on_db!`).
    let before = unsafe { ((*db).mapping == Mapping::None).then(|| file_size(&*db)) };
    let rc = on_db!(file, xFetch, unmapped(), |fetch, inner| fetch(
        inner, offset, amount, out
    ));
    if let Some(before) = before {
        // SAFETY: as above.
        unsafe {
            (*db).mapping = match (before, file_size(&*db)) {
                (Some(before), Some(after)) if before == after => Mapping::Of(after),
                _ => Mapping::Unknown,
            };
        }
    }
    rc
}

/// SQLite asks to drop the whole mapping (`page` null) at the start of
/// every transaction that follows another connection's commit, because a
/// file may have been cut short meanwhile, and a mapped page past its end
/// faults (`SIGBUS`) when read. Dropping it costs a long-lived process
/// dearly: the `munmap`, a TLB shootdown on every core its threads ran on,
/// and a page fault for each page it touches again. In a profile of 16
/// worker processes on 2 cores, `munmap` was a fifth of the workers' CPU
/// time, and a waiter woken by a commit paid it on its way to the answer
/// (docs/durability-and-speed.md has what keeping the mapping measured).
///
/// So on Linux the request is declined when the file has exactly the
/// length it had when it was mapped: nothing mapped lies past its end,
/// and a shared mapping there shows the file's current bytes (the kernel
/// keeps it coherent with writes, truncations and growth, which is what
/// POSIX does not promise and SQLite therefore does not assume). When the
/// length changed, or is not known here, the mapping is dropped as SQLite
/// asked, and the next fetch maps the file anew.
unsafe extern "C" fn db_unfetch(
    file: *mut ffi::sqlite3_file,
    offset: i64,
    page: *mut c_void,
) -> c_int {
    if page.is_null() {
        // SAFETY: a database file x_open set up (see `on_db!`); the borrow
        // ends before the call below.
        let db = unsafe { &mut *file.cast::<DbFile>() };
        if cfg!(target_os = "linux")
            && let Mapping::Of(length) = db.mapping
            && file_size(db) == Some(length)
        {
            db.kept += 1;
            return ffi::SQLITE_OK;
        }
        db.mapping = Mapping::None;
    }
    on_db!(file, xUnfetch, ffi::SQLITE_OK, |unfetch, inner| unfetch(
        inner, offset, page
    ))
}

/// The database file's length, from the platform file (`fstat`).
fn file_size(db: &DbFile) -> Option<i64> {
    let mut size = 0;
    // SAFETY: `inner` was opened by the parent VFS and stays open as long
    // as `db`.
    unsafe {
        let size_of = (*(*db.inner).pMethods).xFileSize?;
        (size_of(db.inner, &mut size) == ffi::SQLITE_OK).then_some(size)
    }
}

/// How many times SQLite's request to drop `conn`'s mapping of its main
/// database was declined because the file kept its length (see
/// `db_unfetch`); `None` if the connection is not open through this VFS.
pub fn kept_mappings(conn: &rusqlite::Connection) -> Option<u64> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: SQLITE_FCNTL_FILE_POINTER writes the main database's
    // `sqlite3_file` pointer, which lives as long as the connection; it is
    // ours only if its methods are ours.
    unsafe {
        let rc = ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        );
        if rc != ffi::SQLITE_OK || file.is_null() || !std::ptr::eq((*file).pMethods, &DB_METHODS) {
            return None;
        }
        Some((*file.cast::<DbFile>()).kept)
    }
}
