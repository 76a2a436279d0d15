//! What the plan checks of both stores share (`query_plans.rs` for SQLite,
//! `pg_plans.rs` for PostgreSQL): [`every_orch_query`], the orch query
//! shapes a store must serve from its indexes, whether or not the corpus's
//! scripts reach them. It only asks; each test traces and judges its own
//! store's statements.

use inbox_engine::orch::model::{OrchEventType, RunStatus, TaskStatus};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskOrder, TaskQuery};
use inbox_engine::{Store, TxMode};

/// Asks every shape of orch query the `Store` allows, in one read
/// transaction: each filter alone and together, both task orders, one
/// status and several, a limit and none.
pub(crate) fn every_orch_query<S: Store>(store: &mut S) {
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
