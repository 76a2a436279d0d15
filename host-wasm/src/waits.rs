//! `watch` and `waitReply` as Promises.
//!
//! For the stores of one connection (`memory`, `sqlite`, `opfs`), nothing
//! outside this `Inbox` can write to its database: a wait can only be woken
//! by a command of the same instance or by time (its deadline, a lease
//! running out, its own heartbeat). So a pending wait is polled again
//! exactly then: after every command that may have written, and when the
//! engine's [`Waiter`] asks to be polled at a given instant (one
//! `setTimeout`). The `file` store shares its file with other processes,
//! whose commits nothing announces here: while waits are pending, it also
//! looks every [`OUTSIDE_POLL_MS`] whether the file changed (a few `stat`s,
//! no lock) and polls the waits when it did. Every decision (cursor,
//! deadline, sweeps, heartbeats) stays in the engine's `Waiter`; this module
//! only schedules.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use inbox_engine::{Executor, Response, WaitStep, Waiter};
use js_sys::Function;
use wasm_bindgen::JsValue;

use crate::backend::{Backend, StoreKind};
use crate::js::{self, Timer};

/// One wait in progress.
struct Pending {
    id: u64,
    waiter: Waiter,
    resolve: Function,
    reject: Function,
    /// The next poll: at the waiter's `until`. Kept while `until` stays the
    /// same, because a replaced timer's callback is never freed (a JS
    /// timer that may still fire must own its closure).
    /// The timer and the tick it fires at.
    timer: Option<(i64, Timer)>,
}

/// How often a `file` store with pending waits looks for other processes'
/// commits.
pub const OUTSIDE_POLL_MS: i64 = 100;

/// The waits in progress on one `Inbox`.
#[derive(Default)]
pub struct Waits {
    next_id: u64,
    pending: Vec<Pending>,
    /// The next look for outside commits (`file` store, waits pending).
    outside: Option<Timer>,
}

impl Waits {
    /// How many waits are in progress.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no wait is in progress.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// What an `Inbox` shares with its timers: the engine (absent once closed)
/// and the waits.
pub struct Shared {
    /// The engine over its store; `None` after `close()`.
    pub backend: Option<Backend>,
    /// Waits in progress.
    pub waits: Waits,
}

/// A settled wait, delivered to JS after the borrow of [`Shared`] ends.
type Settlement = (Function, JsValue);

/// Starts a wait: polls once now, and if the waiter is not done, keeps it
/// with the Promise's `resolve`/`reject` until a commit or its time.
pub fn start(shared: &Rc<RefCell<Shared>>, waiter: Waiter, resolve: Function, reject: Function) {
    let id = {
        let mut state = shared.borrow_mut();
        state.waits.next_id += 1;
        let id = state.waits.next_id;
        state.waits.pending.push(Pending {
            id,
            waiter,
            resolve,
            reject,
            timer: None,
        });
        id
    };
    poll(shared, Some(id));
}

/// Polls one wait (`Some(id)`) or every wait (`None`, after a command that
/// may have written), settling those that are over and rescheduling the
/// rest.
pub fn poll(shared: &Rc<RefCell<Shared>>, only: Option<u64>) {
    let settled = {
        let mut guard = shared.borrow_mut();
        let state = &mut *guard;
        let Some(backend) = state.backend.as_mut() else {
            return;
        };
        let mut settled: Vec<Settlement> = Vec::new();
        let mut index = 0;
        while index < state.waits.pending.len() {
            let pending = &mut state.waits.pending[index];
            if only.is_some_and(|id| id != pending.id) {
                index += 1;
                continue;
            }
            match pending.waiter.poll(backend) {
                WaitStep::Finished(response) => {
                    let pending = state.waits.pending.swap_remove(index);
                    settled.push(settle(&pending, &response));
                }
                WaitStep::Pending { within } => {
                    let within = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
                    let until = i64::try_from(backend.ticks())
                        .unwrap_or(i64::MAX)
                        .saturating_add(within);
                    if pending.timer.as_ref().is_none_or(|(at, _)| *at != until) {
                        // One millisecond late rather than early: timers and
                        // the clock round differently, and a poll before
                        // `until` would only schedule itself again.
                        let timer = schedule(Rc::downgrade(shared), pending.id, within + 1);
                        pending.timer = Some((until, timer));
                    }
                    index += 1;
                }
            }
        }
        if state.waits.pending.is_empty() {
            state.waits.outside = None;
        } else if state.waits.outside.is_none() && backend.kind() == StoreKind::File {
            state.waits.outside = Some(look_outside(Rc::downgrade(shared)));
        }
        settled
    };
    deliver(settled);
}

/// Looks, after [`OUTSIDE_POLL_MS`], whether another process changed the
/// file, and polls every wait if it did.
fn look_outside(shared: Weak<RefCell<Shared>>) -> Timer {
    Timer::after(OUTSIDE_POLL_MS, move || {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let changed = {
            let mut state = shared.borrow_mut();
            state.waits.outside = None;
            state.backend.as_mut().is_some_and(Backend::outside_changed)
        };
        if changed {
            poll(&shared, None);
        } else {
            let mut state = shared.borrow_mut();
            if !state.waits.pending.is_empty() {
                state.waits.outside = Some(look_outside(Rc::downgrade(&shared)));
            }
        }
    })
}

/// Rejects every wait in progress (the inbox is closing).
pub fn abandon(shared: &Rc<RefCell<Shared>>, error: JsValue) {
    let pending = std::mem::take(&mut shared.borrow_mut().waits.pending);
    deliver(
        pending
            .into_iter()
            .map(|p| (p.reject, error.clone()))
            .collect(),
    );
}

fn settle(pending: &Pending, response: &Response) -> Settlement {
    match js::response_to_js(response) {
        Ok(value) => (pending.resolve.clone(), value),
        Err(error) => (pending.reject.clone(), error),
    }
}

fn deliver(settled: Vec<Settlement>) {
    for (function, value) in settled {
        // resolve/reject of a Promise never throw.
        let _ = function.call1(&JsValue::UNDEFINED, &value);
    }
}

fn schedule(shared: Weak<RefCell<Shared>>, id: u64, delay_millis: i64) -> Timer {
    Timer::after(delay_millis, move || {
        // A timer may outlive its inbox (freed without close): then there
        // is nothing left to poll.
        if let Some(shared) = shared.upgrade() {
            // This timer has fired: forget it, so that the poll schedules a
            // new one even if it asks for the same instant again.
            if let Some(pending) = shared
                .borrow_mut()
                .waits
                .pending
                .iter_mut()
                .find(|p| p.id == id)
            {
                pending.timer = None;
            }
            poll(&shared, Some(id));
        }
    })
}
