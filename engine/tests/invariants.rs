//! Property tests: random command sequences against the in-memory store,
//! with the engine's invariants checked after every step.
//!
//! - at most one live lease per thread, held by its assignee, only while the
//!   thread is claimed, in progress or blocked;
//! - lease tokens only grow, and a claim's token is the previous one plus 1;
//! - a claim succeeds only when no live lease existed;
//! - terminal threads never change again (record, lease, messages);
//! - event ids strictly increase with no gaps, and time never runs backwards
//!   in the event stream;
//! - read commands (fetch, list, show, watch, wait-reply) change nothing;
//! - a failed command changes nothing;
//! - every response serializes to the JSON contract with the right exit code;
//! - a successful command did its job (a small model of each command's
//!   effect: `done` leaves the thread `done` with its lease released, an
//!   `update` to `blocked` leaves it `blocked` with the lease renewed, ...).

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::store::{EventQuery, MessageQuery, Store, ThreadOrder, ThreadQuery, TxMode};
use inbox_engine::wire::*;
use inbox_engine::{
    Command, Effect, Engine, ErrorCode, Event, Kind, ManualClock, MemoryStore, Output, Request,
    Response, SequentialIds, Status, ThreadState,
};
use proptest::prelude::*;

const AGENTS: &[&str] = &["lead", "w1", "w2"];

#[derive(Clone, Debug)]
enum Op {
    Open {
        to: usize,
        max_attempts: u32,
    },
    Append {
        from: usize,
        thread: usize,
        kind: Kind,
    },
    Claim {
        agent: usize,
        thread: usize,
        seconds: u64,
    },
    ClaimNext {
        agent: usize,
        seconds: u64,
    },
    Renew {
        agent: usize,
        thread: usize,
        token: Option<u64>,
    },
    Update {
        agent: usize,
        thread: usize,
        token: Option<u64>,
        status: Option<Status>,
    },
    Reply {
        from: usize,
        thread: usize,
        kind: Kind,
        token: Option<u64>,
    },
    Finish {
        agent: usize,
        thread: usize,
        token: Option<u64>,
        done: bool,
    },
    Cancel {
        agent: usize,
        thread: usize,
    },
    Advance {
        seconds: u64,
    },
    Fetch {
        agent: usize,
        blocked: bool,
        unread: bool,
    },
    List {
        agent: Option<usize>,
    },
    Show {
        thread: usize,
        agent: usize,
        mark_read: bool,
    },
    Watch {
        agent: Option<usize>,
        after: u64,
    },
    WaitReply {
        thread: usize,
        agent: Option<usize>,
    },
    Sweep,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::ALL.to_vec())
}

fn token() -> impl Strategy<Value = Option<u64>> {
    prop::option::of(0u64..5)
}

fn agent() -> impl Strategy<Value = usize> {
    0..AGENTS.len()
}

fn op() -> impl Strategy<Value = Op> {
    // Thread indexes run one past the threads that usually exist, so unknown
    // threads are exercised too.
    let thread = 0usize..5;
    prop_oneof![
        2 => (1..3usize, 1u32..4).prop_map(|(to, max_attempts)| Op::Open { to, max_attempts }),
        1 => (agent(), thread.clone(), kind()).prop_map(|(from, thread, kind)| Op::Append { from, thread, kind }),
        3 => (agent(), thread.clone(), 1u64..120).prop_map(|(agent, thread, seconds)| Op::Claim { agent, thread, seconds }),
        2 => (agent(), 1u64..120).prop_map(|(agent, seconds)| Op::ClaimNext { agent, seconds }),
        1 => (agent(), thread.clone(), token()).prop_map(|(agent, thread, token)| Op::Renew { agent, thread, token }),
        2 => (agent(), thread.clone(), token(), prop::option::of(prop::sample::select(vec![Status::InProgress, Status::Blocked, Status::Done])))
            .prop_map(|(agent, thread, token, status)| Op::Update { agent, thread, token, status }),
        2 => (agent(), thread.clone(), kind(), token()).prop_map(|(from, thread, kind, token)| Op::Reply { from, thread, kind, token }),
        1 => (agent(), thread.clone(), token(), any::<bool>()).prop_map(|(agent, thread, token, done)| Op::Finish { agent, thread, token, done }),
        1 => (agent(), thread.clone()).prop_map(|(agent, thread)| Op::Cancel { agent, thread }),
        2 => (0u64..200).prop_map(|seconds| Op::Advance { seconds }),
        1 => (agent(), any::<bool>(), any::<bool>()).prop_map(|(agent, blocked, unread)| Op::Fetch { agent, blocked, unread }),
        1 => prop::option::of(agent()).prop_map(|agent| Op::List { agent }),
        1 => (thread.clone(), agent(), any::<bool>()).prop_map(|(thread, agent, mark_read)| Op::Show { thread, agent, mark_read }),
        1 => (prop::option::of(agent()), 0u64..30).prop_map(|(agent, after)| Op::Watch { agent, after }),
        1 => (thread, prop::option::of(agent())).prop_map(|(thread, agent)| Op::WaitReply { thread, agent }),
        1 => Just(Op::Sweep),
    ]
}

type TestEngine = Engine<MemoryStore, ManualClock, SequentialIds>;

fn thread_id(index: usize) -> Option<String> {
    Some(format!("thr_{:06}", index + 1))
}

fn name(index: usize) -> Option<String> {
    Some(AGENTS[index].to_owned())
}

fn request(op: &Op) -> Option<Request> {
    let summary = Some("step".to_owned());
    Some(match op.clone() {
        Op::Open { to, max_attempts } => Request::Send(SendRequest {
            from_agent: name(0),
            to_agent: name(to),
            subject: Some("work".into()),
            max_attempts: Some(max_attempts),
            ..Default::default()
        }),
        Op::Append { from, thread, kind } => Request::Send(SendRequest {
            from_agent: name(from),
            thread_id: thread_id(thread),
            kind: Some(kind),
            summary,
            ..Default::default()
        }),
        Op::Claim {
            agent,
            thread,
            seconds,
        } => Request::Claim(ClaimRequest {
            agent: name(agent),
            thread_id: thread_id(thread),
            next: false,
            lease_seconds: Some(seconds),
        }),
        Op::ClaimNext { agent, seconds } => Request::Claim(ClaimRequest {
            agent: name(agent),
            thread_id: None,
            next: true,
            lease_seconds: Some(seconds),
        }),
        Op::Renew {
            agent,
            thread,
            token,
        } => Request::Renew(RenewRequest {
            agent: name(agent),
            thread_id: thread_id(thread),
            lease_token: token,
            lease_seconds: None,
        }),
        Op::Update {
            agent,
            thread,
            token,
            status,
        } => Request::Update(UpdateRequest {
            agent: name(agent),
            thread_id: thread_id(thread),
            lease_token: token,
            status,
            summary,
            ..Default::default()
        }),
        Op::Reply {
            from,
            thread,
            kind,
            token,
        } => Request::Reply(ReplyRequest {
            from_agent: name(from),
            thread_id: thread_id(thread),
            lease_token: token,
            kind: Some(kind),
            summary,
            ..Default::default()
        }),
        Op::Finish {
            agent,
            thread,
            token,
            done,
        } => {
            let finish = FinishRequest {
                agent: name(agent),
                thread_id: thread_id(thread),
                lease_token: token,
                summary,
                ..Default::default()
            };
            if done {
                Request::Done(finish)
            } else {
                Request::Fail(finish)
            }
        }
        Op::Cancel { agent, thread } => Request::Cancel(CancelRequest {
            agent: name(agent),
            thread_id: thread_id(thread),
            reason: summary,
            artifacts: Vec::new(),
        }),
        Op::Advance { .. } => return None,
        Op::Fetch {
            agent,
            blocked,
            unread,
        } => Request::Fetch(FetchRequest {
            agent: name(agent),
            status: if blocked {
                vec![Status::Pending, Status::Blocked]
            } else {
                Vec::new()
            },
            limit: None,
            unread,
        }),
        Op::List { agent } => Request::List(ListRequest {
            agent: agent.and_then(name),
            ..Default::default()
        }),
        Op::Show {
            thread,
            agent,
            mark_read,
        } => Request::Show(ShowRequest {
            thread_id: thread_id(thread),
            agent: name(agent),
            mark_read,
            ..Default::default()
        }),
        Op::Watch { agent, after } => Request::Watch(WatchRequest {
            agent: agent.and_then(name),
            after_event: Some(after),
            timeout_seconds: Some(0),
            ..Default::default()
        }),
        Op::WaitReply { thread, agent } => Request::WaitReply(WaitReplyRequest {
            thread_id: thread_id(thread),
            agent: agent.and_then(name),
            timeout_seconds: Some(0),
            ..Default::default()
        }),
        Op::Sweep => Request::Sweep(SweepRequest {}),
    })
}

/// A successful claim took a thread nobody held, and counted its lease token
/// up by one. A claim of the next thread took one that was pending and
/// assigned to the claimer, and came back empty only when no such thread
/// existed. (A sweep ran just before, so stored statuses are current.)
fn check_claim(
    before: &Snapshot,
    out: &ClaimOutput,
    next_for: Option<&str>,
    now: inbox_engine::Timestamp,
) {
    let claimable = |t: &&ThreadState| {
        t.thread.status == Status::Pending && Some(t.thread.assigned_to.as_str()) == next_for
    };
    let Some(LeaseOutput { thread, lease, .. }) = &out.claimed else {
        let agent = next_for.expect("only a claim of the next thread may come back empty");
        assert!(
            before.threads.iter().find(claimable).is_none(),
            "claim --next found nothing although {agent} had a pending thread"
        );
        return;
    };
    let old = before
        .threads
        .iter()
        .find(|t| t.thread.thread_id == thread.thread.thread_id)
        .expect("a claim took a thread that did not exist");
    assert!(
        !old.lease.as_ref().is_some_and(|l| l.is_live(now)),
        "a claim succeeded over a live lease"
    );
    assert_eq!(
        lease.lease_token,
        old.lease.as_ref().map_or(0, |l| l.lease_token) + 1,
        "claim tokens count up by one"
    );
    if next_for.is_some() {
        assert!(
            claimable(&old),
            "claim --next took a thread that was not pending for the claimer"
        );
    }
}

/// Everything the store holds that the invariants talk about.
struct Snapshot {
    threads: Vec<ThreadState>,
    events: Vec<Event>,
    message_counts: Vec<usize>,
}

fn snapshot(engine: &mut TestEngine) -> Snapshot {
    let store = engine.store_mut();
    store.begin(TxMode::Read).unwrap();
    let mut threads = store
        .threads(&ThreadQuery::all(ThreadOrder::NewestFirst, usize::MAX))
        .unwrap();
    threads.sort_by(|a, b| a.thread.thread_id.cmp(&b.thread.thread_id));
    let events = store
        .events(&EventQuery::after_event(0, usize::MAX))
        .unwrap();
    let message_counts = threads
        .iter()
        .map(|t| {
            store
                .messages(&MessageQuery {
                    thread_id: t.thread.thread_id.clone(),
                    from_agent: None,
                    after_event: 0,
                    newest_first: false,
                    limit: usize::MAX,
                })
                .unwrap()
                .len()
        })
        .collect();
    store.commit().unwrap();
    Snapshot {
        threads,
        events,
        message_counts,
    }
}

fn check_contract(response: &Response, command: Command) {
    let json: serde_json::Value = serde_json::from_str(&response.to_json()).unwrap();
    assert_eq!(json["command"], command.as_str());
    match response {
        Response::Success(_) | Response::Replayed(_) => {
            assert_eq!(json["ok"], true);
            assert!(matches!(response.exit_code(), 0 | 10));
        }
        Response::Failure { error, .. } => {
            assert_eq!(json["ok"], false);
            assert_eq!(json["error"]["code"], error.code().as_str());
            assert!(!json["error"]["message"].as_str().unwrap().is_empty());
            assert_eq!(response.exit_code(), error.code().exit_code());
            assert!(
                !matches!(
                    error.code(),
                    ErrorCode::InternalError | ErrorCode::StorageError
                ),
                "engine bug surfaced as {error}"
            );
        }
    }
}

fn check_invariants(before: &Snapshot, after: &Snapshot, now: inbox_engine::Timestamp) {
    // Events: contiguous ids from 1, time never runs backwards.
    for (i, event) in after.events.iter().enumerate() {
        assert_eq!(
            event.event_id,
            i as u64 + 1,
            "event ids must be 1, 2, 3, ..."
        );
        if i > 0 {
            assert!(event.created_at >= after.events[i - 1].created_at);
        }
    }
    assert!(after.events.len() >= before.events.len());
    assert_eq!(
        after.events[..before.events.len()],
        before.events[..],
        "events are append-only"
    );

    for (i, state) in after.threads.iter().enumerate() {
        let thread = &state.thread;
        assert!(thread.attempts <= thread.max_attempts, "{thread:?}");
        if let Some(lease) = &state.lease {
            assert_eq!(lease.thread_id, thread.thread_id);
            assert_eq!(
                lease.agent, thread.assigned_to,
                "only the assignee can hold a lease"
            );
            assert_eq!(
                lease.attempt, thread.attempts,
                "the lease is the latest attempt"
            );
            if lease.is_live(now) {
                assert!(
                    matches!(
                        thread.status,
                        Status::Claimed | Status::InProgress | Status::Blocked
                    ),
                    "a live lease on a {} thread",
                    thread.status
                );
            }
        } else {
            assert_eq!(thread.attempts, 0, "an attempt without a lease record");
        }
        if thread.status.is_terminal() {
            assert!(state.lease.as_ref().is_none_or(|l| l.released_at.is_some()));
        }
        // The presenting reads rely on it (`ThreadQuery::keep_lease_of`):
        // outside a holder's statuses, a lease is released, live or not.
        if state
            .lease
            .as_ref()
            .is_some_and(|l| l.released_at.is_none())
        {
            assert!(
                inbox_engine::rules::HELD.contains(&thread.status),
                "an unreleased lease on a {} thread",
                thread.status
            );
        }
        let Some(old) = before
            .threads
            .iter()
            .position(|t| t.thread.thread_id == thread.thread_id)
        else {
            continue;
        };
        let old_state = &before.threads[old];
        if old_state.thread.status.is_terminal() {
            assert_eq!(old_state, state, "a terminal thread changed");
            assert_eq!(before.message_counts[old], after.message_counts[i]);
        }
        let old_token = old_state.lease.as_ref().map_or(0, |l| l.lease_token);
        let new_token = state.lease.as_ref().map_or(0, |l| l.lease_token);
        assert!(new_token >= old_token, "lease tokens only grow");
    }
    assert!(
        after.threads.len() >= before.threads.len(),
        "threads are never deleted"
    );
}

fn run(ops: &[Op]) {
    let mut engine = Engine::new(
        MemoryStore::new(),
        ManualClock::new(ManualClock::SCRIPT_EPOCH),
        SequentialIds::new(),
    );
    for op in ops {
        if let Op::Advance { seconds } = op {
            engine.clock_mut().advance_millis(*seconds as i64 * 1000);
            continue;
        }
        let Some(request) = request(op) else { continue };
        // Record lapses first, so that the command alone is responsible for
        // any change (a failed write may still commit a sweep of its own).
        let swept = engine.execute(Request::Sweep(SweepRequest {}));
        assert!(swept.is_ok(), "{}", swept.to_json());

        let before_store = engine.store().clone();
        let before = snapshot(&mut engine);
        let command = request.command();
        let read_only = request.effect() != Effect::Write;
        let claim_next_agent = match &request {
            Request::Claim(r) if r.next => r.agent.clone(),
            _ => None,
        };

        let response = engine.execute(request.clone());
        check_contract(&response, command);

        if read_only || !response.is_ok() {
            assert!(
                engine.store().same_records(&before_store),
                "`{command}` changed the store although it {}: {}",
                if read_only { "only reads" } else { "failed" },
                response.to_json()
            );
        }
        if claim_next_agent.is_some() {
            assert!(
                response.is_ok(),
                "claim --next either claims or finds nothing, it never fails: {}",
                response.to_json()
            );
        }
        if let Response::Success(Output::Claim(out)) = &response {
            check_claim(&before, out, claim_next_agent.as_deref(), engine.now());
        }
        let now = engine.now();
        let after = snapshot(&mut engine);
        check_invariants(&before, &after, now);
        if let Response::Success(output) = &response {
            check_effect(&request, output, &before, &after, now);
        }
    }
}

/// What a successful write must have done to its thread: a small model of
/// each command, independent of the engine's code. The invariants above
/// hold for any store that never changes; this says the command happened.
fn check_effect(
    request: &Request,
    output: &Output,
    before: &Snapshot,
    after: &Snapshot,
    now: inbox_engine::Timestamp,
) {
    let Some(thread_id) = touched_thread(output) else {
        return;
    };
    let index = after
        .threads
        .iter()
        .position(|t| t.thread.thread_id == thread_id)
        .expect("the command's thread is stored");
    let state = &after.threads[index];
    let old = before
        .threads
        .iter()
        .position(|t| t.thread.thread_id == thread_id);
    let messages_before = old.map_or(0, |i| before.message_counts[i]);
    let wrote = after.message_counts[index] - messages_before;
    let lease = state.lease.as_ref();
    let held_by = |agent: &Option<String>| {
        let lease = lease.expect("a holder command leaves a lease");
        assert_eq!(
            Some(&lease.agent),
            agent.as_ref(),
            "the caller holds the lease"
        );
        assert!(lease.released_at.is_none(), "the lease is held");
        assert_eq!(
            lease.expires_at,
            now.plus_seconds(lease.lease_seconds),
            "a holder command renews the lease from now"
        );
    };
    let status = state.thread.status;
    let held = [Status::Claimed, Status::InProgress, Status::Blocked];
    match request {
        Request::Send(r) if r.thread_id.is_none() => {
            assert!(old.is_none(), "send opened a new thread");
            assert_eq!(status, Status::Pending);
            assert_eq!(Some(&state.thread.assigned_to), r.to_agent.as_ref());
            assert_eq!(wrote, 1);
        }
        Request::Send(_) | Request::Reply(_) => assert_eq!(wrote, 1, "one message added"),
        Request::Claim(r) => {
            assert!(
                matches!(status, Status::Claimed | Status::Blocked),
                "{status}"
            );
            held_by(&r.agent);
            assert_eq!(wrote, 0);
        }
        Request::Renew(r) => {
            assert!(held.contains(&status), "{status}");
            held_by(&r.agent);
        }
        Request::Update(r) => {
            match r.status {
                Some(wanted) => assert_eq!(status, wanted, "update sets the status it names"),
                None => assert!(held.contains(&status), "{status}"),
            }
            held_by(&r.agent);
            assert_eq!(wrote, 1);
        }
        Request::Done(_) | Request::Fail(_) | Request::Cancel(_) => {
            let wanted = match request {
                Request::Done(_) => Status::Done,
                Request::Fail(_) => Status::Failed,
                _ => Status::Cancelled,
            };
            assert_eq!(status, wanted, "the thread is finished as asked");
            if wanted == Status::Cancelled {
                assert!(
                    lease.is_none_or(|l| l.released_at.is_some()),
                    "no lease stays held"
                );
            } else {
                let released = lease.and_then(|l| l.released_at);
                assert_eq!(released, Some(now), "the holder's lease is released now");
            }
            assert_eq!(wrote, 1);
        }
        _ => {}
    }
}

/// The thread a write's output is about.
fn touched_thread(output: &Output) -> Option<String> {
    match output {
        Output::Send(out)
        | Output::Update(out)
        | Output::Reply(out)
        | Output::Done(out)
        | Output::Fail(out)
        | Output::Cancel(out) => Some(out.thread.thread.thread_id.clone()),
        Output::Renew(out) => Some(out.thread.thread.thread_id.clone()),
        Output::Claim(out) => out
            .claimed
            .as_ref()
            .map(|c| c.thread.thread.thread_id.clone()),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_command_sequences_keep_every_invariant(ops in prop::collection::vec(op(), 1..80)) {
        run(&ops);
    }
}

/// A regression case kept from development: a late holder revives a lapsed
/// lease after a sweep released it, then a claim must still be refused.
#[test]
fn revived_lease_still_conflicts_with_a_new_claim() {
    run(&[
        Op::Open {
            to: 1,
            max_attempts: 3,
        },
        Op::Claim {
            agent: 1,
            thread: 0,
            seconds: 10,
        },
        Op::Advance { seconds: 20 },
        Op::Sweep,
        Op::Update {
            agent: 1,
            thread: 0,
            token: Some(1),
            status: None,
        },
        Op::Claim {
            agent: 1,
            thread: 0,
            seconds: 10,
        },
    ]);
}
