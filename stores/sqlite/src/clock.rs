//! The machine's wall clock as the kernel keeps it, for judging how old a
//! file's last write is and for the native host's clock (`HostClock` in
//! inbox-host-native).
//!
//! On Linux it is read from the kernel directly (the vDSO, through rustix),
//! not through the C library: every process on the machine then shares one
//! clock, the one the database's leases are judged by, and a time shim
//! preloaded into one process (`faketime`) cannot give that process a
//! clock of its own. This module must never decide anything from a time;
//! it only reads the clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// The machine's wall clock in milliseconds since the epoch, from the
/// kernel (see the module doc for why not through the C library).
#[cfg(target_os = "linux")]
pub fn now_millis() -> i64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    now.tv_sec
        .saturating_mul(1000)
        .saturating_add(now.tv_nsec / 1_000_000)
}

/// The machine's wall clock in milliseconds since the epoch.
#[cfg(not(target_os = "linux"))]
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How long ago `instant` (a file's modification time, which the kernel
/// stamps) was, by the kernel's clock, in milliseconds: how old a write is,
/// judged by the clock that stamped it, so that a process under faketime
/// judges it as every other process does. `None` when the instant is before
/// the epoch; 0 when it is in the future.
pub fn age_millis(instant: SystemTime) -> Option<u64> {
    let at = u64::try_from(instant.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let now = u64::try_from(now_millis()).unwrap_or(0);
    Some(now.saturating_sub(at))
}
