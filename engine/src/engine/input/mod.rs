//! Input checks: one function per command, named after it, that turns the
//! request into what its handler needs, or refuses it.
//!
//! Every check here is a pure function of the request (see
//! [`crate::validate`] for the limits); nothing may read the store, so a
//! request that fails here costs no transaction at all. Checks take the
//! request by value and move its text into the checked input: a body of a
//! megabyte is never copied on its way to the store. The orch commands'
//! checks are in `orch`.

use crate::address::Address;
use crate::error::EngineError;
use crate::model::{EventId, JsonObject, Kind, LeaseToken, Priority, Status};
use crate::rules::Action;
use crate::store::{ThreadOrder, ThreadQuery};
use crate::validate::{self as v, ArtifactDraft};
use crate::wire::*;

use super::DEFAULT_REPLY_KINDS;

/// A message about to be written: everything but its ids, sender and
/// recipient.
pub(super) struct MessageDraft {
    pub(super) kind: Kind,
    pub(super) summary: String,
    pub(super) body: String,
    pub(super) payload: JsonObject,
    pub(super) artifacts: Vec<ArtifactDraft>,
}

impl MessageDraft {
    fn check(
        kind: Kind,
        summary: String,
        body: Option<String>,
        payload: Option<serde_json::Value>,
        artifacts: Vec<ArtifactInput>,
    ) -> Result<MessageDraft, EngineError> {
        v::line("summary", &summary, v::SUMMARY_MAX_CHARS)?;
        Ok(MessageDraft {
            kind,
            summary,
            body: v::body(body)?,
            payload: v::object("payload", payload, v::PAYLOAD_MAX_BYTES)?,
            artifacts: v::artifacts(artifacts)?,
        })
    }
}

/// The caller of a command only the lease holder may run.
pub(super) struct Holder {
    pub(super) agent: String,
    pub(super) thread_id: String,
    /// Strict fencing: the token `claim` returned, if the caller gave it.
    pub(super) lease_token: Option<LeaseToken>,
}

impl Holder {
    fn check(
        agent: &Option<String>,
        thread_id: &Option<String>,
        lease_token: Option<LeaseToken>,
    ) -> Result<Holder, EngineError> {
        Ok(Holder {
            agent: v::agent("agent", agent)?.to_owned(),
            thread_id: v::id("thread_id", thread_id)?.to_owned(),
            lease_token,
        })
    }
}

/// `send` without a thread: the new thread's fields.
pub(super) struct NewThread {
    pub(super) to: Address,
    /// Assign a role's thread to one member now (see `SendRequest::pick`).
    pub(super) pick: bool,
    pub(super) subject: String,
    pub(super) run_id: Option<String>,
    pub(super) task_id: Option<String>,
    pub(super) priority: Priority,
    pub(super) max_attempts: u32,
}

/// `send`: open a thread, or add a message to one.
pub(super) enum SendInput {
    New {
        from: String,
        thread: NewThread,
        draft: MessageDraft,
    },
    Append(AppendInput),
}

/// A message added to an existing thread (`reply`, or `send` with a thread).
pub(super) struct AppendInput {
    pub(super) from: String,
    pub(super) to: Option<Address>,
    pub(super) thread_id: String,
    pub(super) lease_token: Option<LeaseToken>,
    pub(super) draft: MessageDraft,
}

/// Kinds a message into an existing thread may have: results are written
/// by `done` and `fail` only.
const APPEND_KINDS: &[Kind] = &[
    Kind::Task,
    Kind::Progress,
    Kind::Question,
    Kind::Answer,
    Kind::Control,
    Kind::Event,
];

/// Kinds the first message of a thread may have.
const OPEN_KINDS: &[Kind] = &[Kind::Task, Kind::Question, Kind::Control, Kind::Event];

/// Kinds `reply` writes.
const REPLY_KINDS: &[Kind] = &[Kind::Answer, Kind::Question, Kind::Progress, Kind::Control];

/// Fields of `send` that only apply when opening a thread.
fn new_thread_fields(r: &SendRequest) -> [(&'static str, bool); 6] {
    [
        ("pick", r.pick),
        ("subject", r.subject.is_some()),
        ("run_id", r.run_id.is_some()),
        ("task_id", r.task_id.is_some()),
        ("priority", r.priority.is_some()),
        ("max_attempts", r.max_attempts.is_some()),
    ]
}

pub(super) fn send(r: SendRequest) -> Result<SendInput, EngineError> {
    let from = v::agent("from_agent", &r.from_agent)?.to_owned();
    if r.thread_id.is_some() {
        if let Some((field, _)) = new_thread_fields(&r).into_iter().find(|(_, given)| *given) {
            return Err(EngineError::invalid(
                field,
                "only applies when opening a thread; leave it out when sending into one",
            ));
        }
        let kind = r.kind.unwrap_or(Kind::Task);
        v::kind_in(
            "kind",
            kind,
            APPEND_KINDS,
            "; results are written by done and fail",
        )?;
        return append(
            from,
            kind,
            r.to_agent,
            r.thread_id,
            None,
            r.summary,
            r.body,
            r.payload,
            r.artifacts,
        )
        .map(SendInput::Append);
    }
    let to = Address::parse(
        "to_agent",
        v::required(
            "to_agent",
            &r.to_agent,
            "give the recipient: an agent name, role:NAME or broadcast",
        )?,
    )?;
    if r.pick && !matches!(to, Address::Role(_)) {
        return Err(EngineError::invalid(
            "pick",
            "picks one member of a role; it needs to_agent role:NAME",
        ));
    }
    let subject =
        v::required("subject", &r.subject, "say in one line what the work is")?.to_owned();
    v::line("subject", &subject, v::SUBJECT_MAX_CHARS)?;
    // A broadcast is information: its first message is a notice unless said.
    let default_kind = if to.is_work() {
        Kind::Task
    } else {
        Kind::Event
    };
    let kind = r.kind.unwrap_or(default_kind);
    v::kind_in("kind", kind, OPEN_KINDS, " to open a thread")?;
    let max_attempts = v::bounded(
        "max_attempts",
        r.max_attempts.map(u64::from),
        u64::from(v::DEFAULT_MAX_ATTEMPTS),
        u64::from(v::MAX_ATTEMPTS_LIMIT),
    )?;
    let thread = NewThread {
        to,
        pick: r.pick,
        run_id: v::optional_name("run_id", &r.run_id)?.map(str::to_owned),
        task_id: v::optional_name("task_id", &r.task_id)?.map(str::to_owned),
        priority: r.priority.unwrap_or(Priority::Normal),
        max_attempts: u32::try_from(max_attempts).unwrap_or(v::DEFAULT_MAX_ATTEMPTS),
        subject,
    };
    let summary = r.summary.unwrap_or_else(|| thread.subject.clone());
    let draft = MessageDraft::check(kind, summary, r.body, r.payload, r.artifacts)?;
    Ok(SendInput::New {
        from,
        thread,
        draft,
    })
}

/// The checks a message into an existing thread shares between `send` and
/// `reply`.
#[allow(clippy::too_many_arguments)]
fn append(
    from: String,
    kind: Kind,
    to: Option<String>,
    thread_id: Option<String>,
    lease_token: Option<LeaseToken>,
    summary: Option<String>,
    body: Option<String>,
    payload: Option<serde_json::Value>,
    artifacts: Vec<ArtifactInput>,
) -> Result<AppendInput, EngineError> {
    v::required("summary", &summary, "say in one line what this message is")?;
    let to = match to.as_deref() {
        None => None,
        Some(text) => Some(Address::parse("to_agent", text)?),
    };
    let thread_id = v::id("thread_id", &thread_id)?.to_owned();
    Ok(AppendInput {
        from,
        to,
        thread_id,
        lease_token,
        draft: MessageDraft::check(kind, summary.unwrap_or_default(), body, payload, artifacts)?,
    })
}

pub(super) fn reply(r: ReplyRequest) -> Result<AppendInput, EngineError> {
    let from = v::agent("from_agent", &r.from_agent)?.to_owned();
    let kind = r.kind.unwrap_or(Kind::Answer);
    v::kind_in(
        "kind",
        kind,
        REPLY_KINDS,
        "; results are written by done and fail",
    )?;
    append(
        from,
        kind,
        r.to_agent,
        r.thread_id,
        r.lease_token,
        r.summary,
        r.body,
        r.payload,
        r.artifacts,
    )
}

pub(super) struct FetchInput {
    pub(super) agent: String,
    pub(super) statuses: Vec<Status>,
    pub(super) limit: usize,
    pub(super) unread: bool,
}

/// Statuses a thread can be claimed from (what `fetch` may list).
const OPEN_STATUSES: &[Status] = &[
    Status::Pending,
    Status::Claimed,
    Status::InProgress,
    Status::Blocked,
];

pub(super) fn fetch(r: FetchRequest) -> Result<FetchInput, EngineError> {
    let mut statuses = v::statuses("status", &r.status, OPEN_STATUSES)?;
    if statuses.is_empty() {
        statuses.push(Status::Pending);
    }
    Ok(FetchInput {
        agent: v::agent("agent", &r.agent)?.to_owned(),
        statuses,
        limit: v::limit(r.limit, v::DEFAULT_FETCH_LIMIT)?,
        unread: r.unread,
    })
}

/// Which thread `claim` takes.
pub(super) enum ClaimTarget {
    Thread(String),
    /// The first thread of the agent's queue.
    Next,
}

pub(super) struct ClaimInput {
    pub(super) agent: String,
    pub(super) target: ClaimTarget,
    pub(super) lease_seconds: u64,
}

pub(super) fn claim(r: ClaimRequest) -> Result<ClaimInput, EngineError> {
    let agent = v::agent("agent", &r.agent)?.to_owned();
    let lease_seconds = lease_seconds(r.lease_seconds)?.unwrap_or(v::DEFAULT_LEASE_SECONDS);
    let target = match (r.next, r.thread_id) {
        (true, Some(_)) => {
            return Err(EngineError::invalid(
                "next",
                "claims the next thread of the queue; give it or thread_id, not both",
            ));
        }
        (true, None) => ClaimTarget::Next,
        (false, thread_id) => ClaimTarget::Thread(
            v::required(
                "thread_id",
                &thread_id,
                "give the thread to claim, or next=true to claim the next one of your queue",
            )?
            .to_owned(),
        ),
    };
    Ok(ClaimInput {
        agent,
        target,
        lease_seconds,
    })
}

pub(super) struct RenewInput {
    pub(super) holder: Holder,
    /// A new lease length; the lease's own if `None`.
    pub(super) lease_seconds: Option<u64>,
}

pub(super) fn renew(r: RenewRequest) -> Result<RenewInput, EngineError> {
    Ok(RenewInput {
        holder: Holder::check(&r.agent, &r.thread_id, r.lease_token)?,
        lease_seconds: lease_seconds(r.lease_seconds)?,
    })
}

/// A lease length in `1..=MAX_LEASE_SECONDS`, if given.
fn lease_seconds(value: Option<u64>) -> Result<Option<u64>, EngineError> {
    value
        .map(|s| v::bounded("lease_seconds", Some(s), 0, v::MAX_LEASE_SECONDS))
        .transpose()
}

/// A holder command that writes a message to the thread's creator
/// (`update`, `done`, `fail`).
pub(super) struct HolderMessage {
    pub(super) holder: Holder,
    pub(super) action: Action,
    pub(super) draft: MessageDraft,
}

pub(super) fn update(r: UpdateRequest) -> Result<HolderMessage, EngineError> {
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
        Some(other) => return Err(not_an_update_status(other)),
    };
    let summary = v::required("summary", &r.summary, hint)?.to_owned();
    Ok(HolderMessage {
        holder: Holder::check(&r.agent, &r.thread_id, r.lease_token)?,
        action,
        draft: MessageDraft::check(kind, summary, r.body, r.payload, r.artifacts)?,
    })
}

fn not_an_update_status(status: Status) -> EngineError {
    let hint = match status {
        Status::Done => "; finish with done",
        Status::Failed => "; finish with fail",
        Status::Cancelled => "; stop with cancel",
        _ => "",
    };
    EngineError::invalid(
        "status",
        format!("`{status}` cannot be set by update; use in_progress or blocked{hint}"),
    )
}

pub(super) fn done(r: FinishRequest) -> Result<HolderMessage, EngineError> {
    finish(r, Action::Complete, "say in one line what the result is")
}

pub(super) fn fail(r: FinishRequest) -> Result<HolderMessage, EngineError> {
    finish(r, Action::Fail, "say in one line why the work failed")
}

fn finish(r: FinishRequest, action: Action, hint: &str) -> Result<HolderMessage, EngineError> {
    let summary = v::required("summary", &r.summary, hint)?.to_owned();
    Ok(HolderMessage {
        holder: Holder::check(&r.agent, &r.thread_id, r.lease_token)?,
        action,
        draft: MessageDraft::check(Kind::Result, summary, r.body, r.payload, r.artifacts)?,
    })
}

pub(super) struct CancelInput {
    pub(super) agent: String,
    pub(super) thread_id: String,
    pub(super) reason: String,
    pub(super) artifacts: Vec<ArtifactDraft>,
}

pub(super) fn cancel(r: CancelRequest) -> Result<CancelInput, EngineError> {
    let agent = v::agent("agent", &r.agent)?.to_owned();
    let thread_id = v::id("thread_id", &r.thread_id)?.to_owned();
    let reason = v::required("reason", &r.reason, "say why the thread is cancelled")?;
    v::line("reason", reason, v::SUMMARY_MAX_CHARS)?;
    let reason = reason.to_owned();
    Ok(CancelInput {
        agent,
        thread_id,
        reason,
        artifacts: v::artifacts(r.artifacts)?,
    })
}

pub(super) fn list(r: ListRequest) -> Result<ThreadQuery, EngineError> {
    Ok(ThreadQuery {
        thread_id: None,
        statuses: v::statuses("status", &r.status, Status::ALL)?,
        assigned_to: crate::address::optional_address("assigned_to", &r.assigned_to)?,
        created_by: v::optional_agent("created_by", &r.created_by)?.map(str::to_owned),
        agent: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        run_id: v::optional_name("run_id", &r.run_id)?.map(str::to_owned),
        task_id: v::optional_name("task_id", &r.task_id)?.map(str::to_owned),
        unread: None,
        released_leases: false,
        order: ThreadOrder::NewestFirst,
        limit: v::limit(r.limit, v::DEFAULT_LIST_LIMIT)?,
    })
}

pub(super) struct ShowInput {
    pub(super) thread_id: String,
    pub(super) agent: Option<String>,
    pub(super) mark_read: bool,
    pub(super) after_message: Option<String>,
    pub(super) limit: usize,
}

pub(super) fn show(r: ShowRequest) -> Result<ShowInput, EngineError> {
    let thread_id = v::id("thread_id", &r.thread_id)?.to_owned();
    let agent = v::optional_agent("agent", &r.agent)?.map(str::to_owned);
    if r.mark_read && agent.is_none() {
        return Err(EngineError::missing(
            "agent",
            "mark_read moves the read cursor of an agent; say whose",
        ));
    }
    Ok(ShowInput {
        thread_id,
        agent,
        mark_read: r.mark_read,
        after_message: match &r.after_message {
            None => None,
            Some(_) => Some(v::id("after_message", &r.after_message)?.to_owned()),
        },
        limit: v::limit(r.limit, v::DEFAULT_SHOW_LIMIT)?,
    })
}

pub(super) struct WatchInput {
    pub(super) agent: Option<String>,
    pub(super) statuses: Vec<Status>,
    pub(super) kinds: Vec<Kind>,
    pub(super) after_event: Option<EventId>,
    pub(super) limit: usize,
}

pub(super) fn watch(r: WatchRequest) -> Result<WatchInput, EngineError> {
    v::timeout(r.timeout_seconds)?;
    Ok(WatchInput {
        agent: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        statuses: v::statuses("status", &r.status, Status::ALL)?,
        kinds: v::distinct(&r.kinds),
        after_event: r.after_event,
        limit: v::limit(r.limit, v::DEFAULT_WATCH_LIMIT)?,
    })
}

pub(super) struct WaitReplyInput {
    pub(super) thread_id: String,
    pub(super) agent: Option<String>,
    pub(super) after_event: Option<EventId>,
    pub(super) after_message: Option<String>,
    pub(super) kinds: Vec<Kind>,
}

pub(super) fn wait_reply(r: WaitReplyRequest) -> Result<WaitReplyInput, EngineError> {
    v::timeout(r.timeout_seconds)?;
    if r.after_event.is_some() && r.after_message.is_some() {
        return Err(EngineError::invalid(
            "after_message",
            "cannot be combined with after_event; give one cursor",
        ));
    }
    let mut kinds = v::distinct(&r.kinds);
    if kinds.is_empty() {
        kinds.extend_from_slice(DEFAULT_REPLY_KINDS);
    }
    Ok(WaitReplyInput {
        thread_id: v::id("thread_id", &r.thread_id)?.to_owned(),
        agent: v::optional_agent("agent", &r.agent)?.map(str::to_owned),
        after_event: r.after_event,
        after_message: match &r.after_message {
            None => None,
            Some(_) => Some(v::id("after_message", &r.after_message)?.to_owned()),
        },
        kinds,
    })
}

mod agents;
mod orch;
mod settings;
pub(super) use agents::*;
pub(super) use orch::*;
pub(super) use settings::*;
