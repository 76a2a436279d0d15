//! Peer: PostgreSQL as a job queue: a `FOR UPDATE SKIP LOCKED` claim with a
//! lease column, and LISTEN/NOTIFY to wake waiters.
//!
//! How it is modelled (issue 4): `tasks(id, task_id, body, status, owner,
//! lease_until)` with a partial index on pending rows. A send is one
//! statement that inserts the row and calls `pg_notify`. A worker claims
//! with `UPDATE ... WHERE id = (SELECT id ... WHERE status = 'pending' ORDER
//! BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`, setting a 900 s lease;
//! when no pending row is left it tries the same on rows whose lease lapsed.
//! Done is `UPDATE ... SET status = 'done' WHERE id = $1 AND owner = $2`
//! (fenced by owner). Two agents talk through `msgs`: post inserts a row
//! and notifies the other agent's channel in one statement; wait is
//! `LISTEN` and a blocking read of the next notification, then a `SELECT` of
//! the message it names. Sessions use `synchronous_commit = off` for
//! "normal" durability and `on` for "full" (the cluster keeps `fsync=on`).
//!
//! What it does not do: attempt limits, priorities, retention, or
//! connection pooling (one connection per client).
//!
//! Two variants keep an event log besides (`log_events`, one row per claim
//! and per done) whose ids become visible in increasing order, as inbox's
//! must: each commit holds the one row of `log_counter` from taking its id
//! to its end. [`Log::ReadByClient`] reads the id in a first round trip
//! (`BEGIN`, the claim or done, the counter's lock and value) and writes the
//! event with `COMMIT` in a second, as an engine that decides in the client
//! must at least; [`Log::GivenInServer`] takes the id, writes the event and
//! commits in the claim's or done's own statement.

use std::time::Duration;

use anyhow::{Context, Result};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};

use super::{Claimed, Durability, Endpoint, Queue, Role, Task};

/// Drops and recreates the tables.
pub(crate) fn prepare(conninfo: &str) -> Result<()> {
    let mut client = connect(conninfo, Durability::Full)?;
    client
        .batch_execute(
            "DROP TABLE IF EXISTS tasks, msgs, thread_messages, log_counter, log_events;
             CREATE TABLE log_counter (id int PRIMARY KEY, last bigint NOT NULL);
             INSERT INTO log_counter VALUES (1, 0);
             CREATE TABLE log_events (
                 id      bigint PRIMARY KEY,
                 task    bigint NOT NULL,
                 kind    text NOT NULL
             );
             CREATE TABLE tasks (
                 id          bigserial PRIMARY KEY,
                 task_id     text NOT NULL,
                 body        text NOT NULL,
                 status      text NOT NULL DEFAULT 'pending',
                 owner       text,
                 lease_until timestamptz,
                 created_at  timestamptz NOT NULL DEFAULT now()
             );
             CREATE INDEX tasks_pending ON tasks (id) WHERE status = 'pending';
             CREATE INDEX tasks_leased ON tasks (lease_until) WHERE status = 'claimed';
             CREATE TABLE msgs (
                 id       bigserial PRIMARY KEY,
                 to_agent text NOT NULL,
                 body     text NOT NULL
             );",
        )
        .context("cannot create the PostgreSQL tables")
}

/// One session with the durability's `synchronous_commit`.
pub(crate) fn connect(conninfo: &str, durability: Durability) -> Result<Client> {
    let mut client = Client::connect(conninfo, NoTls)
        .with_context(|| format!("cannot connect to PostgreSQL ({conninfo})"))?;
    let setting = match durability {
        Durability::Normal => "off",
        Durability::Full => "on",
    };
    client.batch_execute(&format!("SET synchronous_commit = {setting}"))?;
    Ok(client)
}

/// Whether and how claims and dones also append to an ordered event log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Log {
    /// No log: the plain queue.
    None,
    /// The id is read by the client before the event is written.
    ReadByClient,
    /// The id is taken and the event written inside the one statement.
    GivenInServer,
}

/// A producer's or worker's session.
pub(crate) struct PgQueue {
    client: Client,
    owner: String,
    log: Log,
}

impl PgQueue {
    /// Connects as worker (or producer) `worker`.
    pub(crate) fn open(
        conninfo: &str,
        durability: Durability,
        worker: usize,
        log: Log,
    ) -> Result<PgQueue> {
        Ok(PgQueue {
            client: connect(conninfo, durability)?,
            owner: format!("worker-{worker}"),
            log,
        })
    }

    /// Runs `change` (an `UPDATE ... RETURNING id, task_id` of at most one
    /// task, whose text names no parameter) with the log's event `kind`.
    fn logged(&mut self, change: &str, kind: &str) -> Result<Option<(i64, String)>> {
        match self.log {
            Log::None => unreachable_log(),
            Log::GivenInServer => {
                let sql = format!(
                    "WITH c AS ({change}),
                          n AS (UPDATE log_counter SET last = last + 1
                                WHERE id = 1 AND EXISTS (SELECT 1 FROM c) RETURNING last),
                          e AS (INSERT INTO log_events (id, task, kind)
                                SELECT n.last, c.id, '{kind}' FROM n, c)
                     SELECT id, task_id FROM c"
                );
                let row = self.client.query_opt(&sql, &[])?;
                Ok(row.map(|row| (row.get(0), row.get(1))))
            }
            Log::ReadByClient => {
                let sql = format!(
                    "BEGIN; {change}; SELECT last FROM log_counter WHERE id = 1 FOR UPDATE"
                );
                let messages = self.client.simple_query(&sql)?;
                let rows: Vec<_> = messages
                    .iter()
                    .filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(row) => Some(row),
                        _ => None,
                    })
                    .collect();
                let [task, counter] = rows[..] else {
                    self.client.batch_execute("ROLLBACK")?;
                    return Ok(None);
                };
                let id: i64 = task.get(0).unwrap_or("").parse()?;
                let task_id = task.get(1).unwrap_or("").to_owned();
                let next = counter.get(0).unwrap_or("").parse::<i64>()? + 1;
                self.client.batch_execute(&format!(
                    "UPDATE log_counter SET last = {next} WHERE id = 1;
                     INSERT INTO log_events (id, task, kind) VALUES ({next}, {id}, '{kind}');
                     COMMIT"
                ))?;
                Ok(Some((id, task_id)))
            }
        }
    }
}

/// Only [`PgQueue::logged`]'s callers know the log is on.
fn unreachable_log() -> Result<Option<(i64, String)>> {
    anyhow::bail!("no event log in this variant")
}

/// The claim statement: `$1` owner; `{filter}` picks the candidates.
fn claim_sql(filter: &str) -> String {
    format!(
        "UPDATE tasks SET status = 'claimed', owner = $1, lease_until = now() + interval '900 seconds'
         WHERE id = (SELECT id FROM tasks WHERE {filter} ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
         RETURNING id, task_id"
    )
}

impl Queue for PgQueue {
    fn send(&mut self, producer: usize, seq: u64) -> Result<()> {
        let line = inbox_bench::files::task_line("lead", "worker", producer, seq);
        let task = inbox_bench::files::task_id(producer, seq);
        self.client
            .execute(
                "WITH t AS (INSERT INTO tasks (task_id, body) VALUES ($1, $2) RETURNING id)
                 SELECT pg_notify('tasks', id::text) FROM t",
                &[&task, &line],
            )
            .context("INSERT failed")
            .map(drop)
    }

    fn claim(&mut self) -> Result<Claimed> {
        if self.log != Log::None {
            // Owners are `worker-N`: safe to write into the statement.
            let owner = &self.owner;
            let change = claim_sql("status = 'pending'").replace("$1", &format!("'{owner}'"));
            let claimed = self.logged(&change, "claimed")?;
            return Ok(Claimed {
                task: claimed.map(|(id, task_id)| Task {
                    handle: id.to_string(),
                    id: task_id,
                    token: 0,
                }),
                conflicts: 0,
            });
        }
        let mut row = self
            .client
            .query_opt(&claim_sql("status = 'pending'"), &[&self.owner])
            .context("claim failed")?;
        if row.is_none() {
            row = self
                .client
                .query_opt(
                    &claim_sql("status = 'claimed' AND lease_until < now()"),
                    &[&self.owner],
                )
                .context("reclaim failed")?;
        }
        Ok(Claimed {
            task: row.map(|row| Task {
                handle: row.get::<_, i64>(0).to_string(),
                id: row.get(1),
                token: 0,
            }),
            conflicts: 0,
        })
    }

    fn done(&mut self, task: &Task) -> Result<()> {
        let id: i64 = task.handle.parse().context("bad row id")?;
        if self.log != Log::None {
            let owner = &self.owner;
            let change = format!(
                "UPDATE tasks SET status = 'done', lease_until = NULL
                 WHERE id = {id} AND owner = '{owner}' RETURNING id, task_id"
            );
            return self.logged(&change, "done").map(drop);
        }
        self.client
            .execute(
                "UPDATE tasks SET status = 'done', lease_until = NULL WHERE id = $1 AND owner = $2",
                &[&id, &self.owner],
            )
            .context("done failed")
            .map(drop)
    }
}

/// An agent listening on its own channel.
pub(crate) struct PgEndpoint {
    client: Client,
    role: Role,
}

impl PgEndpoint {
    /// Connects as `role` and starts listening.
    pub(crate) fn open(conninfo: &str, durability: Durability, role: Role) -> Result<PgEndpoint> {
        let mut client = connect(conninfo, durability)?;
        client.batch_execute(&format!("LISTEN to_{}", role.me()))?;
        Ok(PgEndpoint { client, role })
    }
}

impl Endpoint for PgEndpoint {
    fn post(&mut self, seq: u64) -> Result<()> {
        let to = self.role.other();
        let line = inbox_bench::files::task_line(self.role.me(), to, 0, seq);
        self.client
            .execute(
                "WITH m AS (INSERT INTO msgs (to_agent, body) VALUES ($1, $2) RETURNING id)
                 SELECT pg_notify('to_' || $1, id::text) FROM m",
                &[&to, &line],
            )
            .context("post failed")
            .map(drop)
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        let note = self
            .client
            .notifications()
            .timeout_iter(timeout)
            .next()
            .context("waiting for a notification failed")?;
        let Some(note) = note else {
            return Ok(false);
        };
        let id: i64 = note.payload().parse().context("bad notification payload")?;
        self.client
            .query_one("SELECT body FROM msgs WHERE id = $1", &[&id])
            .context("reading the notified message failed")?;
        Ok(true)
    }
}
