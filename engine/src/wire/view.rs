//! What both command sets' outputs are made of, inbox's (`crate::wire`) and
//! orch's (`crate::orch::wire`): a thread as readers see it, and whether a
//! command found what it looked for. A module of its own so that orch's
//! wire can use them without depending on inbox's. It must never decide
//! anything: these are shapes.

use serde::{Deserialize, Serialize};

use crate::model::{Lease, Thread};

/// A thread as readers see it at the time of the command: its status takes
/// lapsed leases into account, and `lease` is present only while one is live.
#[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadView {
    /// The thread, with its effective status.
    #[serde(flatten)]
    pub thread: Thread,
    /// The live lease, or `null`.
    pub lease: Option<Lease>,
}

/// What a command that looks for something found: the commands marked
/// `or_nothing` in the command table exit 10 when their output's `found` is
/// false (see [`crate::Output::found_nothing`]). One home for "nothing found", so
/// the exit code and the waiter's "did it wake" cannot disagree.
pub trait Found {
    /// Whether the command found what it looked for.
    fn found(&self) -> bool;
}
