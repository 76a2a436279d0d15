//! The SQL the two SQL stores share, the SQLite store (`inbox-sqlite`) and
//! the PostgreSQL one (`inbox-postgres`): a thread query's text, written
//! once and bound by each store its own way ([`thread_sql`]), and the
//! grouping of a mailbox read's messages per thread ([`per_thread`]).
//!
//! This crate must never run a statement or open a connection: it writes
//! SQL text and reshapes rows a store has already read.

use inbox_engine::{Message, StoreError};

pub mod thread_sql;

/// Runs `fill` once per thread on that thread's messages (a store's
/// per-thread lookup, such as their artifacts) and returns the messages it
/// gave back in the order they came in. Both stores' mailbox reads use it.
pub fn per_thread(
    messages: Vec<Message>,
    mut fill: impl FnMut(Vec<Message>) -> Result<Vec<Message>, StoreError>,
) -> Result<Vec<Message>, StoreError> {
    let mut by_thread: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match by_thread.iter_mut().find(|(t, _)| *t == m.thread_id) {
            Some((_, indexes)) => indexes.push(i),
            None => by_thread.push((m.thread_id.clone(), vec![i])),
        }
    }
    let mut slots: Vec<Option<Message>> = messages.into_iter().map(Some).collect();
    for (_, indexes) in by_thread {
        let group: Vec<Message> = indexes.iter().filter_map(|&i| slots[i].take()).collect();
        for (i, message) in indexes.into_iter().zip(fill(group)?) {
            slots[i] = Some(message);
        }
    }
    Ok(slots.into_iter().flatten().collect())
}
