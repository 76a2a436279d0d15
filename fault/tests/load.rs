//! The load check in its bounded CI mode: 32 worker processes draining a
//! queue fed by producers for 20 s, every step its own `inbox` process (see
//! `inbox_fault::load`). `INBOX_FAULT_SECONDS` sets the duration;
//! `INBOX_FAULT_LONG=1` runs five minutes.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use inbox_fault::load::{self, LoadConfig};

#[test]
fn thirty_two_workers_never_see_a_locked_database_nor_a_double_claim() {
    let seed = common::seed("--test load");
    let mut config = if common::long() {
        LoadConfig::long(seed)
    } else {
        LoadConfig::short(seed)
    };
    if let Some(seconds) = common::env_number("INBOX_FAULT_SECONDS") {
        config.duration = Duration::from_secs(seconds);
    }
    let report = load::run(&common::inbox(), &config).unwrap_or_else(|failure| panic!("{failure}"));
    eprintln!("{report}");
    assert!(report.completed > 0, "no thread was completed: {report}");
    assert!(
        report.conflicts > 0,
        "workers never raced for a thread: {report}"
    );
}
