//! The records the engine keeps and the vocabularies they use: [`Thread`],
//! [`Message`] (with its [`Artifact`]s), [`Lease`], [`Event`], [`ReadCursor`];
//! [`Status`], [`Kind`], [`Priority`], [`EventType`].
//!
//! These are plain data. Field names are the JSON contract's names and the
//! storage columns' names; renaming one is a breaking change of the wire
//! format and the schema, so it must never happen casually. Rules about
//! which values may follow which live in [`crate::rules`], not here.

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;
use crate::vocabulary::vocabulary;

/// A JSON object: the shape of every `payload` and artifact `metadata`.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// How an error message names a JSON value's type ("an array").
pub fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Position in the event stream. Event ids start at 1 and strictly increase
/// in commit order; 0 means "before the first event".
#[cfg_attr(feature = "typescript", tsify::declare)]
pub type EventId = u64;

/// A fencing token: increases with every claim of a thread, starting at 1.
#[cfg_attr(feature = "typescript", tsify::declare)]
pub type LeaseToken = u64;

vocabulary! {
    /// Where a thread is in its life. `done`, `failed` and `cancelled` are
    /// terminal: nothing changes a terminal thread.
    pub enum Status ("status") {
        Pending = "pending" : "Waiting for a worker to claim it.",
        Claimed = "claimed" : "Claimed; the holder has not reported progress yet.",
        InProgress = "in_progress" : "The holder is working on it.",
        Blocked = "blocked" : "The holder asked a question and waits for an answer.",
        Done = "done" : "Finished with a result.",
        Failed = "failed" : "Finished without success (by the holder, or by lease expiry on the last attempt).",
        Cancelled = "cancelled" : "Stopped by someone before it finished.",
    }
}

impl Status {
    /// True for `done`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Done | Status::Failed | Status::Cancelled)
    }
}

vocabulary! {
    /// What a message is for.
    pub enum Kind ("kind") {
        Task = "task" : "Work handed to an agent; the first message of most threads.",
        Progress = "progress" : "A progress report from the worker.",
        Question = "question" : "A question; `update` with status `blocked` writes one.",
        Answer = "answer" : "An answer to a question; unblocks a blocked thread.",
        Result = "result" : "The final outcome, written by `done`, `fail` and lease expiry.",
        Control = "control" : "An instruction about the work itself, e.g. a cancellation.",
        Event = "event" : "A notice for the record.",
    }
}

vocabulary! {
    /// How soon a thread should be picked up; `fetch` offers `high` first.
    pub enum Priority ("priority") {
        Low = "low" : "Picked after everything else.",
        Normal = "normal" : "The default.",
        High = "high" : "Picked first.",
    }
}

impl Priority {
    /// Rank for queue order: higher ranks are fetched first.
    pub fn rank(self) -> u8 {
        match self {
            Priority::Low => 0,
            Priority::Normal => 1,
            Priority::High => 2,
        }
    }
}

vocabulary! {
    /// What happened, in the past tense. Every mutation appends exactly one
    /// event (a sweep appends one per lapsed lease).
    pub enum EventType ("event type") {
        ThreadCreated = "thread_created" : "`send` opened a thread.",
        MessageSent = "message_sent" : "`send` or `reply` added a message without changing the status.",
        ThreadClaimed = "thread_claimed" : "`claim` granted a lease.",
        LeaseRenewed = "lease_renewed" : "`renew` extended a lease.",
        LeaseExpired = "lease_expired" : "A lease ran out and nobody renewed it; the thread is claimable again (recorded by the first write after the expiry).",
        ProgressReported = "progress_reported" : "`update` reported progress.",
        ThreadBlocked = "thread_blocked" : "`update` with status `blocked` asked a question.",
        QuestionAnswered = "question_answered" : "An `answer` reached a blocked thread and unblocked it.",
        ThreadCompleted = "thread_completed" : "`done` finished the thread with a result.",
        ThreadFailed = "thread_failed" : "`fail`, or lease expiry on the last attempt, failed the thread.",
        ThreadCancelled = "thread_cancelled" : "`cancel` stopped the thread.",
    }
}

/// The durable container for one work conversation.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// `thr_...`
    pub thread_id: String,
    /// The orchestration run this thread belongs to, if any.
    pub run_id: Option<String>,
    /// The task id the leader uses for this work, if any.
    pub task_id: Option<String>,
    /// One line that says what the work is.
    pub subject: String,
    /// The agent that opened the thread (usually the leader).
    pub created_by: String,
    /// The agent that may claim the thread (the worker).
    pub assigned_to: String,
    /// Where the thread is in its life.
    pub status: Status,
    /// Queue order for `fetch`.
    pub priority: Priority,
    /// How many times the thread has been claimed.
    pub attempts: u32,
    /// Claims allowed before an expired lease fails the thread.
    pub max_attempts: u32,
    /// The newest message in the thread.
    pub latest_message_id: Option<String>,
    /// The newest event about this thread.
    pub last_event_id: EventId,
    /// When `send` opened it.
    pub created_at: Timestamp,
    /// When anything about it last changed.
    pub updated_at: Timestamp,
}

impl Thread {
    /// Whether `self` and `other` agree on every field fixed when the
    /// thread is opened: all but `status`, `attempts`, `latest_message_id`,
    /// `last_event_id` and `updated_at`, the ones a thread's life changes.
    /// [`crate::Store::update_thread`] writes only those, so that a store's
    /// indexes on fixed fields (assignee, creator, run) are not rewritten by
    /// every command; it refuses an update that would change another.
    pub fn keeps_fixed_fields_of(&self, other: &Thread) -> bool {
        self.thread_id == other.thread_id
            && self.run_id == other.run_id
            && self.task_id == other.task_id
            && self.subject == other.subject
            && self.created_by == other.created_by
            && self.assigned_to == other.assigned_to
            && self.priority == other.priority
            && self.max_attempts == other.max_attempts
            && self.created_at == other.created_at
    }
}

/// One entry in a thread's conversation.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `msg_...`
    pub message_id: String,
    /// The thread it belongs to.
    pub thread_id: String,
    /// The event that recorded it; orders messages exactly, across processes.
    pub event_id: EventId,
    /// Who wrote it.
    pub from_agent: String,
    /// Who it is for.
    pub to_agent: String,
    /// What it is for.
    pub kind: Kind,
    /// One line a reader can act on.
    pub summary: String,
    /// The long form; may be empty.
    pub body: String,
    /// Structured data for programs; always a JSON object.
    pub payload: JsonObject,
    /// When it was written.
    pub created_at: Timestamp,
    /// Files, logs, patches or links attached to it, in the order given.
    pub artifacts: Vec<Artifact>,
}

/// A reference to a file, log, patch or URL attached to a message. The
/// engine stores the reference, never the content.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// `art_...`
    pub artifact_id: String,
    /// The message it is attached to.
    pub message_id: String,
    /// Where the content is: a path or URL, as the sender wrote it.
    pub path: String,
    /// What the content is (`file` unless given): `log`, `patch`, `url`, ...
    pub kind: String,
    /// Structured data about the content; always a JSON object.
    pub metadata: JsonObject,
    /// The path made absolute by the sending host (`null` for URLs, or when
    /// the host has no file system).
    pub absolute_path: Option<String>,
    /// The file's size in bytes, when the sending host could read it.
    pub size_bytes: Option<u64>,
    /// The file's SHA-256 digest (64 lowercase hex digits), when the sending
    /// host could read it.
    pub sha256: Option<String>,
    /// When it was attached.
    pub created_at: Timestamp,
}

/// The most recent claim of a thread. There is at most one lease record per
/// thread; a new claim replaces it, so its token only ever grows.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The thread it covers.
    pub thread_id: String,
    /// The agent that claimed it.
    pub agent: String,
    /// The fencing token of this claim.
    pub lease_token: LeaseToken,
    /// Which attempt this claim is (1 for the first claim).
    pub attempt: u32,
    /// How long the lease lasts from a claim, renewal or heartbeat.
    pub lease_seconds: u64,
    /// When it was claimed.
    pub claimed_at: Timestamp,
    /// When it runs out unless renewed.
    pub expires_at: Timestamp,
    /// When it was given up (thread finished) or recorded as expired; absent
    /// while the lease is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<Timestamp>,
}

impl Lease {
    /// Held at `now`: not released and not yet expired.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.released_at.is_none() && now < self.expires_at
    }

    /// Ran out without being released: the holder stopped renewing.
    pub fn is_lapsed(&self, now: Timestamp) -> bool {
        self.released_at.is_none() && now >= self.expires_at
    }
}

/// A monotonic record of one change, used to wake waiters and to audit.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the stream; strictly increasing in commit order.
    pub event_id: EventId,
    /// The thread it is about.
    pub thread_id: String,
    /// Copied from the thread so run-scoped readers need no join.
    pub run_id: Option<String>,
    /// Copied from the thread.
    pub task_id: Option<String>,
    /// What happened.
    pub event_type: EventType,
    /// The agent that caused it (`inbox` for lease expiry).
    pub source: String,
    /// The message it wrote, if any.
    pub message_id: Option<String>,
    /// That message's kind, so reply waiters can match without a join.
    pub message_kind: Option<Kind>,
    /// The thread's status right after this event.
    pub status: Status,
    /// One line about what happened.
    pub summary: String,
    /// Details that depend on the event type (lease token, previous status).
    pub payload: JsonObject,
    /// When it happened.
    pub created_at: Timestamp,
}

/// How far one agent has read one thread. Moved only by `show --mark-read`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadCursor {
    /// The thread read.
    pub thread_id: String,
    /// The reader.
    pub agent: String,
    /// The newest message the reader has marked read.
    pub last_read_message_id: String,
    /// That message's event id; everything after it is unread.
    pub last_read_event_id: EventId,
    /// When the reader marked it.
    pub last_read_at: Timestamp,
}

vocabulary! {
    /// Whether a registered agent seems to be around, judged from its last
    /// activity (see [`crate::rules::presence`] for the thresholds).
    pub enum Presence ("presence") {
        Active = "active" : "Holds a live lease, or acted in the last 5 minutes.",
        Idle = "idle" : "Acted in the last hour, but not in the last 5 minutes.",
        Gone = "gone" : "Has not acted for an hour: a send-time pick skips it.",
    }
}

/// A registered agent: a name others can address, the roles it serves and
/// what it says it does. Registration is optional for plain names; roles
/// need it, because a role's members are the agents registered with it.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// The agent's name (as in `from_agent`, `agent`, `assigned_to`).
    pub name: String,
    /// The roles it is a member of, sorted, without repeats.
    pub roles: Vec<String>,
    /// What it does, for the people and leaders choosing whom to ask.
    pub description: String,
    /// When it first registered.
    pub registered_at: Timestamp,
    /// When it last registered or marked messages read: the activity that
    /// records no event.
    pub seen_at: Timestamp,
    /// The event that last gave it work from one of its roles (a claim of a
    /// role's thread, or a send-time pick); 0 if none. A role's rotation
    /// picks the member that got role work least recently.
    pub last_assigned_event: EventId,
    /// The SHA-256 of its token, hex, when the database requires tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// The registered agent whose token vouched for its registration (the
    /// team's lead, typically), when tokens were required and some agent
    /// already held one; none for the first agent, or without tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_by: Option<String>,
}

/// A write applied under an idempotency key: what a retry with the same
/// key and the same request gets back instead of applying it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The key the caller chose.
    pub key: String,
    /// The command it was used with (its wire name).
    pub command: String,
    /// The request's fingerprint ([`crate::call::fingerprint`]).
    pub request_sha256: String,
    /// The first outcome: the output's fields, as the command returned them.
    pub output: serde_json::Value,
    /// When the write was applied.
    pub created_at: Timestamp,
}

vocabulary! {
    /// Whether a command acting as a registered agent must prove it is that
    /// agent (the `agent_tokens` setting).
    pub enum AgentTokens ("agent_tokens setting") {
        Off = "off" : "Names are trusted: whoever can open the database may act as any agent (the default; the file's permissions are the trust boundary).",
        Required = "required" : "A write or wait must act as a registered agent and carry the token `agent register` printed for it. Once an agent holds a token, registering a new agent (or one without a token) and changing a setting take a registered agent's token.",
    }
}

vocabulary! {
    /// Whether only registered agents may act and be sent to (the
    /// `agent_registration` setting).
    pub enum AgentRegistration ("agent_registration setting") {
        Optional = "optional" : "Any name may act and be sent to; registering is what makes roles and broadcasts reach an agent (the default).",
        Required = "required" : "Only registered agents act (a write or wait naming an agent nobody registered is refused with agent_not_registered) and receive (an agent, role or role broadcast nobody registered is refused with unknown_recipient).",
    }
}

/// The database-wide settings the engine applies, stored as one record and
/// changed with `settings`. A store that never had them stored reports
/// `None`, read as [`Settings::default`]; a stored record missing fields
/// (written by an older inbox) is read with [`Settings::from_stored`].
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Whether commands acting as a registered agent need its token.
    pub agent_tokens: AgentTokens,
    /// Whether only registered agents act and receive.
    pub agent_registration: AgentRegistration,
    /// Whether writes remove what the retention limits allow as they go
    /// (a few threads at a time), instead of only when `gc` runs.
    pub auto_gc: bool,
    /// Retention: finished threads idle for more days than this are removed.
    pub keep_days: u32,
    /// Retention: beyond this many messages, the oldest removable threads go.
    pub keep_messages: u32,
    /// Retention: removable threads that were read and idle for more hours
    /// than this go first.
    pub keep_read_hours: u32,
}

impl Settings {
    /// Settings as a store kept them: fields the record lacks (settings
    /// added after it was written) take their defaults.
    pub fn from_stored(json: &str) -> Result<Settings, serde_json::Error> {
        let mut merged = serde_json::to_value(Settings::default())?;
        let stored: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)?;
        if let Some(object) = merged.as_object_mut() {
            object.extend(stored);
        }
        serde_json::from_value(merged)
    }
}

impl Default for Settings {
    /// Tokens off, registration optional, `gc` by hand only, and seed 004's limits: 7 days, 5,000
    /// messages, read ones after 24 hours.
    fn default() -> Settings {
        Settings {
            agent_tokens: AgentTokens::Off,
            agent_registration: AgentRegistration::Optional,
            auto_gc: false,
            keep_days: 7,
            keep_messages: 5000,
            keep_read_hours: 24,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_settings_missing_fields_take_their_defaults() {
        let older = Settings::from_stored(r#"{"agent_tokens":"required"}"#);
        let expected = Settings {
            agent_tokens: AgentTokens::Required,
            ..Settings::default()
        };
        assert!(older.is_ok_and(|s| s == expected));
        assert!(Settings::from_stored(r#"{"agent_tokens":"maybe"}"#).is_err());
        assert!(Settings::from_stored("[]").is_err());
    }
}
