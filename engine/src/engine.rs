//! [`Engine`]: executes one [`Request`] and returns one [`Response`].
//!
//! Each command is checked first (`input`: pure, no store access), then its
//! handler runs inside one store transaction: a read transaction for
//! [`Effect::Read`] and [`Effect::Wait`], a write transaction for
//! [`Effect::Write`] that first records lapsed leases (the sweep). The
//! table may say otherwise: orch's reads look in a read transaction and
//! record, in a short write, only what they found to record (`look`,
//! `record_then_read`); the orch writes that start attempts with worktrees
//! run in steps, so that git never runs under the write lock (`starting`).
//! Which check, which handler and which transaction all come from the
//! command table ([`crate::for_each_command`]); handlers live in `writes`,
//! `reads` and `orch`, the steps they share in `tx`.
//!
//! An error rolls the command's transaction back, so a refused or failed
//! command writes nothing of its own; the one thing a failed write may leave
//! behind is the recording of leases that had already run out, which any
//! write would have recorded (see [`Engine::write`]). This module must never
//! block, sleep or read a clock other than the injected one: waiting is the
//! host's job, helped by [`crate::Waiter`].

mod agents;
mod ahead;
mod idempotent;
mod identity;
mod input;
mod looking;
mod orch;
mod orch_council;
mod orch_steps;
mod premade;
mod reads;
mod retention;
mod starting;
mod tx;
mod worktrees;
mod writes;

use crate::call::Call;
use crate::command::Effect;
use crate::command::{Output, Request};
use crate::error::EngineError;
use crate::ids::IdSource;
use crate::model::Kind;
use crate::orch::model::{AttemptStatus, Worktree};
use crate::orch::workspace::{self, Place, Workspace};
use crate::response::Response;
use crate::store::{Store, TxMode};
use crate::time::{Clock, Timestamp};
use crate::wire::*;

use looking::{Looking, LookingIds};
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
    /// The idempotency key of the call being executed, for its write.
    key: Option<idempotent::Pending>,
    /// Whether the call being executed was answered from its key's record.
    replayed: bool,
    /// Who the call being executed acts as, with its token.
    caller: Option<identity::Caller>,
    /// What the call being executed reads first, for its write's store.
    ahead: Option<crate::store::ReadAhead>,
    /// The host's git, for the worktrees of runs with a repository.
    workspace: Option<Box<dyn Workspace>>,
    /// Worktrees made for the next write before it began, each with its
    /// attempt's reservation (see `starting`): what the write does not
    /// take is undone when the command ends.
    premade: premade::Premades,
    /// The write that runs next was prepared by `starting`.
    starting: bool,
    /// The last write needed a worktree that was not made first.
    unmade: bool,
    /// The last look saw a reservation whose command has gone.
    stale_seen: bool,
}

impl<S: Store, C: Clock, I: IdSource> Engine<S, C, I> {
    /// An engine over `store`, taking time from `clock` and ids from `ids`.
    pub fn new(store: S, clock: C, ids: I) -> Self {
        Engine {
            store,
            clock,
            ids,
            key: None,
            replayed: false,
            caller: None,
            ahead: None,
            workspace: None,
            premade: premade::Premades::default(),
            starting: false,
            unmade: false,
            stale_seen: false,
        }
    }

    /// The same engine, making and tidying the git worktrees of runs with
    /// a repository through `workspace` (the host's git). Without one, a
    /// run with a repository cannot dispatch (`git_unavailable`).
    pub fn with_workspace(mut self, workspace: Box<dyn Workspace>) -> Self {
        self.workspace = Some(workspace);
        self
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

    /// Decodes a JSON call (a request, with its envelope's fields) and
    /// executes it; the JSON entry point of the wasm and plugin hosts.
    pub fn execute_json(&mut self, json: &str) -> Response {
        match Call::from_json(json) {
            Ok(call) => self.execute_call(call),
            Err(failure) => *failure,
        }
    }

    /// Executes a request with its envelope: with an idempotency key, a
    /// write already applied under that key is answered with its first
    /// outcome ([`Response::Replayed`]) and changes nothing; with an agent
    /// token, the command may act as that agent when tokens are required.
    pub fn execute_call(&mut self, call: impl Into<Call>) -> Response {
        let call = call.into();
        let command = call.request.command();
        self.key = match idempotent::Pending::of(&call) {
            Ok(key) => key,
            Err(error) => return Response::failure(Some(command.as_str().to_owned()), error),
        };
        self.caller = Some(identity::Caller::of(&call));
        self.ahead = ahead::of(&call.request);
        self.replayed = false;
        self.stale_seen = false;
        let result = self.dispatch(call.request);
        self.key = None;
        self.caller = None;
        self.ahead = None;
        match result {
            Ok(output) if std::mem::take(&mut self.replayed) => Response::Replayed(output),
            Ok(output) => Response::Success(output),
            Err(error) => Response::failure(Some(command.as_str().to_owned()), error),
        }
    }

    /// Executes one command without an envelope (see
    /// [`Engine::execute_call`]). Never panics on any input; an error
    /// response means the command wrote nothing of its own (see the module
    /// docs).
    ///
    /// `watch` and `wait-reply` poll once and return `woke: false` if nothing
    /// matched; to block, drive them with a [`crate::Waiter`].
    pub fn execute(&mut self, request: Request) -> Response {
        self.execute_call(request)
    }

    /// Runs `f` in the transaction `effect` calls for.
    fn in_transaction<T: serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        effect: Effect,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        match effect {
            Effect::Read => self.read(f),
            Effect::Wait => {
                // A wait acts as its agent (its heartbeats renew a lease):
                // the caller shows who it is before the look.
                let caller = self.caller.take();
                self.read(|tx| {
                    tx.authenticate(caller.as_ref())?;
                    f(tx)
                })
            }
            Effect::Write => self.write(f),
        }
    }

    /// `init`: prepares the store, outside any transaction.
    fn init(&mut self, _: InitRequest) -> Result<InitOutput, EngineError> {
        let info = self.store.initialize()?;
        Ok(InitOutput {
            database: info.location,
            schema_version: info.schema_version,
        })
    }

    /// `version`: touches no store.
    fn version(&mut self, _: VersionRequest) -> Result<VersionOutput, EngineError> {
        Ok(version())
    }

    /// Runs `f` in a read transaction.
    fn read<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        self.transaction(TxMode::Read, now, f)
    }

    /// Runs `f` in a write transaction, after the caller has shown who it
    /// is and lapsed leases are recorded. If `f` fails, its transaction
    /// (sweep included) rolls back, and the sweep is redone on its own so
    /// that lapses do not wait for a successful command. With `auto_gc` on,
    /// a write that passes a multiple of [`retention::AUTO_GC_EVERY`] events
    /// then removes a few threads the retention limits allow, in a
    /// transaction of its own.
    fn write<T: serde::Serialize + serde::de::DeserializeOwned>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        let mut swept = false;
        let key = self.key.take();
        let caller = self.caller.take();
        let mut replayed = false;
        let mut collect = None;
        if let Some(reads) = self.ahead.take() {
            self.store.read_ahead(reads);
        }
        let result = self.transaction(TxMode::Write, now, |tx| {
            let settings = tx.authenticate(caller.as_ref())?;
            tx.agent_token = caller.as_ref().and_then(|c| c.token().map(str::to_owned));
            // A retried write is answered before anything is recorded.
            if let Some(key) = &key
                && let Some(first) = tx.replay(key)?
            {
                replayed = true;
                return Ok(first);
            }
            let first_event = tx.next_event_id;
            swept = !tx.record_lapses()?.is_empty();
            let output = f(tx)?;
            if let Some(key) = key {
                tx.remember(key, &output)?;
            }
            collect = retention::due(&settings, first_event, tx.next_event_id);
            Ok(output)
        });
        self.replayed = replayed && result.is_ok();
        if result.is_err() && swept {
            // Best effort: the command's own error is what the caller needs.
            let _ = self.transaction(TxMode::Write, now, |tx| tx.record_lapses());
        }
        if let (Ok(_), Some(limits)) = (&result, collect) {
            // Best effort too: the command is done; what is not removed now
            // is removed by a later write or `gc`.
            let _ = self.transaction(TxMode::Write, now, |tx| tx.collect(&limits));
        }
        result
    }

    /// `sweep`: records lapsed leases. Checks in a read transaction first, so
    /// waiters can call it often without taking the write lock.
    fn sweep(&mut self, _: SweepRequest) -> Result<SweepOutput, EngineError> {
        let now = self.clock.now();
        let lapsed = self.transaction(TxMode::Read, now, |tx| {
            Ok(!tx.store.lapsed_leases(tx.now, 1)?.is_empty())
        })?;
        let events = if lapsed {
            self.transaction(TxMode::Write, now, |tx| tx.record_lapses())?
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

    /// Runs a read that must see what writes would record first (orch's
    /// reads: lapsed leases, then the run reconciled with its threads) in a
    /// write transaction that is always rolled back: the answer is the
    /// current truth, and nothing changes by reading. Only the engine's own
    /// steps that must not record (the plans of `starting`) use it; the
    /// reads themselves [`Engine::look`] first.
    fn preview<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        self.run_in(TxMode::Write, now, false, |tx| {
            tx.record_lapses()?;
            f(tx)
        })
    }

    /// Runs a read that must see what writes would record first in a read
    /// transaction, taking no write lock: `Some` answer when it found
    /// nothing to record (the usual case: lapsed leases and the run's
    /// threads already followed), `None` when it would have recorded
    /// something, so the answer is not the truth yet; then the caller
    /// records it ([`Engine::record_then_read`]) and answers from there.
    fn look<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, Looking<'_, S>, LookingIds>) -> Result<T, EngineError>,
    ) -> Option<Result<T, EngineError>> {
        let now = self.clock.now();
        let mut store = Looking::new(&mut self.store);
        let mut ids = LookingIds::default();
        if let Err(error) = store.begin(TxMode::Read) {
            return Some(Err(error.into()));
        }
        let mut stale = false;
        let result = (|| {
            let now = store.clock()?.unwrap_or(now);
            // What a write would number next: `orch wait` answers with the
            // latest event.
            let next_event_id = store.latest_event_id()? + 1;
            let mut tx = Tx {
                store: &mut store,
                ids: &mut ids,
                now,
                next_event_id,
                discard: false,
                workspace: self.workspace.as_deref_mut(),
                preview: true,
                taken: Vec::new(),
                ended: Vec::new(),
                premade: premade::Premades::default(),
                starting: false,
                unmade: false,
                agent_token: None,
                planned: Vec::new(),
                stale: Vec::new(),
            };
            tx.record_lapses()?;
            let answer = f(&mut tx);
            stale = !tx.stale.is_empty();
            answer
        })();
        let _ = store.rollback();
        self.stale_seen = stale;
        if store.wrote() || ids.asked() {
            return None;
        }
        Some(result)
    }

    /// A read that found something to record ([`Engine::look`]): records it
    /// (lapsed leases, what the run's threads did) in one short write, and
    /// answers from that same transaction. It starts nothing and runs no
    /// git: like every read it makes no worktree, and when what it found
    /// ends an attempt that has one, it records nothing (the answer is
    /// still the truth), leaving the end to the next orch write, which
    /// tidies that worktree once it has committed.
    fn record_then_read<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        let now = self.clock.now();
        self.transaction(TxMode::Write, now, |tx| {
            tx.preview = true;
            tx.record_lapses()?;
            let answer = f(tx)?;
            tx.discard = !tx.ended.is_empty();
            Ok(answer)
        })
    }

    fn transaction<T>(
        &mut self,
        mode: TxMode,
        now: Timestamp,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        self.run_in(mode, now, true, f)
    }

    /// Runs `f` in a transaction of `mode` and commits it when `keep` (and
    /// `f` succeeded and did not ask to discard its writes: a dry run),
    /// else rolls it back. The worktrees made before it that it did not
    /// keep stay with the engine (see `starting`).
    fn run_in<T>(
        &mut self,
        mode: TxMode,
        now: Timestamp,
        keep: bool,
        f: impl FnOnce(&mut Tx<'_, S, I>) -> Result<T, EngineError>,
    ) -> Result<T, EngineError> {
        self.store.begin(mode)?;
        let premade = std::mem::take(&mut self.premade);
        let mut taken = Vec::new();
        let mut ended = Vec::new();
        let result = (|| {
            // A store that keeps one clock for every writer (a database
            // server) judges time instead of this host (see Store::clock).
            let now = self.store.clock()?.unwrap_or(now);
            let next_event_id = match mode {
                TxMode::Write => self.store.latest_event_id()? + 1,
                TxMode::Read => 0,
            };
            let mut tx = Tx {
                store: &mut self.store,
                ids: &mut self.ids,
                now,
                next_event_id,
                discard: false,
                workspace: self.workspace.as_deref_mut(),
                preview: !keep,
                taken: Vec::new(),
                ended: Vec::new(),
                premade,
                starting: self.starting,
                unmade: false,
                agent_token: None,
                planned: Vec::new(),
                stale: Vec::new(),
            };
            let result = f(&mut tx);
            taken = std::mem::take(&mut tx.taken);
            ended = std::mem::take(&mut tx.ended);
            self.premade = std::mem::take(&mut tx.premade);
            self.unmade |= tx.unmade;
            result.map(|value| (value, tx.discard))
        })();
        let kept = match result {
            Ok((value, discard)) if !keep || discard => self
                .store
                .rollback()
                .map(|()| (value, false))
                .map_err(EngineError::from),
            Ok((value, _)) => match self.store.commit() {
                Ok(()) => Ok((value, true)),
                Err(error) => {
                    let _ = self.store.rollback();
                    Err(error.into())
                }
            },
            Err(error) => {
                let _ = self.store.rollback();
                Err(error)
            }
        };
        match kept {
            Ok((value, true)) => {
                // Git only once the transaction has ended.
                self.tidy_worktrees(ended);
                Ok(value)
            }
            kept => {
                // Still reserved: another pass takes them, or they are
                // undone when the command ends.
                for (key, premade) in taken {
                    self.premade.put(key, premade);
                }
                kept.map(|(value, _)| value)
            }
        }
    }

    /// Tidies the worktrees of attempts a committed transaction ended (see
    /// [`workspace::tidy`]): never lose work, keep nothing that is clean.
    /// After the commit, because git cannot roll back; best effort, since
    /// `orch worktree gc` does the same for whatever is left.
    fn tidy_worktrees(&mut self, ended: Vec<(Worktree, Place, AttemptStatus)>) {
        if let Some(workspace) = self.workspace.as_deref_mut() {
            for (worktree, place, status) in &ended {
                let _ = workspace::tidy(workspace, worktree, place, *status);
            }
        }
    }
}

/// Generates [`Engine::dispatch`] from the command table: each command's
/// input check and handler, in the transaction its effect calls for, or the
/// engine's own handler for commands that manage their own transactions.
macro_rules! dispatch {
    ($({
        docs: [$($doc:tt)+],
        variant: $variant:ident,
        name: $name:tt,
        handler: $handler:ident,
        js: [$($js:ident)+],
        request: $request:ident,
        acting: [$($acting:ident)?],
        output: $output:ident,
        or_nothing: [$($or_nothing:ident)?],
        effect: $effect:ident,
        writes_if: [$($flag:ident)?],
        transactions: [$($own:ident)?],
    })+) => {
        impl<S: Store, C: Clock, I: IdSource> Engine<S, C, I> {
            /// Runs one request: see the module docs.
            fn dispatch(&mut self, request: Request) -> Result<Output, EngineError> {
                let effect = request.effect();
                match request {
                    $(Request::$variant(request) => {
                        dispatch!(@run self, effect, $handler, request, [$($own)?])
                            .map(Output::$variant)
                    })+
                }
            }
        }
    };
    (@run $engine:ident, $effect:ident, $handler:ident, $request:ident, []) => {{
        let input = input::$handler($request)?;
        $engine.in_transaction($effect, |tx| tx.$handler(input))
    }};
    (@run $engine:ident, $effect:ident, $handler:ident, $request:ident, [own]) => {
        $engine.$handler($request)
    };
    (@run $engine:ident, $effect:ident, $handler:ident, $request:ident, [records]) => {{
        let input = input::$handler($request)?;
        // A look that finds nothing to record answers with no write lock;
        // one with an idempotency key is always the write it names.
        let looked = match ($engine.key.is_none(), $engine.caller.clone()) {
            (true, caller) => $engine.look(|tx| {
                tx.authenticate(caller.as_ref())?;
                tx.$handler(input.clone())
            }),
            (false, _) => None,
        };
        match looked {
            // A reservation whose command has gone is undone first.
            Some(answer) if !$engine.stale_seen => answer,
            // What it records may start retries: git makes their
            // worktrees first.
            _ => $engine.starting_write(|tx| tx.$handler(input.clone())),
        }
    }};
    (@run $engine:ident, $effect:ident, $handler:ident, $request:ident, [starts]) => {{
        let input = input::$handler($request)?;
        // The attempts it may start get their worktrees from git first,
        // with no transaction open.
        $engine.starting_write(|tx| tx.$handler(input.clone()))
    }};
    (@run $engine:ident, $effect:ident, $handler:ident, $request:ident, [preview]) => {{
        let input = input::$handler($request)?;
        match $engine.look(|tx| tx.$handler(input.clone())) {
            Some(answer) => answer,
            None => $engine.record_then_read(|tx| tx.$handler(input)),
        }
    }};
}

crate::for_each_command!(dispatch);

/// What `version` answers: this engine's version and its wire version. A
/// plain function, so that a host can answer `--version` without an engine
/// (and without compiling one for a store it never opens).
pub fn version() -> VersionOutput {
    VersionOutput {
        engine_version: env!("CARGO_PKG_VERSION").to_owned(),
        wire_version: WIRE_VERSION,
    }
}
