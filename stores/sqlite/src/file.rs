//! The database file as something to trust and to keep track of: who owns
//! it, whether it is the file it claims to be, and whether it is still the
//! file this process opened.
//!
//! SQLite keeps a database in three files, `coord.db`, `coord.db-wal` and
//! `coord.db-shm`, found by name. A name that points somewhere else than the
//! process expects is how data gets lost: a `-shm` deleted under a running
//! waiter makes two processes use two different WAL indexes and corrupts
//! the file; a `-wal` deleted loses acknowledged commits; two hard-link
//! names for one database give it two WALs; a planted symbolic link makes
//! `init` create the database (and its `-wal`) wherever it points. This
//! module checks for each of these before anything is written, and says
//! which it found. It must never open the database itself (SQLite does),
//! and never hold a descriptor on the database file: closing any descriptor
//! of a file drops every POSIX lock the process holds on it, SQLite's too.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use inbox_engine::StoreError;

use crate::format::is_wal_header;

/// The suffixes of SQLite's companion files in WAL mode.
pub const COMPANIONS: [&str; 2] = ["-wal", "-shm"];

/// `path` with a companion suffix.
pub fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Opens the lock file at `path` for reading and writing, creating it
/// owner-only (0600), never through a symbolic link: a planted link would
/// let someone else's file decide who waits.
pub fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let no_follow = i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0);
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(no_follow)
        .open(path)
}

/// A file's identity: the device and inode it is stored at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    dev: u64,
    ino: u64,
}

fn key(path: &Path) -> Option<Key> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| Key {
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// The identities of a database's three files when a connection opened
/// them, to tell later whether the names still lead to the same files.
#[derive(Clone, Debug)]
pub struct FileIdentity {
    /// Each file and its identity, once seen. A cell, so that a reader
    /// holding the store immutably (a waiter) can check too.
    files: Vec<(PathBuf, Cell<Option<Key>>)>,
}

impl FileIdentity {
    /// Records what `db` and its companions are now. A companion that does
    /// not exist yet is recorded the first time it is seen.
    pub fn record(db: &Path) -> FileIdentity {
        let mut files = vec![(db.to_path_buf(), Cell::new(key(db)))];
        files.extend(COMPANIONS.iter().map(|s| {
            let path = companion(db, s);
            let key = key(&path);
            (path, Cell::new(key))
        }));
        FileIdentity { files }
    }

    /// The database file.
    pub fn database(&self) -> &Path {
        &self.files[0].0
    }

    /// Fails if any of the files was deleted, moved or replaced since it
    /// was recorded: the process must stop before it writes.
    pub fn check(&self) -> Result<(), StoreError> {
        for (path, recorded) in &self.files {
            let now = key(path);
            match (recorded.get(), now) {
                (None, seen) => recorded.set(seen),
                (Some(was), Some(is)) if was == is => {}
                (Some(_), now) => {
                    let what = if now.is_none() {
                        "was deleted or moved"
                    } else {
                        "was replaced by another file"
                    };
                    return Err(StoreError::other(format!(
                        "{} {what} while this process had the database open; it stopped before \
                         writing, to keep the database intact. Never delete, move or replace an \
                         inbox database or its -wal and -shm files while agents use it; run the \
                         command again",
                        path.display()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Refuses what cannot be an inbox database file before SQLite opens it:
/// a device or pipe (`--db /dev/null`), and a file with more than one name
/// (hard links: SQLite finds the `-wal` by name, so each name would get a
/// WAL of its own and the two would corrupt the database).
pub fn check_database_file(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let shown = path.display();
    if meta.is_dir() {
        return Err(StoreError::other(format!(
            "{shown} is a folder, not a database file; pass --db with a file path"
        )));
    }
    if !meta.is_file() {
        return Err(StoreError::other(format!(
            "{shown} is not a regular file (a device, pipe or socket) and cannot hold a database; \
             pass --db with a file path"
        )));
    }
    if meta.nlink() > 1 {
        return Err(StoreError::other(format!(
            "{shown} has {} names (hard links); SQLite keeps a database's -wal and -shm files by \
             name, so two names give it two write-ahead logs and corrupt it. Remove the other \
             names and use one path",
            meta.nlink()
        )));
    }
    Ok(())
}

/// Refuses a database file in rollback-journal mode that has a write-ahead
/// log or its index beside it: inbox keeps every database in WAL mode and
/// leaves both companions in place, so such a file was written over by
/// something else (a copy, `writeFileSync` of exported bytes) where a
/// database lived. If the `-wal` still holds frames, SQLite would apply them
/// to the new file, mixing two databases; if it was just checkpointed, the
/// commits it held are in the file that was replaced, and opening the copy
/// would carry on without them. Either way acknowledged commits would be
/// lost without a word, so nothing is opened. Returns whether the file is in
/// WAL mode (a file in rollback mode with no companions is a self-contained
/// copy, which the caller switches to WAL).
pub fn check_log_belongs(path: &Path) -> Result<bool, StoreError> {
    // Through SQLite's VFS: closing a descriptor of our own would drop the
    // locks of this process's open connections to the file.
    let Some(header) = crate::header::read(path).filter(|h| h.starts_with(b"SQLite format 3\0"))
    else {
        // Empty or not SQLite: the schema check says what it is.
        return Ok(true);
    };
    if is_wal_header(&header) {
        return Ok(true);
    }
    let log = companion(path, "-wal");
    let index = companion(path, "-shm");
    let left = [&log, &index]
        .into_iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok());
    if let Some(left) = left {
        return Err(StoreError::other(format!(
            "{} was written over by a copy (it is not in WAL mode, as inbox keeps its databases) \
             while {} of the database it replaced is still beside it; that database's latest \
             commits are in its log or were in the file the copy replaced, and opening the copy \
             would lose them or corrupt it. Nothing was opened. If the copy is meant to stand \
             (the database it replaced is given up), stop every agent and move {} and {} \
             aside; to restore a copy safely, use `inbox import --sqlite COPY --replace`, which \
             keeps a backup; to share a database with Node, use Inbox.open({{store: \"file\"}})",
            path.display(),
            left.display(),
            log.display(),
            index.display()
        )));
    }
    Ok(false)
}

/// Why SQLite could not open or use the database at `path`, when a look at
/// its three files and its folder tells: a companion that is a symbolic
/// link, a file this user cannot read and write, a folder where the
/// companions cannot be created. `None` when nothing there explains it.
/// Looks with `lstat` and `access` only: it never opens the files (see the
/// module doc).
pub fn diagnose(path: &Path) -> Option<String> {
    use rustix::fs::Access;
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    for file in
        std::iter::once(path.to_path_buf()).chain(COMPANIONS.iter().map(|s| companion(path, s)))
    {
        let shown = file.display();
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            continue;
        };
        if meta.file_type().is_symlink() && file != path {
            return Some(format!(
                "{shown} is a symbolic link; SQLite would write the database's log wherever it \
                 points, so it is not used. Stop the agents, remove the link, and run the command \
                 again"
            ));
        }
        if meta.uid() != me {
            return Some(format!(
                "{shown} belongs to another user (uid {}); a database's files must all be yours. \
                 Ask its owner, or use a database of your own",
                meta.uid()
            ));
        }
        if rustix::fs::access(&file, Access::READ_OK | Access::WRITE_OK).is_err() {
            return Some(format!(
                "{shown} cannot be read and written by you (mode {:o}); `chmod u+rw {shown}`",
                meta.mode() & 0o7777
            ));
        }
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    let missing = COMPANIONS
        .iter()
        .any(|s| std::fs::symlink_metadata(companion(path, s)).is_err());
    if missing && rustix::fs::access(folder, Access::WRITE_OK | Access::EXEC_OK).is_err() {
        return Some(format!(
            "you cannot create files in {}, where SQLite keeps the database's -wal and -shm; \
             `chmod u+wx {}`",
            folder.display(),
            folder.display()
        ));
    }
    None
}

/// The `-wal` of the database at `path`, if it is missing while its `-shm`
/// is still there: inbox processes leave both in place, so the log was
/// deleted (with the commits it held) while the database was in use.
pub fn log_deleted(path: &Path) -> Option<PathBuf> {
    let log = companion(path, "-wal");
    let index_left = std::fs::symlink_metadata(companion(path, "-shm")).is_ok();
    (index_left && std::fs::symlink_metadata(&log).is_err()).then_some(log)
}

/// For `init`, which creates files: refuses a database path or companion
/// that is a symbolic link (init would create the file wherever the link
/// points, maybe in a folder of another user's choosing) or that another
/// user owns (a planted `-wal` would hold our commits in their file), and a
/// folder other users may replace files in.
pub fn check_creatable(path: &Path) -> Result<(), StoreError> {
    for candidate in
        std::iter::once(path.to_path_buf()).chain(COMPANIONS.iter().map(|s| companion(path, s)))
    {
        if std::fs::symlink_metadata(&candidate).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(StoreError::other(format!(
                "{} is a symbolic link; init never follows one, since it would create the database \
                 wherever the link points. Remove the link, or pass --db with the real path",
                candidate.display()
            )));
        }
    }
    check_owned(path)?;
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && let Some(problem) = writable_by_others(folder)
    {
        return Err(StoreError::other(format!(
            "{} {problem}, so they could replace the database; make it private first (`chmod go-w {}`)",
            folder.display(),
            folder.display()
        )));
    }
    Ok(())
}

/// Refuses a database whose file or companion files another user owns:
/// this process would write its agents' work into a file someone else
/// controls (and can read).
pub fn check_owned(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    for candidate in
        std::iter::once(path.to_path_buf()).chain(COMPANIONS.iter().map(|s| companion(path, s)))
    {
        if let Ok(meta) = std::fs::symlink_metadata(&candidate)
            && meta.uid() != me
        {
            return Err(StoreError::other(format!(
                "{} belongs to another user (uid {}, you are {me}); inbox never writes into a \
                 database someone else controls. Use a database of your own (`inbox init` in your \
                 project, or --db)",
                candidate.display(),
                meta.uid()
            )));
        }
    }
    Ok(())
}

/// Why a database found by looking around (not named by `--db` or
/// `$INBOX_DB`) must not be used: it or its companions belong to another
/// user, or other users may write it or its folder. `None` when it is this
/// user's own.
pub fn untrusted(path: &Path) -> Option<String> {
    if let Err(refused) = check_owned(path) {
        return Some(refused.message);
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    for candidate in std::iter::once(path).chain(folder) {
        if let Some(problem) = writable_by_others(candidate) {
            return Some(format!(
                "{} {problem}; `chmod go-w` it, or name the database with --db to use it anyway",
                candidate.display()
            ));
        }
    }
    None
}

/// Whether users other than the owner may write `path` or, for a folder,
/// replace what it holds: group or others write permission, unless the
/// folder is sticky (like `/tmp`, where only a file's owner may remove it).
fn writable_by_others(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.mode() & 0o7777;
    let sticky = meta.is_dir() && mode & 0o1000 != 0;
    (mode & 0o022 != 0 && !sticky)
        .then(|| format!("can be written by other users (mode {mode:04o})"))
}

/// Whether process (or thread) `pid` of this namespace runs. A zombie, or
/// a task that is exiting, does not ([`stat_says_dead`]).
/// `/proc` tells that apart; where it cannot be read (no such task, or no
/// `/proc` at all), a signal-0 probe decides, for which `EPERM` means
/// another user's process runs (and a zombie counts as running).
pub(crate) fn process_runs(pid: u32) -> bool {
    use std::io::Read;
    let mut stat = Vec::with_capacity(512);
    // A stat line is a few hundred bytes; the limit keeps the read bounded.
    let read = std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|file| file.take(4096).read_to_end(&mut stat));
    match read {
        Ok(_) => !stat_says_dead(&stat),
        Err(_) => signal_reaches(pid),
    }
}

/// Whether a signal-0 probe finds `pid` (one we may not signal exists).
fn signal_reaches(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Whether a `/proc/<pid>/stat` line is a dead task's: its state, the first
/// field after the name (which is in parentheses and may hold anything,
/// parentheses included), is `Z` (zombie) or `X` (dead). A zombie will never
/// let go of a lock it holds itself, so a killed holder whose parent has
/// not reaped it yet holds nobody up.
fn stat_says_dead(stat: &[u8]) -> bool {
    let after_name = stat.iter().rposition(|&b| b == b')').map_or(0, |i| i + 1);
    let state = stat[after_name..].iter().find(|b| !b.is_ascii_whitespace());
    matches!(state, Some(b'Z' | b'X' | b'x'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_says_whether_the_task_is_dead() {
        assert!(!stat_says_dead(b"42 (inbox) S 1 42 42 0 -1"));
        assert!(!stat_says_dead(b"42 (inbox) R 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (inbox) Z 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (inbox) X 1 42 42 0 -1"));
        // The name is whatever the process chose, parentheses included:
        // the state follows the last one.
        assert!(!stat_says_dead(b"42 (a) Z (b) S 1 42 42 0 -1"));
        assert!(stat_says_dead(b"42 (a) S (b) Z 1 42 42 0 -1"));
    }

    #[test]
    fn this_process_runs() {
        assert!(process_runs(std::process::id()));
        assert!(process_runs(
            rustix::thread::gettid()
                .as_raw_nonzero()
                .get()
                .unsigned_abs()
        ));
    }

    #[test]
    fn a_killed_process_does_not_run_even_unreaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        assert!(process_runs(child.id()));
        child.kill().unwrap();
        // Not reaped yet: a zombie until `wait`, once the kernel has
        // finished killing it.
        let killed = std::time::Instant::now();
        while process_runs(child.id()) {
            assert!(
                killed.elapsed() < std::time::Duration::from_secs(5),
                "a killed, unreaped child still counts as running"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let stat = std::fs::read(format!("/proc/{}/stat", child.id())).unwrap();
        assert!(stat_says_dead(&stat), "the child is a zombie, not gone");
        child.wait().unwrap();
        assert!(!process_runs(child.id()));
    }
}
