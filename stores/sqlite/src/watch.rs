//! Blocking `watch` and `wait-reply` across processes, without burning CPU.
//!
//! The engine's [`Waiter`] decides what to poll and when; this module only
//! sleeps between polls until another process commits or the waiter's next
//! instant comes. A commit is detected with `PRAGMA data_version`, which
//! changes on a connection when any *other* connection commits. To learn
//! *when* to look:
//!
//! - on Linux, inotify on the database's folder reports every write to the
//!   `-wal` file (the folder, not the file, so a WAL that is recreated is still
//!   seen). A write can be seen before its commit is visible, so each
//!   notification is chased with `data_version` looks at growing pauses
//!   until the commit shows (up to 250 ms), and a slow safety poll covers
//!   anything missed;
//! - elsewhere, `data_version` is polled with an adaptive interval.
//!
//! The watch is armed before the first poll, so a commit that lands between
//! the first query and the first sleep is never missed. No read transaction
//! is held while sleeping. A host that serves many requests in one process
//! (the MCP server) can also stop a wait from outside ([`wait_or_stop`]),
//! when its client cancels the call. This module must never decide what
//! matches a wait; that is the engine's.

use std::path::Path;
use std::time::{Duration, Instant};

use inbox_engine::{Call, Executor, Response, WaitStep, Waiter};

use crate::store::SqliteStore;

/// How often to look even without a notification.
const SAFETY_POLL: Duration = Duration::from_millis(500);

/// How often a wait that can be stopped asks whether it should stop: short
/// enough that a cancelled call ends at once as people and clients see it,
/// long enough that asking costs nothing.
pub const STOP_CHECK: Duration = Duration::from_millis(50);

/// Blocks in `watch` or `wait-reply` until it wakes, times out or fails, and
/// returns the response to print. `watcher` must have been armed on the
/// engine's database before this call (see [`ChangeWatcher::arm`]); a host
/// that waits again can reuse it.
///
/// `engine` is anything that executes requests over the database: the
/// built-in [`inbox_engine::Engine`], or an engine component in a sandbox; `store` finds
/// its SQLite store, whose connection is watched.
pub fn wait<E: Executor>(
    engine: &mut E,
    store: fn(&E) -> &SqliteStore,
    call: impl Into<Call>,
    watcher: &mut ChangeWatcher,
) -> Response {
    match wait_until(engine, store, call.into(), watcher, None) {
        Some(response) => response,
        // Without a `stop`, only the waiter ends the wait.
        None => Response::failure(
            None,
            inbox_engine::EngineError::Internal {
                message: "a wait without a stop was stopped".into(),
            },
        ),
    }
}

/// [`wait`], which also returns `None` soon (within [`STOP_CHECK`]) after
/// `stop` starts answering true: for a host whose client may cancel a call
/// while it waits. What the wait did until then stays done (a renewed
/// lease, a recorded lapse), as when a waiting CLI process is killed.
pub fn wait_or_stop<E: Executor>(
    engine: &mut E,
    store: fn(&E) -> &SqliteStore,
    call: impl Into<Call>,
    watcher: &mut ChangeWatcher,
    stop: &dyn Fn() -> bool,
) -> Option<Response> {
    wait_until(engine, store, call.into(), watcher, Some(stop))
}

fn wait_until<E: Executor>(
    engine: &mut E,
    store: fn(&E) -> &SqliteStore,
    call: Call,
    watcher: &mut ChangeWatcher,
    stop: Option<&dyn Fn() -> bool>,
) -> Option<Response> {
    let stopped = || stop.is_some_and(|stop| stop());
    let mut waiter = match Waiter::for_call(call) {
        Ok(waiter) => waiter,
        Err(response) => return Some(*response),
    };
    let mut seen = data_version(store(engine));
    // A wait whose look records (orch's) runs statements on its wake that
    // its first look did not: prepare them while it sleeps.
    let mut prepare_ahead = waiter.command().records_first();
    loop {
        // A wait outlives many commands of other processes: before each
        // look, make sure the database is still the file it opened.
        if let Err(error) = store(engine).check_files() {
            let command = waiter.command().as_str().to_owned();
            return Some(Response::failure(
                Some(command),
                inbox_engine::EngineError::Store(error),
            ));
        }
        match waiter.poll(engine) {
            WaitStep::Finished(response) => return Some(response),
            WaitStep::Pending { within } => {
                if std::mem::take(&mut prepare_ahead) {
                    store(engine).prepare_ahead();
                }
                let deadline = Instant::now() + within;
                watcher.sleep_until(store(engine), &mut seen, deadline, stop);
            }
        }
        if stopped() {
            return None;
        }
    }
}

/// `PRAGMA data_version` of the store's connection; `None` if it cannot be
/// read (the next poll then reports the store's error). The statement is
/// cached: a wait looks about ten times between two commits it wakes for,
/// and compiling it afresh took a quarter of each look (3.2 µs against
/// 2.4 µs in a loop).
pub fn data_version(store: &SqliteStore) -> Option<i64> {
    store
        .connection()
        .prepare_cached("PRAGMA data_version")
        .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
        .ok()
}

/// Sleeps until another connection commits or a deadline passes.
///
/// The inotify watch exists only while the watcher sleeps: tearing down a
/// watch makes the kernel wait for an RCU grace period (about 9 ms at the
/// median, up to 18 ms, measured on Linux 6.18), and when that happens at
/// process exit, a waiting CLI process answers late. Removing the watch as
/// soon as the sleep ends lets that wait run while the process still works on
/// its answer; the watch is added again before the next sleep, and before the
/// next look at `data_version`, so no commit can slip between the two.
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
        self.sleep_until(store, seen, deadline, None);
    }

    /// [`ChangeWatcher::wait`], which also returns soon after `stop`
    /// starts answering true.
    fn sleep_until(
        &mut self,
        store: &SqliteStore,
        seen: &mut Option<i64>,
        deadline: Instant,
        stop: Option<&dyn Fn() -> bool>,
    ) {
        #[cfg(target_os = "linux")]
        if let Some(inotify) = &mut self.inotify
            && inotify.arm().is_err()
        {
            // Cannot watch any more: poll from here on.
            self.inotify = None;
        }
        self.sleep(store, seen, deadline, stop);
        #[cfg(target_os = "linux")]
        if let Some(inotify) = &mut self.inotify {
            inotify.disarm();
        }
    }

    fn sleep(
        &mut self,
        store: &SqliteStore,
        seen: &mut Option<i64>,
        deadline: Instant,
        stop: Option<&dyn Fn() -> bool>,
    ) {
        let mut first = true;
        // Without a stop, sleeps last as long as they did before stops
        // existed; with one, no sleep outlasts a check.
        let slice = if stop.is_some() {
            STOP_CHECK
        } else {
            SAFETY_POLL
        };
        loop {
            if stop.is_some_and(|stop| stop()) {
                return;
            }
            let version = data_version(store);
            if version != *seen || version.is_none() {
                *seen = version;
                self.interval = Duration::from_millis(1);
                return;
            }
            let now = Instant::now();
            // The database's files deleted or replaced: back to the caller,
            // which stops the wait with the reason.
            if now >= deadline || store.check_files().is_err() {
                return;
            }
            // A commit whose WAL write came before the watch was armed, but
            // which is not visible yet (its writer is still syncing the WAL),
            // sends no further notification: making it visible touches only
            // the mmap'd `-shm`. Such a wake used to wait for the safety
            // poll (a 502 ms max in the full-durability benchmark), so a WAL
            // written moments ago is chased as if a notification had come.
            #[cfg(target_os = "linux")]
            if std::mem::take(&mut first)
                && let Some(inotify) = &mut self.inotify
                && inotify.wal_written_within(CONFIRM_BUDGET)
                && confirm(inotify, store, seen, deadline)
            {
                return;
            }
            let left = deadline - now;
            #[cfg(target_os = "linux")]
            if let Some(inotify) = &mut self.inotify {
                if inotify.wait(left.min(slice)) {
                    // The write that woke us may not be committed yet:
                    // chase it before sleeping again.
                    if confirm(inotify, store, seen, deadline) {
                        return;
                    }
                }
                continue;
            }
            // No notifications: poll, backing off from 1 ms to the safety poll.
            std::thread::sleep(self.interval.min(left).min(slice));
            self.interval = (self.interval * 2).min(SAFETY_POLL);
        }
    }
}

/// How long a notification is chased before going back to sleep. A write
/// to the WAL comes before its commit is visible: with an fsync per commit,
/// the writer syncs the WAL between the two, and a sync on a loaded machine
/// can take tens of milliseconds. Giving up sooner turned such wakes into
/// the 500 ms safety poll.
#[cfg(target_os = "linux")]
const CONFIRM_BUDGET: Duration = Duration::from_millis(250);

/// The longest pause between two looks while chasing a notification.
#[cfg(target_os = "linux")]
const CONFIRM_MAX_PAUSE: Duration = Duration::from_millis(4);

/// After a notification, looks for the commit with pauses of 50 µs doubling
/// up to 4 ms, for up to [`CONFIRM_BUDGET`]; a further write ends a pause at
/// once and starts the chase over. Each look is one `PRAGMA data_version` (a few µs), so chasing a
/// write that never commits (a rollback, a checkpoint truncating the WAL, a
/// writer killed mid-transaction) costs about 70 looks.
#[cfg(target_os = "linux")]
fn confirm(
    inotify: &mut linux::Inotify,
    store: &SqliteStore,
    seen: &mut Option<i64>,
    deadline: Instant,
) -> bool {
    const FIRST_PAUSE: Duration = Duration::from_micros(50);
    let mut give_up = (Instant::now() + CONFIRM_BUDGET).min(deadline);
    let mut pause = FIRST_PAUSE;
    loop {
        let version = data_version(store);
        if version != *seen {
            *seen = version;
            return true;
        }
        if Instant::now() + pause >= give_up {
            return false;
        }
        if inotify.wait(pause) {
            // A new write: its commit follows within microseconds (or one
            // sync), so chase it from the shortest pause and a fresh budget,
            // not at the pace the chase had slowed to.
            pause = FIRST_PAUSE;
            give_up = (Instant::now() + CONFIRM_BUDGET).min(deadline);
        } else {
            pause = (pause * 2).min(CONFIRM_MAX_PAUSE);
        }
    }
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
    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

    /// An inotify watch on the database's folder, filtered to its WAL (and
    /// to its files going away).
    pub(super) struct Inotify {
        fd: OwnedFd,
        /// The watched folder.
        dir: std::path::PathBuf,
        /// The watch, while armed.
        watch: Option<i32>,
        /// The WAL's file name (`coord.db-wal`). Commits become visible only
        /// through it; writes to `-shm` (a process opening the database) or
        /// to the database file (a checkpoint) never carry new data, and
        /// waking on them made the confirmation below overshoot.
        wal: OsString,
        /// The database's three file names: deleting or moving any of them
        /// wakes the waiter, which then stops (see `SqliteStore::check_files`).
        names: [OsString; 3],
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
            let with = |suffix: &str| {
                let mut name = name.clone();
                name.push(suffix);
                name
            };
            let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
            let mut inotify = Inotify {
                fd,
                dir: dir.to_path_buf(),
                watch: None,
                wal: with("-wal"),
                names: [name.clone(), with("-wal"), with("-shm")],
            };
            inotify.arm()?;
            Ok(inotify)
        }

        /// Adds the watch if it is not there.
        pub(super) fn arm(&mut self) -> std::io::Result<()> {
            if self.watch.is_none() {
                let flags = WatchFlags::MODIFY
                    | WatchFlags::CREATE
                    | WatchFlags::MOVED_TO
                    | WatchFlags::CLOSE_WRITE
                    | WatchFlags::DELETE
                    | WatchFlags::MOVED_FROM;
                self.watch = Some(inotify::add_watch(&self.fd, &self.dir, flags)?);
            }
            Ok(())
        }

        /// Whether the WAL was written in the last `window` (by its
        /// modification time).
        pub(super) fn wal_written_within(&self, window: Duration) -> bool {
            std::fs::metadata(self.dir.join(&self.wal))
                .and_then(|m| m.modified())
                .ok()
                .and_then(crate::clock::age_millis)
                .is_some_and(|age| u128::from(age) <= window.as_millis())
        }

        /// Removes the watch. The call is cheap; the kernel's slow part (an
        /// RCU grace period) then runs in the background.
        pub(super) fn disarm(&mut self) {
            if let Some(watch) = self.watch.take() {
                let _ = inotify::remove_watch(&self.fd, watch);
                // Events still queued belong to the old watch: stale now.
                self.drain();
            }
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

        /// Reads every pending event; true if one concerned the WAL.
        fn drain(&mut self) -> bool {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            let mut relevant = false;
            loop {
                match reader.next() {
                    Ok(event) => {
                        let name = event.file_name().map(|n| n.to_bytes()).unwrap_or_default();
                        let gone = event
                            .events()
                            .intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM);
                        if name == self.wal.as_bytes()
                            || (gone && self.names.iter().any(|n| n.as_bytes() == name))
                        {
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
