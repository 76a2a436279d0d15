//! [`Engine`]: executes one [`Request`] as one store transaction and returns
//! one [`Response`].
//!
//! Each command is validated first (pure, no store access), then run inside a
//! transaction: reads in a read transaction, everything else in a write
//! transaction that first records lapsed leases (the sweep). Any error rolls
//! the transaction back, so a failed command has changed nothing. This module
//! must never block, sleep or read a clock other than the injected one:
//! waiting is the host's job, helped by [`crate::Waiter`].

use std::collections::HashSet;

use serde_json::json;

use crate::error::EngineError;
use crate::ids::{IdKind, IdSource};
use crate::model::{
    Event, EventId, EventType, JsonObject, Kind, Lease, LeaseToken, Message, ReadCursor, Status,
    Thread,
};
use crate::rules::{self, Action};
use crate::store::{
    EventQuery, MessageQuery, Store, ThreadOrder, ThreadQuery, ThreadState, TxMode,
};
use crate::time::{Clock, Timestamp};
use crate::validate::{self as v, ArtifactDraft, SYSTEM_AGENT};
use crate::wire::*;

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
            Request::Init(_) => Ok(Output::Init(InitOutput {
                schema_version: self.store.initialize()?,
            })),
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
                let thread_id = v::id("thread_id", &r.thread_id)?;
                let seconds = lease_seconds(r.lease_seconds)?.unwrap_or(v::DEFAULT_LEASE_SECONDS);
                self.write(|tx| tx.claim(agent, thread_id, seconds))
                    .map(Output::Claim)
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

// ---------------------------------------------------------------------------
// Checked inputs: what validation turned each request into.

#[derive(Clone)]
struct MessageDraft {
    kind: Kind,
    summary: String,
    body: String,
    payload: JsonObject,
    artifacts: Vec<ArtifactDraft>,
}

impl MessageDraft {
    fn check(
        kind: Kind,
        summary: &str,
        body: &Option<String>,
        payload: &Option<serde_json::Value>,
        artifacts: &[ArtifactInput],
    ) -> Result<MessageDraft, EngineError> {
        v::line("summary", summary, v::SUMMARY_MAX_CHARS)?;
        Ok(MessageDraft {
            kind,
            summary: summary.to_owned(),
            body: v::body(body)?,
            payload: v::object("payload", payload, v::PAYLOAD_MAX_BYTES)?,
            artifacts: v::artifacts(artifacts)?,
        })
    }
}

struct NewThread<'a> {
    to: &'a str,
    subject: &'a str,
    run_id: Option<&'a str>,
    task_id: Option<&'a str>,
    priority: crate::model::Priority,
    max_attempts: u32,
}

struct SendInput<'a> {
    from: &'a str,
    target: SendTarget<'a>,
}

enum SendTarget<'a> {
    New(NewThread<'a>, MessageDraft),
    Existing(AppendInput<'a>),
}

impl<'a> SendInput<'a> {
    fn check(r: &'a SendRequest) -> Result<SendInput<'a>, EngineError> {
        let from = v::agent("from_agent", &r.from_agent)?;
        if r.thread_id.is_some() {
            for (field, given) in [
                ("subject", r.subject.is_some()),
                ("run_id", r.run_id.is_some()),
                ("task_id", r.task_id.is_some()),
                ("priority", r.priority.is_some()),
                ("max_attempts", r.max_attempts.is_some()),
            ] {
                if given {
                    return Err(EngineError::invalid(
                        field,
                        "only applies when opening a thread; leave it out when sending into one",
                    ));
                }
            }
            let kind = r.kind.unwrap_or(Kind::Task);
            let allowed = [
                Kind::Task,
                Kind::Progress,
                Kind::Question,
                Kind::Answer,
                Kind::Control,
                Kind::Event,
            ];
            v::kind_in(
                "kind",
                kind,
                &allowed,
                "; results are written by done and fail",
            )?;
            let append = AppendInput::check(
                from,
                &r.to_agent,
                &r.thread_id,
                None,
                kind,
                &r.summary,
                &r.body,
                &r.payload,
                &r.artifacts,
            )?;
            return Ok(SendInput {
                from,
                target: SendTarget::Existing(append),
            });
        }
        let to = v::agent("to_agent", &r.to_agent)?;
        let subject = v::required("subject", &r.subject, "say in one line what the work is")?;
        v::line("subject", subject, v::SUBJECT_MAX_CHARS)?;
        let kind = r.kind.unwrap_or(Kind::Task);
        let allowed = [Kind::Task, Kind::Question, Kind::Control, Kind::Event];
        v::kind_in("kind", kind, &allowed, " to open a thread")?;
        let summary = r.summary.as_deref().unwrap_or(subject);
        let max_attempts = v::bounded(
            "max_attempts",
            r.max_attempts.map(u64::from),
            u64::from(v::DEFAULT_MAX_ATTEMPTS),
            u64::from(v::MAX_ATTEMPTS_LIMIT),
        )?;
        let new = NewThread {
            to,
            subject,
            run_id: v::optional_name("run_id", &r.run_id)?,
            task_id: v::optional_name("task_id", &r.task_id)?,
            priority: r.priority.unwrap_or(crate::model::Priority::Normal),
            max_attempts: u32::try_from(max_attempts).unwrap_or(v::DEFAULT_MAX_ATTEMPTS),
        };
        let draft = MessageDraft::check(kind, summary, &r.body, &r.payload, &r.artifacts)?;
        Ok(SendInput {
            from,
            target: SendTarget::New(new, draft),
        })
    }
}

struct AppendInput<'a> {
    from: &'a str,
    to: Option<&'a str>,
    thread_id: &'a str,
    lease_token: Option<LeaseToken>,
    draft: MessageDraft,
}

impl<'a> AppendInput<'a> {
    #[allow(clippy::too_many_arguments)]
    fn check(
        from: &'a str,
        to: &'a Option<String>,
        thread_id: &'a Option<String>,
        lease_token: Option<LeaseToken>,
        kind: Kind,
        summary: &'a Option<String>,
        body: &'a Option<String>,
        payload: &'a Option<serde_json::Value>,
        artifacts: &'a [ArtifactInput],
    ) -> Result<AppendInput<'a>, EngineError> {
        let summary = v::required("summary", summary, "say in one line what this message is")?;
        Ok(AppendInput {
            from,
            to: v::optional_agent("to_agent", to)?,
            thread_id: v::id("thread_id", thread_id)?,
            lease_token,
            draft: MessageDraft::check(kind, summary, body, payload, artifacts)?,
        })
    }

    fn reply(r: &'a ReplyRequest) -> Result<AppendInput<'a>, EngineError> {
        let from = v::agent("from_agent", &r.from_agent)?;
        let kind = r.kind.unwrap_or(Kind::Answer);
        let allowed = [Kind::Answer, Kind::Question, Kind::Progress, Kind::Control];
        v::kind_in(
            "kind",
            kind,
            &allowed,
            "; results are written by done and fail",
        )?;
        AppendInput::check(
            from,
            &r.to_agent,
            &r.thread_id,
            r.lease_token,
            kind,
            &r.summary,
            &r.body,
            &r.payload,
            &r.artifacts,
        )
    }
}

struct FetchInput<'a> {
    agent: &'a str,
    statuses: Vec<Status>,
    limit: usize,
    unread: bool,
}

impl<'a> FetchInput<'a> {
    fn check(r: &'a FetchRequest) -> Result<FetchInput<'a>, EngineError> {
        let open = [
            Status::Pending,
            Status::Claimed,
            Status::InProgress,
            Status::Blocked,
        ];
        let mut statuses = v::statuses("status", &r.status, &open)?;
        if statuses.is_empty() {
            statuses.push(Status::Pending);
        }
        Ok(FetchInput {
            agent: v::agent("agent", &r.agent)?,
            statuses,
            limit: v::limit(r.limit, v::DEFAULT_FETCH_LIMIT)?,
            unread: r.unread,
        })
    }
}

struct UpdateInput<'a> {
    agent: &'a str,
    thread_id: &'a str,
    lease_token: Option<LeaseToken>,
    action: Action,
    draft: MessageDraft,
}

impl<'a> UpdateInput<'a> {
    fn check(r: &'a UpdateRequest) -> Result<UpdateInput<'a>, EngineError> {
        let (action, kind, hint) = match r.status {
            None => (
                Action::Report,
                Kind::Progress,
                "say in one line what progress was made",
            ),
            Some(Status::InProgress) => (
                Action::Start,
                Kind::Progress,
                "say in one line what you are doing",
            ),
            Some(Status::Blocked) => (
                Action::Block,
                Kind::Question,
                "say exactly what is missing, as a question someone can answer",
            ),
            Some(other) => {
                let hint = match other {
                    Status::Done => "; finish with done",
                    Status::Failed => "; finish with fail",
                    Status::Cancelled => "; stop with cancel",
                    _ => "",
                };
                return Err(EngineError::invalid(
                    "status",
                    format!("`{other}` cannot be set by update; use in_progress or blocked{hint}"),
                ));
            }
        };
        let summary = v::required("summary", &r.summary, hint)?;
        Ok(UpdateInput {
            agent: v::agent("agent", &r.agent)?,
            thread_id: v::id("thread_id", &r.thread_id)?,
            lease_token: r.lease_token,
            action,
            draft: MessageDraft::check(kind, summary, &r.body, &r.payload, &r.artifacts)?,
        })
    }
}

struct FinishInput<'a> {
    agent: &'a str,
    thread_id: &'a str,
    lease_token: Option<LeaseToken>,
    action: Action,
    draft: MessageDraft,
}

impl<'a> FinishInput<'a> {
    fn check(r: &'a FinishRequest, action: Action) -> Result<FinishInput<'a>, EngineError> {
        let hint = match action {
            Action::Complete => "say in one line what the result is",
            _ => "say in one line why the work failed",
        };
        let summary = v::required("summary", &r.summary, hint)?;
        Ok(FinishInput {
            agent: v::agent("agent", &r.agent)?,
            thread_id: v::id("thread_id", &r.thread_id)?,
            lease_token: r.lease_token,
            action,
            draft: MessageDraft::check(Kind::Result, summary, &r.body, &r.payload, &r.artifacts)?,
        })
    }
}

fn list_query(r: &ListRequest) -> Result<ThreadQuery, EngineError> {
    Ok(ThreadQuery {
        thread_id: None,
        statuses: v::statuses("status", &r.status, Status::ALL)?,
        assigned_to: v::optional_agent("assigned_to", &r.assigned_to)?.map(str::to_owned),
        created_by: v::optional_agent("created_by", &r.created_by)?.map(str::to_owned),
        involving: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        run_id: v::optional_name("run_id", &r.run_id)?.map(str::to_owned),
        task_id: v::optional_name("task_id", &r.task_id)?.map(str::to_owned),
        unread_by: None,
        order: ThreadOrder::RecentFirst,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

struct WatchInput<'a> {
    agent: Option<&'a str>,
    statuses: Vec<Status>,
    after_event: Option<EventId>,
    limit: usize,
}

impl<'a> WatchInput<'a> {
    fn check(r: &'a WatchRequest) -> Result<WatchInput<'a>, EngineError> {
        v::timeout(r.timeout_seconds)?;
        Ok(WatchInput {
            agent: v::optional_agent("agent", &r.agent)?,
            statuses: v::statuses("status", &r.status, Status::ALL)?,
            after_event: r.after_event,
            limit: v::limit(r.limit, v::DEFAULT_WATCH_LIMIT)?,
        })
    }
}

struct WaitReplyInput<'a> {
    thread_id: &'a str,
    agent: Option<&'a str>,
    after_event: Option<EventId>,
    after_message: Option<&'a str>,
    kinds: Vec<Kind>,
}

impl<'a> WaitReplyInput<'a> {
    fn check(r: &'a WaitReplyRequest) -> Result<WaitReplyInput<'a>, EngineError> {
        v::timeout(r.timeout_seconds)?;
        if r.after_event.is_some() && r.after_message.is_some() {
            return Err(EngineError::invalid(
                "after_message",
                "cannot be combined with after_event; give one cursor",
            ));
        }
        let mut kinds = Vec::new();
        for &kind in &r.kinds {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            kinds.extend_from_slice(DEFAULT_REPLY_KINDS);
        }
        Ok(WaitReplyInput {
            thread_id: v::id("thread_id", &r.thread_id)?,
            agent: v::optional_agent("agent", &r.agent)?,
            after_event: r.after_event,
            after_message: match &r.after_message {
                None => None,
                Some(_) => Some(v::id("after_message", &r.after_message)?),
            },
            kinds,
        })
    }
}

// ---------------------------------------------------------------------------
// The transaction context: every handler runs here.

struct Tx<'a, S, I> {
    store: &'a mut S,
    ids: &'a mut I,
    now: Timestamp,
    /// The id the next event of this (write) transaction gets.
    next_event_id: EventId,
}

/// What a command changes besides the thread record: one event, and maybe
/// one message.
struct Change<'a> {
    event_type: EventType,
    source: &'a str,
    summary: String,
    payload: JsonObject,
    message: Option<(&'a str, &'a str, MessageDraft)>,
}

impl<S: Store, I: IdSource> Tx<'_, S, I> {
    fn load(&mut self, thread_id: &str) -> Result<ThreadState, EngineError> {
        self.store
            .thread(thread_id)?
            .ok_or_else(|| EngineError::ThreadNotFound {
                thread_id: thread_id.to_owned(),
            })
    }

    fn view(&self, state: &ThreadState) -> ThreadView {
        let mut thread = state.thread.clone();
        thread.status = rules::effective_status(&state.thread, state.lease.as_ref(), self.now);
        ThreadView {
            thread,
            lease: state.lease.clone().filter(|l| l.is_live(self.now)),
        }
    }

    fn effective(&self, state: &ThreadState) -> Status {
        rules::effective_status(&state.thread, state.lease.as_ref(), self.now)
    }

    /// Writes `thread` (inserting it when `new`), the change's message and
    /// its event. The thread's status must already be the new one.
    fn record(
        &mut self,
        thread: &mut Thread,
        new: bool,
        change: Change<'_>,
    ) -> Result<(EventId, Option<Message>), EngineError> {
        self.record_event(thread, new, change)
            .map(|(event, message)| (event.event_id, message))
    }

    /// [`Tx::record`], returning the whole event.
    fn record_event(
        &mut self,
        thread: &mut Thread,
        new: bool,
        change: Change<'_>,
    ) -> Result<(Event, Option<Message>), EngineError> {
        let event_id = self.next_event_id;
        self.next_event_id += 1;
        let now = self.now;
        let message = match change.message {
            None => None,
            Some((from, to, draft)) => {
                let message_id = self.ids.next_id(IdKind::Message, now);
                let artifacts = draft
                    .artifacts
                    .into_iter()
                    .map(|a| {
                        a.into_artifact(self.ids.next_id(IdKind::Artifact, now), &message_id, now)
                    })
                    .collect();
                Some(Message {
                    message_id,
                    thread_id: thread.thread_id.clone(),
                    event_id,
                    from_agent: from.to_owned(),
                    to_agent: to.to_owned(),
                    kind: draft.kind,
                    summary: draft.summary,
                    body: draft.body,
                    payload: draft.payload,
                    created_at: now,
                    artifacts,
                })
            }
        };
        thread.last_event_id = event_id;
        thread.updated_at = now;
        if let Some(message) = &message {
            thread.latest_message_id = Some(message.message_id.clone());
        }
        if new {
            self.store.insert_thread(thread)?;
        } else {
            self.store.update_thread(thread)?;
        }
        if let Some(message) = &message {
            self.store.insert_message(message)?;
        }
        let event = Event {
            event_id,
            thread_id: thread.thread_id.clone(),
            run_id: thread.run_id.clone(),
            task_id: thread.task_id.clone(),
            event_type: change.event_type,
            source: change.source.to_owned(),
            message_id: message.as_ref().map(|m| m.message_id.clone()),
            message_kind: message.as_ref().map(|m| m.kind),
            status: thread.status,
            summary: change.summary,
            payload: change.payload,
            created_at: now,
        };
        self.store.insert_event(&event)?;
        Ok((event, message))
    }

    /// Refuses anything on a thread that is finished (or, by a lapsed last
    /// lease, effectively finished).
    fn open_status(&self, state: &ThreadState, what: &str) -> Result<Status, EngineError> {
        let status = self.effective(state);
        if status.is_terminal() {
            return Err(EngineError::state(
                &state.thread.thread_id,
                status,
                format!(
                    "finished threads never change, so it {what}; open a new thread with send if more work is needed"
                ),
            ));
        }
        Ok(status)
    }

    fn was_holder(&mut self, thread_id: &str, agent: &str) -> Result<bool, EngineError> {
        let mut query = EventQuery::after(0, 1);
        query.thread_id = Some(thread_id.to_owned());
        query.event_types = vec![EventType::ThreadClaimed];
        query.source = Some(agent.to_owned());
        Ok(!self.store.events(&query)?.is_empty())
    }

    /// Checks that `agent` (with `token`, if given) holds the thread's most
    /// recent lease, live or lapsed: the fencing rule of every worker
    /// command. Returns that lease.
    fn fence(
        &mut self,
        state: &ThreadState,
        agent: &str,
        token: Option<LeaseToken>,
    ) -> Result<Lease, EngineError> {
        let thread_id = &state.thread.thread_id;
        let Some(lease) = &state.lease else {
            return Err(EngineError::state(
                thread_id,
                self.effective(state),
                "nobody has claimed it; claim it first",
            ));
        };
        let lost = || EngineError::LeaseLost {
            thread_id: thread_id.clone(),
            holder: lease.agent.clone(),
            lease_token: lease.lease_token,
        };
        match token {
            Some(t) if t > lease.lease_token => Err(EngineError::invalid(
                "lease_token",
                format!(
                    "is {t}, but the newest lease token of thread {thread_id} is {}; pass the token claim returned",
                    lease.lease_token
                ),
            )),
            Some(t) if t < lease.lease_token => Err(lost()),
            _ if agent == lease.agent => Ok(lease.clone()),
            // The token matched, but the name did not: someone else's token.
            Some(_) => Err(EngineError::NotLeaseHolder {
                thread_id: thread_id.clone(),
                agent: agent.to_owned(),
                holder: lease.agent.clone(),
            }),
            None if self.was_holder(thread_id, agent)? => Err(lost()),
            None => Err(EngineError::NotLeaseHolder {
                thread_id: thread_id.clone(),
                agent: agent.to_owned(),
                holder: lease.agent.clone(),
            }),
        }
    }

    /// After [`Tx::fence`]: revives a lapsed lease (the holder is back and
    /// nobody replaced it), resuming a thread the lapse put back in the
    /// queue. Returns whether it revived.
    fn revive(&self, state: &mut ThreadState, lease: &mut Lease) -> bool {
        if lease.is_live(self.now) {
            return false;
        }
        lease.released_at = None;
        lease.expires_at = self.now.plus_seconds(lease.lease_seconds);
        if let Some(t) = rules::transition(Action::Revive, state.thread.status) {
            state.thread.status = t.target(state.thread.status, true);
        }
        true
    }

    /// A holder command: the lease runs `lease_seconds` from now.
    fn heartbeat(&self, lease: &mut Lease) {
        lease.released_at = None;
        lease.expires_at = self.now.plus_seconds(lease.lease_seconds);
    }

    fn apply(
        &self,
        state: &mut ThreadState,
        action: Action,
        verb: &str,
    ) -> Result<(Status, EventType), EngineError> {
        let from = state.thread.status;
        let live = state.lease.as_ref().is_some_and(|l| l.is_live(self.now));
        let row = rules::transition(action, from).ok_or_else(|| {
            EngineError::state(
                &state.thread.thread_id,
                from,
                format!("it cannot be {verb}"),
            )
        })?;
        let event = row
            .event
            .ok_or_else(|| EngineError::internal(format!("{action:?} has no event")))?;
        let to = row.target(from, live);
        state.thread.status = to;
        Ok((from, event))
    }

    // --- commands -----------------------------------------------------------

    fn send(&mut self, input: &SendInput<'_>) -> Result<MessageOutput, EngineError> {
        let (new, draft) = match &input.target {
            SendTarget::Existing(append) => return self.append(append),
            SendTarget::New(new, draft) => (new, draft.clone()),
        };
        let mut thread = Thread {
            thread_id: self.ids.next_id(IdKind::Thread, self.now),
            run_id: new.run_id.map(str::to_owned),
            task_id: new.task_id.map(str::to_owned),
            subject: new.subject.to_owned(),
            created_by: input.from.to_owned(),
            assigned_to: new.to.to_owned(),
            status: Status::Pending,
            priority: new.priority,
            attempts: 0,
            max_attempts: new.max_attempts,
            latest_message_id: None,
            last_event_id: 0,
            created_at: self.now,
            updated_at: self.now,
        };
        let (event_id, message) = self.record(
            &mut thread,
            true,
            Change {
                event_type: EventType::ThreadCreated,
                source: input.from,
                summary: draft.summary.clone(),
                payload: JsonObject::new(),
                message: Some((input.from, new.to, draft)),
            },
        )?;
        let state = ThreadState {
            thread,
            lease: None,
        };
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("send wrote no message"))?,
            event_id,
        })
    }

    fn append(&mut self, input: &AppendInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "accepts no more messages")?;
        let from = input.from;
        let holder_message = input.lease_token.is_some()
            || state.lease.as_ref().is_some_and(|l| l.agent == from)
            || (state.lease.is_some() && self.was_holder(input.thread_id, from)?);
        let mut payload = JsonObject::new();
        if holder_message {
            let mut lease = self.fence(&state, from, input.lease_token)?;
            if self.revive(&mut state, &mut lease) {
                payload.insert("lease_revived".into(), true.into());
            }
            self.heartbeat(&mut lease);
            self.store.put_lease(&lease)?;
            state.lease = Some(lease);
        }
        let action = if input.draft.kind == Kind::Answer
            && state.thread.status == Status::Blocked
            && !holder_message
        {
            Action::Answer
        } else {
            Action::Append
        };
        let (previous, event_type) = self.apply(&mut state, action, "written to")?;
        if previous != state.thread.status {
            payload.insert("previous_status".into(), previous.as_str().into());
        }
        let to = input.to.unwrap_or(if from == state.thread.assigned_to {
            &state.thread.created_by
        } else {
            &state.thread.assigned_to
        });
        let to = to.to_owned();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: from,
                summary: draft.summary.clone(),
                payload,
                message: Some((from, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("append wrote no message"))?,
            event_id,
        })
    }

    fn claim(
        &mut self,
        agent: &str,
        thread_id: &str,
        seconds: u64,
    ) -> Result<LeaseOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        let status = self.open_status(&state, "cannot be claimed")?;
        if state.thread.assigned_to != agent {
            return Err(EngineError::NotAssigned {
                thread_id: thread_id.to_owned(),
                agent: agent.to_owned(),
                assigned_to: state.thread.assigned_to.clone(),
            });
        }
        if let Some(lease) = state.lease.as_ref().filter(|l| l.is_live(self.now)) {
            return Err(EngineError::LeaseConflict {
                thread_id: thread_id.to_owned(),
                holder: lease.agent.clone(),
                lease_token: lease.lease_token,
                expires_at: lease.expires_at,
            });
        }
        if state.thread.attempts >= state.thread.max_attempts {
            return Err(EngineError::state(
                thread_id,
                status,
                format!(
                    "all {} attempts are used; the leader may open a new thread",
                    state.thread.max_attempts
                ),
            ));
        }
        // Claim from the effective status: a lapsed lease already counts as gone.
        state.thread.status = status;
        let (_, event_type) = self.apply(&mut state, Action::Claim, "claimed")?;
        let previous = state.lease.take();
        let lease = Lease {
            thread_id: thread_id.to_owned(),
            agent: agent.to_owned(),
            lease_token: previous.as_ref().map_or(1, |l| l.lease_token + 1),
            attempt: state.thread.attempts + 1,
            lease_seconds: seconds,
            claimed_at: self.now,
            expires_at: self.now.plus_seconds(seconds),
            released_at: None,
        };
        state.thread.attempts = lease.attempt;
        self.store.put_lease(&lease)?;
        let mut payload = lease_payload(&lease);
        payload.insert("expires_at".into(), lease.expires_at.to_string().into());
        if let Some(previous) = &previous {
            payload.insert("previous_agent".into(), previous.agent.clone().into());
        }
        let summary = format!(
            "{agent} claimed it (attempt {} of {}, lease token {})",
            lease.attempt, state.thread.max_attempts, lease.lease_token
        );
        let (event_id, _) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary,
                payload,
                message: None,
            },
        )?;
        state.lease = Some(lease.clone());
        Ok(LeaseOutput {
            thread: self.view(&state),
            lease,
            event_id,
        })
    }

    fn renew(
        &mut self,
        agent: &str,
        thread_id: &str,
        token: Option<LeaseToken>,
        seconds: Option<u64>,
    ) -> Result<LeaseOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        self.open_status(&state, "has no lease to renew")?;
        let mut lease = self.fence(&state, agent, token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        if let Some(seconds) = seconds {
            lease.lease_seconds = seconds;
        }
        self.heartbeat(&mut lease);
        state.lease = Some(lease.clone());
        let (_, event_type) = self.apply(&mut state, Action::Renew, "renewed")?;
        self.store.put_lease(&lease)?;
        payload.extend(lease_payload(&lease));
        payload.insert("expires_at".into(), lease.expires_at.to_string().into());
        let summary = format!("{agent} renewed the lease until {}", lease.expires_at);
        let (event_id, _) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary,
                payload,
                message: None,
            },
        )?;
        Ok(LeaseOutput {
            thread: self.view(&state),
            lease,
            event_id,
        })
    }

    fn update(&mut self, input: &UpdateInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "takes no more updates")?;
        let mut lease = self.fence(&state, input.agent, input.lease_token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        self.heartbeat(&mut lease);
        state.lease = Some(lease.clone());
        let verb = match input.action {
            Action::Block => "blocked",
            Action::Start => "set in_progress",
            _ => "updated",
        };
        let (previous, event_type) = self.apply(&mut state, input.action, verb)?;
        if previous != state.thread.status {
            payload.insert("previous_status".into(), previous.as_str().into());
        }
        self.store.put_lease(&lease)?;
        let to = state.thread.created_by.clone();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: input.agent,
                summary: draft.summary.clone(),
                payload,
                message: Some((input.agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("update wrote no message"))?,
            event_id,
        })
    }

    fn finish(&mut self, input: &FinishInput<'_>) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(input.thread_id)?;
        self.open_status(&state, "cannot be finished again")?;
        let mut lease = self.fence(&state, input.agent, input.lease_token)?;
        let mut payload = JsonObject::new();
        if self.revive(&mut state, &mut lease) {
            payload.insert("lease_revived".into(), true.into());
        }
        state.lease = Some(lease.clone());
        let verb = if input.action == Action::Complete {
            "done"
        } else {
            "failed"
        };
        let (previous, event_type) = self.apply(&mut state, input.action, verb)?;
        payload.insert("previous_status".into(), previous.as_str().into());
        lease.released_at = Some(self.now);
        self.store.put_lease(&lease)?;
        state.lease = Some(lease);
        let to = state.thread.created_by.clone();
        let draft = input.draft.clone();
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: input.agent,
                summary: draft.summary.clone(),
                payload,
                message: Some((input.agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("finish wrote no message"))?,
            event_id,
        })
    }

    fn cancel(
        &mut self,
        agent: &str,
        thread_id: &str,
        reason: &str,
        artifacts: &[ArtifactDraft],
    ) -> Result<MessageOutput, EngineError> {
        let mut state = self.load(thread_id)?;
        let status = self.open_status(&state, "cannot be cancelled")?;
        state.thread.status = status;
        let (previous, event_type) = self.apply(&mut state, Action::Cancel, "cancelled")?;
        if let Some(lease) = state.lease.as_mut().filter(|l| l.released_at.is_none()) {
            lease.released_at = Some(self.now);
            let lease = lease.clone();
            self.store.put_lease(&lease)?;
        }
        let mut payload = JsonObject::new();
        payload.insert("previous_status".into(), previous.as_str().into());
        let to = if agent == state.thread.assigned_to {
            state.thread.created_by.clone()
        } else {
            state.thread.assigned_to.clone()
        };
        let draft = MessageDraft {
            kind: Kind::Control,
            summary: reason.to_owned(),
            body: String::new(),
            payload: json_object(json!({"action": "cancel"})),
            artifacts: artifacts.to_vec(),
        };
        let (event_id, message) = self.record(
            &mut state.thread,
            false,
            Change {
                event_type,
                source: agent,
                summary: reason.to_owned(),
                payload,
                message: Some((agent, &to, draft)),
            },
        )?;
        Ok(MessageOutput {
            thread: self.view(&state),
            message: message.ok_or_else(|| EngineError::internal("cancel wrote no message"))?,
            event_id,
        })
    }

    /// Records every lapsed lease: released, the thread back to the queue
    /// (or failed on its last attempt), one event each.
    fn sweep(&mut self) -> Result<Vec<Event>, EngineError> {
        let lapsed = self.store.lapsed_leases(self.now, usize::MAX)?;
        let mut events = Vec::new();
        for mut lease in lapsed {
            let Some(mut state) = self.store.thread(&lease.thread_id)? else {
                continue;
            };
            lease.released_at = Some(self.now);
            self.store.put_lease(&lease)?;
            let thread = &state.thread;
            let action = if thread.attempts >= thread.max_attempts {
                Action::LapseFinal
            } else {
                Action::Lapse
            };
            let Some(row) = rules::transition(action, thread.status) else {
                // A pending or finished thread with an unreleased lease: the
                // release above is all there is to record.
                continue;
            };
            let Some(event_type) = row.event else {
                continue;
            };
            let previous = thread.status;
            state.thread.status = row.target(previous, false);
            let mut payload = lease_payload(&lease);
            payload.insert("expired_at".into(), lease.expires_at.to_string().into());
            payload.insert("previous_status".into(), previous.as_str().into());
            let (summary, message) = if action == Action::LapseFinal {
                payload.insert("reason".into(), "lease_expired".into());
                let summary = format!(
                    "lease of {} expired at {} on attempt {} of {}; the thread failed",
                    lease.agent, lease.expires_at, lease.attempt, state.thread.max_attempts
                );
                let draft = MessageDraft {
                    kind: Kind::Result,
                    summary: summary.clone(),
                    body: String::new(),
                    payload: json_object(json!({"reason": "lease_expired"})),
                    artifacts: Vec::new(),
                };
                (summary, Some(draft))
            } else {
                let summary = format!(
                    "lease of {} (token {}) expired at {}; the thread can be claimed again",
                    lease.agent, lease.lease_token, lease.expires_at
                );
                (summary, None)
            };
            let to = state.thread.created_by.clone();
            let (event, _) = self.record_event(
                &mut state.thread,
                false,
                Change {
                    event_type,
                    source: SYSTEM_AGENT,
                    summary,
                    payload,
                    message: message.map(|d| (SYSTEM_AGENT, to.as_str(), d)),
                },
            )?;
            events.push(event);
        }
        Ok(events)
    }

    /// Threads matching `query` by *effective* status. Stored statuses are
    /// exact except for threads whose lease lapsed since the last write; those
    /// few are looked up one by one and judged by [`rules::effective_status`].
    fn effective_threads(
        &mut self,
        query: &ThreadQuery,
        claimable_only: bool,
    ) -> Result<Vec<ThreadState>, EngineError> {
        let lapsed = self.store.lapsed_leases(self.now, usize::MAX)?;
        let lapsed_ids: HashSet<&str> = lapsed.iter().map(|l| l.thread_id.as_str()).collect();
        let mut stored = query.clone();
        stored.limit = query.limit.saturating_add(lapsed.len());
        if claimable_only {
            // Without a lapse, only a pending thread has no live lease.
            stored.statuses.retain(|s| *s == Status::Pending);
        }
        let mut rows = if claimable_only && stored.statuses.is_empty() {
            Vec::new()
        } else {
            self.store.threads(&stored)?
        };
        rows.retain(|r| !lapsed_ids.contains(r.thread.thread_id.as_str()));
        for lease in &lapsed {
            let mut one = query.clone();
            one.thread_id = Some(lease.thread_id.clone());
            one.statuses = Vec::new();
            one.limit = 1;
            for row in self.store.threads(&one)? {
                let status = self.effective(&row);
                if query.statuses.is_empty() || query.statuses.contains(&status) {
                    rows.push(row);
                }
            }
        }
        if claimable_only {
            let now = self.now;
            rows.retain(|r| rules::is_claimable(&r.thread, r.lease.as_ref(), now));
        }
        rows.sort_by(|a, b| query.compare(&a.thread, &b.thread));
        rows.truncate(query.limit);
        Ok(rows)
    }

    fn fetch(&mut self, input: &FetchInput<'_>) -> Result<ThreadsOutput, EngineError> {
        let query = ThreadQuery {
            statuses: input.statuses.clone(),
            assigned_to: Some(input.agent.to_owned()),
            unread_by: input.unread.then(|| input.agent.to_owned()),
            ..ThreadQuery::all(ThreadOrder::Queue, input.limit)
        };
        let rows = self.effective_threads(&query, true)?;
        Ok(ThreadsOutput {
            threads: rows.iter().map(|r| self.view(r)).collect(),
        })
    }

    fn list(&mut self, query: &ThreadQuery) -> Result<ThreadsOutput, EngineError> {
        let rows = self.effective_threads(query, false)?;
        Ok(ThreadsOutput {
            threads: rows.iter().map(|r| self.view(r)).collect(),
        })
    }

    fn show(
        &mut self,
        thread_id: &str,
        agent: Option<&str>,
        mark_read: bool,
    ) -> Result<ShowOutput, EngineError> {
        let state = self.load(thread_id)?;
        let messages = self.store.messages(&MessageQuery {
            thread_id: thread_id.to_owned(),
            from_agent: None,
            newest_first: false,
            limit: usize::MAX,
        })?;
        let mut read_cursor = match agent {
            Some(agent) => self.store.read_cursor(thread_id, agent)?,
            None => None,
        };
        if let (true, Some(agent), Some(newest)) = (mark_read, agent, messages.last()) {
            let behind = read_cursor
                .as_ref()
                .is_none_or(|c| c.last_read_event_id < newest.event_id);
            if behind {
                let cursor = ReadCursor {
                    thread_id: thread_id.to_owned(),
                    agent: agent.to_owned(),
                    last_read_message_id: newest.message_id.clone(),
                    last_read_event_id: newest.event_id,
                    last_read_at: self.now,
                };
                self.store.put_read_cursor(&cursor)?;
                read_cursor = Some(cursor);
            }
        }
        Ok(ShowOutput {
            thread: self.view(&state),
            messages,
            read_cursor,
        })
    }

    fn watch(&mut self, input: &WatchInput<'_>) -> Result<WatchOutput, EngineError> {
        let latest = self.store.latest_event_id()?;
        let after = input.after_event.unwrap_or(latest);
        let mut query = EventQuery::after(after, input.limit);
        query.involving = input.agent.map(str::to_owned);
        query.statuses = input.statuses.clone();
        query.exclude_source = input.agent.map(str::to_owned);
        let events = self.store.events(&query)?;
        Ok(match events.last() {
            Some(last) => WatchOutput {
                woke: true,
                next_event_id: last.event_id,
                events,
            },
            None => WatchOutput {
                woke: false,
                next_event_id: after.max(latest),
                events,
            },
        })
    }

    /// Where `wait-reply` starts when the request gives no cursor: after the
    /// waiting agent's own last message in the thread and after its read
    /// cursor, whichever is later, so a reply that arrived between the
    /// agent's question and its wait is not missed. Without an agent, or if
    /// the agent never wrote or read there: the latest event.
    fn default_reply_cursor(
        &mut self,
        thread_id: &str,
        agent: Option<&str>,
        latest: EventId,
    ) -> Result<EventId, EngineError> {
        let Some(agent) = agent else {
            return Ok(latest);
        };
        let own = self
            .store
            .messages(&MessageQuery {
                thread_id: thread_id.to_owned(),
                from_agent: Some(agent.to_owned()),
                newest_first: true,
                limit: 1,
            })?
            .first()
            .map(|m| m.event_id);
        let read = self
            .store
            .read_cursor(thread_id, agent)?
            .map(|c| c.last_read_event_id);
        Ok(match own.max(read) {
            Some(cursor) => cursor,
            None => latest,
        })
    }

    fn wait_reply(&mut self, input: &WaitReplyInput<'_>) -> Result<WaitReplyOutput, EngineError> {
        let state = self.load(input.thread_id)?;
        let latest = self.store.latest_event_id()?;
        let after = match (input.after_event, input.after_message) {
            (Some(event_id), _) => event_id,
            (None, Some(message_id)) => match self.store.message(message_id)? {
                Some(m) if m.thread_id == input.thread_id => m.event_id,
                _ => {
                    return Err(EngineError::MessageNotFound {
                        thread_id: input.thread_id.to_owned(),
                        message_id: message_id.to_owned(),
                    });
                }
            },
            (None, None) => self.default_reply_cursor(input.thread_id, input.agent, latest)?,
        };
        let mut query = EventQuery::after(after, 1);
        query.thread_id = Some(input.thread_id.to_owned());
        query.message_kinds = input.kinds.clone();
        query.exclude_source = input.agent.map(str::to_owned);
        let found = self.store.events(&query)?.into_iter().next();
        if let Some(event) = found {
            let message = match &event.message_id {
                Some(id) => self.store.message(id)?,
                None => None,
            };
            let message = message.ok_or_else(|| {
                EngineError::internal(format!(
                    "event {} names a message that does not exist",
                    event.event_id
                ))
            })?;
            return Ok(WaitReplyOutput {
                woke: true,
                next_event_id: event.event_id,
                message: Some(message),
                thread: self.view(&state),
            });
        }
        if state.thread.status.is_terminal() {
            return Err(EngineError::state(
                input.thread_id,
                state.thread.status,
                "no reply can arrive in a finished thread; read its result with show",
            ));
        }
        Ok(WaitReplyOutput {
            woke: false,
            next_event_id: after.max(latest),
            message: None,
            thread: self.view(&state),
        })
    }
}

fn lease_payload(lease: &Lease) -> JsonObject {
    json_object(json!({
        "agent": lease.agent,
        "lease_token": lease.lease_token,
        "attempt": lease.attempt,
    }))
}

fn json_object(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}
