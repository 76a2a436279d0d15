//! What every test of the harness shares: the `inbox` binary under test
//! (built with `cargo build -p inbox-cli` first, so it is never stale), the
//! seed of a run, and the knobs that turn the short CI mode into the long
//! one:
//!
//! - `INBOX_FAULT_LONG=1`: every check and fuzz target in its long mode;
//! - `INBOX_FAULT_SEED=N`: replay a run (the seed is printed by every test);
//! - `INBOX_FAULT_ITERATIONS=N`, `INBOX_FAULT_SECONDS=N`: crash iterations,
//!   load duration;
//! - `PROPTEST_CASES=N`: cases of every fuzz target;
//! - `INBOX_FAULT_BIN=PATH`: test another binary instead of building one.

// Test helpers report failures by panicking.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    dead_code,
    unreachable_pub
)]

use std::sync::OnceLock;

use inbox_fault::Inbox;

/// The binary under test, built (or found up to date) once per test binary.
pub fn inbox() -> Inbox {
    static INBOX: OnceLock<Result<Inbox, String>> = OnceLock::new();
    INBOX
        .get_or_init(|| inbox_fault::locate_inbox(None, true))
        .clone()
        .unwrap_or_else(|e| panic!("cannot get the inbox binary: {e}"))
}

/// Whether the long mode was asked for.
pub fn long() -> bool {
    std::env::var("INBOX_FAULT_LONG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A number from the environment, if set.
pub fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text} is not a number")),
    )
}

/// The seed of this run: `INBOX_FAULT_SEED`, else a fresh one. Printed, with
/// the command that replays the test.
pub fn seed(test: &str) -> u64 {
    let seed = env_number("INBOX_FAULT_SEED").unwrap_or_else(inbox_fault::rng::fresh_seed);
    eprintln!(
        "{test}: seed {seed} (replay: INBOX_FAULT_SEED={seed} cargo test -p inbox-fault {test})"
    );
    seed
}

/// Proptest cases for a fuzz target: `PROPTEST_CASES` if set, else `short`
/// (times 50 in the long mode).
pub fn cases(short: u32) -> u32 {
    match env_number("PROPTEST_CASES") {
        Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        None if long() => short.saturating_mul(50),
        None => short,
    }
}
