//! The bridges and interchange formats: inbox beside the file-based
//! systems agent teams already use (the `*.task.json` drop folder,
//! per-member JSONL inboxes, a `mailbox.jsonl` log), in and out.
//!
//! Today this crate holds [`mailbox`], the message types of a
//! `mailbox.jsonl` log, which the `inbox` command line's import and export
//! and the MCP server's mailbox tools both read; the bridges and the rest
//! of the formats are still in `inbox-cli` (`src/bridge/`,
//! `src/interchange/`) and move here next. This crate must never apply an
//! inbox rule: it maps formats onto engine requests.

pub mod mailbox;
