//! What the plan checks of both stores share (`query_plans.rs` of inbox-sqlite,
//! `pg_plans.rs` of inbox-postgres): [`every_orch_query`] and
//! [`every_thread_query`], the query shapes a store must serve from its
//! indexes, whether or not the corpus's scripts reach them. They only ask;
//! each test traces and judges its own store's statements.

#![allow(clippy::unwrap_used)] // A test helper: a store that fails a query fails the test.

use inbox_engine::orch::model::{OrchEventType, RunStatus, TaskStatus};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use inbox_engine::{Store, TxMode};

/// Asks every shape of orch query the `Store` allows, in one read
/// transaction: each filter alone and together, both task orders, one
/// status and several, a limit and none.
pub fn every_orch_query<S: Store>(store: &mut S) {
    store.begin(TxMode::Read).unwrap();
    every_task_query(store);
    every_run_query(store);
    every_orch_event_query(store);
    store.attempts("r", "t").unwrap();
    store.latest_event_id().unwrap();
    store.commit().unwrap();
}

fn every_task_query<S: Store>(store: &mut S) {
    let some = [
        Vec::new(),
        vec![TaskStatus::Ready],
        TaskStatus::ACTIONABLE.to_vec(),
    ];
    for (statuses, limit) in some.iter().flat_map(|s| [(s, 10), (s, usize::MAX)]) {
        for (needing, order) in [None, Some("t".to_owned())]
            .into_iter()
            .flat_map(|n| [(n.clone(), TaskOrder::Added), (n, TaskOrder::Queue)])
        {
            let query = TaskQuery {
                run_id: "r".into(),
                statuses: statuses.clone(),
                needing,
                order,
                limit,
            };
            store.tasks(&query).unwrap();
        }
    }
}

fn every_run_query<S: Store>(store: &mut S) {
    let run_statuses = [Vec::new(), vec![RunStatus::Active], RunStatus::ALL.to_vec()];
    for (statuses, limit) in run_statuses.iter().flat_map(|s| [(s, 2), (s, usize::MAX)]) {
        for created_by in [None, Some("lead".to_owned())] {
            let query = RunQuery {
                created_by,
                statuses: statuses.clone(),
                limit,
            };
            store.runs(&query).unwrap();
        }
    }
}

fn every_orch_event_query<S: Store>(store: &mut S) {
    let types = [Vec::new(), OrchEventType::ACTIONABLE.to_vec()];
    for (event_types, limit) in types.iter().flat_map(|t| [(t, 10), (t, usize::MAX)]) {
        for run_id in [None, Some("r".to_owned())] {
            let query = OrchEventQuery {
                after_event: 0,
                run_id,
                event_types: event_types.clone(),
                limit,
            };
            store.orch_events(&query).unwrap();
        }
    }
}

/// Asks every shape of thread query the engine can make, in one read
/// transaction: `list`'s filters (agent, creator, assignee, run, task)
/// alone and together, with no status, one and several, newest first;
/// `fetch`'s queue of an assignee, with and without `unread`; each also
/// narrowed to one thread, as the lapsed-lease lookups ask; released
/// leases read and not.
pub fn every_thread_query<S: Store>(store: &mut S) {
    use inbox_engine::model::Status;
    use inbox_engine::store::{ThreadOrder, ThreadQuery};
    store.begin(TxMode::Read).unwrap();
    let statuses = [
        Vec::new(),
        vec![Status::Pending],
        vec![Status::Pending, Status::Claimed],
    ];
    let value = |on: bool, text: &str| on.then(|| text.to_owned());
    for filters in 0..64u32 {
        let on = |bit: u32| filters & (1 << bit) != 0;
        for statuses in &statuses {
            for released_leases in [true, false] {
                let query = ThreadQuery {
                    thread_id: value(on(0), "thr_1"),
                    agent: value(on(1), "w"),
                    created_by: value(on(2), "lead"),
                    assigned_to: value(on(3), "w"),
                    run_id: value(on(4), "r"),
                    task_id: value(on(5), "t"),
                    statuses: statuses.clone(),
                    released_leases,
                    ..ThreadQuery::all(ThreadOrder::NewestFirst, 50)
                };
                store.threads(&query).unwrap();
            }
        }
    }
    for thread_id in [None, Some("thr_1".to_owned())] {
        for unread in [None, Some("w".to_owned())] {
            let query = ThreadQuery {
                thread_id: thread_id.clone(),
                assigned_to: Some("w".into()),
                statuses: vec![Status::Pending],
                unread,
                released_leases: false,
                ..ThreadQuery::all(ThreadOrder::Queue, 20)
            };
            store.threads(&query).unwrap();
        }
    }
    store.commit().unwrap();
}
