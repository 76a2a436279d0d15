//! The [`Waiter`]'s fencing: a waiting holder keeps alive exactly the lease
//! it held when the wait began, and is told `lease_lost` as soon as it sees
//! that lease replaced, whether or not it named its token; and
//! `orch-wait`'s one look records what the run's threads did before it looks.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::{
    Engine, ErrorCode, ManualClock, MemoryStore, Request, Response, SequentialIds, WaitStep, Waiter,
};

type TestEngine = Engine<MemoryStore, ManualClock, SequentialIds>;

fn run(engine: &mut TestEngine, json: &str) -> serde_json::Value {
    let response = engine.execute_json(json);
    assert!(response.is_ok(), "{json}: {}", response.to_json());
    serde_json::from_str(&response.to_json()).unwrap()
}

/// A fresh store on the script clock.
fn initialized() -> TestEngine {
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    run(&mut engine, r#"{"command":"init"}"#);
    engine
}

/// A thread claimed by `worker` with a 60 s lease (token 1).
fn claimed() -> TestEngine {
    let mut engine = initialized();
    run(
        &mut engine,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#,
    );
    run(
        &mut engine,
        r#"{"command":"claim","agent":"worker","thread_id":"thr_000001","lease_seconds":60}"#,
    );
    engine
}

fn waiter(json: &str) -> Waiter {
    Waiter::new(Request::from_json(json).unwrap()).unwrap()
}

fn lease(engine: &mut TestEngine) -> serde_json::Value {
    run(engine, r#"{"command":"show","thread_id":"thr_000001"}"#)["thread"]["lease"].clone()
}

fn lost(step: WaitStep) -> bool {
    matches!(step, WaitStep::Finished(Response::Failure { error, .. }) if error.code() == ErrorCode::LeaseLost)
}

#[test]
fn a_waiter_without_a_token_renews_only_the_lease_it_began_with() {
    let mut engine = claimed();
    let mut waiter =
        waiter(r#"{"command":"wait-reply","agent":"worker","thread_id":"thr_000001"}"#);
    assert!(matches!(waiter.poll(&mut engine), WaitStep::Pending { .. }));

    // The waiting process freezes past its lease; another process of the
    // same agent name claims the thread again (token 2).
    engine.clock_mut().advance_millis(120_000);
    let second = run(
        &mut engine,
        r#"{"command":"claim","agent":"worker","thread_id":"thr_000001","lease_seconds":600}"#,
    );
    assert_eq!(second["lease"]["lease_token"], 2);
    let before = lease(&mut engine);

    // Resumed, the first waiter's heartbeat is overdue: it must not renew
    // token 2, and must say its own lease is lost.
    assert!(lost(waiter.poll(&mut engine)));
    assert_eq!(
        lease(&mut engine),
        before,
        "the new holder's lease is untouched"
    );
}

#[test]
fn a_waiter_whose_named_token_was_replaced_is_told_at_once() {
    let mut engine = claimed();
    engine.clock_mut().advance_millis(120_000);
    run(
        &mut engine,
        r#"{"command":"claim","agent":"worker","thread_id":"thr_000001","lease_seconds":600}"#,
    );
    let mut waiter = waiter(
        r#"{"command":"wait-reply","agent":"worker","thread_id":"thr_000001","lease_token":1}"#,
    );
    assert!(lost(waiter.poll(&mut engine)));
}

#[test]
fn a_waiting_holder_keeps_its_own_lease_alive() {
    let mut engine = claimed();
    let mut waiter =
        waiter(r#"{"command":"wait-reply","agent":"worker","thread_id":"thr_000001"}"#);
    for _ in 0..10 {
        let WaitStep::Pending { within } = waiter.poll(&mut engine) else {
            panic!("the wait ended early");
        };
        engine
            .clock_mut()
            .advance_millis(i64::try_from(within.as_millis()).unwrap());
    }
    let lease = lease(&mut engine);
    assert_eq!(lease["lease_token"], 1);
    assert_eq!(lease["agent"], "worker");
}

/// A wall clock that jumps, with a monotonic clock that does not: the
/// waiter's schedule follows the monotonic one.
struct SteppingClock {
    wall: inbox_engine::Timestamp,
    ticks: u64,
}

impl inbox_engine::Clock for SteppingClock {
    fn now(&mut self) -> inbox_engine::Timestamp {
        self.wall
    }
    fn ticks(&mut self) -> u64 {
        self.ticks
    }
}

/// A wall clock stepped back an hour neither stretches the wait's timeout
/// by an hour nor stops the waiting holder's heartbeats.
#[test]
fn a_wall_clock_stepped_back_moves_no_deadline_and_stops_no_heartbeat() {
    let clock = SteppingClock {
        wall: ManualClock::SCRIPT_EPOCH,
        ticks: 1_000,
    };
    let mut engine = Engine::new(MemoryStore::new(), clock, SequentialIds::new());
    for json in [
        r#"{"command":"init"}"#,
        r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"s"}"#,
        r#"{"command":"claim","agent":"worker","thread_id":"thr_000001","lease_seconds":60}"#,
    ] {
        assert!(engine.execute_json(json).is_ok(), "{json}");
    }
    let mut waiter = waiter(
        r#"{"command":"wait-reply","agent":"worker","thread_id":"thr_000001","timeout_seconds":120}"#,
    );
    let mut waited = 0u64;
    let mut stepped = false;
    let finished = loop {
        match waiter.poll(&mut engine) {
            WaitStep::Finished(response) => break response,
            WaitStep::Pending { within } => {
                let millis = u64::try_from(within.as_millis()).unwrap();
                waited += millis;
                let clock = engine.clock_mut();
                clock.ticks += millis;
                clock.wall = clock.wall.plus_millis(i64::try_from(millis).unwrap());
                if !stepped {
                    clock.wall = clock.wall.plus_millis(-3_600_000);
                    stepped = true;
                }
            }
        }
    };
    assert_eq!(finished.exit_code(), 10, "{}", finished.to_json());
    assert_eq!(waited, 120_000, "the timeout is 120 s of monotonic time");
    let watch = engine
        .execute_json(r#"{"command":"watch","after_event":0,"timeout_seconds":0,"limit":100}"#);
    let heartbeats = watch
        .to_json()
        .matches("\"event_type\":\"lease_renewed\"")
        .count();
    // Every 20 s (a third of the 60 s lease) for 120 s, after the step too.
    assert!(
        heartbeats >= 5,
        "{heartbeats} heartbeats: {}",
        watch.to_json()
    );
}

/// `orch-wait`'s look records what the run's threads did first, in the same
/// transaction: one call, by a waiter or by an embedder without one, sees a
/// worker's `done` as the event the leader wakes on.
#[test]
fn one_orch_wait_look_records_what_a_worker_did() {
    let mut engine = initialized();
    run(
        &mut engine,
        r#"{"command":"orch-run-create","agent":"lead","run_id":"r","goal":"g"}"#,
    );
    run(
        &mut engine,
        r#"{"command":"orch-plan","agent":"lead","tasks":[{"task_id":"t","title":"T","assignee":"w","review":true}]}"#,
    );
    run(
        &mut engine,
        r#"{"command":"orch-dispatch","agent":"lead","task_id":"t"}"#,
    );
    let claim = run(
        &mut engine,
        r#"{"command":"claim","agent":"w","next":true}"#,
    );
    let thread = claim["lease"]["thread_id"].as_str().unwrap().to_owned();
    let before = run(
        &mut engine,
        r#"{"command":"orch-wait","timeout_seconds":0}"#,
    );
    let cursor = before["next_event_id"].as_u64().unwrap();
    run(
        &mut engine,
        &format!(r#"{{"command":"done","agent":"w","thread_id":"{thread}","summary":"ok"}}"#),
    );

    let woke = run(
        &mut engine,
        &format!(r#"{{"command":"orch-wait","after_event":{cursor},"timeout_seconds":0}}"#),
    );
    assert_eq!(woke["woke"], true, "{woke}");
    assert_eq!(woke["events"][0]["event_type"], "task_review", "{woke}");
    assert_eq!(woke["run"]["counts"]["review"], 1, "{woke}");
    assert_eq!(woke["actionable"][0]["task_id"], "t", "{woke}");
    assert_eq!(
        woke["next_event_id"], woke["events"][0]["event_id"],
        "{woke}"
    );

    // Recorded for good: the next look finds nothing new after its cursor.
    let again = format!(
        r#"{{"command":"orch-wait","after_event":{},"timeout_seconds":0}}"#,
        woke["next_event_id"]
    );
    let mut waiter = waiter(&again);
    let step = waiter.poll(&mut engine);
    assert!(
        matches!(&step, WaitStep::Finished(r) if r.exit_code() == 10),
        "{step:?}"
    );
}
