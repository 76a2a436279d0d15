//! A lock other programs take by creating a folder: Node's `proper-lockfile`,
//! which Claude Code's agent teams take on `inboxes/<agent>.json.lock`
//! before they rewrite `<agent>.json`. This module owns that protocol on
//! the bridge's side: taking the lock, keeping it, writing the file under
//! it, and letting it go.
//!
//! The protocol, as `proper-lockfile` has it: the lock is taken by `mkdir`
//! (one process wins); its holder refreshes the folder's mtime every half
//! stale time; a lock whose mtime is older than the stale time is a crashed
//! holder's, which anyone may remove and take. So a holder that stalls (a
//! suspended laptop, a swapped-out process, a slow disk) past the stale
//! time can lose its lock without being told. This module must therefore
//! never write the file, nor remove a lock folder, on the belief that it
//! still holds the lock: it keeps the lock folder open, and "held" means
//! the name still leads to that very folder (the open descriptor keeps the
//! folder's inode from being reused). A write is made by exchanging a new
//! file with the old one, checked afterwards (the lock still held, the old
//! file still what was read), and undone when the check fails; a lock
//! folder is removed only after renaming it aside and finding it is ours.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::{Folder, refused};

/// The environment variable that stalls a process holding a lock folder at
/// a named step, in test builds only (debug assertions on, as `cargo test`
/// builds; a release build never reads it): `STEP` stops the process
/// (SIGSTOP, as a suspended laptop or a swapped-out process stalls),
/// `STEP:MS` sleeps MS milliseconds (a slow disk, the process still
/// running); several, separated by commas, stall at each. The steps: `locked` (the lock just taken), `read` (the
/// caller's, after reading the file), `written` (the new file written
/// beside it), `checked` (the lock found held, just before the exchange),
/// `replaced` (just after it), `release` (before letting go).
pub const STALL_ENV: &str = "INBOX_TEST_LOCK_STALL";

/// Stalls here if [`STALL_ENV`] names `step` (test builds only).
pub fn stall_point(step: &str) {
    stall_at(STALL_ENV, step);
}

/// Stalls here if the variable `env` names `step`, as [`STALL_ENV`] does
/// for locks (test builds only): the one mechanism the crash tests use to
/// stop a process at a named step.
pub fn stall_at(env: &str, step: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Some(value) = std::env::var_os(env) else {
        return;
    };
    let value = value.to_string_lossy();
    let Some((_, millis)) = value
        .split(',')
        .map(|one| match one.split_once(':') {
            Some((at, millis)) => (at, millis.parse::<u64>().ok()),
            None => (one, None),
        })
        .find(|(at, _)| *at == step)
    else {
        return;
    };
    match millis {
        Some(millis) => std::thread::sleep(Duration::from_millis(millis)),
        None => {
            use rustix::process::{Signal, getpid, kill_process};
            let _ = kill_process(getpid(), Signal::STOP);
        }
    }
}

impl Folder {
    /// Takes the lock `name` the way Node's `proper-lockfile` (Claude
    /// Code's) does: by creating a folder of that name, which only one
    /// process can. A lock folder older than `stale` is a crashed holder's
    /// and is taken over. Gives up (`WouldBlock`) after `patience`; refused
    /// (`InvalidInput`) when something else than a lock folder (a file, a
    /// link, a folder with something in it) is in its place.
    ///
    /// While the returned lock lives, a thread refreshes the folder's mtime
    /// every half `stale`, as `proper-lockfile`'s holders do, and notices
    /// when the lock was taken from it.
    pub fn lock_folder(
        &self,
        name: &OsStr,
        stale: Duration,
        patience: Duration,
    ) -> io::Result<FolderLock> {
        let path = self.join(name);
        let started = Instant::now();
        loop {
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let lock = FolderLock::hold(&self.path, name, stale)?;
                    stall_point("locked");
                    return Ok(lock);
                }
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                Err(_) => {}
            }
            match std::fs::symlink_metadata(&path) {
                // Let go of meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
                Ok(meta) if !meta.is_dir() => {
                    return Err(refused(format!(
                        "{} is not a lock folder (a file or a link is in its place); remove it",
                        path.display()
                    )));
                }
                Ok(meta) if is_stale(&meta, stale) => {
                    take_over(&self.path, name, &meta)?;
                    continue;
                }
                Ok(_) => {}
            }
            if started.elapsed() > patience {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("{} is held by another process", path.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a lock folder's mtime is older than `stale` (`proper-lockfile`'s
/// rule; an mtime in the future is not stale).
fn is_stale(meta: &std::fs::Metadata, stale: Duration) -> bool {
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > stale)
}

/// Removes the stale lock folder `name` that `judged` describes, and only
/// it: renamed aside first, then removed if it is the very folder judged
/// stale (same inode, same mtime), else put back. A holder that refreshed
/// it, or another process that took it over meanwhile, keeps its lock.
fn take_over(folder: &Path, name: &OsStr, judged: &std::fs::Metadata) -> io::Result<()> {
    let dir = open_folder(folder)?;
    let aside = aside_name(name, "stale");
    match rustix::fs::renameat(&dir, name, &dir, &aside) {
        Ok(()) => {}
        // Let go of meanwhile: taken on the next try.
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let same = std::fs::symlink_metadata(folder.join(&aside)).is_ok_and(|moved| {
        (moved.dev(), moved.ino(), moved.mtime(), moved.mtime_nsec())
            == (
                judged.dev(),
                judged.ino(),
                judged.mtime(),
                judged.mtime_nsec(),
            )
    });
    if !same {
        put_back(&dir, &aside, name);
        return Ok(());
    }
    match rustix::fs::unlinkat(&dir, &aside, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(()),
        Err(_) => {
            // Something was put in it: not a lock folder to remove.
            put_back(&dir, &aside, name);
            Err(refused(format!(
                "{} is a stale lock folder with something in it; remove it",
                folder.join(name).display()
            )))
        }
    }
}

/// Renames `aside` back to `name`, unless something took `name` meanwhile
/// (then it stays aside: never over another process's lock).
fn put_back(dir: &OwnedFd, aside: &OsStr, name: &OsStr) {
    let _ = rustix::fs::renameat_with(dir, aside, dir, name, RenameFlags::NOREPLACE);
}

/// A unique name beside `name` for something set aside or about to be
/// renamed over it (`.NAME.PID-N.KIND`): hidden, and never a member's name.
fn aside_name(name: &OsStr, kind: &str) -> OsString {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut aside = OsString::from(".");
    aside.push(name);
    aside.push(format!(".{}-{n}.{kind}", std::process::id()));
    aside
}

fn open_folder(folder: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::open(folder, flags, Mode::empty())?)
}

/// A lock taken by [`Folder::lock_folder`]: kept fresh while it lives,
/// released (if still ours) when dropped.
#[derive(Debug)]
pub struct FolderLock {
    folder: PathBuf,
    name: OsString,
    /// The lock folder we created, open: its identity is what "held" means.
    own: Arc<OwnedFd>,
    /// Set once the lock was seen taken from us (it never comes back).
    lost: Arc<AtomicBool>,
    keeper: Option<Keeper>,
}

/// What [`FolderLock::replace`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replaced {
    /// The file is the new bytes, replaced while the lock was held
    /// throughout and nobody else wrote it.
    Done,
    /// The lock was taken from us (found stale and taken over, or removed),
    /// or the file changed since it was read: another writer's file is left
    /// as that writer made it, and the new bytes may or may not be in the
    /// file. Says what happened.
    LostRace(String),
}

/// The thread that refreshes a held lock's mtime.
#[derive(Debug)]
struct Keeper {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl FolderLock {
    /// The lock folder `name` just created in `folder`: opened, and kept.
    fn hold(folder: &Path, name: &OsStr, stale: Duration) -> io::Result<FolderLock> {
        let dir = open_folder(folder)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let own = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
            Ok(own) => Arc::new(own),
            Err(e) => {
                let _ = rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR);
                return Err(e.into());
            }
        };
        let mut lock = FolderLock {
            folder: folder.to_path_buf(),
            name: name.to_owned(),
            own,
            lost: Arc::new(AtomicBool::new(false)),
            keeper: None,
        };
        // Dropped on an error: the lock folder is let go of.
        lock.keeper = Some(lock.keep(stale / 2)?);
        Ok(lock)
    }

    /// Starts the thread that, every `every`, checks the lock is still
    /// ours and sets its mtime to now (on our folder's descriptor: never on
    /// a folder another process put in its place).
    fn keep(&self, every: Duration) -> io::Result<Keeper> {
        let (stop, stopped) = mpsc::channel::<()>();
        let path = self.folder.join(&self.name);
        let own = Arc::clone(&self.own);
        let lost = Arc::clone(&self.lost);
        let thread = std::thread::Builder::new()
            .name("lock-keeper".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    if !is_ours(&path, &own) || refresh(&own).is_err() {
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            })?;
        Ok(Keeper { stop, thread })
    }

    /// Whether the lock is still ours: its name leads to the folder we
    /// created. Once not, never again.
    pub fn holds(&self) -> bool {
        if self.lost.load(Ordering::SeqCst) {
            return false;
        }
        if is_ours(&self.folder.join(&self.name), &self.own) {
            return true;
        }
        self.lost.store(true, Ordering::SeqCst);
        false
    }

    /// Replaces the file `name` of the lock's folder with `bytes`, whole,
    /// if and only if the lock is held throughout and the file is still
    /// `read` (`None`: it did not exist). The bytes are written to a fresh
    /// owner-only file beside it and synced; the lock is checked; the new
    /// file is exchanged with the old one (`renameat2(RENAME_EXCHANGE)`,
    /// never following a link) and the check made again, with the old
    /// file's content compared with `read`. When a check fails, the other
    /// writer's file is put back (when it changed) and the outcome is
    /// [`Replaced::LostRace`], never [`Replaced::Done`].
    pub fn replace(&self, name: &OsStr, read: Option<&[u8]>, bytes: &[u8]) -> io::Result<Replaced> {
        let dir = open_folder(&self.folder)?;
        let temporary = aside_name(name, "tmp");
        let ours = write_new(&dir, &temporary, bytes)?;
        stall_point("written");
        if !self.holds() {
            remove(&dir, &temporary);
            return Ok(Replaced::LostRace(self.lost_before()));
        }
        stall_point("checked");
        let exchanged = match swap_in(&dir, &temporary, name, read.is_some()) {
            Ok(exchanged) => exchanged,
            Err(error) => {
                remove(&dir, &temporary);
                return match error.raw_os_error().map(Errno::from_raw_os_error) {
                    Some(Errno::EXIST) => Ok(Replaced::LostRace(format!(
                        "{} was created by another writer meanwhile; nothing written",
                        name.to_string_lossy()
                    ))),
                    Some(Errno::NOENT) => Ok(Replaced::LostRace(format!(
                        "{} was removed by another writer meanwhile; nothing written",
                        name.to_string_lossy()
                    ))),
                    _ => Err(error),
                };
            }
        };
        stall_point("replaced");
        let unchanged = match (read, exchanged) {
            (Some(read), true) => content_is(&dir, &temporary, read),
            _ => true,
        };
        if self.holds() && unchanged {
            if exchanged {
                remove(&dir, &temporary);
            }
            return Ok(Replaced::Done);
        }
        if !exchanged {
            return Ok(Replaced::LostRace(self.lost_after()));
        }
        if unchanged {
            // The old file is what was read: nothing of another writer's
            // is in it to keep.
            remove(&dir, &temporary);
            return Ok(Replaced::LostRace(self.lost_after()));
        }
        Ok(Replaced::LostRace(give_back(&dir, &temporary, name, &ours)))
    }

    fn lost_before(&self) -> String {
        format!(
            "the lock {} was taken over (found stale) or removed while the bridge held it; \
             nothing written",
            self.name.to_string_lossy()
        )
    }

    fn lost_after(&self) -> String {
        format!(
            "the lock {} was taken over (found stale) or removed while the file was replaced; \
             the write is not confirmed",
            self.name.to_string_lossy()
        )
    }
}

impl Drop for FolderLock {
    /// Stops the keeper, then removes the lock folder if it is still ours:
    /// renamed aside first, removed only if it is the folder we created
    /// (else put back), so a lock another process took is never removed.
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            drop(keeper.stop);
            let _ = keeper.thread.join();
        }
        stall_point("release");
        if !self.holds() {
            return;
        }
        let Ok(dir) = open_folder(&self.folder) else {
            return;
        };
        let aside = aside_name(&self.name, "released");
        if rustix::fs::renameat(&dir, &self.name, &dir, &aside).is_err() {
            return;
        }
        if is_ours(&self.folder.join(&aside), &self.own) {
            let _ = rustix::fs::unlinkat(&dir, &aside, AtFlags::REMOVEDIR);
        } else {
            put_back(&dir, &aside, &self.name);
        }
    }
}

/// Whether `path` (not followed if a link) is the folder `own` is open on.
fn is_ours(path: &Path, own: &OwnedFd) -> bool {
    let (Ok(there), Ok(mine)) = (rustix::fs::lstat(path), rustix::fs::fstat(own)) else {
        return false;
    };
    there.st_dev == mine.st_dev && there.st_ino == mine.st_ino
}

/// Sets the lock folder's mtime (and atime) to now.
fn refresh(own: &OwnedFd) -> io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let times = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    Ok(rustix::fs::futimens(own, &times)?)
}

/// Writes `bytes` to the new owner-only file `name` (never through a link)
/// and syncs it; its identity (device, inode).
fn write_new(dir: &OwnedFd, name: &OsStr, bytes: &[u8]) -> io::Result<(u64, u64)> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::from_raw_mode(0o600),
    )?);
    let written = (&file).write_all(bytes).and_then(|()| file.sync_data());
    let stat = rustix::fs::fstat(&file);
    drop(file);
    match (written, stat) {
        (Ok(()), Ok(stat)) => Ok((stat.st_dev, stat.st_ino)),
        (Err(e), _) => {
            remove(dir, name);
            Err(e)
        }
        (_, Err(e)) => {
            remove(dir, name);
            Err(e.into())
        }
    }
}

/// Puts `temporary` in `name`'s place: exchanged with the file there when
/// `existed` (`true` then: the old file is at `temporary`), or renamed to
/// it only if nothing is there (`EEXIST` otherwise). A file system without
/// exchanges gets a plain rename (`false`: the old file is gone).
fn swap_in(dir: &OwnedFd, temporary: &OsStr, name: &OsStr, existed: bool) -> io::Result<bool> {
    if !existed {
        rustix::fs::renameat_with(dir, temporary, dir, name, RenameFlags::NOREPLACE)?;
        return Ok(false);
    }
    match rustix::fs::renameat_with(dir, temporary, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(true),
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            rustix::fs::renameat(dir, temporary, dir, name)?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the regular file `name` holds exactly `expected` (read at most
/// one byte more; never through a link).
fn content_is(dir: &OwnedFd, name: &OsStr, expected: &[u8]) -> bool {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
        return false;
    };
    let file = File::from(fd);
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut bytes = Vec::with_capacity(expected.len());
    let limit = expected.len() as u64 + 1;
    if (&file).take(limit).read_to_end(&mut bytes).is_err() {
        return false;
    }
    bytes == expected
}

/// Another writer's file was at `name` when ours was exchanged in (it is at
/// `temporary` now): exchanged back if ours is still at `name`, and ours
/// removed. What happened, for the caller's report.
fn give_back(dir: &OwnedFd, temporary: &OsStr, name: &OsStr, ours: &(u64, u64)) -> String {
    let is_ours = |at: &OsStr| {
        rustix::fs::statat(dir, at, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| (s.st_dev, s.st_ino) == *ours)
    };
    let file = name.to_string_lossy();
    if is_ours(name)
        && rustix::fs::renameat_with(dir, temporary, dir, name, RenameFlags::EXCHANGE).is_ok()
    {
        if is_ours(temporary) {
            remove(dir, temporary);
        }
        return format!(
            "{file} was written by another writer while the bridge held its lock (taken over \
             as stale, or not taken); their file is kept, nothing written"
        );
    }
    format!(
        "{file} was written by another writer while the bridge held its lock, and again since; \
         their earlier file is kept as {}",
        temporary.to_string_lossy()
    )
}

/// Removes the file `name`, if it can.
fn remove(dir: &OwnedFd, name: &OsStr) {
    let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team() -> (tempfile::TempDir, Folder) {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::ensure(&dir.path().join("inboxes")).unwrap();
        (dir, folder)
    }

    fn age(path: &Path, by: Duration) {
        let old = std::time::SystemTime::now() - by;
        let dir = File::open(path).unwrap();
        dir.set_times(
            std::fs::FileTimes::new()
                .set_modified(old)
                .set_accessed(old),
        )
        .unwrap();
    }

    fn listing(folder: &Folder) -> Vec<OsString> {
        let mut names: Vec<OsString> = std::fs::read_dir(folder.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_folder_lock_is_exclusive_and_a_stale_one_is_taken_over() {
        let (_dir, folder) = team();
        let name = OsStr::new("worker.json.lock");
        let long = Duration::from_secs(60);
        let held = folder.lock_folder(name, long, long).unwrap();
        let short = Duration::from_millis(50);
        let busy = folder.lock_folder(name, long, short).unwrap_err();
        assert_eq!(busy.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        assert!(listing(&folder).is_empty(), "{:?}", listing(&folder));
        // A crashed holder's: older than `stale`, it is taken over.
        std::fs::create_dir(folder.join(name)).unwrap();
        age(&folder.join(name), Duration::from_secs(30));
        let taken = folder.lock_folder(name, Duration::from_secs(10), long);
        assert!(taken.as_ref().is_ok_and(FolderLock::holds));
        drop(taken);
        assert!(listing(&folder).is_empty(), "{:?}", listing(&folder));
        // Not a lock folder: said, not waited on.
        std::fs::write(folder.join(name), "x").unwrap();
        let planted = folder.lock_folder(name, long, long).unwrap_err();
        assert_eq!(planted.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_held_lock_stays_fresh_and_knows_when_it_is_taken() {
        let (_dir, folder) = team();
        let name = OsStr::new("worker.json.lock");
        let path = folder.join(name);
        let stale = Duration::from_millis(400);
        let held = folder.lock_folder(name, stale, stale).unwrap();
        age(&path, Duration::from_secs(30));
        // The keeper sets it to now within half the stale time.
        let started = Instant::now();
        while std::fs::metadata(&path)
            .unwrap()
            .modified()
            .unwrap()
            .elapsed()
            .unwrap()
            > stale
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never refreshed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(held.holds());
        // Taken over as proper-lockfile does (rmdir, mkdir): not ours any
        // more, and never removed by us.
        std::fs::remove_dir(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let theirs = std::fs::metadata(&path).unwrap().ino();
        assert!(!held.holds());
        let file = OsStr::new("worker.json");
        let replaced = held.replace(file, None, b"[]\n").unwrap();
        assert!(matches!(replaced, Replaced::LostRace(_)), "{replaced:?}");
        assert!(!folder.join(file).exists());
        drop(held);
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), theirs);
        assert_eq!(listing(&folder), [name]);
    }

    #[test]
    fn a_replace_never_overwrites_a_file_changed_since_it_was_read() {
        let (_dir, folder) = team();
        let file = OsStr::new("worker.json");
        std::fs::write(folder.join(file), "[1]").unwrap();
        let held = folder
            .lock_folder(
                OsStr::new("worker.json.lock"),
                Duration::from_secs(10),
                Duration::from_secs(10),
            )
            .unwrap();
        assert_eq!(
            held.replace(file, Some(b"[1]"), b"[1,2]").unwrap(),
            Replaced::Done
        );
        assert_eq!(std::fs::read(folder.join(file)).unwrap(), b"[1,2]");
        // A writer that takes no lock wrote since the read: theirs is kept.
        std::fs::write(folder.join(file), "[1,2,3]").unwrap();
        let replaced = held.replace(file, Some(b"[1,2]"), b"[1,2,4]").unwrap();
        assert!(matches!(replaced, Replaced::LostRace(_)), "{replaced:?}");
        assert_eq!(std::fs::read(folder.join(file)).unwrap(), b"[1,2,3]");
        // Created meanwhile: not replaced either.
        let other = OsStr::new("other.json");
        std::fs::write(folder.join(other), "[9]").unwrap();
        let replaced = held.replace(other, None, b"[]").unwrap();
        assert!(matches!(replaced, Replaced::LostRace(_)), "{replaced:?}");
        assert_eq!(std::fs::read(folder.join(other)).unwrap(), b"[9]");
        drop(held);
        assert_eq!(
            listing(&folder),
            [OsString::from("other.json"), OsString::from("worker.json")]
        );
    }
}
