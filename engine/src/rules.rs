//! The thread state machine as data: the [`TRANSITIONS`] table every status
//! change is looked up in, and [`effective_status`], which says what a thread
//! is at a given instant once lapsed leases are taken into account.
//!
//! The engine never changes a status except through [`transition`], and
//! `docs/state-machine.md` is generated from [`TRANSITIONS`], so the document
//! and the behaviour cannot drift apart. This module is pure: no store, no
//! clock.

use crate::model::{EventType, Lease, Presence, Status, Thread};
use crate::time::Timestamp;

/// Something that may change a thread's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// `send` without a thread.
    Open,
    /// `send` or `reply` into an open thread, other than an unblocking answer.
    Append,
    /// An `answer` from anyone but the holder, into a blocked thread.
    Answer,
    /// `claim`.
    Claim,
    /// `renew`.
    Renew,
    /// `update` without a status.
    Report,
    /// `update --status in_progress`.
    Start,
    /// `update --status blocked`.
    Block,
    /// `done`.
    Complete,
    /// `fail`.
    Fail,
    /// `cancel`.
    Cancel,
    /// A sweep found the lease lapsed and attempts remain.
    Lapse,
    /// A sweep found the lease lapsed on the last allowed attempt.
    LapseFinal,
    /// The holder of a lapsed lease acts again before anyone else claimed
    /// the thread: its lease is revived, then its command applies.
    Revive,
}

/// Where a transition leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// This status.
    To(Status),
    /// The status it had.
    Same,
    /// `in_progress` while a lease is live (the holder resumes), otherwise
    /// `pending` (anyone assigned may claim it and read the answer).
    Unblocked,
}

/// One row of the state machine.
#[derive(Clone, Copy, Debug)]
pub struct Transition {
    /// The action.
    pub action: Action,
    /// How a user triggers it.
    pub trigger: &'static str,
    /// Statuses it applies to; empty for [`Action::Open`], which has no thread yet.
    pub from: &'static [Status],
    /// The resulting status.
    pub to: Target,
    /// The event recorded; `None` for a step that is part of another
    /// command ([`Action::Revive`]).
    pub event: Option<EventType>,
    /// What else happens.
    pub effect: &'static str,
}

use Status::{Blocked, Claimed, InProgress, Pending};

const OPEN: &[Status] = &[Pending, Claimed, InProgress, Blocked];
/// The statuses a thread is in while a lease on it is held (unreleased):
/// every claim leads into one of them, and every way out of them releases
/// the lease (a lapse is recorded by the next write). So a lease on a thread
/// in any other status is released, which lets a read that presents threads
/// skip looking up their leases ([`crate::store::ThreadQuery::keep_lease_of`]).
pub const HELD: &[Status] = &[Claimed, InProgress, Blocked];

/// Every allowed status change. Terminal statuses appear in no `from` list:
/// a terminal thread accepts nothing.
pub const TRANSITIONS: &[Transition] = &[
    Transition {
        action: Action::Open,
        trigger: "send (no thread_id)",
        from: &[],
        to: Target::To(Pending),
        event: Some(EventType::ThreadCreated),
        effect: "creates the thread assigned to `to_agent` and its first message (kind `task` unless given)",
    },
    Transition {
        action: Action::Append,
        trigger: "send / reply into a thread",
        from: OPEN,
        to: Target::Same,
        event: Some(EventType::MessageSent),
        effect: "adds the message; a holder's message renews its lease",
    },
    Transition {
        action: Action::Answer,
        trigger: "reply / send kind=answer, not from the holder",
        from: &[Blocked],
        to: Target::Unblocked,
        event: Some(EventType::QuestionAnswered),
        effect: "adds the answer",
    },
    Transition {
        action: Action::Claim,
        trigger: "claim",
        from: &[Pending, Claimed, InProgress],
        to: Target::To(Claimed),
        event: Some(EventType::ThreadClaimed),
        effect: "only without a live lease and with attempts left; grants a lease with the next lease token and counts an attempt",
    },
    Transition {
        action: Action::Claim,
        trigger: "claim",
        from: &[Blocked],
        to: Target::To(Blocked),
        event: Some(EventType::ThreadClaimed),
        effect: "as above; the new holder inherits the open question and should wait for the answer",
    },
    Transition {
        action: Action::Renew,
        trigger: "renew",
        from: HELD,
        to: Target::Same,
        event: Some(EventType::LeaseRenewed),
        effect: "holder only; the lease runs `lease_seconds` from now",
    },
    Transition {
        action: Action::Report,
        trigger: "update (no status)",
        from: HELD,
        to: Target::Same,
        event: Some(EventType::ProgressReported),
        effect: "holder only; adds a `progress` message and renews the lease",
    },
    Transition {
        action: Action::Start,
        trigger: "update status=in_progress",
        from: HELD,
        to: Target::To(InProgress),
        event: Some(EventType::ProgressReported),
        effect: "holder only; adds a `progress` message and renews the lease",
    },
    Transition {
        action: Action::Block,
        trigger: "update status=blocked",
        from: HELD,
        to: Target::To(Blocked),
        event: Some(EventType::ThreadBlocked),
        effect: "holder only; adds a `question` message (the summary says exactly what is missing) and renews the lease",
    },
    Transition {
        action: Action::Complete,
        trigger: "done",
        from: HELD,
        to: Target::To(Status::Done),
        event: Some(EventType::ThreadCompleted),
        effect: "holder only; adds a `result` message and releases the lease",
    },
    Transition {
        action: Action::Fail,
        trigger: "fail",
        from: HELD,
        to: Target::To(Status::Failed),
        event: Some(EventType::ThreadFailed),
        effect: "holder only; adds a `result` message and releases the lease",
    },
    Transition {
        action: Action::Cancel,
        trigger: "cancel",
        from: OPEN,
        to: Target::To(Status::Cancelled),
        event: Some(EventType::ThreadCancelled),
        effect: "anyone; adds a `control` message with the reason and releases any lease",
    },
    Transition {
        action: Action::Lapse,
        trigger: "lease expired (recorded by the next write)",
        from: &[Claimed, InProgress],
        to: Target::To(Pending),
        event: Some(EventType::LeaseExpired),
        effect: "releases the lease; claimable again",
    },
    Transition {
        action: Action::Lapse,
        trigger: "lease expired (recorded by the next write)",
        from: &[Blocked],
        to: Target::To(Blocked),
        event: Some(EventType::LeaseExpired),
        effect: "releases the lease; claimable again, still waiting for its answer",
    },
    Transition {
        action: Action::LapseFinal,
        trigger: "lease expired on the last attempt (recorded by the next write)",
        from: HELD,
        to: Target::To(Status::Failed),
        event: Some(EventType::ThreadFailed),
        effect: "releases the lease; adds a `result` message from `inbox` with reason `lease_expired`",
    },
    Transition {
        action: Action::Revive,
        trigger: "a holder command after its lease lapsed, nobody having claimed since",
        from: &[Pending],
        to: Target::To(InProgress),
        event: None,
        effect: "revives the lease (same token, runs from now) and, the holder being evidently at work, resumes the thread; then the command applies and its event says `lease_revived: true`",
    },
];

/// The row for `action` in status `from`; `None` when the action is not
/// allowed there.
pub fn transition(action: Action, from: Status) -> Option<&'static Transition> {
    TRANSITIONS
        .iter()
        .find(|t| t.action == action && t.from.contains(&from))
}

impl Transition {
    /// The status this row leads to from `from`; `lease_live` decides
    /// [`Target::Unblocked`].
    pub fn target(&self, from: Status, lease_live: bool) -> Status {
        match self.to {
            Target::To(status) => status,
            Target::Same => from,
            Target::Unblocked if lease_live => InProgress,
            Target::Unblocked => Pending,
        }
    }
}

/// What a thread is at `now`, given its lease record.
///
/// Leases lapse by the clock, not by a command, so between a lapse and the
/// next write (which records it, see [`Action::Lapse`]) the stored status is
/// stale. Every read shows this effective status instead, so readers never
/// see a difference between "lapsed" and "lapse recorded":
/// - a lapsed lease on the last attempt makes the thread `failed`;
/// - otherwise a lapsed `claimed` or `in_progress` thread is `pending` again;
/// - a lapsed `blocked` thread stays `blocked` (it still needs its answer).
pub fn effective_status(thread: &Thread, lease: Option<&Lease>, now: Timestamp) -> Status {
    let lapsed = lease.is_some_and(|l| l.is_lapsed(now));
    if thread.status.is_terminal() || !lapsed {
        return thread.status;
    }
    let action = if thread.attempts >= thread.max_attempts {
        Action::LapseFinal
    } else {
        Action::Lapse
    };
    transition(action, thread.status).map_or(thread.status, |t| t.target(thread.status, false))
}

/// Whether `thread` can be claimed at `now` by its assignee: open, no live
/// lease, attempts left.
pub fn is_claimable(thread: &Thread, lease: Option<&Lease>, now: Timestamp) -> bool {
    let status = effective_status(thread, lease, now);
    !status.is_terminal()
        && !lease.is_some_and(|l| l.is_live(now))
        && thread.attempts < thread.max_attempts
}

/// Who a message in `thread` is for when its sender names nobody: the
/// other side of the conversation, i.e. the creator for the assignee or the
/// holder (the agent that last claimed it, `holder`), and for anyone else
/// the holder if there is one (the member of a role that took the work),
/// otherwise the assignee.
pub fn default_recipient<'a>(thread: &'a Thread, holder: Option<&'a str>, sender: &str) -> &'a str {
    if sender == thread.assigned_to || holder == Some(sender) {
        &thread.created_by
    } else {
        holder.unwrap_or(&thread.assigned_to)
    }
}

/// An agent that acted this recently is `active`.
pub const ACTIVE_WITHIN_SECONDS: u64 = 5 * 60;

/// An agent that acted this recently (but not within
/// [`ACTIVE_WITHIN_SECONDS`]) is `idle`; longer ago, `gone`.
pub const IDLE_WITHIN_SECONDS: u64 = 60 * 60;

/// A registered agent's presence at `now`: `active` while it holds a live
/// lease or acted in the last [`ACTIVE_WITHIN_SECONDS`], `idle` within
/// [`IDLE_WITHIN_SECONDS`], `gone` after. Activity is what the agent wrote
/// (every event it caused), its registration and its `mark-read`; reads
/// never count, so that reading stays read-only.
pub fn presence(last_active: Timestamp, holds_live_lease: bool, now: Timestamp) -> Presence {
    if holds_live_lease || now < last_active.plus_seconds(ACTIVE_WITHIN_SECONDS) {
        Presence::Active
    } else if now < last_active.plus_seconds(IDLE_WITHIN_SECONDS) {
        Presence::Idle
    } else {
        Presence::Gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_statuses_accept_nothing() {
        for t in TRANSITIONS {
            assert!(
                t.from.iter().all(|s| !s.is_terminal()),
                "{:?} leaves a terminal status",
                t.action
            );
        }
    }

    #[test]
    fn each_action_has_at_most_one_row_per_status() {
        for a in TRANSITIONS {
            for b in TRANSITIONS {
                if std::ptr::eq(a, b) || a.action != b.action {
                    continue;
                }
                assert!(
                    a.from.iter().all(|s| !b.from.contains(s)),
                    "{:?} is ambiguous",
                    a.action
                );
            }
        }
    }
}
