//! Waking waiters on other machines: [`Listener`], a connection that
//! `LISTEN`s on [`CHANNEL`], shared by every wait of a process through its
//! [`Hub`] (one listening connection per process and database), where every write transaction
//! that wrote events notifies the highest id it wrote (see
//! [`super::PgStore`]'s commit). A notification is only a hint: a waiter
//! always re-runs its query from its cursor after a wake, and after every
//! (re)connect of the listener, because notifications sent while nobody
//! listened are gone. A missed notification can therefore delay a wake
//! (until the waiter's bounded sleep ends) but never lose one. This module
//! must never read records or decide whether a wait is over; it only says
//! when looking again is worthwhile, which includes once a server that
//! went away (and failed a look) is back.

use std::sync::{Arc, Condvar, Mutex, Weak};
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

/// How often a wait that may be stopped (an MCP call its client cancels)
/// checks whether it was.
pub const STOP_CHECK: Duration = Duration::from_millis(50);

/// Runs a wait (`watch`, `wait-reply`, `orch wait`) on an engine over a
/// PostgreSQL store: it looks, and while the engine says to wait, sleeps on
/// the process's [`Hub`] (at most [`POLL_FALLBACK`]) and looks again,
/// after any notification, reconnect or timeout alike. The engine decides
/// when the wait is over, so a spurious wake costs one look and a missed
/// one at most [`POLL_FALLBACK`]. Returns `None` soon (within
/// [`STOP_CHECK`]) after `stop` starts answering true; what the wait did
/// until then (a renewed lease) stays done.
///
/// A server that cannot be reached (a restart, a cut network) does not
/// end the wait before its deadline: a look that failed with
/// `storage_error` while the hub's listener lost the server too is made
/// again once the listener is back. A failed look changed nothing (the
/// waiter moves its cursor only past what a look returned), so looking
/// again is the same look.
pub fn wait<E: Executor>(
    engine: &mut E,
    call: Call,
    hub: &Hub,
    stop: Option<&dyn Fn() -> bool>,
) -> Option<Response> {
    let mut waiter = match Waiter::for_call(call) {
        Ok(waiter) => waiter,
        Err(response) => return Some(*response),
    };
    loop {
        // Read before the look: a commit the look does not see bumps it.
        let seen = hub.seen();
        match waiter.poll(engine) {
            WaitStep::Finished(response) => {
                let again = storage_failure(&response)
                    && hub.back_after_outage(seen, time_left(&waiter, engine));
                if !again {
                    return Some(response);
                }
            }
            WaitStep::Pending { within } => {
                let mut sleep = within.min(POLL_FALLBACK);
                if let Some(stop) = stop {
                    if stop() {
                        return None;
                    }
                    sleep = sleep.min(STOP_CHECK);
                }
                hub.wait_after(seen, sleep);
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

/// One listening connection shared by every wait of a process on one
/// database: a thread sleeps on a [`Listener`] and counts what it sees
/// (notifications, and reconnects, after which anything may have been
/// missed) and whether it can reach the server; waiters note the counts
/// before they look and sleep until they move. The thread and its
/// connection end once no waiter holds the hub (within
/// [`POLL_FALLBACK`]).
#[derive(Clone)]
pub struct Hub {
    shared: Arc<Shared>,
}

/// What the listener saw, and the condition waiters sleep on.
struct Shared {
    state: Mutex<Seen>,
    moved: Condvar,
}

/// What a hub's listener has seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Wakes: notifications and reconnects.
    wakes: u64,
    /// Reconnects after the server ended the listener's session.
    reconnects: u64,
    /// Whether the listener could not reach the server at its last try.
    down: bool,
}

/// The process's live hubs, by the database they listen to.
static HUBS: Mutex<Vec<(String, Weak<Shared>)>> = Mutex::new(Vec::new());

impl Hub {
    /// The process's hub for the database `config` names: the live one,
    /// or a new one, listening before this returns (so that no commit
    /// after a waiter's first look can go unnoticed).
    pub fn for_database(config: &Config) -> Result<Hub, StoreError> {
        let key = describe(config);
        let mut hubs = HUBS.lock().unwrap_or_else(|e| e.into_inner());
        hubs.retain(|(_, hub)| hub.strong_count() > 0);
        if let Some(shared) = hubs
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, hub)| hub.upgrade())
        {
            return Ok(Hub { shared });
        }
        let listener = Listener::connect(config.clone())?;
        let shared = Arc::new(Shared {
            state: Mutex::new(Seen::default()),
            moved: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        hubs.push((key, weak.clone()));
        std::thread::Builder::new()
            .name("inbox-listen".into())
            .spawn(move || listen_for(listener, weak))
            .map_err(|e| StoreError::other(format!("cannot start the listening thread: {e}")))?;
        Ok(Hub { shared })
    }

    /// What the listener has seen so far.
    pub fn seen(&self) -> Seen {
        *self.lock()
    }

    /// Sleeps until the listener has seen a wake after `seen`, or for
    /// `timeout`.
    pub fn wait_after(&self, seen: Seen, timeout: Duration) {
        let state = self.lock();
        let _ = self
            .shared
            .moved
            .wait_timeout_while(state, timeout, |now| now.wakes == seen.wakes);
    }

    /// After a look that failed with `storage_error` (`seen` from before
    /// it): whether the server was away and is back within `within`, so
    /// that the same look is worth making again. The listener finds a
    /// server restart within one of its sleeps ([`POLL_FALLBACK`]); if it
    /// finds nothing wrong, the failure was not an outage.
    pub fn back_after_outage(&self, seen: Seen, within: Duration) -> bool {
        let due = Instant::now() + within;
        let noticed = self.wait_while(POLL_FALLBACK.min(within) * 2, |now| {
            !now.down && now.reconnects == seen.reconnects
        });
        if !noticed.down {
            return noticed.reconnects != seen.reconnects;
        }
        let left = due.saturating_duration_since(Instant::now());
        !self.wait_while(left, |now| now.down).down
    }

    /// Sleeps while `keep` holds of what the listener has seen, at most
    /// `timeout`; returns what it has seen then.
    fn wait_while(&self, timeout: Duration, keep: impl FnMut(&mut Seen) -> bool) -> Seen {
        let state = self.lock();
        let (state, _) = self
            .shared
            .moved
            .wait_timeout_while(state, timeout, keep)
            .unwrap_or_else(|e| e.into_inner());
        *state
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The hub's thread: listens until no waiter holds the hub, and records
/// what it sees. While the server cannot be reached, it tries again
/// every [`POLL_FALLBACK`] (each [`Listener::wait`] reconnects first).
fn listen_for(mut listener: Listener, hub: Weak<Shared>) {
    loop {
        let wake = listener.wait(POLL_FALLBACK);
        let Some(shared) = hub.upgrade() else {
            return;
        };
        let mut seen = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = *seen;
        match wake {
            Ok(Wake::TimedOut) => seen.down = false,
            Ok(Wake::Notified(_)) => {
                seen.wakes += 1;
                seen.down = false;
            }
            Ok(Wake::Reconnected) => {
                seen.wakes += 1;
                seen.reconnects += 1;
                seen.down = false;
            }
            Err(_) => seen.down = true,
        }
        let changed = *seen != before;
        drop(seen);
        if changed {
            shared.moved.notify_all();
        }
        if wake.is_err() {
            std::thread::sleep(POLL_FALLBACK);
        }
    }
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

/// A new connection listening on [`CHANNEL`].
fn listening(config: &Config, location: &str) -> Result<Client, StoreError> {
    let mut client = super::tls::connect(config, location)?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| pg_error(e, location))?;
    Ok(client)
}
