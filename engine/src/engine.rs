//! [`Engine`]: executes one [`Request`] as one store transaction and returns
//! one [`Response`].
//!
//! Each command is validated first (pure, no store access), then run inside a
//! transaction: reads in a read transaction, everything else in a write
//! transaction that first records lapsed leases (the sweep). Any error rolls
//! the transaction back, so a failed command has changed nothing. This module
//! must never block, sleep or read a clock other than the injected one:
//! waiting is the host's job, helped by [`crate::Waiter`].

mod input;
mod reads;
mod tx;

use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::Kind;
use crate::rules::Action;
use crate::store::{Store, TxMode};
use crate::time::{Clock, Timestamp};
use crate::validate as v;
use crate::wire::*;

use input::*;
use tx::Tx;

/// Reply kinds `wait-reply` matches when the request names none.
pub const DEFAULT_REPLY_KINDS: &[Kind] = &[Kind::Answer, Kind::Control, Kind::Result];

/// The inbox rules over a store, a clock and an id source.
///
/// Construct one per connection (the CLI makes one per process; a wasm
/// instance keeps one). It is not `Sync`; hosts that share a store across
/// threads give each thread its own engine over its own connection.
pub struct Engine<S, C, I> {
    store: S,
    clock: C,
    ids: I,
}

impl<S: Store, C: Clock, I: IdSource> Engine<S, C, I> {
    /// An engine over `store`, taking time from `clock` and ids from `ids`.
    pub fn new(store: S, clock: C, ids: I) -> Self {
        Engine { store, clock, ids }
    }

    /// The store, e.g. to inspect it in tests.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably (hosts use it for maintenance outside commands).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock, e.g. to move a [`crate::ManualClock`].
    pub fn clock_mut(&mut self) -> &mut C {
        &mut self.clock
    }

    /// Takes the engine apart.
    pub fn into_parts(self) -> (S, C, I) {
        (self.store, self.clock, self.ids)
    }

    /// The current time from the injected clock.
    pub fn now(&mut self) -> Timestamp {
        self.clock.now()
    }

    /// Decodes a JSON request and executes it; the JSON entry point of the
    /// wasm and plugin hosts.
    pub fn execute_json(&mut self, json: &str) -> Response {
        match Request::from_json(json) {
            Ok(request) => self.execute(request),
            Err(failure) => *failure,
        }
    }

    /// Executes one command. Never panics on any input; an error response
    /// means nothing was changed.
    ///
    /// `watch` and `wait-reply` poll once and return `woke: false` if nothing
    /// matched; to block, drive them with a [`crate::Waiter`].
    pub fn execute(&mut self, request: Request) -> Response {
        let command = request.command();
        match self.run(request) {
            Ok(output) => Response::Success(output),
            Err(error) => Response::failure(Some(command.to_owned()), error),
        }
    }

    fn run(&mut self, request: Request) -> Result<Output, EngineError> {
        match request {
            Request::Init(_) => {
                let info = self.store.initialize()?;
                Ok(Output::Init(InitOutput {
                    database: info.location,
                    schema_version: info.schema_version,
                }))
            }
            Request::Version(_) => Ok(Output::Version(VersionOutput {
                engine_version: env!("CARGO_PKG_VERSION").to_owned(),
                wire_version: WIRE_VERSION,
            })),
            Request::Send(r) => {
                let input = SendInput::check(&r)?;
                self.write(|tx| tx.send(&input)).map(Output::Send)
            }
            Request::Fetch(r) => {
                let input = FetchInput::check(&r)?;
                self.read(|tx| tx.fetch(&input)).map(Output::Fetch)
            }
            Request::Claim(r) => {
                let agent = v::agent("agent", &r.agent)?;
                let seconds = lease_seconds(r.lease_seconds)?.unwrap_or(v::DEFAULT_LEASE_SECONDS);
                if r.next {
                    if r.thread_id.is_some() {
                        return Err(EngineError::invalid(
                            "next",
                            "claims the next thread of the queue; give it or thread_id, not both",
                        ));
                    }
                    return self
                        .write(|tx| tx.claim_next(agent, seconds))
                        .map(Output::Claim);
                }
                let thread_id = v::required(
                    "thread_id",
                    &r.thread_id,
                    "give the thread to claim, or next=true to claim the next one of your queue",
                )?;
                self.write(|tx| tx.claim(agent, thread_id, seconds))
                    .map(|out| Output::Claim(out.into()))
            }
            Request::Renew(r) => {
                let agent = v::agent("agent", &r.agent)?;
                let thread_id = v::id("thread_id", &r.thread_id)?;
                let seconds = lease_seconds(r.lease_seconds)?;
                self.write(|tx| tx.renew(agent, thread_id, r.lease_token, seconds))
                    .map(Output::Renew)
            }
            Request::Update(r) => {
                let input = UpdateInput::check(&r)?;
                self.write(|tx| tx.update(&input)).map(Output::Update)
            }
            Request::Reply(r) => {
                let input = AppendInput::reply(&r)?;
                self.write(|tx| tx.append(&input)).map(Output::Reply)
            }
            Request::Done(r) => {
                let input = FinishInput::check(&r, Action::Complete)?;
                self.write(|tx| tx.finish(&input)).map(Output::Done)
            }
            Request::Fail(r) => {
                let input = FinishInput::check(&r, Action::Fail)?;
                self.write(|tx| tx.finish(&input)).map(Output::Fail)
            }
            Request::Cancel(r) => {
                let agent = v::agent("agent", &r.agent)?;
                let thread_id = v::id("thread_id", &r.thread_id)?;
                let reason = v::required("reason", &r.reason, "say why the thread is cancelled")?;
                v::line("reason", reason, v::SUMMARY_MAX_CHARS)?;
                let artifacts = v::artifacts(&r.artifacts)?;
                self.write(|tx| tx.cancel(agent, thread_id, reason, &artifacts))
                    .map(Output::Cancel)
            }
            Request::List(r) => {
                let query = list_query(&r)?;
                self.read(|tx| tx.list(&query)).map(Output::List)
            }
            Request::Show(r) => {
                let thread_id = v::id("thread_id", &r.thread_id)?;
                let agent = v::optional_agent("agent", &r.agent)?;
                if r.mark_read {
                    let agent = agent.ok_or_else(|| {
                        EngineError::missing(
                            "agent",
                            "mark_read moves the read cursor of an agent; say whose",
                        )
                    })?;
                    self.write(|tx| tx.show(thread_id, Some(agent), true))
                } else {
                    self.read(|tx| tx.show(thread_id, agent, false))
                }
                .map(Output::Show)
            }
            Request::Watch(r) => {
                let input = WatchInput::check(&r)?;
                self.read(|tx| tx.watch(&input)).map(Output::Watch)
            }
            Request::WaitReply(r) => {
                let input = WaitReplyInput::check(&r)?;
                self.read(|tx| tx.wait_reply(&input)).map(Output::WaitReply)
            }
            Request::Sweep(_) => self.sweep().map(Output::Sweep),
        }
    }

    /// Runs `f` in a read transaction.
    fn read<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        self.transaction(TxMode::Read, now, f)
    }

    /// Runs `f` in a write transaction, after recording lapsed leases. If `f`
    /// fails, its transaction (sweep included) rolls back, and the sweep is
    /// redone on its own so that lapses do not wait for a successful command.
    fn write<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        let mut swept = false;
        let result = self.transaction(TxMode::Write, now, |tx| {
            swept = !tx.sweep()?.is_empty();
            f(tx)
        });
        if result.is_err() && swept {
            // Best effort: the command's own error is what the caller needs.
            let _ = self.transaction(TxMode::Write, now, |tx| tx.sweep());
        }
        result
    }

    /// `sweep`: records lapsed leases. Checks in a read transaction first, so
    /// waiters can call it often without taking the write lock.
    fn sweep(&mut self) -> Result<SweepOutput, EngineError> {
        let now = self.clock.now();
        let lapsed = self.transaction(TxMode::Read, now, |tx| {
            Ok(!tx.store.lapsed_leases(now, 1)?.is_empty())
        })?;
        let events = if lapsed {
            self.transaction(TxMode::Write, now, |tx| tx.sweep())?
        } else {
            Vec::new()
        };
        let next_lease_expiry =
            self.transaction(TxMode::Read, now, |tx| Ok(tx.store.next_lease_expiry()?))?;
        Ok(SweepOutput {
            events,
            next_lease_expiry,
        })
    }

    fn transaction<T>(
        &mut self,
        mode: TxMode,
        now: Timestamp,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        self.store.begin(mode)?;
        let result = (|| {
            let next_event_id = match mode {
                TxMode::Write => self.store.latest_event_id()? + 1,
                TxMode::Read => 0,
            };
            let mut tx = Tx {
                store: &mut self.store,
                ids: &mut self.ids,
                now,
                next_event_id,
            };
            f(&mut tx)
        })();
        match result {
            Ok(value) => match self.store.commit() {
                Ok(()) => Ok(value),
                Err(error) => {
                    let _ = self.store.rollback();
                    Err(error.into())
                }
            },
            Err(error) => {
                let _ = self.store.rollback();
                Err(error)
            }
        }
    }
}

fn lease_seconds(value: Option<u64>) -> Result<Option<u64>, EngineError> {
    value
        .map(|s| v::bounded("lease_seconds", Some(s), 0, v::MAX_LEASE_SECONDS))
        .transpose()
}
