//! Waking waiters on other machines: [`Listener`], one connection per
//! process that `LISTEN`s on [`CHANNEL`], where every write transaction
//! that wrote events notifies the highest id it wrote (see
//! [`super::PgStore`]'s commit). A notification is only a hint: a waiter
//! always re-runs its query from its cursor after a wake, and after every
//! (re)connect of the listener, because notifications sent while nobody
//! listened are gone. A missed notification can therefore delay a wake
//! (until the waiter's bounded sleep ends) but never lose one. This module
//! must never read records or decide whether a wait is over; it only says
//! when looking again is worthwhile, which includes once a server that
//! went away (and failed a look) is back.

use std::time::{Duration, Instant};

use inbox_engine::wait::{Executor, WaitStep, Waiter};
use inbox_engine::{Call, ErrorCode, EventId, Response, StoreError};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Config};

use super::{describe, pg_error};

/// The channel write transactions notify, with the highest event id they
/// wrote as the payload. One channel per PostgreSQL database: inbox
/// databases in other schemas of it wake each other's listeners for
/// nothing, which costs a query and never a missed event.
pub const CHANNEL: &str = "inbox_events";

/// The longest a waiter sleeps between looks whatever the listener says:
/// the bound on how late a lost notification (or a listener that cannot
/// reconnect) makes a wake.
pub const POLL_FALLBACK: Duration = Duration::from_secs(1);

/// Runs a wait (`watch`, `wait-reply`, `orch wait`) on an engine over a
/// PostgreSQL store: it looks, and while the engine says to wait, sleeps on
/// `listener` (at most [`POLL_FALLBACK`]) and looks again, after any
/// notification, reconnect or timeout alike. The engine decides when the
/// wait is over, so a spurious wake costs one look and a missed one at
/// most [`POLL_FALLBACK`].
///
/// A server that cannot be reached (a restart, a cut network) does not
/// end the wait before its deadline: while the listener cannot listen,
/// it does not look, and a look that failed with `storage_error` because
/// the server went away is made again once it is back. A failed look
/// changed nothing (the waiter moves its cursor only past what a look
/// returned), so looking again is the same look.
pub fn wait<E: Executor>(engine: &mut E, call: Call, listener: &mut Listener) -> Response {
    let mut waiter = match Waiter::for_call(call) {
        Ok(waiter) => waiter,
        Err(response) => return *response,
    };
    loop {
        match waiter.poll(engine) {
            WaitStep::Finished(response) => {
                // Look again once the server is back, if its absence is
                // what failed the look.
                let again = storage_failure(&response)
                    && listener.server_was_lost()
                    && listener.wait_for_server(time_left(&waiter, engine));
                if !again {
                    return response;
                }
            }
            WaitStep::Pending { within } => {
                let sleep = within.min(POLL_FALLBACK);
                if listener.wait(sleep).is_err() {
                    // A look now would fail and end the wait: wait for
                    // the server, until the waiter is due anyway.
                    listener.wait_for_server(within);
                }
            }
        }
    }
}

/// Whether a response is a `storage_error` failure.
fn storage_failure(response: &Response) -> bool {
    matches!(response, Response::Failure { error, .. } if error.code() == ErrorCode::StorageError)
}

/// The time until the waiter's deadline (none once it has passed).
fn time_left<E: Executor>(waiter: &Waiter, engine: &mut E) -> Duration {
    let now = engine.ticks();
    let deadline = waiter.deadline().unwrap_or(now);
    Duration::from_millis(deadline.saturating_sub(now))
}

/// What ended a [`Listener::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A commit notified; the highest event id it wrote, when its payload
    /// said so.
    Notified(Option<EventId>),
    /// The listener reconnected: anything may have been missed, so look.
    Reconnected,
    /// Nothing came within the time given.
    TimedOut,
}

/// A connection that listens for commits.
pub struct Listener {
    config: Config,
    client: Client,
    location: String,
}

impl Listener {
    /// Connects with `config` (completed from the environment as
    /// [`super::PgStore::connect`] does) and starts listening.
    pub fn connect(mut config: Config) -> Result<Listener, StoreError> {
        super::from_environment(&mut config);
        config.application_name("inbox-listen");
        let location = describe(&config);
        let client = listening(&config, &location)?;
        Ok(Listener {
            config,
            client,
            location,
        })
    }

    /// Waits up to `timeout` for a notification. A lost connection is
    /// re-established (once per call) and reported as
    /// [`Wake::Reconnected`]; an error means the server cannot be reached
    /// now, and the caller's wait goes on polling.
    pub fn wait(&mut self, timeout: Duration) -> Result<Wake, StoreError> {
        let next = self.client.notifications().timeout_iter(timeout).next();
        match next {
            Ok(Some(notification)) => Ok(Wake::Notified(notification.payload().parse().ok())),
            Ok(None) if !self.client.is_closed() => Ok(Wake::TimedOut),
            // The connection went away (a server restart, a proxy, a
            // terminated backend): listen again before saying so.
            Ok(None) | Err(_) => {
                self.client = listening(&self.config, &self.location)?;
                Ok(Wake::Reconnected)
            }
        }
    }
}

impl Listener {
    /// Whether the listener's session is gone and the server does not
    /// take a new one now: a failed look was the server's absence, not
    /// a fault of the command.
    fn server_was_lost(&mut self) -> bool {
        if self.client.is_valid(POLL_FALLBACK).is_ok() {
            return false;
        }
        match listening(&self.config, &self.location) {
            Ok(client) => {
                self.client = client;
                // Back already (a quick restart): look again.
                true
            }
            Err(_) => true,
        }
    }

    /// Listens again, trying every [`POLL_FALLBACK`], until it can (true)
    /// or `within` has passed (false): how a wait outlasts a restart.
    fn wait_for_server(&mut self, within: Duration) -> bool {
        let due = Instant::now() + within;
        loop {
            if !self.client.is_closed() && self.client.is_valid(POLL_FALLBACK).is_ok() {
                return true;
            }
            if let Ok(client) = listening(&self.config, &self.location) {
                self.client = client;
                return true;
            }
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(POLL_FALLBACK));
        }
    }
}

/// A new connection listening on [`CHANNEL`].
fn listening(config: &Config, location: &str) -> Result<Client, StoreError> {
    let mut client = super::tls::connect(config, location)?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| pg_error(e, location))?;
    Ok(client)
}
