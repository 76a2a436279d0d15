//! [`SqliteStore`]: the engine's [`Store`] over one SQLite connection.
//!
//! Each [`Store`] method is one or two prepared (and cached) statements; the
//! engine's queries map onto the indexes in [`crate::schema`]. Write
//! transactions start with `BEGIN IMMEDIATE`, which takes SQLite's single
//! writer lock up front, so "read the lease, then write a new one" is atomic
//! across processes; read transactions are `BEGIN DEFERRED` snapshots. The
//! store runs every statement through [`sql::Sql`], so the same queries run
//! over any binding of the real SQLite library: rusqlite (native and wasm)
//! and Node's `node:sqlite`. This module must never touch the file system or
//! sleep: opening files, busy retries and waiting belong to [`crate::open`]
//! and [`crate::watch`], so the same store compiles for SQLite in wasm.

use inbox_engine::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, StoreInfo, ThreadOrder, ThreadPage,
    ThreadQuery, ThreadState, TxMode,
};
use inbox_engine::{
    Agent, Artifact, Event, EventId, IdempotencyRecord, JsonObject, Lease, Message, ReadCursor,
    Settings, Status, Store, StoreError, StoreErrorKind, Thread, Timestamp,
};
use rusqlite::Connection;

use crate::error::{sql_store_error, store_error};
use crate::schema::{self, SchemaState};
use crate::sql::{Flow, Param, Sql, SqlError, SqlRow, sql_params};
use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskQuery};

mod agents;

pub mod durability;
mod orch;
mod retention;

/// Settings every host applies to a connection before handing it to
/// [`SqliteStore::new`], whatever the platform: the schema's foreign keys are
/// rules of the data (a message needs its thread), so a host that skipped
/// them would accept writes the native CLI refuses.
pub const PORTABLE_PRAGMAS: &str = "PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;";

/// The engine's storage in an SQLite database, over any binding of SQLite
/// ([`Sql`]); rusqlite's [`Connection`] unless said otherwise.
pub struct SqliteStore<C: Sql = Connection> {
    conn: C,
    /// What the file held when the store was opened.
    schema: SchemaState,
    /// The file, for messages ("`:memory:`" for an in-memory database).
    location: String,
    tx: Option<TxMode>,
    /// Inside [`SqliteStore::begin_batch`]: each transaction the engine
    /// begins is a savepoint of the batch's one write transaction.
    batch: bool,
    /// The identities of the database's files when they were opened,
    /// checked before every write (native files only).
    #[cfg(feature = "native")]
    files: Option<crate::file::FileIdentity>,
    /// The database's writer gate (native files only; see
    /// [`crate::writer_gate`]).
    #[cfg(feature = "native")]
    gate: Option<crate::writer_gate::WriterGate>,
    /// A long-lived connection's checkpoint thread (see
    /// [`crate::checkpointer`]); declared after `conn`, so that the
    /// connection, whose WAL hook nudges it, closes first.
    #[cfg(feature = "native")]
    checkpointer: Option<crate::checkpointer::Checkpointer>,
    /// The thread [`Store::thread`] read last, and the status it stored:
    /// lets [`Store::update_thread`] leave the status out of its `SET`
    /// when it does not change (a hint only; the `UPDATE` checks it).
    loaded: Option<(String, Status)>,
}

impl SqliteStore<Connection> {
    /// A store over an open rusqlite connection. The caller has applied its
    /// own connection settings (see [`crate::open`]); this sizes the
    /// statement cache, keeps query plans stable and checks that the file
    /// is an inbox database or empty (see [`SqliteStore::over`]).
    pub fn new(conn: Connection, location: impl Into<String>) -> Result<SqliteStore, StoreError> {
        let location = location.into();
        conn.set_prepared_statement_cache_capacity(64);
        // Query planner stability: without it, SQLite (3.5x) re-plans a
        // statement whose plan looked at a bound value (a `LIMIT ?`, a
        // partial index's condition) every time that parameter is bound
        // again, and rusqlite clears bindings whenever a statement goes back
        // to its cache, so every cached statement was compiled afresh on
        // every use: `show` took 48 us in process instead of 6 us. Every
        // plan here is chosen for the indexes, never for a value (the
        // query-plan guard test checks them).
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )
        .map_err(|e| store_error(e, &location))?;
        SqliteStore::over(conn, location)
    }

    /// From now on, checks before every write that the database's files
    /// are still the ones `files` recorded (see [`crate::file`]).
    #[cfg(feature = "native")]
    pub fn guard_files(&mut self, files: crate::file::FileIdentity) {
        self.files = Some(files);
    }

    /// The identities of the database's files, if [`SqliteStore::guard_files`]
    /// recorded them.
    #[cfg(feature = "native")]
    pub fn files(&self) -> Option<&crate::file::FileIdentity> {
        self.files.as_ref()
    }

    /// Keeps `checkpointer` running as long as this connection is open
    /// (replacing, and so stopping, any earlier one).
    #[cfg(feature = "native")]
    pub(crate) fn keep_checkpointer(
        &mut self,
        checkpointer: Option<crate::checkpointer::Checkpointer>,
    ) {
        self.checkpointer = checkpointer;
    }

    /// Ends the store in a process that exits next (one CLI command),
    /// leaving its connection for the exit to close.
    ///
    /// Closing a connection finalizes its statements, frees the schema it
    /// parsed, unmaps the database and its index and gives back all that
    /// memory: 20 to 80 µs of a command's process (measured in
    /// docs/lab-log.md), for a process whose exit releases its
    /// locks and closes its files anyway. A committed connection holds
    /// nothing another process waits on: its commit is in the WAL and the
    /// WAL index, its write lock went with the commit, and closing it
    /// without a checkpoint (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`) leaves the
    /// files as the exit does. So the writer gate (which other writers may
    /// be waiting for) and any checkpoint thread are let go of here, as on
    /// drop, and only the connection is left. A connection inside a
    /// transaction is closed as usual, which rolls it back.
    ///
    /// Never call it in a process that goes on: the connection, its memory
    /// and its files stay open until the process ends.
    #[cfg(feature = "native")]
    pub fn leave_for_exit(self) {
        if !self.conn.is_autocommit() {
            return;
        }
        // The other fields drop when this function returns; the
        // connection, whose drop would close it, is forgotten.
        let SqliteStore { conn, .. } = self;
        std::mem::forget(conn);
    }

    /// Fails if the database's files were deleted, moved or replaced since
    /// they were opened: a waiter checks on every wake, the store before
    /// every write.
    #[cfg(feature = "native")]
    pub fn check_files(&self) -> Result<(), StoreError> {
        self.files_unchanged()
    }

    /// From now on, begins every write transaction behind `gate` (see
    /// [`crate::writer_gate`]); `None` goes straight to SQLite's lock, as a
    /// writer that does not know the gate does.
    #[cfg(feature = "native")]
    pub fn gate_writers(&mut self, gate: Option<crate::writer_gate::WriterGate>) {
        self.gate = gate;
    }

    /// Prepares, while a wait sleeps, the statements its wake will run for
    /// the first time in this process: those that record what a worker did
    /// (a thread and its last message, then orch's task, attempt, event and
    /// run). A statement's first preparation (parsing and planning it
    /// against the schema) took 30-50 µs in a process just woken, and an
    /// `orch wait` woken by a worker's `done` ran nine it had not run
    /// before: about a third of its wake latency. Best effort: a statement
    /// that fails to prepare here fails again, and is reported, where it runs.
    pub fn prepare_ahead(&self) {
        let inbox = [thread_by_id(), message_by_id()];
        let all = inbox
            .iter()
            .map(String::as_str)
            .chain([ARTIFACTS_OF_MESSAGE])
            .chain(orch::ORCH_WAKE.iter().copied());
        for sql in all {
            // Dropping the statement returns it to the connection's cache.
            drop(self.conn.prepare_cached(sql));
        }
    }
}

impl<C: Sql> SqliteStore<C> {
    /// A store over an open connection of any binding. The caller has
    /// applied its own connection settings (see [`crate::open`] and
    /// [`PORTABLE_PRAGMAS`]); this only checks that the file is an inbox
    /// database or empty.
    pub fn over(conn: C, location: impl Into<String>) -> Result<SqliteStore<C>, StoreError> {
        let location = location.into();
        let schema = schema::inspect(&conn, &location)?;
        Ok(SqliteStore {
            conn,
            schema,
            location,
            tx: None,
            batch: false,
            #[cfg(feature = "native")]
            files: None,
            #[cfg(feature = "native")]
            gate: None,
            #[cfg(feature = "native")]
            checkpointer: None,
            loaded: None,
        })
    }

    /// Fails if the files [`SqliteStore::guard_files`] recorded were
    /// deleted, moved or replaced since.
    #[cfg(feature = "native")]
    fn files_unchanged(&self) -> Result<(), StoreError> {
        match &self.files {
            Some(files) => files.check(),
            None => Ok(()),
        }
    }

    /// Runs `sql`, [`INSERT_THREAD`], [`UPDATE_THREAD`] or
    /// [`UPDATE_THREAD_KEEPING_STATUS`], for `t`; returns the rows it
    /// changed (0 or 1), and remembers the status written.
    fn write_thread(&mut self, t: &Thread, sql: &str) -> Result<usize, StoreError> {
        let changed = self.execute(
            sql,
            &sql_params![
                &t.thread_id,
                &t.run_id,
                &t.task_id,
                &t.subject,
                &t.created_by,
                &t.assigned_to,
                t.status.as_str(),
                t.priority.as_str(),
                t.attempts,
                t.max_attempts,
                &t.latest_message_id,
                sql_int(t.last_event_id),
                t.created_at.to_string(),
                t.updated_at.to_string(),
            ],
        )?;
        if changed == 1 {
            self.loaded = Some((t.thread_id.clone(), t.status));
        }
        Ok(changed)
    }

    /// `BEGIN`, and for a write the check that admits it: holding SQLite's
    /// write lock, the files must still be the ones opened (writing through
    /// a deleted -wal or -shm loses commits or corrupts the database).
    fn begin_transaction(&mut self, mode: TxMode) -> Result<(), StoreError> {
        let sql = match mode {
            TxMode::Read => "BEGIN DEFERRED",
            TxMode::Write => "BEGIN IMMEDIATE",
        };
        self.loaded = None;
        if let Err(e) = self.conn.execute(sql, &[]) {
            let error = self.error(e);
            self.open_gate();
            return Err(error);
        }
        self.tx = Some(mode);
        #[cfg(feature = "native")]
        if mode == TxMode::Write
            && let Err(error) = self.files_unchanged()
        {
            let _ = self.rollback();
            return Err(error);
        }
        Ok(())
    }

    /// Opens the writer gate if this writer closed it.
    fn open_gate(&mut self) {
        #[cfg(feature = "native")]
        if let Some(gate) = &mut self.gate {
            gate.transaction_ended();
        }
    }

    /// The connection, e.g. to read `PRAGMA data_version` while waiting.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The connection, mutably: for diagnostics such as statement tracing.
    /// Never run statements through it while the engine has a transaction
    /// open.
    pub fn connection_mut(&mut self) -> &mut C {
        &mut self.conn
    }

    /// The database file (or `:memory:`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The schema version, migrating an older inbox schema first. Fails with
    /// `not_initialized` on an empty file: run `init` (which calls
    /// [`Store::initialize`]) to create the schema.
    pub fn ensure_schema(&mut self) -> Result<u32, StoreError> {
        match self.schema {
            SchemaState::Empty => Err(StoreError::new(
                StoreErrorKind::NotInitialized,
                format!(
                    "{} has no inbox schema yet; run `inbox init` to create it",
                    self.location
                ),
            )),
            SchemaState::Version(v) if v == schema::SCHEMA_VERSION => Ok(v),
            SchemaState::Version(_) => {
                let version = schema::migrate(&self.conn, &self.location)?;
                self.schema = SchemaState::Version(version);
                Ok(version)
            }
        }
    }

    /// A database-wide setting written by `init` (e.g. `durability`).
    pub fn setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.row(
            "SELECT value FROM settings WHERE key = ?1",
            &sql_params![key],
            |row| string(row, 0),
        )
    }

    /// Writes a database-wide setting.
    pub fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO settings (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &sql_params![key, value],
        )
        .map(drop)
    }

    /// Starts a batch: one write transaction (`BEGIN IMMEDIATE`, as every
    /// write takes) that every transaction begun until
    /// [`SqliteStore::end_batch`] runs inside, as a savepoint. An import
    /// runs thousands of engine commands this way: each is still one
    /// transaction for the engine (a refused command rolls back to its
    /// savepoint and leaves nothing), and the whole import commits once or
    /// not at all. The write lock is held throughout, so other writers wait
    /// for the batch as they wait for any write.
    ///
    /// # Errors
    ///
    /// The store's, when the write transaction cannot begin.
    pub fn begin_batch(&mut self) -> Result<(), StoreError> {
        if self.batch {
            return Err(StoreError::other(
                "sqlite store: a batch is already open; end it before beginning another",
            ));
        }
        self.begin(TxMode::Write)?;
        self.tx = None;
        self.batch = true;
        Ok(())
    }

    /// Ends the batch: commits it when `keep`, else rolls everything in it
    /// back.
    ///
    /// # Errors
    ///
    /// The commit's, or the batch's transaction having ended early (SQLite
    /// rolls a transaction back by itself on some errors, such as a full
    /// disk): then nothing of the batch was kept.
    pub fn end_batch(&mut self, keep: bool) -> Result<(), StoreError> {
        if !self.batch {
            return Err(StoreError::other("sqlite store: no batch is open"));
        }
        self.batch = false;
        self.tx = None;
        // However the batch ended, the gate opens: a batch SQLite already
        // rolled back would otherwise leave it closed until the next write.
        self.open_gate();
        if !self.conn.in_transaction() {
            return Err(self.batch_lost());
        }
        let sql = if keep { "COMMIT" } else { "ROLLBACK" };
        self.conn.execute_batch(sql).map_err(|e| self.error(e))
    }

    /// Inside a batch, between the engine's transactions: begins a group
    /// of them that [`SqliteStore::end_group`] keeps or drops together
    /// (one savepoint around them), for an import whose one line runs
    /// several commands and must leave all or none of them.
    ///
    /// # Errors
    ///
    /// No batch is open, or the store failed.
    pub fn begin_group(&mut self) -> Result<(), StoreError> {
        if !self.batch || self.tx.is_some() {
            return Err(StoreError::other(
                "sqlite store: a group begins inside a batch, between transactions",
            ));
        }
        self.batch_statement("SAVEPOINT batch_group")
    }

    /// Ends the group [`SqliteStore::begin_group`] began: keeps what its
    /// transactions wrote when `keep`, else drops all of it.
    ///
    /// # Errors
    ///
    /// The store's.
    pub fn end_group(&mut self, keep: bool) -> Result<(), StoreError> {
        if !keep {
            self.batch_statement("ROLLBACK TO batch_group")?;
        }
        self.batch_statement("RELEASE batch_group")
    }

    /// A transaction of the engine's, inside the batch.
    fn begin_savepoint(&mut self, mode: TxMode) -> Result<(), StoreError> {
        self.batch_statement("SAVEPOINT engine_tx")?;
        self.tx = Some(mode);
        Ok(())
    }

    /// Runs `sql` inside the batch, which must still be open.
    fn batch_statement(&mut self, sql: &str) -> Result<(), StoreError> {
        if !self.conn.in_transaction() {
            return Err(self.batch_lost());
        }
        self.execute(sql, &[]).map(drop)
    }

    fn batch_lost(&self) -> StoreError {
        StoreError::other(format!(
            "{}: SQLite ended the batch's transaction by itself (a full disk or an I/O error); \
             nothing of it was kept",
            self.location
        ))
    }

    fn error(&self, error: SqlError) -> StoreError {
        sql_store_error(&error, &self.location)
    }

    /// Runs one statement (cached by the binding); the rows it changed.
    pub(super) fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<usize, StoreError> {
        self.conn.execute(sql, params).map_err(|e| self.error(e))
    }

    /// The rows `sql` returns, each decoded by `decode`. `expected` sizes
    /// the result up front: the statement's own LIMIT, or 0 when it has
    /// none.
    pub(super) fn rows<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        expected: usize,
        mut decode: impl FnMut(&dyn SqlRow) -> Result<T, SqlError>,
    ) -> Result<Vec<T>, StoreError> {
        // A plain loop into a vector sized once, rather than collecting
        // from an iterator: a decoded row (a thread state, a message) is a
        // few hundred bytes, and the adapters moved each one several times
        // while the vector grew by doubling (together a seventh of a
        // `list`).
        let mut out = Vec::with_capacity(expected.min(MAX_PRESIZED));
        self.conn
            .each_row(sql, params, &mut |row| {
                out.push(decode(row)?);
                Ok(Flow::More)
            })
            .map_err(|e| self.error(e))?;
        Ok(out)
    }

    /// The first row `sql` returns, decoded by `decode`; `None` if none.
    pub(super) fn row<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        mut decode: impl FnMut(&dyn SqlRow) -> Result<T, SqlError>,
    ) -> Result<Option<T>, StoreError> {
        let mut found = None;
        self.conn
            .each_row(sql, params, &mut |row| {
                found = Some(decode(row)?);
                Ok(Flow::Stop)
            })
            .map_err(|e| self.error(e))?;
        Ok(found)
    }

    /// The one integer an aggregate (`count(*)`, `max(..)`) returns.
    pub(super) fn aggregate(&self, sql: &str) -> Result<i64, StoreError> {
        let value = self.row(sql, &[], |row| row.int(0))?;
        value.flatten().ok_or_else(|| {
            StoreError::other(format!(
                "{0}: a count came back empty, so the database may be damaged; \
                 check it with `sqlite3 {0} 'PRAGMA integrity_check'`",
                self.location
            ))
        })
    }

    /// The leases not released yet, in expiry order, as long as `keep`
    /// says [`Flow::More`] for each.
    pub(super) fn unreleased_leases(
        &self,
        keep: &mut dyn FnMut(Lease) -> Flow,
    ) -> Result<(), StoreError> {
        // `now` is deliberately not a bound parameter: SQLite ties a plan
        // that uses a partial index to the values bound next to it and
        // recompiles the statement whenever they change, which every
        // command's new `now` would do (it cost 14% of a send). The caller
        // compares it instead.
        let sql = format!(
            "SELECT {LEASE_COLUMNS} FROM leases WHERE released_at IS NULL
             ORDER BY expires_at, thread_id"
        );
        self.conn
            .each_row(&sql, &[], &mut |row| Ok(keep(lease_row(row)?)))
            .map_err(|e| self.error(e))
    }

    /// The thread states a query of [`THREAD_COLUMNS`] returns.
    fn thread_states(
        &self,
        sql: &str,
        params: &[Param<'_>],
        limit: usize,
    ) -> Result<Vec<ThreadState>, StoreError> {
        self.rows(sql, params, limit, thread_state_row)
    }

    fn artifacts(&self, sql: &str, key: &str) -> Result<Vec<Artifact>, StoreError> {
        self.rows(sql, &sql_params![key], 0, artifact_row)
    }

    /// Attaches artifacts (read with one query per thread) to `messages`.
    fn with_artifacts(&self, mut messages: Vec<Message>) -> Result<Vec<Message>, StoreError> {
        let Some(first) = messages.first() else {
            return Ok(messages);
        };
        let artifacts = if messages.len() == 1 {
            self.artifacts(ARTIFACTS_OF_MESSAGE, &first.message_id)?
        } else {
            self.artifacts(
                "SELECT artifact_id, message_id, path, kind, metadata_json, absolute_path, size_bytes, sha256, created_at
                 FROM artifacts WHERE thread_id = ?1 ORDER BY message_id, position",
                &first.thread_id,
            )?
        };
        if artifacts.is_empty() {
            return Ok(messages);
        }
        for message in &mut messages {
            message.artifacts = artifacts
                .iter()
                .filter(|a| a.message_id == message.message_id)
                .cloned()
                .collect();
        }
        Ok(messages)
    }
}

// --- row mapping -------------------------------------------------------------

/// Column `index` as text borrowed from the binding's row. The columns
/// that are parsed into something else (timestamps, status words) are read
/// this way: an owned `String` per column was a third of a `list`'s
/// allocations.
fn text_at(row: &dyn SqlRow, index: usize) -> Result<&str, SqlError> {
    row.text(index)?
        .ok_or_else(|| SqlError::column(index, "is NULL where text is required"))
}

/// Column `index` as an owned string, `None` for `NULL`.
fn text(row: &dyn SqlRow, index: usize) -> Result<Option<String>, SqlError> {
    Ok(row.text(index)?.map(str::to_owned))
}

/// Column `index` as an owned string that must not be `NULL`.
fn string(row: &dyn SqlRow, index: usize) -> Result<String, SqlError> {
    text_at(row, index).map(str::to_owned)
}

/// Column `index` as an integer that must not be `NULL`.
fn int(row: &dyn SqlRow, index: usize) -> Result<i64, SqlError> {
    row.int(index)?
        .ok_or_else(|| SqlError::column(index, "is NULL where an integer is required"))
}

fn time_at(row: &dyn SqlRow, index: usize) -> Result<Timestamp, SqlError> {
    Timestamp::parse(text_at(row, index)?).map_err(|e| SqlError::column(index, e))
}

fn time_opt(row: &dyn SqlRow, index: usize) -> Result<Option<Timestamp>, SqlError> {
    match row.text(index)? {
        None => Ok(None),
        Some(text) => Timestamp::parse(text)
            .map(Some)
            .map_err(|e| SqlError::column(index, e)),
    }
}

/// A word (a status, a kind) the engine does not know.
fn unknown(index: usize, what: &str, text: &str) -> SqlError {
    SqlError::column(index, format!("unknown {what} `{text}` in the database"))
}

fn word<T>(
    row: &dyn SqlRow,
    index: usize,
    what: &'static str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, SqlError> {
    let text = text_at(row, index)?;
    parse(text).ok_or_else(|| unknown(index, what, text))
}

fn json_at(row: &dyn SqlRow, index: usize) -> Result<JsonObject, SqlError> {
    serde_json::from_str(text_at(row, index)?).map_err(|e| SqlError::column(index, e))
}

fn json_text(object: &JsonObject) -> String {
    // Serializing a map of JSON values cannot fail.
    serde_json::to_string(object).unwrap_or_else(|_| "{}".to_owned())
}

fn count(row: &dyn SqlRow, index: usize) -> Result<u32, SqlError> {
    u32::try_from(int(row, index)?).map_err(|e| SqlError::column(index, e))
}

fn id(row: &dyn SqlRow, index: usize) -> Result<u64, SqlError> {
    u64::try_from(int(row, index)?).map_err(|e| SqlError::column(index, e))
}

fn sql_int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A LIMIT written into the SQL text rather than bound: SQLite (3.48 and
/// later) plans with a bound LIMIT's value and so recompiles the statement
/// every time the parameter is bound again, which for cached statements is
/// every run (it cost 15% of a `list`). Limits come from validated input and
/// take few distinct values, so each gets its own cached statement.
fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

use inbox_store_sql::thread_sql::{self, THREAD_COLUMNS};

/// The most rows a result vector is sized for before its first row: a
/// page's worth, so an unbounded query does not reserve memory for rows it
/// may never read.
const MAX_PRESIZED: usize = 256;

fn thread_state_row(row: &dyn SqlRow) -> Result<ThreadState, SqlError> {
    let thread = Thread {
        thread_id: string(row, 0)?,
        run_id: text(row, 1)?,
        task_id: text(row, 2)?,
        subject: string(row, 3)?,
        created_by: string(row, 4)?,
        assigned_to: string(row, 5)?,
        status: word(row, 6, "status", Status::parse)?,
        priority: word(row, 7, "priority", inbox_engine::Priority::parse)?,
        attempts: count(row, 8)?,
        max_attempts: count(row, 9)?,
        latest_message_id: text(row, 10)?,
        last_event_id: id(row, 11)?,
        created_at: time_at(row, 12)?,
        updated_at: time_at(row, 13)?,
    };
    let lease = match text(row, 14)? {
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

const LEASE_COLUMNS: &str =
    "thread_id, agent, lease_token, attempt, lease_seconds, claimed_at, expires_at, released_at";

fn lease_row(row: &dyn SqlRow) -> Result<Lease, SqlError> {
    Ok(Lease {
        thread_id: string(row, 0)?,
        agent: string(row, 1)?,
        lease_token: id(row, 2)?,
        attempt: count(row, 3)?,
        lease_seconds: id(row, 4)?,
        claimed_at: time_at(row, 5)?,
        expires_at: time_at(row, 6)?,
        released_at: time_opt(row, 7)?,
    })
}

/// One thread with its lease.
fn thread_by_id() -> String {
    format!(
        "SELECT {THREAD_COLUMNS} FROM threads t LEFT JOIN leases l ON l.thread_id = t.thread_id
         WHERE t.thread_id = ?1"
    )
}

/// One message (its artifacts: [`ARTIFACTS_OF_MESSAGE`]).
fn message_by_id() -> String {
    format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = ?1")
}

const ARTIFACTS_OF_MESSAGE: &str = "SELECT artifact_id, message_id, path, kind, metadata_json, absolute_path, size_bytes, sha256, created_at
     FROM artifacts WHERE message_id = ?1 ORDER BY position";

const MESSAGE_COLUMNS: &str = "message_id, thread_id, event_id, from_agent, to_agent, kind, summary, body, \
     payload_json, created_at";

fn message_row(row: &dyn SqlRow) -> Result<Message, SqlError> {
    Ok(Message {
        message_id: string(row, 0)?,
        thread_id: string(row, 1)?,
        event_id: id(row, 2)?,
        from_agent: string(row, 3)?,
        to_agent: string(row, 4)?,
        kind: word(row, 5, "kind", inbox_engine::Kind::parse)?,
        summary: string(row, 6)?,
        body: string(row, 7)?,
        payload: json_at(row, 8)?,
        created_at: time_at(row, 9)?,
        artifacts: Vec::new(),
    })
}

fn artifact_row(row: &dyn SqlRow) -> Result<Artifact, SqlError> {
    Ok(Artifact {
        artifact_id: string(row, 0)?,
        message_id: string(row, 1)?,
        path: string(row, 2)?,
        kind: string(row, 3)?,
        metadata: json_at(row, 4)?,
        absolute_path: text(row, 5)?,
        size_bytes: row
            .int(6)?
            .map(|s| u64::try_from(s).map_err(|e| SqlError::column(6, e)))
            .transpose()?,
        sha256: text(row, 7)?,
        created_at: time_at(row, 8)?,
    })
}

const EVENT_COLUMNS: &str = "e.event_id, e.thread_id, e.run_id, e.task_id, e.event_type, e.source, \
     e.message_id, e.message_kind, e.status, e.summary, e.payload_json, e.created_at";

fn event_row(row: &dyn SqlRow) -> Result<Event, SqlError> {
    let message_kind = match row.text(7)? {
        None => None,
        Some(k) => Some(inbox_engine::Kind::parse(k).ok_or_else(|| unknown(7, "kind", k))?),
    };
    Ok(Event {
        event_id: id(row, 0)?,
        thread_id: string(row, 1)?,
        run_id: text(row, 2)?,
        task_id: text(row, 3)?,
        event_type: word(row, 4, "event type", inbox_engine::EventType::parse)?,
        source: string(row, 5)?,
        message_id: text(row, 6)?,
        message_kind,
        status: word(row, 8, "status", Status::parse)?,
        summary: string(row, 9)?,
        payload: json_at(row, 10)?,
        created_at: time_at(row, 11)?,
    })
}

/// `?, ?, ?` with one placeholder per value, pushing the values.
fn placeholders<T: ToString>(values: &[T], params: &mut Vec<Param<'_>>) -> String {
    let mut out = Vec::with_capacity(values.len());
    for value in values {
        params.push(Param::from(value.to_string()));
        out.push(format!("?{}", params.len()));
    }
    out.join(", ")
}

/// Adds `value` to `params`; returns its placeholder.
fn push<'a>(params: &mut Vec<Param<'a>>, value: impl Into<Param<'a>>) -> String {
    params.push(value.into());
    format!("?{}", params.len())
}

/// A new thread's row. Its parameters, a thread's columns in order, are
/// those of the two `UPDATE`s below (see `SqliteStore::write_thread`).
const INSERT_THREAD: &str = "INSERT INTO threads (thread_id, run_id, task_id, subject, created_by,
         assigned_to, status, priority, attempts, max_attempts, latest_message_id, last_event_id,
         created_at, updated_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// Writes a thread's changing columns; the fixed ones must match (see
/// `update_thread`).
const UPDATE_THREAD: &str =
    "UPDATE threads SET status = ?7, attempts = ?9, latest_message_id = ?11,
         last_event_id = ?12, updated_at = ?14
     WHERE thread_id = ?1 AND run_id IS ?2 AND task_id IS ?3 AND subject = ?4
         AND created_by = ?5 AND assigned_to = ?6 AND priority = ?8
         AND max_attempts = ?10 AND created_at = ?13";

/// [`UPDATE_THREAD`] for a thread whose status stays: the status is
/// checked rather than set, so its two indexes are not rewritten.
const UPDATE_THREAD_KEEPING_STATUS: &str =
    "UPDATE threads SET attempts = ?9, latest_message_id = ?11,
         last_event_id = ?12, updated_at = ?14
     WHERE thread_id = ?1 AND run_id IS ?2 AND task_id IS ?3 AND subject = ?4
         AND created_by = ?5 AND assigned_to = ?6 AND status = ?7 AND priority = ?8
         AND max_attempts = ?10 AND created_at = ?13";

impl<C: Sql> Store for SqliteStore<C> {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        // 2 KiB pages, set before anything is written (SQLite cannot change
        // the page size of a WAL database later). A command touches about a
        // dozen pages, each written whole to the WAL, checksummed, read back
        // by the next process's recovery and copied by checkpoints: halving
        // the page halves all of that. Measured in process on this project's
        // 2-core machine: send 5.7-6.2k/s at 4 KiB, 8.1-8.2k/s at 2 KiB;
        // claim+done 2.6k/s and 3.4-3.5k/s. 1 KiB was no faster and makes
        // the B-trees of large tables deeper.
        self.conn
            .execute_batch("PRAGMA page_size = 2048")
            .map_err(|e| self.error(e))?;
        // WAL lets readers run beside the one writer, and it persists in the
        // file. Databases that cannot use it (in memory, some wasm VFSes)
        // keep their own mode, which is fine for a single connection. The
        // pragma answers with the mode it left, a row read and let go.
        self.conn
            .each_row("PRAGMA journal_mode = WAL", &[], &mut |_| Ok(Flow::Stop))
            .map_err(|e| self.error(e))?;
        let schema_version = schema::migrate(&self.conn, &self.location)?;
        self.schema = SchemaState::Version(schema_version);
        Ok(StoreInfo {
            location: Some(self.location.clone()),
            schema_version,
        })
    }

    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        if self.tx.is_some() {
            return Err(StoreError::other("sqlite store: transaction already open"));
        }
        if self.batch {
            return self.begin_savepoint(mode);
        }
        #[cfg(feature = "native")]
        if mode == TxMode::Write
            && let Some(gate) = self.gate.take()
        {
            let (begun, gate) = gate.beginning(|| self.begin_transaction(mode));
            self.gate = gate;
            if begun.is_err() {
                self.open_gate();
            }
            return begun;
        }
        self.begin_transaction(mode)
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        if self.batch {
            self.tx = None;
            return self.batch_statement("RELEASE engine_tx");
        }
        self.execute("COMMIT", &[])?;
        self.tx = None;
        self.open_gate();
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        let was_open = self.tx.take().is_some();
        if self.batch {
            if !was_open {
                return Ok(());
            }
            return self
                .batch_statement("ROLLBACK TO engine_tx")
                .and_then(|()| self.batch_statement("RELEASE engine_tx"));
        }
        let rolled_back = if self.conn.in_transaction() {
            self.conn
                .execute_batch("ROLLBACK")
                .map_err(|e| self.error(e))
        } else {
            // Nothing open (e.g. SQLite already rolled back after an error).
            Ok(())
        };
        if was_open {
            self.open_gate();
        }
        rolled_back
    }

    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        let sql = thread_by_id();
        let state = self.row(&sql, &sql_params![thread_id], thread_state_row)?;
        self.loaded = state
            .as_ref()
            .map(|s| (s.thread.thread_id.clone(), s.thread.status));
        Ok(state)
    }

    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        let mut params: Vec<Param<'_>> = Vec::new();
        let order = thread_sql::order_by(query.order);
        let leases = if query.released_leases {
            thread_sql::EVERY_LEASE
        } else {
            thread_sql::held_lease()
        };
        let limit = sql_limit(query.limit);
        if thread_sql::merges_statuses(query) {
            let sql = thread_sql::by_statuses(query, &mut |v| push(&mut params, v), leases, limit);
            return self.thread_states(&sql, &params, query.limit);
        }
        // Newest first beside a filter on a thread, an agent or a run, the
        // rows are found by that filter's index and the statuses only
        // checked: SQLite would otherwise walk every thread of the status
        // (`threads_status` serves the order) to find one agent's, 7 ms at
        // 40k threads for an agent's pending ones.
        let status = if query.order == ThreadOrder::NewestFirst && thread_sql::narrowed(query) {
            thread_sql::StatusTerm::Unindexed
        } else {
            thread_sql::StatusTerm::Indexed
        };
        let clauses = thread_sql::filters(query, &mut |v| push(&mut params, v), status);
        let sql = match &query.agent {
            None => thread_sql::filtered(&clauses, leases, order, limit),
            // "Created by or assigned to": an OR across two indexes would
            // read every match and sort it. Two ordered, limited index scans
            // merged read at most 2 x limit rows.
            Some(agent) => {
                let p = push(&mut params, agent);
                let rest: String = clauses.iter().map(|c| format!(" AND {c}")).collect();
                format!(
                    "WITH picked AS (
                         SELECT thread_id FROM (SELECT t.thread_id FROM threads t WHERE t.created_by = {p}{rest}
                                                ORDER BY {order} LIMIT {limit})
                         UNION
                         SELECT thread_id FROM (SELECT t.thread_id FROM threads t WHERE t.assigned_to = {p}{rest}
                                                ORDER BY {order} LIMIT {limit}))
                     SELECT {THREAD_COLUMNS} FROM picked JOIN threads t ON t.thread_id = picked.thread_id
                     {leases} ORDER BY {order} LIMIT {limit}"
                )
            }
        };
        self.thread_states(&sql, &params, query.limit)
    }

    fn insert_thread(&mut self, t: &Thread) -> Result<(), StoreError> {
        self.write_thread(t, INSERT_THREAD).map(drop)
    }

    fn update_thread(&mut self, t: &Thread) -> Result<(), StoreError> {
        // Only the changing columns are SET: SQLite rewrites every index
        // with a column in the SET list, changed or not, and setting the
        // whole row rewrote the assignee, creator and run indexes on every
        // claim and done (3 of a claim's 15 pages). The fixed ones are
        // checked instead, in the WHERE clause. The status is left out too
        // when the thread read before kept it (a progress note, a reply to
        // a thread at work): one page of a reply's nine. Should the hint be
        // wrong, the status term matches nothing and the full form runs.
        let keeps_status = self
            .loaded
            .as_ref()
            .is_some_and(|(id, status)| *id == t.thread_id && *status == t.status);
        let mut changed = 0;
        if keeps_status {
            changed = self.write_thread(t, UPDATE_THREAD_KEEPING_STATUS)?;
        }
        if changed != 1 {
            changed = self.write_thread(t, UPDATE_THREAD)?;
        }
        if changed == 1 {
            return Ok(());
        }
        // Nothing matched: the thread is missing, or a fixed field differs.
        let exists = self
            .row(
                "SELECT 1 FROM threads WHERE thread_id = ?1",
                &sql_params![&t.thread_id],
                |_| Ok(()),
            )?
            .is_some();
        Err(if exists {
            StoreError::fixed_fields_changed(&t.thread_id)
        } else {
            StoreError::missing_thread(&t.thread_id)
        })
    }

    fn put_lease(&mut self, l: &Lease) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO leases (thread_id, agent, lease_token, attempt, lease_seconds, claimed_at,
                 expires_at, released_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (thread_id) DO UPDATE SET agent = excluded.agent,
                 lease_token = excluded.lease_token, attempt = excluded.attempt,
                 lease_seconds = excluded.lease_seconds, claimed_at = excluded.claimed_at,
                 expires_at = excluded.expires_at, released_at = excluded.released_at",
            &sql_params![
                &l.thread_id,
                &l.agent,
                sql_int(l.lease_token),
                l.attempt,
                sql_int(l.lease_seconds),
                l.claimed_at.to_string(),
                l.expires_at.to_string(),
                l.released_at.map(|t| t.to_string()),
            ],
        )
        .map(drop)
    }

    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        // Walks the unreleased leases in expiry order and stops at the first
        // one still live.
        let mut lapsed = Vec::new();
        if limit == 0 {
            return Ok(lapsed);
        }
        self.unreleased_leases(&mut |lease| {
            if lease.expires_at > now {
                return Flow::Stop;
            }
            lapsed.push(lease);
            if lapsed.len() < limit {
                Flow::More
            } else {
                Flow::Stop
            }
        })?;
        Ok(lapsed)
    }

    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError> {
        let text = self
            .row(
                "SELECT min(expires_at) FROM leases WHERE released_at IS NULL",
                &[],
                |row| text(row, 0),
            )?
            .flatten();
        text.map(|t| {
            Timestamp::parse(&t).map_err(|e| StoreError::other(format!("{}: {e}", self.location)))
        })
        .transpose()
    }

    fn insert_message(&mut self, m: &Message) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO messages (message_id, thread_id, event_id, from_agent, to_agent, kind, summary,
                 body, payload_json, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            &sql_params![
                &m.message_id,
                &m.thread_id,
                sql_int(m.event_id),
                &m.from_agent,
                &m.to_agent,
                m.kind.as_str(),
                &m.summary,
                &m.body,
                json_text(&m.payload),
                m.created_at.to_string(),
            ],
        )?;
        for (position, a) in m.artifacts.iter().enumerate() {
            self.execute(
                "INSERT INTO artifacts (artifact_id, message_id, thread_id, position, path, kind,
                     metadata_json, absolute_path, size_bytes, sha256, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                &sql_params![
                    &a.artifact_id,
                    &a.message_id,
                    &m.thread_id,
                    position as i64,
                    &a.path,
                    &a.kind,
                    json_text(&a.metadata),
                    &a.absolute_path,
                    a.size_bytes.map(sql_int),
                    &a.sha256,
                    a.created_at.to_string(),
                ],
            )?;
        }
        Ok(())
    }

    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        let sql = message_by_id();
        match self.row(&sql, &sql_params![message_id], message_row)? {
            None => Ok(None),
            Some(m) => Ok(self.with_artifacts(vec![m])?.pop()),
        }
    }

    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        let order = if query.newest_first { "DESC" } else { "ASC" };
        let from = if query.from_agent.is_some() {
            "AND from_agent = ?2"
        } else {
            "AND ?2 IS NULL"
        };
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ?1 {from} AND event_id > ?3
             ORDER BY event_id {order} LIMIT {}",
            sql_limit(query.limit)
        );
        let after = sql_int(query.after_event);
        let params = sql_params![&query.thread_id, &query.from_agent, after];
        let messages = self.rows(&sql, &params, query.limit, message_row)?;
        self.with_artifacts(messages)
    }

    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        // inbox's and orch's events share one sequence.
        self.orch_latest_event_id()
    }

    fn insert_event(&mut self, e: &Event) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO events (event_id, thread_id, run_id, task_id, event_type, source, message_id,
                 message_kind, status, summary, payload_json, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            &sql_params![
                sql_int(e.event_id),
                &e.thread_id,
                &e.run_id,
                &e.task_id,
                e.event_type.as_str(),
                &e.source,
                &e.message_id,
                e.message_kind.map(|k| k.as_str()),
                e.status.as_str(),
                &e.summary,
                json_text(&e.payload),
                e.created_at.to_string(),
            ],
        )
        .map(drop)
    }

    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let mut params = vec![Param::from(sql_int(query.after_event))];
        let mut clauses = vec!["e.event_id > ?1".to_owned()];
        let mut join = "";
        if let Some(thread_id) = &query.thread_id {
            clauses.push(format!("e.thread_id = {}", push(&mut params, thread_id)));
        }
        if let Some(run_id) = &query.run_id {
            clauses.push(format!("e.run_id = {}", push(&mut params, run_id)));
        }
        if let Some(agent) = &query.agent {
            // CROSS JOIN keeps events as the outer loop: walk the events after
            // the cursor (usually a handful) and look each thread up. Left to
            // itself the planner starts from every thread the agent created
            // or is assigned and probes their events: 33 ms per watch poll at
            // a million messages, against 0.01 ms this way.
            join = "CROSS JOIN threads t ON t.thread_id = e.thread_id";
            let p = push(&mut params, agent);
            clauses.push(format!("(t.created_by = {p} OR t.assigned_to = {p})"));
        }
        if !query.statuses.is_empty() {
            clauses.push(format!(
                "e.status IN ({})",
                placeholders(&query.statuses, &mut params)
            ));
        }
        if !query.event_types.is_empty() {
            clauses.push(format!(
                "e.event_type IN ({})",
                placeholders(&query.event_types, &mut params)
            ));
        }
        if !query.message_kinds.is_empty() {
            clauses.push(format!(
                "e.message_kind IN ({})",
                placeholders(&query.message_kinds, &mut params)
            ));
        }
        if let Some(source) = &query.source {
            // With a thread named, its index (thread_id, event_id) is the
            // one to walk: a thread holds a handful of events, while a
            // source (a leader) may have written most of the store's, and
            // SQLite, free to choose, took events_source (source,
            // event_id) for the order: `reply` into a claimed thread from
            // a leader with 100,000 events walked all of them. The unary
            // `+` leaves that index out here.
            let column = if query.thread_id.is_some() {
                "+e.source"
            } else {
                "e.source"
            };
            clauses.push(format!("{column} = {}", push(&mut params, source)));
        }
        if let Some(source) = &query.exclude_source {
            clauses.push(format!("e.source <> {}", push(&mut params, source)));
        }
        let limit = sql_limit(query.limit);
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events e {join} WHERE {} ORDER BY e.event_id LIMIT {limit}",
            clauses.join(" AND ")
        );
        self.rows(&sql, &params, query.limit, event_row)
    }

    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError> {
        self.row(
            "SELECT thread_id, agent, last_read_message_id, last_read_event_id, last_read_at
             FROM thread_reads WHERE thread_id = ?1 AND agent = ?2",
            &sql_params![thread_id, agent],
            |row| {
                Ok(ReadCursor {
                    thread_id: string(row, 0)?,
                    agent: string(row, 1)?,
                    last_read_message_id: string(row, 2)?,
                    last_read_event_id: id(row, 3)?,
                    last_read_at: time_at(row, 4)?,
                })
            },
        )
    }

    fn put_read_cursor(&mut self, c: &ReadCursor) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO thread_reads (thread_id, agent, last_read_message_id, last_read_event_id, last_read_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (thread_id, agent) DO UPDATE SET
                 last_read_message_id = excluded.last_read_message_id,
                 last_read_event_id = excluded.last_read_event_id,
                 last_read_at = excluded.last_read_at",
            &sql_params![
                &c.thread_id,
                &c.agent,
                &c.last_read_message_id,
                sql_int(c.last_read_event_id),
                c.last_read_at.to_string(),
            ],
        )
        .map(drop)
    }

    fn agents(&mut self, query: &AgentQuery) -> Result<Vec<Agent>, StoreError> {
        self.registry_agents(query)
    }

    fn put_agent(&mut self, agent: &Agent) -> Result<(), StoreError> {
        self.registry_put(agent)
    }

    fn delete_agent(&mut self, name: &str) -> Result<(), StoreError> {
        self.registry_delete(name)
    }

    fn live_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.live(now, limit)
    }

    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        self.newest_event_by(source)
    }

    fn mailbox(&mut self, query: &MailboxQuery) -> Result<Vec<Message>, StoreError> {
        self.mailbox_messages(query)
    }

    fn idempotency(&mut self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.idempotency_record(key)
    }

    fn put_idempotency(&mut self, record: &IdempotencyRecord) -> Result<(), StoreError> {
        self.put_idempotency_record(record)
    }

    fn delete_idempotency(&mut self, before: Timestamp, limit: usize) -> Result<u64, StoreError> {
        self.expire_idempotency(before, limit)
    }

    fn settings(&mut self) -> Result<Option<Settings>, StoreError> {
        self.engine_settings()
    }

    fn put_settings(&mut self, settings: &Settings) -> Result<(), StoreError> {
        self.put_engine_settings(settings)
    }

    fn thread_page(&mut self, query: &ThreadPage) -> Result<Vec<ThreadState>, StoreError> {
        self.threads_in_order(query)
    }

    fn message_count(&mut self) -> Result<u64, StoreError> {
        self.count_messages()
    }

    fn delete_thread(&mut self, thread_id: &str) -> Result<u64, StoreError> {
        self.remove_thread(thread_id)
    }

    fn run(&mut self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.orch_run(run_id)
    }

    fn runs(&mut self, query: &RunQuery) -> Result<Vec<Run>, StoreError> {
        self.orch_runs(query)
    }

    fn insert_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.orch_put_run(run, true)
    }

    fn update_run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.orch_put_run(run, false)
    }

    fn task(&mut self, run_id: &str, task_id: &str) -> Result<Option<Task>, StoreError> {
        self.orch_task(run_id, task_id)
    }

    fn tasks(&mut self, query: &TaskQuery) -> Result<Vec<Task>, StoreError> {
        self.orch_tasks(query)
    }

    fn insert_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.orch_put_task(task, true)
    }

    fn update_task(&mut self, task: &Task) -> Result<(), StoreError> {
        self.orch_put_task(task, false)
    }

    fn attempts(&mut self, run_id: &str, task_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.orch_attempts(run_id, task_id)
    }

    fn put_attempt(&mut self, attempt: &Attempt) -> Result<(), StoreError> {
        self.orch_put_attempt(attempt)
    }

    fn insert_orch_event(&mut self, event: &OrchEvent) -> Result<(), StoreError> {
        self.orch_insert_event(event)
    }

    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        self.orch_events_after(query)
    }
}
