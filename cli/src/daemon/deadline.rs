//! A call's deadline, on the one clock a command and its daemon both read,
//! and the daemon's check of it: the moment after which the daemon may
//! neither begin the call nor commit it, so that a command that stopped
//! waiting can say truthfully that the call will never run.
//!
//! The clock is `CLOCK_MONOTONIC`: one clock for every process on the
//! machine, never set and never stepped, unless a process sits in another
//! time namespace (Linux 5.6 lets a namespace offset it), so each end says
//! which one it reads ([`clock`]) and the daemon serves only calls on its
//! own. This module must never decide anything about a call beyond "too
//! late" and "its command is gone".

use std::os::unix::net::UnixStream;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use serde::{Deserialize, Serialize};

/// A moment on `CLOCK_MONOTONIC`, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Moment(u64);

impl Moment {
    /// Now.
    pub(crate) fn now() -> Moment {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let secs = u64::try_from(now.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
        Moment(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }

    /// `wait` after this moment.
    pub(crate) fn after(self, wait: Duration) -> Moment {
        let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        Moment(self.0.saturating_add(wait))
    }

    /// How long until this moment; `None` once it has come.
    pub(crate) fn left(self) -> Option<Duration> {
        let now = Moment::now();
        (now < self).then(|| Duration::from_nanos(self.0 - now.0))
    }

    /// Whether this moment has come.
    pub(crate) fn passed(self) -> bool {
        self.left().is_none()
    }
}

/// Which `CLOCK_MONOTONIC` this process reads: its time namespace, empty on
/// a kernel without them (where every process reads the same one).
pub(crate) fn clock() -> String {
    std::fs::read_link("/proc/self/ns/time")
        .map(|ns| ns.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The call the daemon is running, watched by its database connection's
/// commit hook: a commit at or after the call's deadline, or after its
/// command went away, is turned into a rollback, so that whatever held the
/// call up (a queue, SQLite's lock, a slow disk, a stopped daemon) it is
/// never applied once its command may have said it might not have run.
#[derive(Default)]
pub(crate) struct Guard {
    watched: Mutex<Watched>,
}

/// What the guard watches.
#[derive(Default)]
struct Watched {
    /// The call being run: its deadline, and the daemon's own handle on
    /// its command's connection.
    call: Option<(Moment, UnixStream)>,
    /// Why a commit of the call was turned into a rollback, if one was.
    refused: Option<&'static str>,
}

impl Guard {
    /// Watches the call with `deadline` from `command` until [`Guard::end`].
    pub(crate) fn start(&self, deadline: Moment, command: UnixStream) {
        *self.lock() = Watched {
            call: Some((deadline, command)),
            refused: None,
        };
    }

    /// Stops watching; why a commit of the call was refused, if one was.
    pub(crate) fn end(&self) -> Option<&'static str> {
        std::mem::take(&mut *self.lock()).refused
    }

    /// The commit hook: `true` (roll back) if the call being run may no
    /// longer be applied. Commits outside a call (opening the database,
    /// migrating it) go ahead. Never panics: SQLite's hook takes a panic
    /// for "commit".
    pub(crate) fn refuses_commit(&self) -> bool {
        let mut watched = self.lock();
        let why = watched
            .call
            .as_ref()
            .and_then(|(deadline, command)| too_late(*deadline, command));
        if why.is_some() {
            watched.refused = why;
        }
        why.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why a call with `deadline` from `command` may no longer begin or be
/// committed: its deadline came, or its command hung up (killed, or gone
/// for another reason: nobody is left to tell what happened).
pub(crate) fn too_late(deadline: Moment, command: &UnixStream) -> Option<&'static str> {
    if deadline.passed() {
        Some("its deadline passed before it could run")
    } else if hung_up(command) {
        Some("its command went away before it could run")
    } else {
        None
    }
}

/// Whether the other end of `stream` closed it: a look that does not wait.
/// When the look fails, the command counts as gone: a call is refused
/// rather than applied for nobody.
fn hung_up(stream: &UnixStream) -> bool {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        let mut fds = [PollFd::new(stream, PollFlags::empty())];
        match poll(&mut fds, Some(&zero)) {
            Ok(_) => return fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn moments_pass_and_a_closed_end_is_seen() {
        let soon = Moment::now().after(Duration::from_millis(30));
        assert!(!soon.passed());
        std::thread::sleep(Duration::from_millis(40));
        assert!(soon.passed());
        let (near, far) = UnixStream::pair().unwrap();
        let later = Moment::now().after(Duration::from_secs(60));
        assert_eq!(too_late(later, &far), None);
        drop(near);
        assert!(too_late(later, &far).is_some());
        assert!(too_late(soon, &far).is_some());
    }

    #[test]
    fn the_guard_refuses_only_during_a_call_that_is_too_late() {
        let guard = Guard::default();
        assert!(!guard.refuses_commit(), "no call: commits go ahead");
        let (_near, far) = UnixStream::pair().unwrap();
        guard.start(Moment::now().after(Duration::from_secs(60)), far);
        assert!(!guard.refuses_commit());
        assert_eq!(guard.end(), None);
        let (_near, far) = UnixStream::pair().unwrap();
        guard.start(Moment::now(), far);
        assert!(guard.refuses_commit());
        assert!(guard.end().unwrap().contains("deadline"));
        assert!(!guard.refuses_commit());
        let (near, far) = UnixStream::pair().unwrap();
        guard.start(Moment::now().after(Duration::from_secs(60)), far);
        drop(near);
        assert!(guard.refuses_commit());
        assert!(guard.end().unwrap().contains("went away"));
    }
}
