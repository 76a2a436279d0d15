//! The worktrees of a dispatch planned from the store and made before the
//! write that starts their attempts ([`Premades`]), so that git never runs
//! while a transaction holds the database's write lock (see
//! [`super::worktrees`] for the steps). Shapes and bookkeeping only: this
//! module must never run git or touch the store.

use std::collections::BTreeMap;

use crate::error::EngineError;
use crate::orch::model::{RepoSpec, Worktree};
use crate::orch::workspace::Place;

/// What making one attempt's worktree takes, decided from the store alone
/// (no git): the run's repository settings, the attempt, and the base
/// revision it starts from.
pub(super) struct WorktreePlan {
    pub(super) spec: RepoSpec,
    pub(super) run_id: String,
    pub(super) task_id: String,
    pub(super) attempt: u32,
    pub(super) base: String,
}

impl WorktreePlan {
    /// The run, task and attempt it is for.
    pub(super) fn key(&self) -> Key {
        (self.run_id.clone(), self.task_id.clone(), self.attempt)
    }
}

/// An attempt by run, task and number.
pub(super) type Key = (String, String, u32);

/// A reserved attempt's worktree, with its place.
pub(super) type Reserved = (Key, Worktree, Place);

/// A worktree made before the write that starts its attempt, or git's
/// refusal, which that write reports as if it had run git itself.
#[derive(Clone)]
pub(crate) struct Premade {
    /// The worktree and its place, reserved before git made it; `None`
    /// when git refused before anything was reserved (the repository, the
    /// base, a dirty checkout in strict mode).
    pub(super) worktree: Option<(Worktree, Place)>,
    /// What git said when it made it.
    pub(super) made: Result<(), EngineError>,
}

impl Premade {
    /// The worktree to start the attempt in, or why it cannot be.
    pub(super) fn into_worktree(self) -> Result<Worktree, EngineError> {
        self.made?;
        match self.worktree {
            Some((worktree, _)) => Ok(worktree),
            None => Err(EngineError::internal("a worktree made without a record")),
        }
    }
}

/// The worktrees made (or refused by git) before the transaction that
/// starts their attempts began, so that git never runs while that
/// transaction holds the database's write lock. The transaction takes each
/// for its attempt; one it does not take (the task changed meanwhile) is
/// undone once the command ends (see `Engine::release_premade`).
#[derive(Default)]
pub(crate) struct Premades(BTreeMap<Key, Premade>);

impl Premades {
    /// The one made for attempt `key`, if any.
    pub(super) fn take(&mut self, key: &Key) -> Option<Premade> {
        self.0.remove(key)
    }

    /// What the write will find for attempt `key`: made, refused, or none.
    pub(super) fn peek(&self, key: &Key) -> Option<Result<(), EngineError>> {
        self.0.get(key).map(|p| p.made.clone())
    }

    /// The worktree reserved for attempt `key` by this command, if any.
    pub(super) fn reserved(&self, key: &Key) -> Option<&Worktree> {
        self.0.get(key)?.worktree.as_ref().map(|(w, _)| w)
    }

    pub(super) fn put(&mut self, key: Key, premade: Premade) {
        self.0.insert(key, premade);
    }

    /// Every reserved one, to undo (see `Engine::undo`): those git made,
    /// whose worktrees it discards, and those it refused, which left
    /// nothing behind (git took back what it had begun; the branch or
    /// folder in the way is not orch's).
    pub(super) fn drain(&mut self) -> (Vec<Reserved>, Vec<(Key, String)>) {
        let mut made = Vec::new();
        let mut refused = Vec::new();
        for (key, premade) in std::mem::take(&mut self.0) {
            match (premade.worktree, premade.made.is_ok()) {
                (Some((worktree, place)), true) => made.push((key, worktree, place)),
                (Some((worktree, _)), false) => refused.push((key, worktree.branch)),
                (None, _) => {}
            }
        }
        (made, refused)
    }
}

/// How long a task waiting out a backoff waits at least before orch tries
/// again to start an attempt git refused: even with no backoff, a refusal
/// that lasts (a branch someone made) must not run git on every look.
pub(super) const REFUSED_RETRY_MILLIS: i64 = 60_000;

/// How old a reservation must be before any command undoes it whatever its
/// process (see [`Reservation`]): longer than git takes to make the
/// largest worktree. A reservation of a process of this machine that has
/// ended is undone at once.
pub(super) const RESERVATION_MILLIS: i64 = 10 * 60_000;
