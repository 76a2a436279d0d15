//! What a command line's arguments turn into: a request's fields
//! ([`Fields`], one per engine command), or, for a group of commands under
//! one word, the request itself ([`Group`]), with notes for the user on the
//! way ([`Notes`]). The command table ([`crate::args`]) calls them; their
//! implementations, which read files and describe artifacts, are
//! [`crate::request`]'s. This module must never judge a value.

use inbox_engine::{EngineError, Request};

/// A notice for the user that does not stop the command (e.g. an artifact
/// that does not exist yet is recorded without a digest).
pub(crate) type Notes = Vec<String>;

/// One command's arguments turned into its request's fields: the host's
/// share of input handling (files read, artifacts described), with every
/// value passed on as given for the engine to judge.
pub(crate) trait Fields {
    /// The request's field record.
    type Fields;

    /// The fields; `agent` is the global `--agent` (or `$INBOX_AGENT`).
    fn fields(self, agent: Option<String>, notes: &mut Notes) -> Result<Self::Fields, EngineError>;
}

/// A group of commands under one word (`agent register`): its subcommand
/// picks the request.
pub(crate) trait Group {
    /// The request; `agent` is the global `--agent` (or `$INBOX_AGENT`).
    fn request(self, agent: Option<String>, notes: &mut Notes) -> Result<Request, EngineError>;
}
