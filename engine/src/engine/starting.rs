//! Orch writes that may start attempts with worktrees (`orch dispatch`,
//! `retry`, `reject`, `reassign`, `reconcile`, and `orch wait` when it
//! records), run so that git never works while the database's write lock
//! is held, and so that a process stopped between any two steps leaves
//! only what the next such command finishes or undoes. The write runs
//! first as it is: most need no worktree (a run without a repository, a
//! wait with nothing due). When it would start an attempt whose worktree
//! was not made, it rolls back, and these steps run before it runs again
//! (at most [`PASSES`] times):
//!
//! 1. **Plan.** A preview of the write itself (rolled back) lists the
//!    worktrees the attempts it would start need, and the reservations on
//!    its runs whose command has gone.
//! 2. **Undo the stale.** Git discards their worktrees, with no lock held;
//!    then a short write drops their reservations.
//! 3. **Reserve.** Git looks at each repository (the base's commit, the
//!    leader's uncommitted paths); then a short write reserves each
//!    attempt with its worktree on its run ([`Run::reservations`]).
//! 4. **Make.** Git makes the reserved worktrees, with no lock held.
//! 5. **Write.** The command itself: each attempt it starts takes its
//!    worktree and drops its reservation.
//! 6. **Release.** What the write did not take (the task changed
//!    meanwhile) is undone as in step 2.
//!
//! A crash after step 3 or 4, or during 6, leaves a reservation, and
//! perhaps its worktree, whole or half made: `orch worktree list` shows it
//! `reserved`, and step 2 of the next such command on the run (or `orch
//! worktree gc`) undoes it once its process has ended (or, for a process
//! the host cannot see, once it is older than [`RESERVATION_MILLIS`]).
//! After step 5 the attempt has started, with its worktree. Every other
//! orch write starts no attempt that needs a worktree: a retry that comes
//! due during one waits for the next command above (the leader's `orch
//! wait` among them). This module decides nothing about tasks: the
//! handlers do, in the preview and in the write alike.
//!
//! [`Run::reservations`]: crate::orch::model::Run::reservations
//! [`RESERVATION_MILLIS`]: super::premade::RESERVATION_MILLIS

use crate::error::{EngineError, StoreError, StoreErrorKind};
use crate::ids::IdSource;
use crate::orch::model::Worktree;
use crate::orch::workspace::Place;
use crate::store::{Store, TxMode};
use crate::time::Clock;

use super::Engine;
use super::premade::{Key, WorktreePlan};
use super::tx::Tx;
use super::worktrees::{self, Looks};

/// Most times the steps run for one command: each pass makes what the run's
/// changes since the last one call for.
const PASSES: usize = 4;

impl<S: Store, C: Clock, I: IdSource> Engine<S, C, I> {
    /// Runs the orch write `f` in the steps of this module.
    pub(super) fn starting_write<T: serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        f: impl Fn(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        // `write` takes the call's key and caller; each pass needs them.
        let (key, caller) = (self.key.clone(), self.caller.clone());
        // The write runs first as it is: most need no worktree (a run
        // without a repository, a wait with nothing due). A look that saw
        // a reservation whose command has gone prepares first, to undo it.
        let mut progress = std::mem::take(&mut self.stale_seen) && self.prepare(&f);
        let mut pass = 0;
        let result = loop {
            pass += 1;
            if pass > 1 {
                progress = self.prepare(&f);
            }
            self.key = key.clone();
            self.caller = caller.clone();
            self.starting = true;
            self.unmade = false;
            let result = self.write(&f);
            self.starting = false;
            if !self.unmade {
                break result;
            }
            if pass > PASSES || (pass > 1 && !progress) {
                break Err(EngineError::Store(StoreError::new(
                    StoreErrorKind::Busy,
                    "the run kept changing while git made the worktrees this command needs; nothing was done: run it again",
                )));
            }
        };
        self.release();
        result
    }

    /// Steps 1 to 4; whether they reserved or undid anything.
    fn prepare<T>(&mut self, f: &impl Fn(&mut Tx<'_, S, I>) -> Result<T, EngineError>) -> bool {
        if self.workspace.is_none() {
            return false;
        }
        let caller = self.caller.clone();
        let found = self.preview(|tx| {
            tx.authenticate(caller.as_ref())?;
            f(tx)?;
            Ok((
                std::mem::take(&mut tx.planned),
                std::mem::take(&mut tx.stale),
            ))
        });
        // A write that will be refused makes git do nothing: it says why.
        let Ok((planned, stale)) = found else {
            return false;
        };
        let undone = !self.undo(stale, Vec::new()).is_empty();
        self.make(planned) || undone
    }

    /// Steps 3 and 4 for `plans`; whether anything was made or refused.
    fn make(&mut self, plans: Vec<WorktreePlan>) -> bool {
        let Some(workspace) = self.workspace.as_deref_mut() else {
            return false;
        };
        let mut looks = Looks::new();
        let mut looked = Vec::new();
        let mut progress = false;
        for plan in plans {
            let key = plan.key();
            match worktrees::plan_worktree(workspace, &plan, &mut looks) {
                Ok((worktree, place)) => looked.push((key, worktree, place)),
                Err(error) => {
                    self.premade.put(key, worktrees::refused(error));
                    progress = true;
                }
            }
        }
        if looked.is_empty() {
            return progress;
        }
        let holder = workspace.holder();
        let now = self.clock.now();
        let reserved = self.transaction(TxMode::Write, now, |tx| tx.reserve(looked, holder));
        let (Ok(reserved), Some(workspace)) = (reserved, self.workspace.as_deref_mut()) else {
            return progress;
        };
        for (key, worktree, place) in reserved {
            let premade = worktrees::make_worktree(workspace, worktree, place);
            self.premade.put(key, premade);
            progress = true;
        }
        progress
    }

    /// Step 6: undoes every worktree made for this command that its write
    /// did not take, and drops the reservations of those git refused.
    fn release(&mut self) {
        let (made, refused) = self.premade.drain();
        let _ = self.undo(made, refused);
    }

    /// Has git discard each worktree of `made`, then drops the reservations
    /// of those it discarded and of `refused` (nothing to discard), in one
    /// short write; returns the reservations dropped. One git cannot
    /// discard (a link put on the way) keeps its reservation: `orch
    /// worktree list` shows it, and the next command tries again. Best
    /// effort, as a crash here is.
    pub(super) fn undo(
        &mut self,
        made: Vec<(Key, Worktree, Place)>,
        refused: Vec<(Key, String)>,
    ) -> Vec<(Key, String)> {
        let mut gone = refused;
        if let Some(workspace) = self.workspace.as_deref_mut() {
            for (key, worktree, place) in made {
                if workspace.discard(&worktree, &place).is_ok() {
                    gone.push((key, worktree.branch));
                }
            }
        }
        if !gone.is_empty() {
            let now = self.clock.now();
            let _ = self.transaction(TxMode::Write, now, |tx| tx.unreserve(&gone));
        }
        gone
    }
}
