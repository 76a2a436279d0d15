//! The wire types of the database-wide settings and of retention:
//! `settings` and `gc`. Plain data, like the rest of [`crate::wire`]; the
//! rules are in the engine's `identity` and `retention` steps.

use serde::{Deserialize, Serialize};

use crate::model::{AgentRegistration, AgentTokens, Settings, Status};
use crate::vocabulary::vocabulary;

/// `settings`: show the database-wide settings, changing those given.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SettingsRequest {
    /// `required`: a write or wait must act as a registered agent and
    /// carry its token; `off` (the default): names are trusted.
    pub agent_tokens: Option<AgentTokens>,
    /// `required`: only registered agents act and are sent to; `optional`
    /// (the default): any name may.
    pub agent_registration: Option<AgentRegistration>,
    /// Whether writes remove what the retention limits allow as they go.
    pub auto_gc: Option<bool>,
    /// Retention: finished threads idle for more days than this go.
    pub keep_days: Option<u32>,
    /// Retention: beyond this many messages, the oldest removable threads go.
    pub keep_messages: Option<u32>,
    /// Retention: removable threads read and idle for more hours than this
    /// go first.
    pub keep_read_hours: Option<u32>,
}

/// `settings`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsOutput {
    /// The settings now in force.
    pub settings: Settings,
    /// The settings this call changed, by field name (empty: it only
    /// showed them).
    pub changed: Vec<String>,
}

/// `gc`: remove what the retention limits allow: finished threads past
/// their time and broadcasts everyone has read, with their messages,
/// events and cursors, and idempotency keys older than the window.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GcRequest {
    /// Finished threads idle for more days than this go (default: the
    /// database's `keep_days`).
    pub keep_days: Option<u32>,
    /// Beyond this many messages, the oldest removable threads go
    /// (default: the database's `keep_messages`).
    pub keep_messages: Option<u32>,
    /// Removable threads read and idle for more hours than this go first
    /// (default: the database's `keep_read_hours`).
    pub keep_read_hours: Option<u32>,
    /// Say what would go, and remove nothing.
    pub dry_run: bool,
    /// At most this many threads per call (default 1000, at most 10000);
    /// `more` says when to call again.
    pub limit: Option<u32>,
}

vocabulary! {
    /// Why `gc` removed a thread.
    pub enum GcReason ("gc reason") {
        Age = "age" : "Finished, and idle for more than keep_days.",
        Read = "read" : "Finished (or a broadcast), read by everyone it is for, and idle for more than keep_read_hours.",
        Count = "count" : "The database held more than keep_messages messages, and it was among the oldest finished threads.",
    }
}

/// A thread `gc` removed (or, in a dry run, would remove).
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedThread {
    /// The thread.
    pub thread_id: String,
    /// Its status when it went.
    pub status: Status,
    /// Which limit it went by.
    pub reason: GcReason,
    /// How many messages went with it.
    pub messages: u64,
}

/// `gc`.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcOutput {
    /// Nothing was removed: this is what would have gone.
    pub dry_run: bool,
    /// The limits applied.
    pub keep_days: u32,
    /// The limits applied.
    pub keep_messages: u32,
    /// The limits applied.
    pub keep_read_hours: u32,
    /// The threads removed, oldest first within each limit.
    pub removed: Vec<RemovedThread>,
    /// Messages removed with them.
    pub removed_messages: u64,
    /// Idempotency keys removed: those older than `keep_days`.
    pub expired_keys: u64,
    /// Messages the database holds after this call.
    pub messages_left: u64,
    /// The call stopped at its limit (or at the most threads it looks at
    /// in one call) before it was through: call it again.
    pub more: bool,
}
