//! [`PgStore`]: the engine's [`Store`] over one PostgreSQL connection
//! (design in `docs/postgres.md`).
//!
//! It owns the connection, its session settings (timeouts), the
//! transaction protocol and a cache of prepared statements. Write
//! transactions are READ COMMITTED and first lock the one row of
//! `inbox_writer`, held to commit, so writers are serialized as SQLite's
//! `BEGIN IMMEDIATE` serializes them: the engine's read-decide-write is
//! atomic and event ids commit in increasing order. Read transactions are
//! REPEATABLE READ READ ONLY snapshots. A commit that wrote events notifies
//! their highest id on [`listen::CHANNEL`] in the same round trip, for the
//! waiters of other processes. A write transaction's writes are queued and
//! sent with its next read or its commit, and its `BEGIN` reads ahead what
//! every write reads first ([`pipeline`]): a command costs a few round
//! trips rather than one per statement. Each method follows the SQLite
//! store's query (same columns, same order, an index for each). It must
//! never decide anything (that is the engine's), never sleep or retry, and
//! never put the connection string, which may hold a password, into a
//! message: the database is named by [`describe`].

use std::collections::HashMap;

use inbox_engine::orch::model::{Attempt, OrchEvent, Run, Task};
use inbox_engine::orch::query::{OrchEventQuery, RunQuery, TaskQuery};
use inbox_engine::store::{
    AgentQuery, EventQuery, MailboxQuery, MessageQuery, ReadAhead, StoreInfo, ThreadPage,
    ThreadQuery, ThreadState, TxMode,
};
use inbox_engine::{
    Agent, Event, EventId, IdempotencyRecord, Lease, Message, ReadCursor, Settings, Store,
    StoreError, StoreErrorKind, Thread, Timestamp,
};
use postgres::config::Host;
use postgres::types::ToSql;
use postgres::{Client, Config, Row, Statement};

pub mod listen;
mod orch;
mod password;
mod pipeline;
mod records;
mod rows;
pub mod schema;
mod tls;
mod url;

pub use url::{describe_url, is_url, open, url_named};

use pipeline::{Ahead, Lit, Planned, Queued};
pub use rows::pg_error;
use rows::{ARTIFACT_COLUMNS, EVENT_COLUMNS, LEASE_COLUMNS, MESSAGE_COLUMNS, int, json_text};
use schema::SchemaState;

use inbox_store_sql::thread_sql::{self, THREAD_COLUMNS};

/// Session settings every connection gets (docs/postgres.md, "Timeouts"):
/// no statement runs away, a writer waits for the writer row as long as
/// SQLite's busy budget and then reports `storage_busy`, and a client stuck
/// inside a transaction cannot hold the writer row, and so the bus, for
/// more than a minute. Sent as startup options, ahead of the URL's own
/// `options` (the last setting of a name wins), so they cost no round
/// trip and a deployment can change them in its URL.
const SESSION_OPTIONS: &str =
    "-c statement_timeout=30s -c lock_timeout=10s -c idle_in_transaction_session_timeout=60s";

/// The database a configuration names, for messages: user, host, port and
/// database, never the password.
pub fn describe(config: &Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{user}@{host}:{port}/{db}")
}

/// A `LIMIT` written into the statement's text (PostgreSQL's is a
/// `BIGINT`; the engine's "no limit" is `usize::MAX`). Limits take few
/// distinct values, so each gets its own prepared statement.
#[derive(Clone, Copy)]
struct Limit(usize);

impl Limit {
    /// The limit as SQL takes it: "no limit" is the largest `BIGINT`.
    fn sql(&self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.sql())
    }
}

/// A dynamically built statement's parameters, as literals: bound when
/// the statement runs at once, written into `EXECUTE` when it rides in
/// another statement's round trip (`begin`'s reads ahead).
type Params = Vec<Lit>;

/// Appends a parameter; returns its placeholder (`$n`).
fn push(params: &mut Params, value: impl Into<Lit>) -> String {
    params.push(value.into());
    format!("${}", params.len())
}

/// `$n, $n+1, ...` with one text parameter per value.
fn placeholders<T: ToString>(values: &[T], params: &mut Params) -> String {
    values
        .iter()
        .map(|v| push(params, v.to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The engine's storage in a PostgreSQL database (its current schema).
pub struct PgStore {
    client: Client,
    /// The database as [`describe`] names it.
    location: String,
    /// What the schema held when the store was opened.
    schema: SchemaState,
    tx: Option<TxMode>,
    /// Whether [`Store::clock`] reports the server's time.
    server_clock: bool,
    /// What the engine said the next write transaction reads first.
    reads: Option<ReadAhead>,
    /// Whether [`PgStore::read_commands_ahead`] is on.
    command_reads: bool,
    /// Prepared statements by their text: preparing costs a round trip.
    statements: HashMap<String, Statement>,
    /// The names queued writes `EXECUTE`, by statement text (SQL
    /// `PREPARE`, since a queued write is SQL text).
    prepared: HashMap<String, String>,
    /// How many names `prepared` has handed out.
    names: usize,
    /// Whether [`pipeline::AHEAD`] is prepared in this session.
    ahead_prepared: bool,
    /// The highest event id the open write transaction wrote: its commit
    /// notifies [`listen::CHANNEL`] with it.
    notify: Option<EventId>,
    /// How the store connected, for a [`listen::Listener`] beside it.
    config: Config,
    /// The server's clock at the start of the open transaction, when
    /// [`PgStore::use_server_clock`] is on.
    now: Option<Timestamp>,
    /// Whether writes are queued and reads done ahead ([`pipeline`]), or
    /// every statement waits for its reply (the first cut's protocol).
    pipeline: bool,
    /// Whether a commit that wrote events notifies [`listen::CHANNEL`].
    notify_commits: bool,
    /// The open write transaction's queued writes.
    queued: Queued,
    /// What the open write transaction's `BEGIN` read ahead.
    ahead: Ahead,
}

impl PgStore {
    /// Connects to the database a `postgres://` or `postgresql://` URL (or
    /// a libpq key=value string) names. The password comes from the URL,
    /// `PGPASSWORD` or the password file; the user from the URL, `PGUSER`
    /// or `USER`.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let config: Config = url.parse().map_err(|e| tls::invalid_url(&e))?;
        PgStore::with_config(config)
    }

    /// Connects with a parsed configuration (filled in from the
    /// environment as [`PgStore::connect`] says).
    pub fn with_config(mut config: Config) -> Result<PgStore, StoreError> {
        from_environment(&mut config);
        let location = describe(&config);
        config.application_name("inbox");
        let options = format!("{SESSION_OPTIONS} {}", config.get_options().unwrap_or(""));
        config.options(options.trim_end());
        let mut client = session(&config, &location)?;
        let schema = schema::inspect(&mut client, &location)?;
        Ok(PgStore {
            client,
            location,
            schema,
            tx: None,
            server_clock: true,
            reads: None,
            command_reads: true,
            statements: HashMap::new(),
            prepared: HashMap::new(),
            names: 0,
            ahead_prepared: false,
            notify: None,
            config,
            now: None,
            pipeline: true,
            notify_commits: true,
            queued: Queued::default(),
            ahead: Ahead::default(),
        })
    }

    /// Whether writes are queued and sent with the next read or the
    /// commit, and `BEGIN` reads ahead (on, the default), or every
    /// statement waits for its reply: the first cut's protocol, kept for
    /// measuring what the round trips cost.
    pub fn pipeline(&mut self, on: bool) {
        self.pipeline = on;
    }

    /// Whether the reads the engine announces for a write command
    /// ([`Store::read_ahead`]) ride in its `BEGIN`'s round trip (on, the
    /// default). Off only to measure what that saves.
    pub fn read_commands_ahead(&mut self, on: bool) {
        self.command_reads = on;
    }

    /// Whether a commit that wrote events sends `NOTIFY` (on, the
    /// default). Off only to measure NOTIFY's cost: waiters in other
    /// processes then find new events only by their fallback poll.
    pub fn notify_commits(&mut self, on: bool) {
        self.notify_commits = on;
    }

    /// A listening connection of its own to this store's database; a
    /// process's waits share one through [`PgStore::hub`].
    pub fn listener(&self) -> Result<listen::Listener, StoreError> {
        listen::Listener::connect(self.config.clone())
    }

    /// The process's [`listen::Hub`] for this store's database, which its
    /// waits sleep on.
    pub fn hub(&self) -> Result<listen::Hub, StoreError> {
        listen::Hub::for_database(&self.config)
    }

    /// Before a transaction: if the server ended the session (a restart, a
    /// proxy, an idle timeout), connects again, so that a long-lived
    /// process (a wait, the MCP server) goes on after the command that
    /// found the connection gone failed. That command committed nothing,
    /// so running the next one never applies anything twice. Prepared
    /// statements belonged to the old session and are prepared again.
    fn reconnect_if_closed(&mut self) -> Result<(), StoreError> {
        if !self.client.is_closed() {
            return Ok(());
        }
        self.new_session()
    }

    /// Runs `begin`'s statements. A session the server ended (a restart, a
    /// proxy) is found out here, before anything of the transaction ran:
    /// then it connects again and starts over once, so that a long-lived
    /// process (a wait) goes on across a server restart.
    fn start(&mut self, sql: &str) -> Result<Vec<postgres::SimpleQueryMessage>, StoreError> {
        match self.try_start(sql) {
            Ok(messages) => Ok(messages),
            Err(e) if self.client.is_closed() || lost_session(&e) => {
                self.new_session()?;
                self.try_start(sql).map_err(|e| pg_error(e, &self.location))
            }
            Err(e) => Err(pg_error(e, &self.location)),
        }
    }

    /// `begin`'s statements `sql`, after preparing [`pipeline::AHEAD`] (one
    /// round trip, once per session) if they run it.
    fn try_start(
        &mut self,
        sql: &str,
    ) -> Result<Vec<postgres::SimpleQueryMessage>, postgres::Error> {
        if !self.ahead_prepared && sql.contains(pipeline::AHEAD) {
            self.client.batch_execute(&format!(
                "PREPARE {} AS {}",
                pipeline::AHEAD,
                pipeline::AHEAD_SQL
            ))?;
            self.ahead_prepared = true;
        }
        self.client.simple_query(sql)
    }

    /// Checks that a write's `BEGIN` locked the writer row (its second
    /// statement). Without the row nothing serializes writers: the engine's
    /// read-decide-write and the order of event ids would no longer hold, so
    /// nothing is written until `init` restores it. Only a role that may
    /// delete from `inbox_writer` can remove it, which the README's roles
    /// recipe grants nobody but the owner.
    fn writer_row_held(&self, results: &[Vec<Vec<Option<String>>>]) -> Result<(), StoreError> {
        match results.get(1) {
            Some(rows) if rows.len() == 1 => Ok(()),
            _ => Err(StoreError::other(format!(
                "{}: the row of `inbox_writer` that every write locks is missing (a role that may \
                 delete from it removed it), so writes would not be serialized and none is made; \
                 run `inbox init` as the schema's owner to restore it, and grant agents' roles \
                 no DELETE on it (docs/postgres.md, \"Roles\")",
                self.location
            ))),
        }
    }

    /// The server's clock from `begin`'s answers (the statement at
    /// `index`), when it was asked for.
    fn started_at(
        &self,
        results: &[Vec<Vec<Option<String>>>],
        index: Option<usize>,
    ) -> Result<Option<Timestamp>, StoreError> {
        let Some(index) = index else {
            return Ok(None);
        };
        let millis = results
            .get(index)
            .and_then(|rows| rows.first())
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|text| text.parse::<i64>().ok())
            .ok_or_else(|| {
                StoreError::other(format!(
                    "{}: the server did not say its time",
                    self.location
                ))
            })?;
        Ok(Some(Timestamp::from_millis(millis)))
    }

    /// Remembers that the open transaction wrote event `id`.
    fn wrote_event(&mut self, id: EventId) {
        self.notify = Some(self.notify.map_or(id, |n| n.max(id)));
    }

    /// A write the engine does not read the result of: queued when
    /// pipelining (sent before the next read or with the commit), else run
    /// now. Either way what `BEGIN` read ahead is stale from here on.
    fn write(&mut self, sql: &str, params: Vec<Lit>) -> Result<(), StoreError> {
        self.ahead = Ahead::default();
        if self.pipeline && self.tx == Some(TxMode::Write) {
            let (name, new) = self.name_for(sql);
            if new {
                self.queued.prepare(&name, sql);
            }
            let run = pipeline::execute(&name, &params)?;
            self.queued.push(run);
            return Ok(());
        }
        let statement = self.statement(sql)?;
        let values = pipeline::bound(params, statement.params());
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|p| &**p as _).collect();
        self.client
            .execute(&statement, &refs)
            .map(drop)
            .map_err(|e| pg_error(e, &self.location))
    }

    /// The SQL `PREPARE` name of `sql` in this session, and whether it is
    /// new: then the statement that runs it must prepare it first (and
    /// [`PgStore::forget`] it if that may not have happened).
    fn name_for(&mut self, sql: &str) -> (String, bool) {
        if let Some(name) = self.prepared.get(sql) {
            return (name.clone(), false);
        }
        self.names += 1;
        let name = format!("inbox_w{}", self.names);
        self.prepared.insert(sql.to_owned(), name.clone());
        (name, true)
    }

    /// Adds the engine's announced reads to `begin`'s `statements`, each as
    /// `EXECUTE` of the very statement the store would run for it (and its
    /// `PREPARE` on first use, whose text goes into `preparing`). A read
    /// whose parameters cannot be written as literals is left to be run
    /// when asked.
    fn plan(
        &mut self,
        reads: ReadAhead,
        statements: &mut Vec<String>,
        preparing: &mut Vec<String>,
    ) -> Planned {
        let mut add = |store: &mut PgStore, (sql, params): (String, Params)| {
            let arguments = pipeline::arguments(&params).ok()?;
            let (name, new) = store.name_for(&sql);
            if new {
                statements.push(format!("PREPARE {name} AS {sql}"));
                preparing.push(sql);
            }
            statements.push(format!("EXECUTE {name}{arguments}"));
            Some(statements.len() - 1)
        };
        Planned {
            thread: reads.thread.and_then(|id| {
                let at = add(self, thread_statement(&id))?;
                Some((id, at))
            }),
            agents: reads.agents.and_then(|query| {
                let at = add(self, records::agents_statement(&query))?;
                Some((query, at))
            }),
            threads: reads.threads.and_then(|query| {
                let at = add(self, threads_statement(&query))?;
                Some((query, at))
            }),
        }
    }

    /// Sends the queued writes, before a statement that may read them.
    fn flush(&mut self) -> Result<(), StoreError> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let (sql, preparing) = self.queued.take_with(&[]);
        let sent = self.client.batch_execute(&sql);
        self.sent(sent, preparing)
    }

    /// After a queue was sent: if it failed, the `PREPARE`s it held may
    /// not have run, so their statements are prepared again, under new
    /// names, on their next use.
    fn sent(
        &mut self,
        result: Result<(), postgres::Error>,
        preparing: Vec<String>,
    ) -> Result<(), StoreError> {
        result.map_err(|e| {
            self.forget(preparing);
            pg_error(e, &self.location)
        })
    }

    fn forget(&mut self, preparing: Vec<String>) {
        for sql in preparing {
            self.prepared.remove(&sql);
        }
    }

    /// A new session's state: nothing prepared yet.
    fn new_session(&mut self) -> Result<(), StoreError> {
        self.client = session(&self.config, &self.location)?;
        self.statements.clear();
        self.prepared.clear();
        self.ahead_prepared = false;
        Ok(())
    }

    /// Whether [`Store::clock`] reports the server's time (the default) or
    /// leaves the engine on the host's clock: scripts with a manual clock,
    /// such as the conformance corpus, turn it off.
    pub fn use_server_clock(&mut self, on: bool) {
        self.server_clock = on;
    }

    /// The database, as messages name it (no password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The schema version, migrating an older inbox schema first. Fails
    /// with `not_initialized` on an empty schema: run `inbox init`.
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
                let version = schema::migrate(&mut self.client, &self.location)?;
                self.schema = SchemaState::Version(version);
                Ok(version)
            }
        }
    }

    fn error(&self, error: postgres::Error) -> StoreError {
        pg_error(error, &self.location)
    }

    /// The prepared statement for `sql`, preparing it on first use.
    fn statement(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(|e| self.error(e))?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        self.flush()?;
        let statement = self.statement(sql)?;
        self.client
            .query(&statement, params)
            .map_err(|e| pg_error(e, &self.location))
    }

    fn query_params(&mut self, sql: &str, params: &Params) -> Result<Vec<Row>, StoreError> {
        self.flush()?;
        let statement = self.statement(sql)?;
        let values = pipeline::bound(params.clone(), statement.params());
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|p| &**p as _).collect();
        self.client
            .query(&statement, &refs)
            .map_err(|e| pg_error(e, &self.location))
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
        self.ahead = Ahead::default();
        self.flush()?;
        let statement = self.statement(sql)?;
        self.client
            .execute(&statement, params)
            .map_err(|e| pg_error(e, &self.location))
    }

    fn thread_states(
        &mut self,
        sql: &str,
        params: &Params,
    ) -> Result<Vec<ThreadState>, StoreError> {
        self.query_params(sql, params)?
            .iter()
            .map(rows::thread_state)
            .collect()
    }

    fn messages_of(&mut self, sql: &str, params: &Params) -> Result<Vec<Message>, StoreError> {
        self.query_params(sql, params)?
            .iter()
            .map(rows::message)
            .collect()
    }

    fn artifacts(
        &mut self,
        sql: &str,
        key: &str,
    ) -> Result<Vec<inbox_engine::Artifact>, StoreError> {
        self.query(sql, &[&key])?
            .iter()
            .map(rows::artifact)
            .collect()
    }

    /// Attaches artifacts (one query per thread) to `messages`, which are
    /// all of one thread.
    fn with_artifacts(&mut self, mut messages: Vec<Message>) -> Result<Vec<Message>, StoreError> {
        let Some(first) = messages.first() else {
            return Ok(messages);
        };
        let artifacts = if messages.len() == 1 {
            let key = first.message_id.clone();
            let sql = format!(
                "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE message_id = $1 ORDER BY position"
            );
            self.artifacts(&sql, &key)?
        } else {
            let key = first.thread_id.clone();
            let sql = format!(
                "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE thread_id = $1 \
                 ORDER BY message_id, position"
            );
            self.artifacts(&sql, &key)?
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

    /// [`PgStore::with_artifacts`] for messages of many threads: one query
    /// per thread, in the messages' order.
    fn with_artifacts_across_threads(
        &mut self,
        messages: Vec<Message>,
    ) -> Result<Vec<Message>, StoreError> {
        inbox_store_sql::per_thread(messages, |group| self.with_artifacts(group))
    }

    fn write_thread(&mut self, sql: &str, t: &Thread) -> Result<(), StoreError> {
        self.write(
            sql,
            vec![
                Lit::from(&t.thread_id),
                Lit::from(t.run_id.as_deref()),
                Lit::from(t.task_id.as_deref()),
                Lit::from(&t.subject),
                Lit::from(&t.created_by),
                Lit::from(&t.assigned_to),
                Lit::from(t.status.as_str()),
                Lit::from(t.priority.as_str()),
                Lit::from(i64::from(t.attempts)),
                Lit::from(i64::from(t.max_attempts)),
                Lit::from(t.latest_message_id.as_deref()),
                Lit::from(int(t.last_event_id)),
                Lit::from(t.created_at.to_string()),
                Lit::from(t.updated_at.to_string()),
            ],
        )
    }

    fn insert_artifacts(&mut self, m: &Message) -> Result<(), StoreError> {
        for (position, a) in m.artifacts.iter().enumerate() {
            self.write(
                "INSERT INTO artifacts (artifact_id, message_id, thread_id, position, path, kind,
                     metadata_json, absolute_path, size_bytes, sha256, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                vec![
                    Lit::from(&a.artifact_id),
                    Lit::from(&a.message_id),
                    Lit::from(&m.thread_id),
                    Lit::from(i64::try_from(position).unwrap_or(i64::MAX)),
                    Lit::from(&a.path),
                    Lit::from(&a.kind),
                    Lit::from(json_text(&a.metadata)),
                    Lit::from(a.absolute_path.as_deref()),
                    Lit::from(a.size_bytes.map(int)),
                    Lit::from(a.sha256.as_ref()),
                    Lit::from(a.created_at.to_string()),
                ],
            )?;
        }
        Ok(())
    }

    /// Leases not released, earliest expiry first, on the side of `now`
    /// that `lapsed` asks for.
    fn leases_around(
        &mut self,
        now: Timestamp,
        limit: usize,
        lapsed: bool,
    ) -> Result<Vec<Lease>, StoreError> {
        let limit = Limit(limit);
        let side = if lapsed { "<=" } else { ">" };
        let sql = format!(
            "SELECT {LEASE_COLUMNS} FROM leases WHERE released_at IS NULL AND expires_at {side} $1
             ORDER BY expires_at, thread_id LIMIT {limit}"
        );
        self.query(&sql, &[&now.to_string()])?
            .iter()
            .map(rows::lease)
            .collect()
    }
}

/// Whether an error says the server ended the session.
fn lost_session(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    error.is_closed()
        || error
            .code()
            .is_some_and(|c| *c == SqlState::ADMIN_SHUTDOWN || *c == SqlState::CRASH_SHUTDOWN)
}

/// A new connection (its session settings are in `config`'s options),
/// over TLS when its `sslmode` asks (see [`tls`]).
fn session(config: &Config, location: &str) -> Result<Client, StoreError> {
    tls::connect(config, location)
}

/// Fills in what libpq would take from the environment and the Rust client
/// does not: the user from `PGUSER` or the login name, the password from
/// `PGPASSWORD` or the password file (see [`password`]).
pub(crate) fn from_environment(config: &mut Config) {
    if config.get_user().is_none() {
        let user = std::env::var("PGUSER")
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "postgres".to_owned());
        config.user(&user);
    }
    if config.get_password().is_some() {
        return;
    }
    // libpq matches a socket connection against `localhost` in .pgpass.
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(_)) | None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or_default().to_owned();
    let database = config.get_dbname().unwrap_or(&user).to_owned();
    if let Some(password) = password::lookup(&host, port, &database, &user) {
        config.password(password);
    }
}

/// [`Store::thread`]'s statement.
fn thread_statement(thread_id: &str) -> (String, Params) {
    let sql = format!(
        "SELECT {THREAD_COLUMNS} FROM threads t LEFT JOIN leases l ON l.thread_id = t.thread_id
         WHERE t.thread_id = $1"
    );
    (sql, vec![Lit::from(thread_id)])
}

/// [`Store::threads`]'s statement for `query`.
fn threads_statement(query: &ThreadQuery) -> (String, Params) {
    let mut params = Params::new();
    // Every lease; those a query leaves out are dropped as the rows are
    // read, by `ThreadQuery::keep_lease_of` (see `thread_sql::held_lease`).
    let leases = thread_sql::EVERY_LEASE;
    let limit = Limit(query.limit);
    if thread_sql::merges_statuses(query) {
        let sql =
            thread_sql::by_statuses(query, &mut |v| push(&mut params, v), leases, limit.sql());
        return (sql, params);
    }
    let mut clauses = thread_sql::filters(
        query,
        &mut |v| push(&mut params, v),
        thread_sql::StatusTerm::Indexed,
    );
    let order = thread_sql::order_by(query.order);
    let sql = match &query.agent {
        // A thread named by its key is one row to check, whoever's it is.
        Some(agent) if query.thread_id.is_some() => {
            let p = push(&mut params, agent.clone());
            clauses.push(format!("(t.created_by = {p} OR t.assigned_to = {p})"));
            thread_sql::filtered(&clauses, leases, order, limit.sql())
        }
        None => thread_sql::filtered(&clauses, leases, order, limit.sql()),
        // "Created by or assigned to": two ordered, limited index scans
        // merged, as the SQLite store does, rather than an OR that
        // reads every match and sorts it. The second leaves out what the
        // first finds, so that the two need no deduplication: then
        // PostgreSQL merges them in order as they come (Merge Append) and
        // the whole needs no sort, whatever the planner thinks of a sort's
        // cost (docs/postgres.md, "Query plans").
        Some(agent) => {
            let p = push(&mut params, agent.clone());
            let rest: String = clauses.iter().map(|c| format!(" AND {c}")).collect();
            format!(
                "WITH picked AS (
                     (SELECT t.thread_id FROM threads t WHERE t.created_by = {p}{rest}
                      ORDER BY {order} LIMIT {limit})
                     UNION ALL
                     (SELECT t.thread_id FROM threads t WHERE t.assigned_to = {p} AND t.created_by <> {p}{rest}
                      ORDER BY {order} LIMIT {limit}))
                 SELECT {THREAD_COLUMNS} FROM picked JOIN threads t ON t.thread_id = picked.thread_id
                 {leases} ORDER BY {order} LIMIT {limit}"
            )
        }
    };
    (sql, params)
}

/// The `WHERE` clauses of [`EventQuery`]'s filters, with their parameters
/// pushed; `true` when the agent filter needs the threads joined.
fn event_filters(query: &EventQuery, params: &mut Params) -> (Vec<String>, bool) {
    let mut clauses = vec![format!(
        "e.event_id > {}",
        push(params, int(query.after_event))
    )];
    for (column, value) in [
        ("thread_id", &query.thread_id),
        ("run_id", &query.run_id),
        ("source", &query.source),
    ] {
        if let Some(value) = value {
            clauses.push(format!("e.{column} = {}", push(params, value.clone())));
        }
    }
    if let Some(source) = &query.exclude_source {
        clauses.push(format!("e.source <> {}", push(params, source.clone())));
    }
    if !query.statuses.is_empty() {
        clauses.push(format!(
            "e.status IN ({})",
            placeholders(&query.statuses, params)
        ));
    }
    if !query.event_types.is_empty() {
        let list = placeholders(&query.event_types, params);
        clauses.push(format!("e.event_type IN ({list})"));
    }
    if !query.message_kinds.is_empty() {
        let list = placeholders(&query.message_kinds, params);
        clauses.push(format!("e.message_kind IN ({list})"));
    }
    let join = match &query.agent {
        Some(agent) => {
            let p = push(params, agent.clone());
            clauses.push(format!("(t.created_by = {p} OR t.assigned_to = {p})"));
            true
        }
        None => false,
    };
    (clauses, join)
}

impl Store for PgStore {
    fn initialize(&mut self) -> Result<StoreInfo, StoreError> {
        let schema_version = schema::migrate(&mut self.client, &self.location)?;
        self.schema = SchemaState::Version(schema_version);
        Ok(StoreInfo {
            location: Some(self.location.clone()),
            schema_version,
        })
    }

    fn begin(&mut self, mode: TxMode) -> Result<(), StoreError> {
        if self.tx.is_some() {
            return Err(StoreError::other(
                "postgres store: transaction already open",
            ));
        }
        self.reconnect_if_closed()?;
        // One round trip for the whole start (the simple query protocol):
        // BEGIN, the writer row's lock, the server's clock, which `clock`
        // then answers without asking again, and for a write what every
        // write reads first and what the engine said this one would.
        let reads = self.reads.take();
        let mut statements: Vec<String> = match mode {
            TxMode::Read => vec!["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned()],
            TxMode::Write => vec![
                "BEGIN ISOLATION LEVEL READ COMMITTED".to_owned(),
                "SELECT id FROM inbox_writer WHERE id = 1 FOR UPDATE".to_owned(),
            ],
        };
        // `now()` is the transaction's start: one instant for the command.
        let clock_at = self.server_clock.then(|| {
            statements.push("SELECT floor(extract(epoch FROM now()) * 1000)::bigint".to_owned());
            statements.len() - 1
        });
        let read_ahead = self.pipeline && mode == TxMode::Write;
        let ahead_at = read_ahead.then(|| {
            statements.push(format!("EXECUTE {}", pipeline::AHEAD));
            statements.len() - 1
        });
        let stale = self.queued.clear();
        self.forget(stale);
        let mut preparing = Vec::new();
        let planned = match reads {
            Some(reads) if read_ahead => self.plan(reads, &mut statements, &mut preparing),
            _ => Planned::default(),
        };
        self.ahead = Ahead::default();
        let started = self.start(&statements.join("; ")).and_then(|messages| {
            let results = pipeline::results(&messages);
            if mode == TxMode::Write {
                self.writer_row_held(&results)?;
            }
            let now = self.started_at(&results, clock_at)?;
            let mut ahead = match ahead_at.and_then(|i| results.get(i)) {
                Some(rows) => Ahead::parse(rows)?,
                None => Ahead::default(),
            };
            planned.fill(&mut ahead, &results)?;
            Ok((now, ahead))
        });
        match started {
            Ok((now, ahead)) => {
                self.now = now;
                self.ahead = ahead;
                self.tx = Some(mode);
                self.notify = None;
                Ok(())
            }
            Err(error) => {
                self.forget(preparing);
                let _ = self.client.batch_execute("ROLLBACK");
                Err(error)
            }
        }
    }

    fn read_ahead(&mut self, reads: ReadAhead) {
        self.reads = self.command_reads.then_some(reads);
    }

    fn clock(&mut self) -> Result<Option<Timestamp>, StoreError> {
        Ok(if self.server_clock { self.now } else { None })
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.tx = None;
        self.ahead = Ahead::default();
        // The queued writes and the notification ride in the same round
        // trip, and PostgreSQL delivers the notification only if the
        // commit happens.
        let notify = match self.notify.take() {
            Some(id) if self.notify_commits => Some(format!("NOTIFY {}, '{id}'", listen::CHANNEL)),
            _ => None,
        };
        let mut tail: Vec<&str> = notify.iter().map(String::as_str).collect();
        tail.push("COMMIT");
        let (sql, preparing) = self.queued.take_with(&tail);
        let committed = self.client.batch_execute(&sql);
        if committed.is_err() {
            // A queued write failed: the statements after it, COMMIT
            // included, were skipped, and the transaction is still open
            // (aborted). End it here, since the engine's rollback sees no
            // open transaction after a commit.
            let _ = self.client.batch_execute("ROLLBACK");
        }
        self.sent(committed, preparing)
    }

    fn rollback(&mut self) -> Result<(), StoreError> {
        self.notify = None;
        let unsent = self.queued.clear();
        self.forget(unsent);
        self.ahead = Ahead::default();
        if self.tx.take().is_none() {
            return Ok(());
        }
        self.client
            .batch_execute("ROLLBACK")
            .map_err(|e| pg_error(e, &self.location))
    }

    fn thread(&mut self, thread_id: &str) -> Result<Option<ThreadState>, StoreError> {
        if let Some(state) = self.ahead.thread(thread_id) {
            return Ok(state);
        }
        let (sql, params) = thread_statement(thread_id);
        Ok(self.thread_states(&sql, &params)?.pop())
    }

    fn threads(&mut self, query: &ThreadQuery) -> Result<Vec<ThreadState>, StoreError> {
        let states = match self.ahead.threads(query) {
            Some(states) => states,
            None => {
                let (sql, params) = threads_statement(query);
                self.thread_states(&sql, &params)?
            }
        };
        Ok(states
            .into_iter()
            .map(|state| query.keep_lease_of(state))
            .collect())
    }

    fn insert_thread(&mut self, t: &Thread) -> Result<(), StoreError> {
        self.write_thread(
            "INSERT INTO threads (thread_id, run_id, task_id, subject, created_by, assigned_to, status,
                 priority, attempts, max_attempts, latest_message_id, last_event_id, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            t,
        )
    }

    fn update_thread(&mut self, t: &Thread) -> Result<(), StoreError> {
        // The statement itself refuses a thread that does not exist or
        // whose fixed fields would change (only the changing ones are SET,
        // as in the SQLite store, which shares the rule), so that the check
        // holds when the write is queued and its count is never read: the
        // refusal's text cast to an integer fails the transaction before
        // its COMMIT (a cast of a row count's outcome, which the planner
        // cannot fold early).
        self.write_thread(
            "WITH updated AS (
                 UPDATE threads SET status = $7, attempts = $9, latest_message_id = $11,
                     last_event_id = $12, updated_at = $14
                 WHERE thread_id = $1 AND run_id IS NOT DISTINCT FROM $2
                     AND task_id IS NOT DISTINCT FROM $3 AND subject = $4 AND created_by = $5
                     AND assigned_to = $6 AND priority = $8 AND max_attempts = $10
                     AND created_at = $13
                 RETURNING 1)
             SELECT (CASE count(*) WHEN 1 THEN '1' ELSE 'thread ' || $1
                 || ' does not exist, or the update would change a field fixed when it was opened'
                 END)::int
             FROM updated",
            t,
        )
    }

    fn put_lease(&mut self, l: &Lease) -> Result<(), StoreError> {
        self.write(
            "INSERT INTO leases (thread_id, agent, lease_token, attempt, lease_seconds, claimed_at,
                 expires_at, released_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (thread_id) DO UPDATE SET agent = excluded.agent,
                 lease_token = excluded.lease_token, attempt = excluded.attempt,
                 lease_seconds = excluded.lease_seconds, claimed_at = excluded.claimed_at,
                 expires_at = excluded.expires_at, released_at = excluded.released_at",
            vec![
                Lit::from(&l.thread_id),
                Lit::from(&l.agent),
                Lit::from(int(l.lease_token)),
                Lit::from(i64::from(l.attempt)),
                Lit::from(int(l.lease_seconds)),
                Lit::from(l.claimed_at.to_string()),
                Lit::from(l.expires_at.to_string()),
                Lit::from(l.released_at.map(|t| t.to_string())),
            ],
        )
    }

    fn lapsed_leases(&mut self, now: Timestamp, limit: usize) -> Result<Vec<Lease>, StoreError> {
        if self.ahead.none_lapsed_at(&now.to_string()) {
            return Ok(Vec::new());
        }
        self.leases_around(now, limit, true)
    }

    fn next_lease_expiry(&mut self) -> Result<Option<Timestamp>, StoreError> {
        let text = match self.ahead.earliest_expiry.clone() {
            Some(text) => text,
            None => {
                let row = self.query_opt(
                    "SELECT min(expires_at) FROM leases WHERE released_at IS NULL",
                    &[],
                )?;
                match row {
                    Some(row) => rows::get(&row, 0)?,
                    None => None,
                }
            }
        };
        text.map(|t| rows::parse_time(&t)).transpose()
    }

    fn insert_message(&mut self, m: &Message) -> Result<(), StoreError> {
        self.write(
            "INSERT INTO messages (message_id, thread_id, event_id, from_agent, to_agent, kind, summary,
                 body, payload_json, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            vec![
                Lit::from(&m.message_id),
                Lit::from(&m.thread_id),
                Lit::from(int(m.event_id)),
                Lit::from(&m.from_agent),
                Lit::from(&m.to_agent),
                Lit::from(m.kind.as_str()),
                Lit::from(&m.summary),
                Lit::Bytes(m.body.as_bytes().to_vec()),
                Lit::from(json_text(&m.payload)),
                Lit::from(m.created_at.to_string()),
            ],
        )?;
        self.insert_artifacts(m)
    }

    fn message(&mut self, message_id: &str) -> Result<Option<Message>, StoreError> {
        let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.message_id = $1");
        let mut params = Params::new();
        push(&mut params, message_id.to_owned());
        let messages = self.messages_of(&sql, &params)?;
        Ok(self.with_artifacts(messages)?.pop())
    }

    fn messages(&mut self, query: &MessageQuery) -> Result<Vec<Message>, StoreError> {
        let mut params = Params::new();
        let mut clauses = vec![
            format!(
                "m.thread_id = {}",
                push(&mut params, query.thread_id.clone())
            ),
            format!("m.event_id > {}", push(&mut params, int(query.after_event))),
        ];
        if let Some(from) = &query.from_agent {
            clauses.push(format!(
                "m.from_agent = {}",
                push(&mut params, from.clone())
            ));
        }
        let order = if query.newest_first { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE {} ORDER BY m.event_id {order} LIMIT {}",
            clauses.join(" AND "),
            Limit(query.limit)
        );
        let messages = self.messages_of(&sql, &params)?;
        self.with_artifacts(messages)
    }

    fn latest_event_id(&mut self) -> Result<EventId, StoreError> {
        if let Some(id) = self.ahead.latest_event_id {
            return Ok(id);
        }
        // inbox's and orch's events share one sequence; each max is one
        // step down a primary key's right edge.
        let row = self.query_opt(
            "SELECT greatest(coalesce((SELECT max(event_id) FROM events), 0),
                             coalesce((SELECT max(event_id) FROM orch_events), 0))",
            &[],
        )?;
        match row {
            Some(row) => rows::id(&row, 0),
            None => Ok(0),
        }
    }

    fn insert_event(&mut self, e: &Event) -> Result<(), StoreError> {
        self.wrote_event(e.event_id);
        self.write(
            "INSERT INTO events (event_id, thread_id, run_id, task_id, event_type, source, message_id,
                 message_kind, status, summary, payload_json, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            vec![
                Lit::from(int(e.event_id)),
                Lit::from(&e.thread_id),
                Lit::from(e.run_id.as_deref()),
                Lit::from(e.task_id.as_deref()),
                Lit::from(e.event_type.as_str()),
                Lit::from(&e.source),
                Lit::from(e.message_id.as_deref()),
                Lit::from(e.message_kind.map(|k| k.as_str())),
                Lit::from(e.status.as_str()),
                Lit::from(&e.summary),
                Lit::from(json_text(&e.payload)),
                Lit::from(e.created_at.to_string()),
            ],
        )
    }

    fn events(&mut self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let mut params = Params::new();
        let (clauses, join) = event_filters(query, &mut params);
        // With the agent filter, walk the events after the cursor and look
        // each thread up by its key (see the SQLite store).
        let join = if join {
            "JOIN threads t ON t.thread_id = e.thread_id"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events e {join} WHERE {} ORDER BY e.event_id LIMIT {}",
            clauses.join(" AND "),
            Limit(query.limit)
        );
        self.query_params(&sql, &params)?
            .iter()
            .map(rows::event)
            .collect()
    }

    fn read_cursor(
        &mut self,
        thread_id: &str,
        agent: &str,
    ) -> Result<Option<ReadCursor>, StoreError> {
        let row = self.query_opt(
            "SELECT thread_id, agent, last_read_message_id, last_read_event_id, last_read_at
             FROM thread_reads WHERE thread_id = $1 AND agent = $2",
            &[&thread_id, &agent],
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        let at: String = rows::get(&row, 4)?;
        Ok(Some(ReadCursor {
            thread_id: rows::get(&row, 0)?,
            agent: rows::get(&row, 1)?,
            last_read_message_id: rows::get(&row, 2)?,
            last_read_event_id: rows::id(&row, 3)?,
            last_read_at: rows::parse_time(&at)?,
        }))
    }

    fn put_read_cursor(&mut self, c: &ReadCursor) -> Result<(), StoreError> {
        self.write(
            "INSERT INTO thread_reads (thread_id, agent, last_read_message_id, last_read_event_id, last_read_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (thread_id, agent) DO UPDATE SET
                 last_read_message_id = excluded.last_read_message_id,
                 last_read_event_id = excluded.last_read_event_id,
                 last_read_at = excluded.last_read_at",
            vec![
                Lit::from(&c.thread_id),
                Lit::from(&c.agent),
                Lit::from(&c.last_read_message_id),
                Lit::from(int(c.last_read_event_id)),
                Lit::from(c.last_read_at.to_string()),
            ],
        )
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
        self.leases_around(now, limit, false)
    }

    fn last_event_by(&mut self, source: &str) -> Result<Option<Event>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events e WHERE e.source = $1 ORDER BY e.event_id DESC LIMIT 1"
        );
        self.query_opt(&sql, &[&source])?
            .as_ref()
            .map(rows::event)
            .transpose()
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
        let row = self.query_opt("SELECT count(*) FROM messages", &[])?;
        match row {
            Some(row) => rows::id(&row, 0),
            None => Ok(0),
        }
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
        self.wrote_event(event.event_id);
        self.orch_insert_event(event)
    }

    fn orch_events(&mut self, query: &OrchEventQuery) -> Result<Vec<OrchEvent>, StoreError> {
        self.orch_events_after(query)
    }
}
