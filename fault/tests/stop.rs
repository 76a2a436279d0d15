//! The stop check on the real clock: a worker SIGSTOPped past its lease and
//! resumed after another process reclaimed its thread is fenced off, whatever
//! it was about to do; a lease running out on the last attempt dead-letters
//! the thread; a writer stuck holding the write lock blocks no reader and
//! makes other writers give up cleanly (see `inbox_fault::stop`).

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use inbox_fault::failure::Workdir;
use inbox_fault::stop::{self, WaiterToken};

/// Freezes a worker whose next command is `command` with its stale token,
/// and whose `wait-reply` names its token.
fn frozen_worker(command: &str) {
    frozen_worker_waiting(command, WaiterToken::Given);
}

fn frozen_worker_waiting(command: &str, token: WaiterToken) {
    let seed = common::seed(&format!("--test stop {command} {token:?}"));
    let lease = 1 + seed % 2;
    Workdir::create(None, "stop", seed)
        .and_then(|dir| {
            dir.run(|dir| {
                stop::frozen_worker_is_fenced(&common::inbox(), dir, command, lease, token)
            })
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

/// A waiting holder that gave no `--lease-token` heartbeats only the lease
/// it held when it began: resumed after another process of the same agent
/// name reclaimed, it gets `lease_lost` instead of renewing the new lease.
#[test]
fn a_frozen_waiter_without_a_token_is_fenced_off_by_the_lease_it_held() {
    frozen_worker_waiting("renew", WaiterToken::Omitted);
}

#[test]
fn a_frozen_worker_resumed_after_a_reclaim_cannot_finish_the_thread() {
    frozen_worker("done");
}

#[test]
fn a_frozen_worker_resumed_after_a_reclaim_cannot_fail_the_thread() {
    frozen_worker("fail");
}

#[test]
fn a_frozen_worker_resumed_after_a_reclaim_cannot_report_progress() {
    frozen_worker("update");
}

#[test]
fn a_frozen_worker_resumed_after_a_reclaim_cannot_renew_the_new_lease() {
    frozen_worker("renew");
}

#[test]
fn a_frozen_worker_resumed_after_a_reclaim_cannot_reply_as_holder() {
    frozen_worker("reply");
}

#[test]
fn leases_running_out_on_every_attempt_dead_letter_the_thread() {
    let seed = common::seed("--test stop dead_letter");
    Workdir::create(None, "stop", seed)
        .and_then(|dir| dir.run(|dir| stop::last_attempt_dead_letters(&common::inbox(), dir)))
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[test]
fn a_writer_stuck_holding_the_lock_blocks_no_reader_and_makes_writers_give_up_cleanly() {
    let seed = common::seed("--test stop stuck_writer");
    let waited = Workdir::create(None, "stop", seed)
        .and_then(|dir| dir.run(|dir| stop::stuck_writer_times_out(&common::inbox(), dir)))
        .unwrap_or_else(|failure| panic!("{failure}"));
    for wait in waited {
        // The documented busy budget is 10 s: a writer waits that long, and
        // not much longer, before it gives up.
        assert!(
            wait.as_secs_f64() >= 9.0 && wait.as_secs_f64() < 30.0,
            "{wait:?}"
        );
    }
}
