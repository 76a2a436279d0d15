//! The PostgreSQL schema and its migrations.
//!
//! The version lives in the one-row table `inbox_schema`, whose
//! `application = 'inbox'` marks the schema as inbox's (as SQLite's
//! `application_id` does), so that `init` never adopts another program's
//! tables and an old binary never writes to a newer schema. Migrations only
//! ever append: a released migration is never edited. The numbering is
//! PostgreSQL's own (version 1 holds everything SQLite reached in four).
//! This module must never decide anything about records; it only creates,
//! inspects and migrates tables in the connection's current schema
//! (`search_path`), so that one database can hold several inbox databases.

use inbox_engine::{StoreError, StoreErrorKind};
use postgres::{Client, GenericClient};

use super::pg_error;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[V1];

/// The advisory lock key concurrent `init`s serialize on ("inbx"): the
/// version table may not exist yet, so there is no row to lock.
const MIGRATION_LOCK: i64 = 0x696E_6278;

/// Version 1: SQLite's schema version 4 (threads, leases, messages,
/// artifacts, events, read cursors, settings; orch's runs, tasks, needs,
/// attempts and events; the agent registry; idempotency keys), with an
/// index for every query the store makes, plus the writer row. `CTEXT`
/// stands for `TEXT COLLATE "C"`: ordering and comparing ids and
/// timestamps must be byte order, as in the memory store and SQLite,
/// whatever locale the database was created with.
const V1: &str = r#"
CREATE TABLE inbox_schema (
    application CTEXT NOT NULL,
    version     BIGINT NOT NULL
);
INSERT INTO inbox_schema (application, version) VALUES ('inbox', 0);

-- Every write transaction locks this row (FOR UPDATE) first and holds it to
-- commit: writers are serialized, so the engine's read-decide-write is
-- atomic and event ids commit in increasing order (docs/postgres.md).
CREATE TABLE inbox_writer (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO inbox_writer (id) VALUES (1);

CREATE TABLE threads (
    thread_id         CTEXT PRIMARY KEY,
    run_id            CTEXT,
    task_id           CTEXT,
    subject           CTEXT NOT NULL,
    created_by        CTEXT NOT NULL,
    assigned_to       CTEXT NOT NULL,
    status            CTEXT NOT NULL,
    priority          CTEXT NOT NULL,
    priority_rank     SMALLINT GENERATED ALWAYS AS
                          (CASE priority WHEN 'high' THEN 2 WHEN 'normal' THEN 1 ELSE 0 END) STORED,
    attempts          BIGINT NOT NULL,
    max_attempts      BIGINT NOT NULL,
    latest_message_id CTEXT,
    last_event_id     BIGINT NOT NULL,
    created_at        CTEXT NOT NULL,
    updated_at        CTEXT NOT NULL
);
-- fetch: an agent's queue in priority, then age, order.
CREATE INDEX threads_queue ON threads (assigned_to, status, priority_rank DESC, created_at, thread_id);
-- list (newest first) and retention's pages (oldest first) by each filter.
CREATE INDEX threads_created_by ON threads (created_by, thread_id);
CREATE INDEX threads_assigned_to ON threads (assigned_to, thread_id);
CREATE INDEX threads_status ON threads (status, thread_id);
CREATE INDEX threads_run ON threads (run_id, task_id, thread_id);

CREATE TABLE leases (
    thread_id     CTEXT PRIMARY KEY REFERENCES threads (thread_id),
    agent         CTEXT NOT NULL,
    lease_token   BIGINT NOT NULL,
    attempt       BIGINT NOT NULL,
    lease_seconds BIGINT NOT NULL,
    claimed_at    CTEXT NOT NULL,
    expires_at    CTEXT NOT NULL,
    released_at   CTEXT
);
CREATE INDEX leases_unreleased ON leases (expires_at, thread_id) WHERE released_at IS NULL;

CREATE TABLE messages (
    event_id     BIGINT PRIMARY KEY,
    message_id   CTEXT NOT NULL UNIQUE,
    thread_id    CTEXT NOT NULL REFERENCES threads (thread_id),
    from_agent   CTEXT NOT NULL,
    to_agent     CTEXT NOT NULL,
    kind         CTEXT NOT NULL,
    summary      CTEXT NOT NULL,
    -- Bytes, not text: a body may hold any character, NUL included, which
    -- PostgreSQL's text cannot (SQLite's can), and must come back unchanged.
    body         BYTEA NOT NULL DEFAULT '',
    payload_json CTEXT NOT NULL DEFAULT '{}',
    created_at   CTEXT NOT NULL
);
CREATE INDEX messages_thread ON messages (thread_id, event_id);
CREATE INDEX messages_to ON messages (to_agent, event_id);

CREATE TABLE artifacts (
    artifact_id   CTEXT PRIMARY KEY,
    message_id    CTEXT NOT NULL REFERENCES messages (message_id),
    thread_id     CTEXT NOT NULL,
    position      BIGINT NOT NULL,
    path          CTEXT NOT NULL,
    kind          CTEXT NOT NULL,
    metadata_json CTEXT NOT NULL DEFAULT '{}',
    absolute_path CTEXT,
    size_bytes    BIGINT,
    sha256        CTEXT,
    created_at    CTEXT NOT NULL
);
CREATE INDEX artifacts_message ON artifacts (message_id, position);
CREATE INDEX artifacts_thread ON artifacts (thread_id, message_id, position);

CREATE TABLE events (
    event_id     BIGINT PRIMARY KEY,
    thread_id    CTEXT NOT NULL,
    run_id       CTEXT,
    task_id      CTEXT,
    event_type   CTEXT NOT NULL,
    source       CTEXT NOT NULL,
    message_id   CTEXT,
    message_kind CTEXT,
    status       CTEXT NOT NULL,
    summary      CTEXT NOT NULL DEFAULT '',
    payload_json CTEXT NOT NULL DEFAULT '{}',
    created_at   CTEXT NOT NULL
);
CREATE INDEX events_thread ON events (thread_id, event_id);
CREATE INDEX events_run ON events (run_id, event_id) WHERE run_id IS NOT NULL;
CREATE INDEX events_source ON events (source, event_id);

CREATE TABLE thread_reads (
    thread_id            CTEXT NOT NULL REFERENCES threads (thread_id),
    agent                CTEXT NOT NULL,
    last_read_message_id CTEXT NOT NULL,
    last_read_event_id   BIGINT NOT NULL,
    last_read_at         CTEXT NOT NULL,
    PRIMARY KEY (thread_id, agent)
);

CREATE TABLE settings (
    key   CTEXT PRIMARY KEY,
    value CTEXT NOT NULL
);

CREATE TABLE runs (
    run_id      CTEXT PRIMARY KEY,
    created_by  CTEXT NOT NULL,
    status      CTEXT NOT NULL,
    created_at  CTEXT NOT NULL,
    record_json CTEXT NOT NULL
);
CREATE INDEX runs_newest ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_status ON runs (status, created_at DESC, run_id DESC);
CREATE INDEX runs_created_by ON runs (created_by, created_at DESC, run_id DESC);

CREATE TABLE tasks (
    run_id        CTEXT NOT NULL,
    task_id       CTEXT NOT NULL,
    status        CTEXT NOT NULL,
    priority_rank BIGINT NOT NULL,
    seq           BIGINT NOT NULL,
    record_json   CTEXT NOT NULL,
    PRIMARY KEY (run_id, task_id)
);
CREATE INDEX tasks_queue ON tasks (run_id, status, priority_rank DESC, seq);
CREATE INDEX tasks_added ON tasks (run_id, status, seq);
CREATE INDEX tasks_seq ON tasks (run_id, seq);

CREATE TABLE task_needs (
    run_id        CTEXT NOT NULL,
    needs_task_id CTEXT NOT NULL,
    task_id       CTEXT NOT NULL,
    PRIMARY KEY (run_id, needs_task_id, task_id)
);

CREATE TABLE attempts (
    run_id      CTEXT NOT NULL,
    task_id     CTEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    record_json CTEXT NOT NULL,
    PRIMARY KEY (run_id, task_id, attempt)
);

CREATE TABLE orch_events (
    event_id    BIGINT PRIMARY KEY,
    run_id      CTEXT NOT NULL,
    event_type  CTEXT NOT NULL,
    record_json CTEXT NOT NULL
);
CREATE INDEX orch_events_run ON orch_events (run_id, event_id);

CREATE TABLE agents (
    name        CTEXT PRIMARY KEY,
    record_json CTEXT NOT NULL
);
CREATE TABLE agent_roles (
    role CTEXT NOT NULL,
    name CTEXT NOT NULL REFERENCES agents (name),
    PRIMARY KEY (role, name)
);
CREATE INDEX agent_roles_name ON agent_roles (name);

CREATE TABLE idempotency (
    key         CTEXT PRIMARY KEY,
    created_at  CTEXT NOT NULL,
    record_json CTEXT NOT NULL
);
CREATE INDEX idempotency_created ON idempotency (created_at, key);
"#;

/// What a connection found in its schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// No inbox schema yet: an empty schema.
    Empty,
    /// An inbox schema of this version, not newer than [`SCHEMA_VERSION`].
    Version(u32),
}

/// Reads the schema state, refusing schemas that belong to another program
/// or to a newer inbox. `location` names the database in messages.
pub fn inspect(client: &mut impl GenericClient, location: &str) -> Result<SchemaState, StoreError> {
    let error = |e| pg_error(e, location);
    let row = client
        .query_one(
            "SELECT to_regclass('inbox_schema') IS NOT NULL,
                    (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())",
            &[],
        )
        .map_err(error)?;
    let (has_version, tables): (bool, i64) = (row.get(0), row.get(1));
    if !has_version {
        if tables > 0 {
            return Err(StoreError::other(format!(
                "{location} has tables but no inbox schema (another program's); \
                 point --db at a new database, or a new schema with options=-csearch_path=NAME"
            )));
        }
        return Ok(SchemaState::Empty);
    }
    let rows = client
        .query("SELECT application, version FROM inbox_schema LIMIT 2", &[])
        .map_err(error)?;
    let [row] = rows.as_slice() else {
        return Err(StoreError::other(format!(
            "{location}: `inbox_schema` must hold exactly one row and holds {}; {TAMPERED}",
            if rows.is_empty() { "none" } else { "several" }
        )));
    };
    let (application, version): (String, i64) = (row.get(0), row.get(1));
    if application != "inbox" {
        return Err(StoreError::other(format!(
            "{location} belongs to another program (application `{application}`): \
             point --db at a new database; {TAMPERED}"
        )));
    }
    let version = u32::try_from(version).unwrap_or(u32::MAX);
    if version > SCHEMA_VERSION {
        return Err(StoreError::new(
            StoreErrorKind::SchemaTooNew,
            format!(
                "{location} has schema version {version}, but this inbox only knows up to version \
                 {SCHEMA_VERSION}: upgrade inbox to use it (nothing was changed); {TAMPERED}"
            ),
        ));
    }
    Ok(SchemaState::Version(version))
}

/// What a refusal of `inbox_schema`'s row adds: the row may have been
/// changed by hand rather than by another program or a newer inbox, and
/// the operator must not be sent to upgrade or to move the data away then.
const TAMPERED: &str = "if inbox created this schema and no newer inbox ran on it, a role that may \
     write `inbox_schema` changed it by hand: restore its one row as the schema's owner and grant \
     other roles only SELECT on it (docs/postgres.md, \"Roles\")";

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction, under an
/// advisory lock so that concurrent `init`s migrate exactly once (DDL is
/// transactional: a failure leaves nothing). Returns the version.
pub fn migrate(client: &mut Client, location: &str) -> Result<u32, StoreError> {
    let mut tx = client.transaction().map_err(|e| pg_error(e, location))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| pg_error(e, location))?;
    // Re-read under the lock: another process may have migrated.
    let from = match inspect(&mut tx, location)? {
        SchemaState::Empty => 0,
        SchemaState::Version(v) => v,
    };
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
        tx.batch_execute(&sql.replace("CTEXT", "TEXT COLLATE \"C\""))
            .map_err(|e| pg_error(e, location))?;
        let version = i64::try_from(index + 1).unwrap_or(i64::MAX);
        tx.execute("UPDATE inbox_schema SET version = $1", &[&version])
            .map_err(|e| pg_error(e, location))?;
    }
    restore_writer_row(&mut tx, location)?;
    tx.commit().map_err(|e| pg_error(e, location))?;
    Ok(SCHEMA_VERSION)
}

/// Puts back the row of `inbox_writer` that every write locks, if someone
/// removed it: without it the store refuses to write (`PgStore::begin`).
/// Looks first, so that a role that may only lock the row (an agent's, in
/// the roles recipe of docs/postgres.md) can run `init` on a sound schema; on a broken one it
/// gets PostgreSQL's "permission denied", and the owner repairs it.
fn restore_writer_row(
    tx: &mut postgres::Transaction<'_>,
    location: &str,
) -> Result<(), StoreError> {
    let error = |e| pg_error(e, location);
    let present = tx
        .query_opt("SELECT id FROM inbox_writer WHERE id = 1", &[])
        .map_err(error)?
        .is_some();
    if !present {
        tx.execute("INSERT INTO inbox_writer (id) VALUES (1)", &[])
            .map_err(error)?;
    }
    Ok(())
}
