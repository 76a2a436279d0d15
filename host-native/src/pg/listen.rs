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
//! when looking again is worthwhile.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use inbox_engine::wait::{Executor, WaitStep, Waiter};
use inbox_engine::{Call, EventId, Response, StoreError};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Config, NoTls};

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
        let seen = hub.generation();
        match waiter.poll(engine) {
            WaitStep::Finished(response) => return Some(response),
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

/// One listening connection shared by every wait of a process on one
/// database: a thread sleeps on a [`Listener`] and counts its wakes (a
/// notification or a reconnect, after which anything may have been
/// missed); waiters note the count before they look and sleep until it
/// moves. The thread and its connection end once no waiter holds the hub
/// (within [`POLL_FALLBACK`]).
#[derive(Clone)]
pub struct Hub {
    shared: Arc<Wakes>,
}

/// The count of wakes, and the condition waiters sleep on.
struct Wakes {
    count: Mutex<u64>,
    moved: Condvar,
}

/// The process's live hubs, by the database they listen to.
static HUBS: Mutex<Vec<(String, Weak<Wakes>)>> = Mutex::new(Vec::new());

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
        let shared = Arc::new(Wakes {
            count: Mutex::new(0),
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

    /// How many wakes the listener has seen.
    pub fn generation(&self) -> u64 {
        *self.shared.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps until the listener has seen a wake after `seen`, or for
    /// `timeout`.
    pub fn wait_after(&self, seen: u64, timeout: Duration) {
        let count = self.shared.count.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .shared
            .moved
            .wait_timeout_while(count, timeout, |count| *count == seen);
    }
}

/// The hub's thread: listens until no waiter holds the hub.
fn listen_for(mut listener: Listener, hub: Weak<Wakes>) {
    loop {
        let wake = listener.wait(POLL_FALLBACK);
        let Some(wakes) = hub.upgrade() else {
            return;
        };
        match wake {
            Ok(Wake::TimedOut) => {}
            Ok(Wake::Notified(_) | Wake::Reconnected) => {
                *wakes.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                wakes.moved.notify_all();
            }
            // The server cannot be reached now: the waiters poll.
            Err(_) => std::thread::sleep(POLL_FALLBACK),
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
    let mut client = config.connect(NoTls).map_err(|e| pg_error(e, location))?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| pg_error(e, location))?;
    Ok(client)
}
