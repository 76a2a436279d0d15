//! What a write command reads first, as a hint to the store
//! ([`Store::read_ahead`](crate::Store::read_ahead)): the thread a worker's
//! command names, or for `claim --next` the agent's registration and the
//! head of its own queue. A store that talks to a server then reads them in
//! the round trip that opens the transaction, so a worker's command costs
//! two round trips (open and read; write and commit) rather than three.
//!
//! The queries here are the ones the handlers run ([`registered_query`],
//! [`queue_head`]), so the hint always matches what is asked. This module
//! only names reads; it must never decide anything, and a store that
//! ignores it must answer the same.

use crate::command::Request;
use crate::model::Status;
use crate::store::{AgentQuery, ReadAhead, ThreadOrder, ThreadQuery};

/// The query of [`super::tx::Tx::registered`]: the agent of that name.
pub(super) fn registered_query(name: &str) -> AgentQuery {
    AgentQuery {
        name: Some(name.to_owned()),
        role: None,
        limit: 1,
    }
}

/// The first pending thread assigned to `address`, in queue order: what
/// `claim --next` takes from that address.
pub(super) fn queue_head(address: String) -> ThreadQuery {
    ThreadQuery {
        statuses: vec![Status::Pending],
        assigned_to: Some(address),
        ..ThreadQuery::all(ThreadOrder::Queue, 1)
    }
}

/// The reads `request` starts with, for the commands a worker runs many
/// times per task; `None` for the rest.
pub(super) fn of(request: &Request) -> Option<ReadAhead> {
    let thread = |id: &Option<String>| {
        id.clone().map(|id| ReadAhead {
            thread: Some(id),
            ..ReadAhead::default()
        })
    };
    match request {
        Request::Claim(r) if r.next => {
            let agent = r.agent.as_deref()?;
            Some(ReadAhead {
                agents: Some(registered_query(agent)),
                threads: Some(queue_head(agent.to_owned())),
                ..ReadAhead::default()
            })
        }
        Request::Claim(r) => thread(&r.thread_id),
        Request::Renew(r) => thread(&r.thread_id),
        Request::Update(r) => thread(&r.thread_id),
        Request::Reply(r) => thread(&r.thread_id),
        Request::Done(r) | Request::Fail(r) => thread(&r.thread_id),
        Request::Cancel(r) => thread(&r.thread_id),
        _ => None,
    }
}
