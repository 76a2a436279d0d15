//! [`Waiter`]: the sans-IO state machine behind blocking `watch`,
//! `wait-reply` and `orch-wait`.
//!
//! The engine answers a wait request with one poll. A host that wants to
//! block creates a [`Waiter`], calls [`Waiter::poll`], and while it returns
//! [`WaitStep::Pending`] sleeps until either the store changes (inotify, a
//! notifier, a poll of `PRAGMA data_version`) or the `until` instant, then
//! polls again. The waiter decides everything else, identically on every
//! host: the cursor, the deadline, when to record lapsed leases (so waiters
//! learn of a dead worker on time), when to renew the lease of a holder
//! that is waiting for an answer (the waiting process is the heartbeat),
//! and for `orch-wait`, when to reconcile the run (so a worker's `done`, a
//! lapsed lease or a retry's backoff becomes an event the leader wakes on).
//!
//! It never sleeps, reads a clock of its own or touches storage directly: it
//! only issues [`Request`]s through an [`Executor`].

use std::ops::ControlFlow;
use std::time::Duration;

use crate::call::Call;
use crate::command::{Command, Effect};
use crate::command::{Output, Request};
use crate::engine::Engine;
use crate::error::ErrorCode;
use crate::ids::IdSource;
use crate::model::Lease;
use crate::response::Response;
use crate::store::Store;
use crate::time::{Clock, Timestamp};
use crate::validate;
use crate::wire::{
    OrchWaitRequest, RenewRequest, SweepRequest, ThreadView, WaitReplyRequest, WatchRequest,
};

/// Anything that executes requests and tells the time: an [`Engine`], or a
/// host's proxy to an engine in a sandbox.
pub trait Executor {
    /// Executes one request with its envelope (see [`Engine::execute_call`]).
    fn execute_call(&mut self, call: Call) -> Response;
    /// Executes one request (see [`Engine::execute`]).
    fn execute(&mut self, request: Request) -> Response {
        self.execute_call(Call::from(request))
    }
    /// The current time, from the same clock the engine uses.
    fn now(&mut self) -> Timestamp;
    /// The same clock's monotonic milliseconds (see [`Clock::ticks`]).
    fn ticks(&mut self) -> u64;
}

impl<S: Store, C: Clock, I: IdSource> Executor for Engine<S, C, I> {
    fn execute_call(&mut self, call: Call) -> Response {
        Engine::execute_call(self, call)
    }

    fn execute(&mut self, request: Request) -> Response {
        Engine::execute(self, request)
    }

    fn now(&mut self) -> Timestamp {
        Engine::now(self)
    }

    fn ticks(&mut self) -> u64 {
        self.clock_mut().ticks()
    }
}

/// What the host does next.
// A finished step carries a whole response; it is returned once per wait and
// moved once, so boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum WaitStep {
    /// The wait is over: print this response (it woke, timed out with exit
    /// 10, or failed).
    Finished(Response),
    /// Nothing yet. Block until the store changes or `within` has passed
    /// (on a monotonic clock), whichever is first, then call
    /// [`Waiter::poll`] again. Waking early is harmless.
    Pending {
        /// How long to wait at most before polling again.
        within: Duration,
    },
}

#[derive(Clone, Debug)]
enum Wait {
    Watch(WatchRequest),
    Reply(WaitReplyRequest),
    Orch(OrchWaitRequest),
}

/// One blocking `watch`, `wait-reply` or `orch-wait` in progress.
#[derive(Clone, Debug)]
///
/// Its schedule (the deadline, the next heartbeat and sweep) is kept in the
/// executor's monotonic milliseconds ([`Executor::ticks`]), so a wall clock
/// stepped back or forward moves none of it; instants that come from
/// records (a lease's expiry) are turned into ticks from the wall clock
/// once, when they are learned.
pub struct Waiter {
    wait: Wait,
    /// When the wait times out, in ticks.
    deadline: Option<u64>,
    /// When the next live lease runs out, as of the last sweep: the waiter
    /// polls (and so sweeps) again then. In ticks.
    sweep_at: Option<u64>,
    /// When to renew the waiting holder's lease, if it holds one. In ticks.
    heartbeat_at: Option<u64>,
    /// Whether the first poll has decided about heartbeats.
    started: bool,
    /// The token of the agent the wait acts as, passed on every look and
    /// heartbeat (the call's envelope, see [`Waiter::for_call`]).
    agent_token: Option<String>,
}

impl Waiter {
    /// A waiter for a `watch`, `wait-reply` or `orch-wait` request; any
    /// other command is refused with the response to return.
    pub fn new(request: Request) -> Result<Waiter, Box<Response>> {
        let wait = match request {
            Request::Watch(r) => Wait::Watch(r),
            Request::WaitReply(r) => Wait::Reply(r),
            Request::OrchWait(r) => Wait::Orch(r),
            other => return Err(Box::new(does_not_wait(other.command()))),
        };
        Ok(Waiter {
            wait,
            deadline: None,
            sweep_at: None,
            heartbeat_at: None,
            started: false,
            agent_token: None,
        })
    }

    /// A waiter for a call: its envelope checked first (a wait takes no
    /// idempotency key), then as [`Waiter::new`]; the acting agent's token
    /// goes with every request the wait makes.
    pub fn for_call(call: Call) -> Result<Waiter, Box<Response>> {
        if let Err(error) = call.check() {
            let command = call.request.command().as_str().to_owned();
            return Err(Box::new(Response::failure(Some(command), error)));
        }
        let mut waiter = Waiter::new(call.request)?;
        waiter.agent_token = call.agent_token;
        Ok(waiter)
    }

    /// The command being waited on.
    pub fn command(&self) -> Command {
        match self.wait {
            Wait::Watch(_) => Command::Watch,
            Wait::Reply(_) => Command::WaitReply,
            Wait::Orch(_) => Command::OrchWait,
        }
    }

    /// The wait's deadline in the executor's ticks, once the first poll
    /// has set it.
    pub fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Does everything due now and reports what the host should do next.
    pub fn poll(&mut self, engine: &mut impl Executor) -> WaitStep {
        let clock = Now {
            wall: engine.now(),
            ticks: engine.ticks(),
        };
        let timeout = match &self.wait {
            Wait::Watch(r) => r.timeout_seconds,
            Wait::Reply(r) => r.timeout_seconds,
            Wait::Orch(r) => r.timeout_seconds,
        }
        .unwrap_or(validate::DEFAULT_TIMEOUT_SECONDS)
        .min(validate::MAX_TIMEOUT_SECONDS);
        let deadline = *self
            .deadline
            .get_or_insert(clock.ticks.saturating_add(timeout.saturating_mul(1000)));

        if self.heartbeat_at.is_some_and(|at| clock.ticks >= at)
            && let Some(finished) = self.heartbeat(engine, clock)
        {
            return WaitStep::Finished(finished);
        }

        if let Wait::Orch(_) = &self.wait {
            return self.poll_orch(engine, clock, deadline);
        }

        // Look first: a wake must not wait for housekeeping.
        let mut response = match self.look(engine.execute_call(self.request()), clock) {
            ControlFlow::Break(answer) => return WaitStep::Finished(answer),
            ControlFlow::Continue(response) => response,
        };
        // Nothing yet: record lapsed leases. This runs on every poll that
        // finds nothing, because a poll usually follows a write, which may
        // have added a lease that runs out sooner than any the waiter knew
        // of; it is a cheap read when nothing has lapsed. A lapse can itself
        // be what the waiter waits for (a worker's death, a failed thread),
        // so if anything was recorded, look again.
        let swept = match engine.execute(Request::Sweep(SweepRequest {})) {
            Response::Success(Output::Sweep(out)) => {
                self.sweep_at = out.next_lease_expiry.map(|at| clock.ticks_at(at));
                !out.events.is_empty()
            }
            // Errors surface through the next look, which uses the same store.
            _ => {
                self.sweep_at = Some(clock.ticks + 1000);
                false
            }
        };
        if swept {
            response = match self.look(engine.execute_call(self.request()), clock) {
                ControlFlow::Break(answer) => return WaitStep::Finished(answer),
                ControlFlow::Continue(response) => response,
            };
        }
        self.next_step(response, clock, deadline)
    }

    /// After a look that did not end the wait: finished at the deadline,
    /// else pending until the first of the deadline, the next sweep (or
    /// reconcile) and the next heartbeat.
    fn next_step(&mut self, response: Response, clock: Now, deadline: u64) -> WaitStep {
        self.started = true;
        if clock.ticks >= deadline {
            return WaitStep::Finished(response);
        }
        let next = [Some(deadline), self.sweep_at, self.heartbeat_at]
            .into_iter()
            .flatten()
            .filter(|&t| t > clock.ticks)
            .min()
            .unwrap_or(deadline);
        WaitStep::Pending {
            within: Duration::from_millis(next - clock.ticks),
        }
    }

    /// `orch-wait`: each look records what the run's threads did first (a
    /// write: lapsed leases, the attempts' outcomes, retries whose backoff
    /// ended), in the same transaction, so the events the leader wakes on
    /// exist when it looks. Polls again when the next retry or lease is due.
    fn poll_orch(&mut self, engine: &mut impl Executor, clock: Now, deadline: u64) -> WaitStep {
        let response = engine.execute_call(self.request());
        // A busy store: look again in a second (at the deadline, the busy
        // error is the answer). Any other failure ends the wait (see `look`).
        if let Response::Failure { error, .. } = &response
            && error.code() == ErrorCode::StorageBusy
        {
            self.sweep_at = Some(clock.ticks + 1000);
            return self.next_step(response, clock, deadline);
        }
        self.sweep_at = match &response {
            Response::Success(Output::OrchWait(out)) => out.next_due.map(|at| clock.ticks_at(at)),
            _ => None,
        };
        match self.look(response, clock) {
            ControlFlow::Break(answer) => WaitStep::Finished(answer),
            ControlFlow::Continue(response) => self.next_step(response, clock, deadline),
        }
    }

    /// Breaks with the answer that ends the wait, if `response` ends it: the
    /// response itself when it woke or failed, `lease_lost` when the waiting
    /// holder's lease was taken over; else continues with the response.
    /// Moves the cursor past what the response covered and, on the first
    /// look, pins the lease the waiting holder keeps alive.
    fn look(&mut self, response: Response, clock: Now) -> ControlFlow<Response, Response> {
        let output = match &response {
            Response::Failure { .. } => return ControlFlow::Break(response),
            Response::Success(output) | Response::Replayed(output) => output,
        };
        match (&mut self.wait, output) {
            (Wait::Watch(r), Output::Watch(out)) => r.after_event = Some(out.next_event_id),
            (Wait::Orch(r), Output::OrchWait(out)) => r.after_event = Some(out.next_event_id),
            (Wait::Reply(r), Output::WaitReply(out)) => {
                r.after_event = Some(out.next_event_id);
                r.after_message = None;
                if !self.started {
                    self.heartbeat_at =
                        pin_held_lease(r, &out.thread).map(|lease| clock.ticks_at(renew_at(lease)));
                }
                if !out.woke
                    && let Some(lost) = taken_over(r, &out.thread)
                {
                    return ControlFlow::Break(lost);
                }
            }
            // A request answers with its own command's output.
            _ => {}
        }
        if output.found_nothing() {
            ControlFlow::Continue(response)
        } else {
            ControlFlow::Break(response)
        }
    }

    /// The next look: the wait's request from its cursor, with the token.
    fn request(&self) -> Call {
        self.call(match &self.wait {
            Wait::Watch(r) => Request::Watch(r.clone()),
            Wait::Reply(r) => Request::WaitReply(r.clone()),
            Wait::Orch(r) => Request::OrchWait(r.clone()),
        })
    }

    /// `request` acting with the wait's token.
    fn call(&self, request: Request) -> Call {
        Call {
            agent_token: self.agent_token.clone(),
            ..Call::from(request)
        }
    }

    /// Renews the waiting holder's lease. Returns a response to finish with
    /// when the lease is gone for good.
    fn heartbeat(&mut self, engine: &mut impl Executor, clock: Now) -> Option<Response> {
        let Wait::Reply(r) = &self.wait else {
            self.heartbeat_at = None;
            return None;
        };
        let renew = Request::Renew(RenewRequest {
            agent: r.agent.clone(),
            thread_id: r.thread_id.clone(),
            lease_token: r.lease_token,
            lease_seconds: None,
        });
        match engine.execute_call(self.call(renew)) {
            Response::Success(Output::Renew(out)) => {
                self.heartbeat_at = Some(clock.ticks_at(renew_at(&out.lease)));
                None
            }
            Response::Failure { error, .. } => match error.code() {
                ErrorCode::LeaseLost | ErrorCode::NotLeaseHolder => Some(Response::failure(
                    Some(self.command().as_str().to_owned()),
                    error,
                )),
                // The thread finished or was never claimed: nothing to keep
                // alive; the poll reports the rest.
                ErrorCode::InvalidState => {
                    self.heartbeat_at = None;
                    None
                }
                // Busy or failing store: try again shortly.
                _ => {
                    self.heartbeat_at = Some(clock.ticks + 1000);
                    None
                }
            },
            Response::Success(_) | Response::Replayed(_) => {
                self.heartbeat_at = None;
                None
            }
        }
    }
}

/// The refusal of a waiter for a command that does not wait.
fn does_not_wait(command: Command) -> Response {
    let waits: Vec<&str> = Command::ALL
        .iter()
        .filter(|c| c.effect() == Effect::Wait)
        .map(|c| c.as_str())
        .collect();
    Response::failure(
        Some(command.as_str().to_owned()),
        crate::EngineError::InvalidRequest {
            message: format!("`{command}` does not wait; only {} do", waits.join(", ")),
        },
    )
}

/// One reading of the executor's two clocks, taken at the start of a poll.
#[derive(Clone, Copy, Debug)]
struct Now {
    wall: Timestamp,
    ticks: u64,
}

impl Now {
    /// The tick at which the wall clock will read `at` (now, if it already
    /// does): how an instant from a record joins the waiter's schedule.
    fn ticks_at(self, at: Timestamp) -> u64 {
        let ahead = at.as_millis().saturating_sub(self.wall.as_millis()).max(0);
        self.ticks.saturating_add(ahead.unsigned_abs())
    }
}

fn holds(request: &WaitReplyRequest, lease: &Lease) -> bool {
    request.agent.as_deref() == Some(lease.agent.as_str())
        && request.lease_token.is_none_or(|t| t == lease.lease_token)
}

/// When the waiting agent holds the thread's live lease as the wait
/// begins, fixes that lease's token in the request: the wait keeps exactly
/// that lease alive, never a later claim made under the same agent name
/// (another process, or the same one restarted). Returns the lease.
fn pin_held_lease<'a>(request: &mut WaitReplyRequest, thread: &'a ThreadView) -> Option<&'a Lease> {
    let lease = thread.lease.as_ref().filter(|l| holds(request, l))?;
    request.lease_token = Some(lease.lease_token);
    Some(lease)
}

/// The `lease_lost` answer when the lease the waiter holds (its pinned or
/// given token) was replaced by a newer claim.
fn taken_over(request: &WaitReplyRequest, thread: &ThreadView) -> Option<Response> {
    let token = request.lease_token?;
    let lease = thread.lease.as_ref().filter(|l| l.lease_token > token)?;
    Some(Response::failure(
        Some(Command::WaitReply.as_str().to_owned()),
        crate::EngineError::LeaseLost {
            thread_id: thread.thread.thread_id.clone(),
            holder: lease.agent.clone(),
            lease_token: lease.lease_token,
        },
    ))
}

/// Renew once a third of the lease has passed, leaving two more chances
/// before it runs out.
fn renew_at(lease: &Lease) -> Timestamp {
    let length = i64::try_from(lease.lease_seconds).unwrap_or(i64::MAX / 1000) * 1000;
    lease.expires_at.plus_millis(-(length - length / 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command the table says waits must have its place here: its own
    /// cursor, deadline and (for a holder) heartbeat are this module's.
    #[test]
    fn every_waiting_command_gets_a_waiter_and_no_other_does() {
        for &command in Command::ALL {
            let waiter = Waiter::new(command.empty_request());
            assert_eq!(
                waiter.is_ok(),
                command.effect() == Effect::Wait,
                "{command}: the command table and Waiter::new disagree"
            );
            if let Ok(waiter) = waiter {
                assert_eq!(waiter.command(), command);
            }
        }
    }

    /// A waiting command must be one that can find nothing, or its waiter
    /// would end at the first look.
    #[test]
    fn every_waiting_command_may_find_nothing() {
        for &command in Command::ALL {
            if command.effect() == Effect::Wait {
                assert!(
                    command.may_find_nothing(),
                    "{command} waits but is not marked or_nothing in the command table"
                );
            }
        }
    }
}
