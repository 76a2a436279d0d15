//! Every message of a database, in the order it was written, for the
//! exports that write one line per message (`mailbox-jsonl`,
//! `teams-jsonl`).
//!
//! One read transaction (one consistent snapshot) walks the events that
//! wrote a message, a page at a time, so memory stays bounded however many
//! there are; each message comes with its thread, whether it opened the
//! thread, and whether its recipient has read it (an agent's read cursor on
//! the thread is at or past it: inbox's read state, the one `read` and
//! `show --mark-read` use). This module must never decide how a message
//! is written as a line: the format's `line` function does.

use std::io::Write;

use inbox_engine::address::Address;
use inbox_engine::store::{EventQuery, TxMode};
use inbox_engine::{EventType, Kind, Message, Store, Thread};
use inbox_sqlite::SqliteStore;

use super::InterchangeError;

/// Events read per query.
const PAGE: usize = 500;

/// One message, with what a line about it may need.
pub(super) struct Item<'a> {
    /// The message.
    pub(super) message: &'a Message,
    /// Its thread, as it is now.
    pub(super) thread: &'a Thread,
    /// The event that wrote it.
    pub(super) event_type: EventType,
    /// Whether the message opened the thread.
    pub(super) opened: bool,
    /// Whether its recipient (an agent, not a role or a broadcast) has
    /// read it.
    pub(super) read: bool,
}

/// Writes every message of `store` to `out` as `line` makes it; returns
/// how many.
pub(super) fn export(
    store: &mut SqliteStore,
    out: &mut dyn Write,
    line: fn(&Item<'_>) -> String,
) -> Result<u64, InterchangeError> {
    store.begin(TxMode::Read)?;
    let written = export_in(store, out, line);
    let ended = store.commit();
    let written = written?;
    ended?;
    Ok(written)
}

fn export_in(
    store: &mut SqliteStore,
    out: &mut dyn Write,
    line: fn(&Item<'_>) -> String,
) -> Result<u64, InterchangeError> {
    let mut after = 0;
    let mut written = 0;
    loop {
        let query = EventQuery {
            message_kinds: Kind::ALL.to_vec(),
            ..EventQuery::after_event(after, PAGE)
        };
        let events = store.events(&query)?;
        let Some(last) = events.last() else {
            return Ok(written);
        };
        after = last.event_id;
        for event in &events {
            let Some(message_id) = &event.message_id else {
                continue;
            };
            let (Some(message), Some(state)) =
                (store.message(message_id)?, store.thread(&event.thread_id)?)
            else {
                continue;
            };
            let read = is_read(store, &message)?;
            let item = Item {
                message: &message,
                thread: &state.thread,
                event_type: event.event_type,
                opened: event.event_type == EventType::ThreadCreated,
                read,
            };
            let mut text = line(&item);
            text.push('\n');
            out.write_all(text.as_bytes())
                .map_err(InterchangeError::Write)?;
            written += 1;
        }
    }
}

/// Whether the agent `message` is for has its read cursor on the thread
/// at or past it.
fn is_read(store: &mut SqliteStore, message: &Message) -> Result<bool, InterchangeError> {
    let Address::Agent(agent) = Address::stored(&message.to_agent) else {
        return Ok(false);
    };
    let cursor = store.read_cursor(&message.thread_id, &agent)?;
    Ok(cursor.is_some_and(|c| c.last_read_event_id >= message.event_id))
}
