//! The native process's clock and id seed.
//!
//! [`HostClock`] is the system clock. In test builds only (debug
//! assertions on, as `cargo test` builds), `INBOX_NOW` starts it at a chosen
//! instant and lets it run at real speed from there: tests and scripts place
//! commands at chosen times (a lease "ten minutes later") while waits and
//! timeouts still elapse normally. A release build never honours it: one
//! process's invented time would expire every other agent's lease.
//! Waits measure their deadlines on the monotonic clock ([`Clock::ticks`]).
//!
//! On Linux the system clock is read from the kernel directly (the vDSO,
//! through rustix), not through the C library: every process on the machine
//! then shares one clock, the one the database's leases are judged by, and
//! a time shim preloaded into one process (`faketime`) cannot make that
//! process expire every other agent's lease. A wrong clock is then the
//! machine's, shared by every agent, and no process can have one of its own.
//! This module must never be used by the engine itself; it is how a host
//! injects time.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use inbox_engine::{Clock, Timestamp, UlidIds};

/// The environment variable that starts [`HostClock`] at a chosen instant
/// (test builds only).
pub const NOW_ENV: &str = "INBOX_NOW";

/// Whether this build honours [`NOW_ENV`]: builds with debug assertions
/// (the ones `cargo test` makes), never a release build.
const HONOURS_NOW_ENV: bool = cfg!(debug_assertions);

/// The wall clock, optionally shifted to start at a chosen instant.
#[derive(Clone, Copy, Debug)]
pub struct HostClock {
    start: Option<(Timestamp, Instant)>,
}

impl HostClock {
    /// The system clock.
    pub fn system() -> HostClock {
        HostClock { start: None }
    }

    /// A clock that reads `start` now and runs at real speed from there.
    pub fn starting_at(start: Timestamp) -> HostClock {
        HostClock {
            start: Some((start, Instant::now())),
        }
    }

    /// Whether this is the system clock, not one started at a chosen
    /// instant.
    pub fn is_system(&self) -> bool {
        self.start.is_none()
    }

    /// In a test build, [`HostClock::starting_at`] the instant in
    /// `INBOX_NOW` if it is set (a value that does not parse is an error, so
    /// a typo never silently runs on real time); otherwise, and always in a
    /// release build, the system clock.
    pub fn from_env() -> Result<HostClock, inbox_engine::TimestampError> {
        match std::env::var(NOW_ENV) {
            Ok(text) if !text.is_empty() && HONOURS_NOW_ENV => {
                Timestamp::parse(&text).map(HostClock::starting_at)
            }
            _ => Ok(HostClock::system()),
        }
    }

    /// What to tell the user when `INBOX_NOW` is set in a build that
    /// ignores it.
    pub fn ignored_override() -> Option<String> {
        (!HONOURS_NOW_ENV && std::env::var_os(NOW_ENV).is_some()).then(|| {
            format!("{NOW_ENV} is ignored: only test builds of inbox let a process choose its time")
        })
    }
}

impl Clock for HostClock {
    /// Milliseconds since the process first asked, on the monotonic clock.
    fn ticks(&mut self) -> u64 {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn now(&mut self) -> Timestamp {
        match self.start {
            Some((start, at)) => {
                let elapsed = i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX);
                start.plus_millis(elapsed)
            }
            None => Timestamp::from_millis(inbox_sqlite::clock::now_millis()),
        }
    }
}

/// 64 bits that differ between processes and calls: std's `RandomState` keys
/// come from the OS's random source, mixed here with the process id and the
/// time. Used to seed ids and jitter; it is not for secrets.
pub fn os_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// 32 bytes from the operating system's cryptographic random source
/// (`getrandom`), for a secret; `None` if it fails.
pub fn secret_bytes() -> Option<[u8; 32]> {
    let mut bytes = [0; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes)
}

/// Production ids, seeded from [`os_seed`], with secrets from
/// [`secret_bytes`].
pub fn host_ids() -> UlidIds {
    UlidIds::from_seed(os_seed()).with_secrets(secret_bytes)
}
