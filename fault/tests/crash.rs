//! The crash check in its bounded CI mode: concurrent `inbox` processes of a
//! mixed workload, about a third of them SIGKILLed at random moments, 200
//! iterations, the database audited after each (see `inbox_fault::crash`).
//! `INBOX_FAULT_LONG=1` runs thousands of iterations; `INBOX_FAULT_ITERATIONS`
//! sets the count.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use inbox_fault::crash::{self, CrashConfig};

#[test]
fn killed_processes_never_lose_an_acknowledged_command_nor_break_an_invariant() {
    let seed = common::seed("--test crash");
    let mut config = if common::long() {
        CrashConfig::long(seed)
    } else {
        CrashConfig::short(seed)
    };
    if let Some(n) = common::env_number("INBOX_FAULT_ITERATIONS") {
        config.iterations = n as usize;
    }
    let report =
        crash::run(&common::inbox(), &config).unwrap_or_else(|failure| panic!("{failure}"));
    eprintln!("{report}");
    assert_eq!(
        report.iterations, config.iterations,
        "every iteration ran and was audited"
    );
    assert!(
        report.killed * 10 >= report.processes,
        "too few kills landed for the run to prove anything: {report}"
    );
    assert!(
        report.writes_verified * 10 >= report.processes,
        "too few acknowledged writes to check: {report}"
    );
}
