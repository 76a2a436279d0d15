//! The native process's clock and id seed.
//!
//! [`HostClock`] is the system clock, or, when `INBOX_NOW` names an instant,
//! a clock that starts there and runs at real speed: tests and demos use it to
//! place commands at chosen times (a lease "ten minutes later") while waits
//! and timeouts still elapse normally. This module must never be used by the
//! engine itself; it is how a host injects time.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use inbox_engine::{Clock, Timestamp, UlidIds};

/// The environment variable that starts [`HostClock`] at a chosen instant.
pub const NOW_ENV: &str = "INBOX_NOW";

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

    /// [`HostClock::starting_at`] the instant in `INBOX_NOW` if it is set,
    /// else the system clock. A value that does not parse is an error, so a
    /// typo never silently runs on real time.
    pub fn from_env() -> Result<HostClock, inbox_engine::TimestampError> {
        match std::env::var(NOW_ENV) {
            Ok(text) if !text.is_empty() => Timestamp::parse(&text).map(HostClock::starting_at),
            _ => Ok(HostClock::system()),
        }
    }
}

impl Clock for HostClock {
    fn now(&mut self) -> Timestamp {
        match self.start {
            Some((start, at)) => {
                let elapsed = i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX);
                start.plus_millis(elapsed)
            }
            None => {
                let millis = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                Timestamp::from_millis(millis)
            }
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

/// Production ids, seeded from [`os_seed`].
pub fn host_ids() -> UlidIds {
    UlidIds::from_seed(os_seed())
}
