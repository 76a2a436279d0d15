//! The wire types of the agent registry and the mailbox view: `agent-register`,
//! `agent-list`, `agent-unregister`, `read` and `mark-read`. Plain data, like
//! the rest of [`crate::wire`]; the rules are in the engine's `agents`
//! handlers and in [`crate::address`].

use serde::{Deserialize, Serialize};

use super::Found;
use crate::model::{EventId, Message, Presence, ReadCursor, Status};
use crate::time::Timestamp;

/// `agent-register`: add an agent to the registry, or replace its roles and
/// description. Safe to repeat; each call counts as activity.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentRegisterRequest {
    /// The agent's name (required).
    pub agent: Option<String>,
    /// The roles it serves: threads sent to `role:NAME` are its to claim.
    pub roles: Vec<String>,
    /// What it does, in one line.
    pub description: Option<String>,
}

/// `agent-list`: the registry.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentListRequest {
    /// Only members of this role (which is then listed even with no member).
    pub role: Option<String>,
    /// At most this many agents, by name (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// `agent-unregister`: remove an agent from the registry. Its threads and
/// messages stay; threads sent to its roles wait for other members.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentUnregisterRequest {
    /// The agent (required).
    pub agent: Option<String>,
}

/// `read`: the mailbox view.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadRequest {
    /// The reader (required): messages to it, its roles, or everyone.
    pub agent: Option<String>,
    /// Also messages already read (by default only unread ones).
    pub include_read: bool,
    /// Only messages written at or after this instant.
    pub since: Option<Timestamp>,
    /// Cursor: only messages after this event (`next_event_id` of the last read).
    pub after_event: Option<EventId>,
    /// At most this many messages, oldest first (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// `mark-read`: move the reader's cursors.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MarkReadRequest {
    /// The reader (required).
    pub agent: Option<String>,
    /// These messages (and, in each one's thread, everything before it).
    pub message_ids: Vec<String>,
    /// Or: every message of the reader's mailbox up to this event.
    pub through_event: Option<EventId>,
}

/// A registered agent as `agent-list` shows it.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    /// Its name.
    pub name: String,
    /// Its roles, sorted.
    pub roles: Vec<String>,
    /// What it does.
    pub description: String,
    /// When it first registered.
    pub registered_at: Timestamp,
    /// The registered agent whose token vouched for its registration
    /// (with `agent_tokens required`): who let it join, or gave it its
    /// token. Absent for the first agent and without tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_by: Option<String>,
    /// Its latest activity: the newest event it caused, its registration or
    /// its last `mark-read`, whichever is latest.
    pub last_active_at: Timestamp,
    /// What that activity says: `active`, `idle` or `gone`.
    pub presence: Presence,
    /// The threads it holds a live lease on now.
    pub holds: Vec<String>,
}

/// A role as `agent-list` shows it.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleView {
    /// The role's name (`role:NAME` addresses it).
    pub role: String,
    /// Its registered members.
    pub members: u32,
    /// Those not `gone`.
    pub present: u32,
    /// Its pending threads nobody has claimed (counted up to 1000).
    pub waiting: u32,
}

/// `agent-register` and `agent-unregister`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentOutput {
    /// The agent (as it was, for `agent-unregister`).
    pub agent: AgentView,
    /// Its new token, shown this once: only when the database requires
    /// tokens and the agent had none. Only its hash is stored; pass it as
    /// `agent_token` (`--agent-token`, `$INBOX_AGENT_TOKEN`) whenever the
    /// agent writes or waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_token: Option<String>,
}

/// `agent-list`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsOutput {
    /// Registered agents, by name.
    pub agents: Vec<AgentView>,
    /// The roles of those agents (and the role asked for), by name.
    pub roles: Vec<RoleView>,
}

/// One message of a mailbox, with the thread it is in.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxMessage {
    /// The message.
    #[serde(flatten)]
    pub message: Message,
    /// Its thread's subject.
    pub subject: String,
    /// Its thread's status now.
    pub thread_status: Status,
}

/// `read`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxOutput {
    /// The messages, oldest first.
    pub messages: Vec<MailboxMessage>,
    /// Resume from here: pass it as `after_event` (or `through_event` to
    /// `mark-read`, to mark exactly these read).
    pub next_event_id: EventId,
    /// Whether more messages match: read again from `next_event_id`.
    pub more: bool,
}

impl Found for MailboxOutput {
    fn found(&self) -> bool {
        !self.messages.is_empty()
    }
}

/// `mark-read`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkReadOutput {
    /// The cursors moved, one per thread (none if all were read already).
    pub cursors: Vec<ReadCursor>,
}
