//! Turning PostgreSQL rows into the engine's records, and PostgreSQL errors
//! into [`StoreError`]s. The column lists here are the ones every query of
//! the store selects, in the same order as the SQLite store's, so the two
//! stores read the same fields the same way. It must never run a statement
//! nor put a connection string (which may hold a password) into a message.

use inbox_engine::store::ThreadState;
use inbox_engine::{
    Artifact, Event, EventType, JsonObject, Kind, Lease, Message, Priority, Status, StoreError,
    StoreErrorKind, Thread, Timestamp,
};
use postgres::Row;
use postgres::error::SqlState;
use postgres::types::FromSql;

/// Turns a client error into a store error whose message says what to do.
/// `location` is the database as [`super::describe`] names it (no
/// password); the server's own messages never echo the connection string.
pub fn pg_error(error: postgres::Error, location: &str) -> StoreError {
    if error.is_closed() {
        return StoreError::other(format!(
            "{location}: the connection to the server was lost; check that it is up, then retry \
             the command (a write whose commit was cut off may have happened: pass an \
             --idempotency-key to retry writes safely)"
        ));
    }
    let Some(code) = error.code() else {
        // "error connecting to server" says little without its cause
        // ("Connection refused", "No such file or directory").
        let cause = std::error::Error::source(&error).map_or(String::new(), |s| format!(": {s}"));
        return StoreError::other(format!("{location}: {error}{cause}"));
    };
    let detail = error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_owned());
    if busy(code) {
        return StoreError::new(
            StoreErrorKind::Busy,
            format!("{location}: {detail}; other writers held the database, retry the command"),
        );
    }
    if shutting_down(code) {
        return StoreError::other(format!(
            "{location}: the server is shutting down or restarting ({detail}); retry the command \
             when it is back"
        ));
    }
    if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        return StoreError::other(format!(
            "{location}: {detail}; this database role may not do that: the database's owner \
             grants each role what it may touch (docs/postgres.md, \"Using it\")"
        ));
    }
    StoreError::other(format!("{location}: {detail}"))
}

/// Failures that a retry of the whole command resolves: a lock or
/// statement timeout, a deadlock, a serialization failure.
fn busy(code: &SqlState) -> bool {
    [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::QUERY_CANCELED,
    ]
    .contains(code)
}

fn shutting_down(code: &SqlState) -> bool {
    [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
    ]
    .contains(code)
}

/// A stored value that does not decode: the database was written by
/// something else, or by hand.
fn undecodable(index: usize, what: impl std::fmt::Display) -> StoreError {
    StoreError::other(format!(
        "a stored row does not decode (column {index}): {what}"
    ))
}

/// Column `index` as `T`.
pub(super) fn get<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).map_err(|e| undecodable(index, e))
}

/// A row's columns as either protocol delivers them: a typed [`Row`] of
/// a prepared statement, or the texts of a simple query (what `begin`'s
/// round trip reads ahead). The decoders below read both, so a record is
/// decoded by one function whichever way it came.
pub(super) trait Cells {
    /// A text column (`None` for NULL).
    fn text(&self, index: usize) -> Result<Option<String>, StoreError>;
    /// A `BIGINT` column (`None` for NULL).
    fn int(&self, index: usize) -> Result<Option<i64>, StoreError>;
}

impl Cells for Row {
    fn text(&self, index: usize) -> Result<Option<String>, StoreError> {
        get(self, index)
    }

    fn int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        get(self, index)
    }
}

impl Cells for [Option<String>] {
    fn text(&self, index: usize) -> Result<Option<String>, StoreError> {
        match self.get(index) {
            Some(text) => Ok(text.clone()),
            None => Err(undecodable(index, "no such column")),
        }
    }

    fn int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        self.text(index)?
            .map(|t| t.parse().map_err(|e| undecodable(index, e)))
            .transpose()
    }
}

/// A text column that may not be NULL.
fn text<R: Cells + ?Sized>(row: &R, index: usize) -> Result<String, StoreError> {
    row.text(index)?
        .ok_or_else(|| undecodable(index, "NULL where a value is required"))
}

fn integer<R: Cells + ?Sized>(row: &R, index: usize) -> Result<i64, StoreError> {
    row.int(index)?
        .ok_or_else(|| undecodable(index, "NULL where a number is required"))
}

fn time_at<R: Cells + ?Sized>(row: &R, index: usize) -> Result<Timestamp, StoreError> {
    Timestamp::parse(&text(row, index)?).map_err(|e| undecodable(index, e))
}

fn time_opt<R: Cells + ?Sized>(row: &R, index: usize) -> Result<Option<Timestamp>, StoreError> {
    row.text(index)?
        .map(|t| Timestamp::parse(&t).map_err(|e| undecodable(index, e)))
        .transpose()
}

/// A stored timestamp text, parsed (for `min(expires_at)` and the like).
pub(super) fn parse_time(text: &str) -> Result<Timestamp, StoreError> {
    Timestamp::parse(text).map_err(|e| undecodable(0, e))
}

fn word<T, R: Cells + ?Sized>(
    row: &R,
    index: usize,
    what: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let text = text(row, index)?;
    parse(&text).ok_or_else(|| undecodable(index, format!("unknown {what} `{text}`")))
}

/// The JSON record (an agent, a run, ...) in a row's first column.
pub(super) fn record<T: serde::de::DeserializeOwned, R: Cells + ?Sized>(
    row: &R,
) -> Result<T, StoreError> {
    serde_json::from_str(&text(row, 0)?).map_err(|e| undecodable(0, e))
}

/// A `BYTEA` column holding UTF-8 text (a message body).
fn utf8(row: &Row, index: usize) -> Result<String, StoreError> {
    let bytes: Vec<u8> = get(row, index)?;
    String::from_utf8(bytes).map_err(|e| undecodable(index, e))
}

fn json_at(row: &Row, index: usize) -> Result<JsonObject, StoreError> {
    let text: String = get(row, index)?;
    serde_json::from_str(&text).map_err(|e| undecodable(index, e))
}

/// A JSON object as the text the store keeps (the SQLite store's).
pub(super) fn json_text(object: &JsonObject) -> String {
    // Serializing a map of JSON values cannot fail.
    serde_json::to_string(object).unwrap_or_else(|_| "{}".to_owned())
}

fn count<R: Cells + ?Sized>(row: &R, index: usize) -> Result<u32, StoreError> {
    u32::try_from(integer(row, index)?).map_err(|e| undecodable(index, e))
}

/// Column `index` as an id or other non-negative number.
pub(super) fn id<R: Cells + ?Sized>(row: &R, index: usize) -> Result<u64, StoreError> {
    u64::try_from(integer(row, index)?).map_err(|e| undecodable(index, e))
}

/// An id or count as PostgreSQL's `BIGINT`.
pub(super) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn thread_state<R: Cells + ?Sized>(row: &R) -> Result<ThreadState, StoreError> {
    let thread = Thread {
        thread_id: text(row, 0)?,
        run_id: row.text(1)?,
        task_id: row.text(2)?,
        subject: text(row, 3)?,
        created_by: text(row, 4)?,
        assigned_to: text(row, 5)?,
        status: word(row, 6, "status", Status::parse)?,
        priority: word(row, 7, "priority", Priority::parse)?,
        attempts: count(row, 8)?,
        max_attempts: count(row, 9)?,
        latest_message_id: row.text(10)?,
        last_event_id: id(row, 11)?,
        created_at: time_at(row, 12)?,
        updated_at: time_at(row, 13)?,
    };
    let lease = match row.text(14)? {
        None => None,
        Some(agent) => Some(Lease {
            thread_id: thread.thread_id.clone(),
            agent,
            lease_token: id(row, 15)?,
            attempt: count(row, 16)?,
            lease_seconds: id(row, 17)?,
            claimed_at: time_at(row, 18)?,
            expires_at: time_at(row, 19)?,
            released_at: time_opt(row, 20)?,
        }),
    };
    Ok(ThreadState { thread, lease })
}

pub(super) const LEASE_COLUMNS: &str =
    "thread_id, agent, lease_token, attempt, lease_seconds, claimed_at, expires_at, released_at";

pub(super) fn lease(row: &Row) -> Result<Lease, StoreError> {
    Ok(Lease {
        thread_id: get(row, 0)?,
        agent: get(row, 1)?,
        lease_token: id(row, 2)?,
        attempt: count(row, 3)?,
        lease_seconds: id(row, 4)?,
        claimed_at: time_at(row, 5)?,
        expires_at: time_at(row, 6)?,
        released_at: time_opt(row, 7)?,
    })
}

pub(super) const MESSAGE_COLUMNS: &str = "m.message_id, m.thread_id, m.event_id, m.from_agent, m.to_agent, \
     m.kind, m.summary, m.body, m.payload_json, m.created_at";

pub(super) fn message(row: &Row) -> Result<Message, StoreError> {
    Ok(Message {
        message_id: get(row, 0)?,
        thread_id: get(row, 1)?,
        event_id: id(row, 2)?,
        from_agent: get(row, 3)?,
        to_agent: get(row, 4)?,
        kind: word(row, 5, "kind", Kind::parse)?,
        summary: get(row, 6)?,
        body: utf8(row, 7)?,
        payload: json_at(row, 8)?,
        created_at: time_at(row, 9)?,
        artifacts: Vec::new(),
    })
}

pub(super) const ARTIFACT_COLUMNS: &str = "artifact_id, message_id, path, kind, metadata_json, absolute_path, \
     size_bytes, sha256, created_at";

pub(super) fn artifact(row: &Row) -> Result<Artifact, StoreError> {
    let size: Option<i64> = get(row, 6)?;
    Ok(Artifact {
        artifact_id: get(row, 0)?,
        message_id: get(row, 1)?,
        path: get(row, 2)?,
        kind: get(row, 3)?,
        metadata: json_at(row, 4)?,
        absolute_path: get(row, 5)?,
        size_bytes: size
            .map(|s| u64::try_from(s).map_err(|e| undecodable(6, e)))
            .transpose()?,
        sha256: get(row, 7)?,
        created_at: time_at(row, 8)?,
    })
}

pub(super) const EVENT_COLUMNS: &str = "e.event_id, e.thread_id, e.run_id, e.task_id, e.event_type, e.source, \
     e.message_id, e.message_kind, e.status, e.summary, e.payload_json, e.created_at";

pub(super) fn event(row: &Row) -> Result<Event, StoreError> {
    let kind: Option<String> = get(row, 7)?;
    Ok(Event {
        event_id: id(row, 0)?,
        thread_id: get(row, 1)?,
        run_id: get(row, 2)?,
        task_id: get(row, 3)?,
        event_type: word(row, 4, "event type", EventType::parse)?,
        source: get(row, 5)?,
        message_id: get(row, 6)?,
        message_kind: kind
            .map(|k| Kind::parse(&k).ok_or_else(|| undecodable(7, format!("unknown kind `{k}`"))))
            .transpose()?,
        status: word(row, 8, "status", Status::parse)?,
        summary: get(row, 9)?,
        payload: json_at(row, 10)?,
        created_at: time_at(row, 11)?,
    })
}
