//! Blocking `watch` and `wait-reply` across processes, without burning CPU.
//!
//! The engine's [`Waiter`] decides what to poll and when; this module only
//! sleeps between polls until another process commits or the waiter's next
//! instant comes. A commit is detected with `PRAGMA data_version`, which
//! changes on a connection when any *other* connection commits. To learn
//! *when* to look:
//!
//! - on Linux, inotify on the database's folder reports every write to the
//!   `-wal` file. A write can be seen before its commit is visible, so each
//!   notification is confirmed with `data_version`, re-checked briefly with
//!   growing pauses, and a slow safety poll covers anything missed;
//! - elsewhere, `data_version` is polled with an adaptive interval.
//!
//! The watch is armed before the first poll, so a commit that lands between
//! the first query and the first sleep is never missed. No read transaction
//! is held while sleeping. This module must never decide what matches a
//! wait; that is the engine's.

use std::path::Path;
use std::time::{Duration, Instant};

use inbox_engine::{Clock, Engine, IdSource, Request, Response, WaitStep, Waiter};

use crate::store::SqliteStore;

/// How often to look even without a notification.
const SAFETY_POLL: Duration = Duration::from_millis(500);

/// Blocks in `watch` or `wait-reply` until it wakes, times out or fails, and
/// returns the response to print. `db_path` is the database file.
pub fn wait<C: Clock, I: IdSource>(
    engine: &mut Engine<SqliteStore, C, I>,
    request: Request,
    db_path: &Path,
) -> Response {
    let mut watcher = ChangeWatcher::arm(db_path);
    let mut waiter = match Waiter::new(request) {
        Ok(waiter) => waiter,
        Err(response) => return *response,
    };
    let mut seen = data_version(engine.store());
    loop {
        match waiter.poll(engine) {
            WaitStep::Finished(response) => return response,
            WaitStep::Pending { until } => {
                let millis = until
                    .as_millis()
                    .saturating_sub(engine.now().as_millis())
                    .max(0);
                let deadline = Instant::now() + Duration::from_millis(millis.unsigned_abs());
                watcher.wait(engine.store(), &mut seen, deadline);
            }
        }
    }
}

/// `PRAGMA data_version` of the store's connection; `None` if it cannot be
/// read (the next poll then reports the store's error).
pub fn data_version(store: &SqliteStore) -> Option<i64> {
    store
        .connection()
        .query_row("PRAGMA data_version", [], |row| row.get(0))
        .ok()
}

/// Sleeps until another connection commits or a deadline passes.
pub struct ChangeWatcher {
    #[cfg(target_os = "linux")]
    inotify: Option<linux::Inotify>,
    /// The adaptive poll interval when there is no inotify.
    interval: Duration,
}

impl ChangeWatcher {
    /// Starts watching the database at `db_path`. Never fails: without
    /// inotify it falls back to polling.
    pub fn arm(db_path: &Path) -> ChangeWatcher {
        ChangeWatcher {
            #[cfg(target_os = "linux")]
            inotify: linux::Inotify::watch(db_path).ok(),
            interval: Duration::from_millis(1),
        }
    }

    /// Whether commits are noticed by notification (inotify) rather than by polling.
    pub fn notifies(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inotify.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Returns when `store`'s `data_version` differs from `seen` (updating
    /// it) or at `deadline`, whichever comes first.
    pub fn wait(&mut self, store: &SqliteStore, seen: &mut Option<i64>, deadline: Instant) {
        loop {
            let version = data_version(store);
            if version != *seen || version.is_none() {
                *seen = version;
                self.interval = Duration::from_millis(1);
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            #[cfg(target_os = "linux")]
            if let Some(inotify) = &mut self.inotify {
                if inotify.wait(left.min(SAFETY_POLL)) {
                    // The write that woke us may not be committed yet:
                    // re-check for a few milliseconds before sleeping again.
                    if confirm(store, seen, deadline) {
                        return;
                    }
                }
                continue;
            }
            // No notifications: poll, backing off from 1 ms to the safety poll.
            std::thread::sleep(self.interval.min(left));
            self.interval = (self.interval * 2).min(SAFETY_POLL);
        }
    }
}

/// After a notification, looks for the commit with pauses of 50 µs doubling
/// up to about 13 ms in all.
#[cfg(target_os = "linux")]
fn confirm(store: &SqliteStore, seen: &mut Option<i64>, deadline: Instant) -> bool {
    let mut pause = Duration::from_micros(50);
    for _ in 0..9 {
        let version = data_version(store);
        if version != *seen {
            *seen = version;
            return true;
        }
        if Instant::now() + pause >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause *= 2;
    }
    false
}

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::OsString;
    use std::mem::MaybeUninit;
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::time::Duration;

    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

    /// An inotify watch on the database's folder, filtered to its files.
    pub(super) struct Inotify {
        fd: OwnedFd,
        /// The database file name; its `-wal`, `-shm` and `-journal` share the prefix.
        name: OsString,
    }

    impl Inotify {
        pub(super) fn watch(db_path: &Path) -> std::io::Result<Inotify> {
            let dir = match db_path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            let name = db_path
                .file_name()
                .map(|n| n.to_os_string())
                .unwrap_or_default();
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
            inotify::add_watch(
                &fd,
                dir,
                WatchFlags::MODIFY
                    | WatchFlags::CREATE
                    | WatchFlags::MOVED_TO
                    | WatchFlags::CLOSE_WRITE,
            )?;
            Ok(Inotify { fd, name })
        }

        /// Blocks up to `timeout` for writes to the database's files; true if
        /// there were any.
        pub(super) fn wait(&mut self, timeout: Duration) -> bool {
            let timespec = Timespec {
                tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(0) => false,
                Ok(_) => self.drain(),
                // Interrupted or failed: let the caller re-check.
                Err(_) => true,
            }
        }

        /// Reads every pending event; true if one concerned the database.
        fn drain(&mut self) -> bool {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            let mut relevant = false;
            loop {
                match reader.next() {
                    Ok(event) => {
                        let name = event.file_name().map(|n| n.to_bytes()).unwrap_or_default();
                        if name.starts_with(self.name.as_bytes()) {
                            relevant = true;
                        }
                    }
                    // EAGAIN: drained. Anything else: stop and re-check.
                    Err(_) => return relevant,
                }
            }
        }
    }
}
