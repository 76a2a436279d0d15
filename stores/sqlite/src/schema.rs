//! The SQLite schema and its migrations.
//!
//! The schema version lives in `PRAGMA user_version`, and `PRAGMA
//! application_id` marks the file as an inbox database, so that `init` never
//! adopts another program's database and an old binary never writes to a
//! newer schema. Migrations only ever append: a released migration is never
//! edited. This module must never know about files or processes; it works on
//! any connection of any SQLite binding ([`Sql`]: rusqlite native or in
//! wasm, Node's `node:sqlite`).

use inbox_engine::{StoreError, StoreErrorKind};
use rusqlite::Connection;

use crate::error::sql_store_error;
use crate::sql::{Flow, Sql, SqlError};

/// `PRAGMA application_id` of every inbox database: "inbx".
pub const APPLICATION_ID: i32 = 0x696E_6278;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4];

/// Version 1: the tables of the specification's draft, extended with what
/// the engine needs, and an index for every query the store makes.
const V1: &str = r#"
CREATE TABLE threads (
    thread_id         TEXT PRIMARY KEY NOT NULL,
    run_id            TEXT,
    task_id           TEXT,
    subject           TEXT NOT NULL,
    created_by        TEXT NOT NULL,
    assigned_to       TEXT NOT NULL,
    status            TEXT NOT NULL,
    priority          TEXT NOT NULL,
    -- Queue order is by rank; the text stays readable for people using sqlite3.
    priority_rank     INTEGER GENERATED ALWAYS AS
                          (CASE priority WHEN 'high' THEN 2 WHEN 'normal' THEN 1 ELSE 0 END) VIRTUAL,
    attempts          INTEGER NOT NULL,
    max_attempts      INTEGER NOT NULL,
    latest_message_id TEXT,
    last_event_id     INTEGER NOT NULL,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
) WITHOUT ROWID;
-- fetch: an agent's queue in priority, then age, order.
CREATE INDEX threads_queue ON threads (assigned_to, status, priority_rank DESC, created_at, thread_id);
-- list: newest first, i.e. by thread_id, which every entry of these indexes
-- ends with (the table is WITHOUT ROWID), so each filter serves its own order.
-- None of them holds a column that every command changes: a command writes
-- the thread's row and, only when the status changes, two index entries.
CREATE INDEX threads_created_by ON threads (created_by);
CREATE INDEX threads_assigned_to ON threads (assigned_to);
CREATE INDEX threads_status ON threads (status);
CREATE INDEX threads_run ON threads (run_id, task_id);

-- One row per thread: its latest lease. A new claim replaces it, so the
-- token only grows.
CREATE TABLE leases (
    thread_id     TEXT PRIMARY KEY NOT NULL REFERENCES threads (thread_id),
    agent         TEXT NOT NULL,
    lease_token   INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    lease_seconds INTEGER NOT NULL,
    claimed_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    released_at   TEXT
) WITHOUT ROWID;
-- Lapsed leases and the next expiry: only unreleased leases are indexed.
CREATE INDEX leases_unreleased ON leases (expires_at) WHERE released_at IS NULL;

-- Keyed by the event that wrote the message: one B-tree for the rows (in
-- commit order) and one for the message ids.
CREATE TABLE messages (
    event_id     INTEGER PRIMARY KEY NOT NULL,
    message_id   TEXT NOT NULL UNIQUE,
    thread_id    TEXT NOT NULL REFERENCES threads (thread_id),
    from_agent   TEXT NOT NULL,
    to_agent     TEXT NOT NULL,
    kind         TEXT NOT NULL,
    summary      TEXT NOT NULL,
    body         TEXT NOT NULL DEFAULT '',
    payload_json TEXT NOT NULL DEFAULT '{}',
    created_at   TEXT NOT NULL
);
CREATE INDEX messages_thread ON messages (thread_id, event_id);

CREATE TABLE artifacts (
    artifact_id   TEXT PRIMARY KEY NOT NULL,
    message_id    TEXT NOT NULL REFERENCES messages (message_id),
    thread_id     TEXT NOT NULL,
    position      INTEGER NOT NULL,
    path          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}',
    absolute_path TEXT,
    size_bytes    INTEGER,
    sha256        TEXT,
    created_at    TEXT NOT NULL
);
CREATE INDEX artifacts_message ON artifacts (message_id, position);
CREATE INDEX artifacts_thread ON artifacts (thread_id, message_id, position);

-- The engine assigns event ids (max + 1 inside the write lock). Retention, when
-- it comes, must keep the newest event, so that max(event_id) never goes back.
CREATE TABLE events (
    event_id     INTEGER PRIMARY KEY NOT NULL,
    thread_id    TEXT NOT NULL,
    run_id       TEXT,
    task_id      TEXT,
    event_type   TEXT NOT NULL,
    source       TEXT NOT NULL,
    message_id   TEXT,
    message_kind TEXT,
    status       TEXT NOT NULL,
    summary      TEXT NOT NULL DEFAULT '',
    payload_json TEXT NOT NULL DEFAULT '{}',
    created_at   TEXT NOT NULL
);
CREATE INDEX events_thread ON events (thread_id, event_id);

CREATE TABLE thread_reads (
    thread_id            TEXT NOT NULL REFERENCES threads (thread_id),
    agent                TEXT NOT NULL,
    last_read_message_id TEXT NOT NULL,
    last_read_event_id   INTEGER NOT NULL,
    last_read_at         TEXT NOT NULL,
    PRIMARY KEY (thread_id, agent)
) WITHOUT ROWID;

-- Database-wide settings every process applies when it opens the file
-- (e.g. durability = normal | full).
CREATE TABLE settings (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;
"#;

/// Version 2: orch's records. Each row keeps its record as JSON (the
/// engine's serde shape, so the store cannot drift from the model) beside
/// the columns its queries filter and order by, each served by an index.
const V2: &str = r#"
CREATE TABLE runs (
    run_id      TEXT PRIMARY KEY NOT NULL,
    created_by  TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    record_json TEXT NOT NULL
) WITHOUT ROWID;
-- orch run list: newest first, optionally by status or leader.
CREATE INDEX runs_newest ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_status ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_created_by ON runs (created_by, created_at DESC, run_id DESC);

CREATE TABLE tasks (
    run_id        TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    status        TEXT NOT NULL,
    priority_rank INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    record_json   TEXT NOT NULL,
    PRIMARY KEY (run_id, task_id)
) WITHOUT ROWID;
-- The ready queue (priority, then the order added) and every status list.
CREATE INDEX tasks_queue ON tasks (run_id, status, priority_rank DESC, seq);
CREATE INDEX tasks_added ON tasks (run_id, status, seq);
CREATE INDEX tasks_seq ON tasks (run_id, seq);

-- A task's needs, keyed for the reverse question: who needs this task.
CREATE TABLE task_needs (
    run_id        TEXT NOT NULL,
    needs_task_id TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    PRIMARY KEY (run_id, needs_task_id, task_id)
) WITHOUT ROWID;

CREATE TABLE attempts (
    run_id      TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (run_id, task_id, attempt)
) WITHOUT ROWID;

-- In the same id sequence as `events`.
CREATE TABLE orch_events (
    event_id    INTEGER PRIMARY KEY NOT NULL,
    run_id      TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    record_json TEXT NOT NULL
);
CREATE INDEX orch_events_run ON orch_events (run_id, event_id);

-- What an orch run's threads did since it was last reconciled.
CREATE INDEX events_run ON events (run_id, event_id) WHERE run_id IS NOT NULL;
"#;

/// Version 3: the agent registry (each agent as the engine's JSON, its
/// roles one row each for "members of a role"), the indexes the mailbox
/// view and presence read by (messages by recipient, events by who caused
/// them), and the writes done under an idempotency key.
const V3: &str = r#"
CREATE TABLE agents (
    name        TEXT PRIMARY KEY NOT NULL,
    record_json TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE agent_roles (
    role TEXT NOT NULL,
    name TEXT NOT NULL REFERENCES agents (name),
    PRIMARY KEY (role, name)
) WITHOUT ROWID;
CREATE INDEX agent_roles_name ON agent_roles (name);

CREATE INDEX messages_to ON messages (to_agent, event_id);
CREATE INDEX events_source ON events (source, event_id);

-- Writes done under an idempotency key: a retry gets the first outcome.
CREATE TABLE idempotency (
    key         TEXT PRIMARY KEY NOT NULL,
    created_at  TEXT NOT NULL,
    record_json TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX idempotency_created ON idempotency (created_at);
"#;

/// Version 4: the engine's settings (`settings`, key `engine`: agent
/// tokens, retention). An inbox that does not know them would let any
/// process act as any agent where tokens are required, and would not run
/// retention's automatic steps, so it must not write such a file: that is
/// all this version says. It adds no table (nor anything every process
/// would parse).
const V4: &str = r#"
-- settings, key 'engine': the engine's settings, as JSON.
"#;

/// What a connection found when it looked at its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// No inbox schema yet: an empty (or new) file.
    Empty,
    /// An inbox schema of this version, not newer than [`SCHEMA_VERSION`].
    Version(u32),
}

/// Reads the schema state, refusing files that belong to another program or
/// to a newer inbox. `location` names the file in error messages.
pub fn inspect(conn: &(impl Sql + ?Sized), location: &str) -> Result<SchemaState, StoreError> {
    // Two plain pragmas, not one `SELECT` over `pragma_application_id` and
    // `pragma_user_version`: those are virtual tables, which SQLite declares
    // (parsing a `CREATE TABLE` each) and which compile and run the same two
    // pragmas inside. Measured in a process that runs one command, A/B of
    // static builds: `send` 10 to 17 µs faster.
    let application_id = number(conn, "PRAGMA application_id", location)?;
    let version = number(conn, "PRAGMA user_version", location)?;
    if application_id == 0 && version == 0 {
        let tables = number(
            conn,
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            location,
        )?;
        if tables > 0 {
            return Err(StoreError::other(format!(
                "{location} is an SQLite database of another program (it has tables but no inbox schema); \
                 point --db at a new file"
            )));
        }
        return Ok(SchemaState::Empty);
    }
    if application_id != i64::from(APPLICATION_ID) {
        return Err(StoreError::other(format!(
            "{location} is an SQLite database of another program (application id {application_id:#x}); \
             point --db at a new file"
        )));
    }
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    if version > SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::SchemaTooNew,
            format!(
                "{location} has schema version {version}, but this inbox only knows up to version \
                 {SCHEMA_VERSION}; upgrade inbox to use it (nothing was changed)"
            ),
        ));
    }
    Ok(SchemaState::Version(version))
}

/// The one integer `sql` (a pragma, a count) answers with.
fn number(conn: &(impl Sql + ?Sized), sql: &str, location: &str) -> Result<i64, StoreError> {
    let mut value = None;
    conn.each_row(sql, &[], &mut |row| {
        value = row.int(0)?;
        Ok(Flow::Stop)
    })
    .map_err(|e| sql_store_error(&e, location))?;
    value.ok_or_else(|| {
        StoreError::other(format!(
            "{location}: `{sql}` returned no number, so the database may be damaged; \
             check it with `sqlite3 {location} 'PRAGMA integrity_check'`"
        ))
    })
}

/// Brings the schema to [`SCHEMA_VERSION`], in one immediate transaction so
/// that concurrent processes migrate exactly once. Returns the version.
pub fn migrate(conn: &(impl Sql + ?Sized), location: &str) -> Result<u32, StoreError> {
    let error = |e: SqlError| sql_store_error(&e, location);
    conn.execute_batch("BEGIN IMMEDIATE").map_err(error)?;
    let result = (|| {
        // Re-read under the write lock: another process may have migrated.
        let from = match inspect(conn, location)? {
            SchemaState::Empty => 0,
            SchemaState::Version(v) => v,
        };
        for (index, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            conn.execute_batch(sql).map_err(error)?;
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {}",
                index + 1
            ))
            .map_err(error)?;
        }
        Ok(SCHEMA_VERSION)
    })();
    match result {
        Ok(version) => {
            conn.execute_batch("COMMIT").map_err(error)?;
            Ok(version)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// One entry of `sqlite_schema`: a table, index, view or trigger, as
/// SQLite keeps it (its `CREATE` statement verbatim; none for the indexes
/// SQLite makes itself).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SchemaObject {
    /// `table`, `index`, `view` or `trigger`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The table it belongs to (its own name for a table).
    pub table: String,
    /// Its definition.
    pub sql: Option<String>,
}

/// Every object of the database `schema` (`main`, or an attached one's
/// name) of `conn`, in a stable order. Reading them parses nothing and
/// runs nothing: it is a plain read of SQLite's own table.
pub fn objects(conn: &Connection, schema: &str) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT type, name, tbl_name, sql FROM \"{}\".sqlite_schema",
        schema.replace('"', "\"\"")
    ))?;
    let mut found = stmt
        .query_map([], |row| {
            Ok(SchemaObject {
                kind: row.get(0)?,
                name: row.get(1)?,
                table: row.get(2)?,
                sql: row.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    found.sort();
    Ok(found)
}

/// Exactly the objects a database of schema `version` holds: those of a
/// new in-memory database brought to it by the same migrations (which
/// only ever append, so every inbox database of that version has these
/// and no other).
pub fn objects_of_version(version: u32) -> Result<Vec<SchemaObject>, StoreError> {
    let error = |e| crate::error::store_error(e, ":memory:");
    let conn = Connection::open_in_memory().map_err(error)?;
    let steps = usize::try_from(version).unwrap_or(usize::MAX);
    for sql in MIGRATIONS.iter().take(steps) {
        conn.execute_batch(sql).map_err(error)?;
    }
    objects(&conn, "main").map_err(error)
}
