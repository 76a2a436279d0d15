//! The one wire format every host speaks: [`Request`] in, [`Response`] out,
//! with the request and output record of every command. (The [`Request`] and
//! [`Output`] enums themselves are generated from the command table in
//! [`crate::command`].)
//!
//! The CLI's `--json` output, the wasm API and the plugin ABI are all this
//! JSON. A request is an object tagged by `"command"` whose other fields are
//! named exactly like the record fields they set or filter (`thread_id`,
//! `from_agent`, `lease_seconds`, ...). A response is
//! `{"ok": true, "command": ..., <fields>}` or
//! `{"ok": false, "command": ..., "error": {"code", "message"}}`.
//!
//! Required text fields are `Option`s on purpose: a missing field reaches the
//! engine's validation and comes back as `missing_field` with a hint, instead
//! of a generic decoding error. This module only describes shapes; it must
//! never apply rules (those live in [`crate::engine`] and [`crate::rules`]).

use serde::{Deserialize, Serialize, Serializer};

use crate::model::{
    Event, EventId, Kind, Lease, LeaseToken, Message, Priority, ReadCursor, Status,
};
pub use crate::orch::wire::{
    CouncilOutput, CouncilShowOutput, DispatchOutput, Dispatched, OrchCouncilRequest,
    OrchCouncilShowRequest, OrchDispatchRequest, OrchPlanRequest, OrchReadyRequest,
    OrchReconcileRequest, OrchRunCancelRequest, OrchRunCreateRequest, OrchRunListRequest,
    OrchStatusRequest, OrchTaskAddRequest, OrchTaskRequest, OrchTaskShowRequest, OrchWaitOutput,
    OrchWaitRequest, OrchWorktreeGcRequest, OrchWorktreeListRequest, PlanOutput, ReconcileOutput,
    Refused, RunOutput, RunsOutput, StatusOutput, TaskLine, TaskOutput, TaskShowOutput, TaskSpec,
    TaskView, TasksOutput, WorktreeGcOutput, WorktreeView, WorktreesOutput,
};

mod agents;
pub(crate) mod view;
pub use agents::{
    AgentListRequest, AgentOutput, AgentRegisterRequest, AgentUnregisterRequest, AgentView,
    AgentsOutput, MailboxMessage, MailboxOutput, MarkReadOutput, MarkReadRequest, ReadRequest,
    RoleView,
};
pub use view::{Found, ThreadView};
mod settings;
pub use settings::{GcOutput, GcReason, GcRequest, RemovedThread, SettingsOutput, SettingsRequest};

/// The version of this wire format. Bumped only for incompatible changes;
/// adding an optional request field or a response field is compatible.
pub const WIRE_VERSION: u32 = 1;

/// An artifact reference to attach to a new message.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactInput {
    /// Where the content is (required).
    pub path: Option<String>,
    /// What it is; `file` if absent.
    pub kind: Option<String>,
    /// A JSON object about it.
    #[cfg_attr(feature = "typescript", tsify(type = "JsonObject"))]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<crate::model::JsonObject>")
    )]
    pub metadata: Option<serde_json::Value>,
    /// The path made absolute, as the sending host sees it.
    pub absolute_path: Option<String>,
    /// The file's size in bytes, if the sending host read it.
    pub size_bytes: Option<u64>,
    /// The file's SHA-256 digest in lowercase hex, if the sending host read it.
    pub sha256: Option<String>,
}

/// `init`: no fields.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InitRequest {}

/// `send`: open a thread (no `thread_id`) or append to one.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SendRequest {
    /// The sender (required).
    pub from_agent: Option<String>,
    /// The recipient, an address: an agent name (or `agent:NAME`),
    /// `role:NAME` (any member may claim), `broadcast` or
    /// `broadcast:role:NAME` (information, not work). Required for a new
    /// thread, where it becomes `assigned_to`.
    pub to_agent: Option<String>,
    /// Append to this thread instead of opening one.
    pub thread_id: Option<String>,
    /// New threads only.
    pub run_id: Option<String>,
    /// New threads only.
    pub task_id: Option<String>,
    /// New threads only (required there).
    pub subject: Option<String>,
    /// Defaults to `task`.
    pub kind: Option<Kind>,
    /// Defaults to the subject on a new thread; required when appending.
    pub summary: Option<String>,
    /// The long form.
    pub body: Option<String>,
    /// A JSON object.
    #[cfg_attr(feature = "typescript", tsify(type = "JsonObject"))]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<crate::model::JsonObject>")
    )]
    pub payload: Option<serde_json::Value>,
    /// New threads only; defaults to `normal`.
    pub priority: Option<Priority>,
    /// New threads only; claims allowed before expiry fails the thread.
    pub max_attempts: Option<u32>,
    /// New threads to `role:NAME` only: assign the thread to one member now,
    /// the one that got the role's work least recently, skipping members
    /// who are gone (without a present member it stays on the role).
    pub pick: bool,
    /// References to attach.
    pub artifacts: Vec<ArtifactInput>,
}

/// `fetch`: claimable threads for one agent.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchRequest {
    /// Whose candidates (required).
    pub agent: Option<String>,
    /// Statuses to include; `[pending]` if empty. Terminal statuses are refused.
    pub status: Vec<Status>,
    /// At most this many (default 20, at most 1000).
    pub limit: Option<u32>,
    /// Only threads with messages from others after the agent's read cursor.
    pub unread: bool,
}

/// `claim`: take the lease.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaimRequest {
    /// The claiming agent (required).
    pub agent: Option<String>,
    /// The thread to claim; give this or `next`.
    pub thread_id: Option<String>,
    /// Claim the next thread of the agent's queue instead (what `fetch` would
    /// list first), atomically: no other worker can take it in between.
    pub next: bool,
    /// Lease length (default 900, 1 to 86400).
    pub lease_seconds: Option<u64>,
}

/// `renew`: extend the caller's lease from now.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RenewRequest {
    /// The holder (required).
    pub agent: Option<String>,
    /// The thread (required).
    pub thread_id: Option<String>,
    /// Strict fencing: the token `claim` returned.
    pub lease_token: Option<LeaseToken>,
    /// New lease length; the lease's current length if absent.
    pub lease_seconds: Option<u64>,
}

/// `update`: progress or a blocking question from the holder.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpdateRequest {
    /// The holder (required).
    pub agent: Option<String>,
    /// The thread (required).
    pub thread_id: Option<String>,
    /// Strict fencing: the token `claim` returned.
    pub lease_token: Option<LeaseToken>,
    /// `in_progress` or `blocked`; the status stays as it is if absent.
    pub status: Option<Status>,
    /// What happened, or for `blocked` exactly what is missing (required).
    pub summary: Option<String>,
    /// The long form.
    pub body: Option<String>,
    /// A JSON object.
    #[cfg_attr(feature = "typescript", tsify(type = "JsonObject"))]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<crate::model::JsonObject>")
    )]
    pub payload: Option<serde_json::Value>,
    /// References to attach.
    pub artifacts: Vec<ArtifactInput>,
}

/// `reply`: a message inside an existing thread.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplyRequest {
    /// The sender (required).
    pub from_agent: Option<String>,
    /// The recipient; the other party of the thread if absent.
    pub to_agent: Option<String>,
    /// The thread (required).
    pub thread_id: Option<String>,
    /// Strict fencing for a holder's reply.
    pub lease_token: Option<LeaseToken>,
    /// `answer` (default), `question`, `progress` or `control`.
    pub kind: Option<Kind>,
    /// One line (required).
    pub summary: Option<String>,
    /// The long form.
    pub body: Option<String>,
    /// A JSON object.
    #[cfg_attr(feature = "typescript", tsify(type = "JsonObject"))]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<crate::model::JsonObject>")
    )]
    pub payload: Option<serde_json::Value>,
    /// References to attach.
    pub artifacts: Vec<ArtifactInput>,
}

/// `done` and `fail`: the holder finishes the thread.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinishRequest {
    /// The holder (required).
    pub agent: Option<String>,
    /// The thread (required).
    pub thread_id: Option<String>,
    /// Strict fencing: the token `claim` returned.
    pub lease_token: Option<LeaseToken>,
    /// The result or the failure, in one line (required).
    pub summary: Option<String>,
    /// The long form.
    pub body: Option<String>,
    /// A JSON object.
    #[cfg_attr(feature = "typescript", tsify(type = "JsonObject"))]
    #[cfg_attr(
        feature = "schema",
        schemars(with = "Option<crate::model::JsonObject>")
    )]
    pub payload: Option<serde_json::Value>,
    /// References to attach.
    pub artifacts: Vec<ArtifactInput>,
}

/// `cancel`: stop a thread that has not finished.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CancelRequest {
    /// Who cancels (required).
    pub agent: Option<String>,
    /// The thread (required).
    pub thread_id: Option<String>,
    /// Why, in one line (required).
    pub reason: Option<String>,
    /// References to attach.
    pub artifacts: Vec<ArtifactInput>,
}

/// `list`: threads by filter, newest first.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListRequest {
    /// Threads this agent created or is assigned.
    pub agent: Option<String>,
    /// Any of these statuses; all if empty.
    pub status: Vec<Status>,
    /// Threads this agent created.
    pub created_by: Option<String>,
    /// Threads assigned to this address (an agent name, `role:NAME`,
    /// `broadcast`...).
    pub assigned_to: Option<String>,
    /// Threads of this run.
    pub run_id: Option<String>,
    /// Threads of this task.
    pub task_id: Option<String>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// `show`: one thread and its history.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShowRequest {
    /// The thread (required).
    pub thread_id: Option<String>,
    /// The reader: whose read cursor to report and, with `mark_read`, move.
    pub agent: Option<String>,
    /// Move the reader's cursor to the newest message shown.
    pub mark_read: bool,
    /// Cursor: only messages after this one (the next page).
    pub after_message: Option<String>,
    /// At most this many messages, oldest first (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// `watch`: events on an agent's threads after a cursor.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WatchRequest {
    /// Threads this agent created or is assigned; every thread if absent.
    /// Events this agent caused are skipped.
    pub agent: Option<String>,
    /// Only events that left the thread in one of these statuses.
    pub status: Vec<Status>,
    /// Only events that wrote a message of one of these kinds (`result`,
    /// `question`, ...); events without a message never match then.
    pub kinds: Vec<Kind>,
    /// Cursor: events after this id; the latest event when the wait begins if absent.
    pub after_event: Option<EventId>,
    /// How long the host blocks before giving up (default 300, at most 86400).
    pub timeout_seconds: Option<u64>,
    /// At most this many events per wake (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// `wait-reply`: the next reply-like message in one thread.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitReplyRequest {
    /// The thread (required).
    pub thread_id: Option<String>,
    /// The waiting agent: its own messages never match, and if it holds the
    /// lease the host renews it while waiting.
    pub agent: Option<String>,
    /// Strict fencing for those renewals.
    pub lease_token: Option<LeaseToken>,
    /// Cursor: messages after this event.
    pub after_event: Option<EventId>,
    /// Cursor: messages after this message.
    pub after_message: Option<String>,
    /// Kinds that count as a reply (default answer, control, result).
    pub kinds: Vec<Kind>,
    /// How long the host blocks before giving up (default 300, at most 86400).
    pub timeout_seconds: Option<u64>,
}

/// `sweep`: no fields.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepRequest {}

/// `version`: no fields.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VersionRequest {}

/// `init`: what the store now is.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitOutput {
    /// Where the store keeps its data (a file path), or `null` in memory.
    pub database: Option<String>,
    /// The store's schema version.
    pub schema_version: u32,
}

/// Commands that write one message.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageOutput {
    /// The thread after the command.
    pub thread: ThreadView,
    /// The message written.
    pub message: Message,
    /// The event recorded; pass it to `wait-reply --after-event`.
    pub event_id: EventId,
    /// Who the new thread reached, when it was sent to a role or a
    /// broadcast (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<Route>,
}

/// Where `send` delivered a thread addressed to a role or a broadcast.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    /// The address as given, canonical (`role:NAME`, `broadcast`...).
    pub address: String,
    /// The registered agents it reaches now (0: the thread waits for one to
    /// register).
    pub members: u32,
    /// The member a send-time `pick` assigned the thread to, if any.
    pub picked: Option<String>,
}

/// Commands that return a list of threads.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadsOutput {
    /// The threads, in the command's order.
    pub threads: Vec<ThreadView>,
}

impl Found for ThreadsOutput {
    fn found(&self) -> bool {
        !self.threads.is_empty()
    }
}

/// `claim` and `renew`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeaseOutput {
    /// The thread after the command.
    pub thread: ThreadView,
    /// The lease now held.
    pub lease: Lease,
    /// The event recorded.
    pub event_id: EventId,
}

/// `claim`: the lease taken, or nothing (`next` with nothing to claim). On
/// the wire it is a [`LeaseOutput`], or its three fields all `null`, so an
/// agent reads `lease` either way.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "ClaimWire")]
pub struct ClaimOutput {
    /// The claim, or `None` when `next` found nothing to claim.
    pub claimed: Option<LeaseOutput>,
}

impl Found for ClaimOutput {
    fn found(&self) -> bool {
        self.claimed.is_some()
    }
}

// Declared by hand: the derive cannot say "these fields, or all null".
#[cfg(feature = "typescript")]
#[wasm_bindgen::prelude::wasm_bindgen(typescript_custom_section)]
const CLAIM_OUTPUT_TS: &str = r#"
/** `claim`: the lease taken, or (`next` with nothing to claim) its three fields all `null`. */
export type ClaimOutput = LeaseOutput | { thread: null; lease: null; event_id: null };
"#;

impl Serialize for ClaimOutput {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Nothing {
            thread: (),
            lease: (),
            event_id: (),
        }
        match &self.claimed {
            Some(claimed) => claimed.serialize(serializer),
            None => Nothing {
                thread: (),
                lease: (),
                event_id: (),
            }
            .serialize(serializer),
        }
    }
}

/// [`ClaimOutput`] as read back from JSON, before the all-or-none check.
#[derive(Deserialize)]
struct ClaimWire {
    thread: Option<ThreadView>,
    lease: Option<Lease>,
    event_id: Option<EventId>,
}

impl TryFrom<ClaimWire> for ClaimOutput {
    type Error = &'static str;

    fn try_from(wire: ClaimWire) -> Result<ClaimOutput, Self::Error> {
        match (wire.thread, wire.lease, wire.event_id) {
            (Some(thread), Some(lease), Some(event_id)) => Ok(ClaimOutput {
                claimed: Some(LeaseOutput {
                    thread,
                    lease,
                    event_id,
                }),
            }),
            (None, None, None) => Ok(ClaimOutput { claimed: None }),
            _ => Err("a claim has a thread, a lease and an event id, or none of them"),
        }
    }
}

/// `show`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShowOutput {
    /// The thread.
    pub thread: ThreadView,
    /// The thread's messages, oldest first, each with its artifacts: from
    /// the first (or after `after_message`), at most `limit`.
    pub messages: Vec<Message>,
    /// The reader's cursor (after moving it, with `mark_read`), or `null`.
    pub read_cursor: Option<ReadCursor>,
    /// Whether later messages exist: pass the last message's id as
    /// `after_message` to read them.
    pub more: bool,
}

/// `watch`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WatchOutput {
    /// Whether matching events arrived.
    pub woke: bool,
    /// Resume from here: pass it as `after_event` to the next watch.
    pub next_event_id: EventId,
    /// The matching events, oldest first.
    pub events: Vec<Event>,
}

impl Found for WatchOutput {
    fn found(&self) -> bool {
        self.woke
    }
}

/// `wait-reply`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitReplyOutput {
    /// Whether a reply arrived.
    pub woke: bool,
    /// Resume from here: pass it as `after_event` to the next wait.
    pub next_event_id: EventId,
    /// The reply, or `null`.
    pub message: Option<Message>,
    /// The thread now.
    pub thread: ThreadView,
}

impl Found for WaitReplyOutput {
    fn found(&self) -> bool {
        self.woke
    }
}

/// `sweep`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepOutput {
    /// The events recorded for lapsed leases (possibly none).
    pub events: Vec<Event>,
    /// When the next live lease runs out, or `null`: a waiting host sweeps
    /// again then, so lapses are recorded (and waiters woken) on time.
    pub next_lease_expiry: Option<crate::time::Timestamp>,
}

/// `version`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionOutput {
    /// The engine crate's version.
    pub engine_version: String,
    /// [`WIRE_VERSION`].
    pub wire_version: u32,
}
