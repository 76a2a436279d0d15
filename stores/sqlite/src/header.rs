//! Reads a database file's header (its first 100 bytes) without dropping
//! the SQLite locks this process holds on the file.
//!
//! POSIX locks belong to a process, and closing any descriptor of a file
//! drops all of the process's locks on it. A connection in WAL mode holds a
//! shared lock on the database file while it is open; it is what stops
//! another process's last connection from checkpointing and deleting the
//! `-wal` and `-shm` under it. A long-lived host opens the database again
//! for each call while other calls' connections stay open, and opening
//! reads the header first ([`crate::file::check_log_belongs`]). Reading it
//! with `std::fs` would drop those locks. SQLite's own unix VFS keeps track
//! of every descriptor the process has on a file and, while any connection
//! holds a lock on it, keeps a closed one open until the last lock goes.
//! So the header is read through that VFS.
//!
//! `unsafe` is allowed here only for the VFS's C calls (xOpen, xRead,
//! xClose), each with its `SAFETY` comment. This module must never write.

#![allow(unsafe_code)]

use std::ffi::{CString, c_int, c_void};
use std::path::Path;

use rusqlite::ffi;

/// A database file's header.
pub(crate) type Header = [u8; 100];

/// The first 100 bytes of the file at `path`, or `None` when it cannot be
/// opened or is shorter than that (an empty file, not a database).
pub(crate) fn read(path: &Path) -> Option<Header> {
    use std::os::unix::ffi::OsStrExt as _;
    let name = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: sqlite3_vfs_find(NULL) returns the default VFS (initializing
    // SQLite if needed), which lives as long as the process; `name` is a
    // valid C string for the call, and sqlite3_create_filename copies it
    // into a filename that SQLite's VFS may parse as one of its own, freed
    // below exactly once.
    unsafe {
        let vfs = ffi::sqlite3_vfs_find(std::ptr::null());
        if vfs.is_null() {
            return None;
        }
        let filename = ffi::sqlite3_create_filename(
            name.as_ptr(),
            c"".as_ptr(),
            c"".as_ptr(),
            0,
            std::ptr::null_mut(),
        );
        if filename.is_null() {
            return None;
        }
        let header = read_through(vfs, filename);
        ffi::sqlite3_free_filename(filename);
        header
    }
}

/// Opens `filename` read-only through `vfs`, reads the header and closes
/// it.
///
/// # Safety
///
/// `vfs` must be a registered VFS and `filename` a filename made by
/// `sqlite3_create_filename`, both valid for the call.
unsafe fn read_through(
    vfs: *mut ffi::sqlite3_vfs,
    filename: ffi::sqlite3_filename,
) -> Option<Header> {
    // SAFETY: the caller passes a valid VFS. Its xOpen gets a zeroed,
    // 8-byte aligned allocation of its szOsFile bytes, which outlives the
    // file: xClose runs before `storage` is dropped. As SQLite's contract
    // says, xClose runs whenever xOpen left methods set, even if it failed,
    // and xRead only after a successful xOpen.
    unsafe {
        let size = usize::try_from((*vfs).szOsFile).ok()?;
        let mut storage = vec![0u64; size.div_ceil(8).max(1)];
        let file = storage.as_mut_ptr().cast::<ffi::sqlite3_file>();
        let open = (*vfs).xOpen?;
        let flags = ffi::SQLITE_OPEN_MAIN_DB | ffi::SQLITE_OPEN_READONLY;
        let mut out_flags: c_int = 0;
        let opened = open(vfs, filename, file, flags, &mut out_flags) == ffi::SQLITE_OK;
        let methods = (*file).pMethods;
        let mut header: Header = [0; 100];
        let read = if !opened || methods.is_null() {
            None
        } else {
            (*methods).xRead.map(|read| {
                read(
                    file,
                    header.as_mut_ptr().cast::<c_void>(),
                    c_int::try_from(header.len()).unwrap_or(0),
                    0,
                )
            })
        };
        if let Some(close) = methods.as_ref().and_then(|m| m.xClose) {
            close(file);
        }
        // A short read (SQLITE_IOERR_SHORT_READ) zero-fills: not a header.
        (read == Some(ffi::SQLITE_OK)).then_some(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_first_hundred_bytes_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let full = dir.path().join("full");
        let bytes: Vec<u8> = (0..=255).collect();
        std::fs::write(&full, &bytes).unwrap();
        assert_eq!(read(&full).map(|h| h.to_vec()), Some(bytes[..100].to_vec()));

        let short = dir.path().join("short");
        std::fs::write(&short, &bytes[..99]).unwrap();
        assert_eq!(read(&short), None);
        assert_eq!(read(&dir.path().join("missing")), None);
    }
}
