//! Reading an inbox database file from outside, the way an auditor would,
//! and checking what must hold in it whatever processes did or died doing.
//!
//! [`Snapshot`] reads every table through a read-only connection (which
//! never checkpoints or writes). [`check_storage`] asks SQLite whether the
//! file is sound; [`check_state`] checks the invariants of one snapshot;
//! [`check_history`] checks what must hold between an earlier snapshot and a
//! later one (append-only history, finished threads frozen). This module
//! must never write to a database, and must never reuse the engine's code to
//! decide what is right: it restates the rules independently, from
//! `docs/state-machine.md`.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, Row};

/// One broken invariant, with the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant, in words.
    pub invariant: &'static str,
    /// What was found.
    pub detail: String,
}

impl Violation {
    fn new(invariant: &'static str, detail: impl Into<String>) -> Violation {
        Violation {
            invariant,
            detail: detail.into(),
        }
    }
}

/// The statuses a thread with a live lease may have.
pub const ACTIVE_STATUSES: &[&str] = &["claimed", "in_progress", "blocked"];
/// The statuses from which nothing changes any more.
pub const TERMINAL_STATUSES: &[&str] = &["done", "failed", "cancelled"];

/// A row of `threads`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadRow {
    /// `thread_id`.
    pub thread_id: String,
    /// `status` as stored (not the effective status readers see).
    pub status: String,
    /// `created_by`.
    pub created_by: String,
    /// `assigned_to`.
    pub assigned_to: String,
    /// `subject`.
    pub subject: String,
    /// `attempts`.
    pub attempts: i64,
    /// `max_attempts`.
    pub max_attempts: i64,
    /// `latest_message_id`.
    pub latest_message_id: Option<String>,
    /// `last_event_id`.
    pub last_event_id: i64,
    /// Every column, for byte-for-byte comparisons.
    pub raw: String,
}

impl ThreadRow {
    /// Whether the thread has finished for good.
    pub fn is_terminal(&self) -> bool {
        TERMINAL_STATUSES.contains(&self.status.as_str())
    }
}

/// A row of `leases` (the latest lease of a thread).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    /// `thread_id`.
    pub thread_id: String,
    /// `agent`.
    pub agent: String,
    /// `lease_token`.
    pub lease_token: i64,
    /// `attempt`.
    pub attempt: i64,
    /// `claimed_at`.
    pub claimed_at: String,
    /// `expires_at`.
    pub expires_at: String,
    /// `released_at`.
    pub released_at: Option<String>,
    /// Every column.
    pub raw: String,
}

impl LeaseRow {
    /// Live at `now` (an RFC 3339 timestamp with milliseconds, which sorts
    /// like the instant it names): not released and not yet expired.
    pub fn is_live(&self, now: &str) -> bool {
        self.released_at.is_none() && self.expires_at.as_str() > now
    }
}

/// A row of `messages`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRow {
    /// `event_id`: the event that wrote it.
    pub event_id: i64,
    /// `message_id`.
    pub message_id: String,
    /// `thread_id`.
    pub thread_id: String,
    /// `from_agent`.
    pub from_agent: String,
    /// `kind`.
    pub kind: String,
    /// `summary`.
    pub summary: String,
    /// `body`.
    pub body: String,
    /// `payload_json`.
    pub payload_json: String,
    /// Every column.
    pub raw: String,
}

/// A row of `events`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// `event_id`.
    pub event_id: i64,
    /// `thread_id`.
    pub thread_id: String,
    /// `event_type`.
    pub event_type: String,
    /// `source`.
    pub source: String,
    /// `message_id`.
    pub message_id: Option<String>,
    /// `message_kind`.
    pub message_kind: Option<String>,
    /// `status`: the thread's status right after the event.
    pub status: String,
    /// Every column.
    pub raw: String,
}

/// A row of `artifacts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactRow {
    /// `artifact_id`.
    pub artifact_id: String,
    /// `message_id`.
    pub message_id: String,
    /// `thread_id`.
    pub thread_id: String,
    /// `path`.
    pub path: String,
    /// `absolute_path`.
    pub absolute_path: Option<String>,
    /// `size_bytes`.
    pub size_bytes: Option<i64>,
    /// `sha256`.
    pub sha256: Option<String>,
    /// Every column.
    pub raw: String,
}

/// A row of `thread_reads` (a read cursor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRow {
    /// `thread_id`.
    pub thread_id: String,
    /// `agent`.
    pub agent: String,
    /// `last_read_message_id`.
    pub last_read_message_id: String,
    /// `last_read_event_id`.
    pub last_read_event_id: i64,
}

/// Everything in one database file at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// By thread id.
    pub threads: BTreeMap<String, ThreadRow>,
    /// By thread id.
    pub leases: BTreeMap<String, LeaseRow>,
    /// By event id.
    pub messages: BTreeMap<i64, MessageRow>,
    /// In id order.
    pub events: Vec<EventRow>,
    /// By artifact id.
    pub artifacts: BTreeMap<String, ArtifactRow>,
    /// By (thread id, agent).
    pub reads: BTreeMap<(String, String), ReadRow>,
}

/// Opens `path` read-only: this connection never writes, checkpoints or
/// creates anything.
pub fn open_read_only(path: &Path) -> Result<Connection, String> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open {} read-only: {e}", path.display()))
}

fn raw(row: &Row<'_>) -> rusqlite::Result<String> {
    let mut out = String::new();
    for i in 0..row.as_ref().column_count() {
        let value: Value = row.get(i)?;
        if i > 0 {
            out.push('\u{1f}');
        }
        out.push_str(&format!("{value:?}"));
    }
    Ok(out)
}

fn all<T>(
    conn: &Connection,
    sql: &str,
    map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, String> {
    let mut statement = conn.prepare(sql).map_err(|e| format!("{sql}: {e}"))?;
    let rows = statement
        .query_map([], map)
        .map_err(|e| format!("{sql}: {e}"))?;
    rows.collect::<rusqlite::Result<Vec<T>>>()
        .map_err(|e| format!("{sql}: {e}"))
}

impl Snapshot {
    /// Reads every table of `conn` in one read transaction.
    pub fn read(conn: &Connection) -> Result<Snapshot, String> {
        conn.execute_batch("BEGIN")
            .map_err(|e| format!("BEGIN: {e}"))?;
        let snapshot = Snapshot::read_tables(conn);
        let _ = conn.execute_batch("COMMIT");
        snapshot
    }

    fn read_tables(conn: &Connection) -> Result<Snapshot, String> {
        let threads = all(conn, "SELECT * FROM threads", |row| {
            Ok(ThreadRow {
                thread_id: row.get("thread_id")?,
                status: row.get("status")?,
                created_by: row.get("created_by")?,
                assigned_to: row.get("assigned_to")?,
                subject: row.get("subject")?,
                attempts: row.get("attempts")?,
                max_attempts: row.get("max_attempts")?,
                latest_message_id: row.get("latest_message_id")?,
                last_event_id: row.get("last_event_id")?,
                raw: raw(row)?,
            })
        })?;
        let leases = all(conn, "SELECT * FROM leases", |row| {
            Ok(LeaseRow {
                thread_id: row.get("thread_id")?,
                agent: row.get("agent")?,
                lease_token: row.get("lease_token")?,
                attempt: row.get("attempt")?,
                claimed_at: row.get("claimed_at")?,
                expires_at: row.get("expires_at")?,
                released_at: row.get("released_at")?,
                raw: raw(row)?,
            })
        })?;
        let messages = all(conn, "SELECT * FROM messages", |row| {
            Ok(MessageRow {
                event_id: row.get("event_id")?,
                message_id: row.get("message_id")?,
                thread_id: row.get("thread_id")?,
                from_agent: row.get("from_agent")?,
                kind: row.get("kind")?,
                summary: row.get("summary")?,
                body: row.get("body")?,
                payload_json: row.get("payload_json")?,
                raw: raw(row)?,
            })
        })?;
        let events = all(conn, "SELECT * FROM events ORDER BY event_id", |row| {
            Ok(EventRow {
                event_id: row.get("event_id")?,
                thread_id: row.get("thread_id")?,
                event_type: row.get("event_type")?,
                source: row.get("source")?,
                message_id: row.get("message_id")?,
                message_kind: row.get("message_kind")?,
                status: row.get("status")?,
                raw: raw(row)?,
            })
        })?;
        let artifacts = all(conn, "SELECT * FROM artifacts", |row| {
            Ok(ArtifactRow {
                artifact_id: row.get("artifact_id")?,
                message_id: row.get("message_id")?,
                thread_id: row.get("thread_id")?,
                path: row.get("path")?,
                absolute_path: row.get("absolute_path")?,
                size_bytes: row.get("size_bytes")?,
                sha256: row.get("sha256")?,
                raw: raw(row)?,
            })
        })?;
        let reads = all(conn, "SELECT * FROM thread_reads", |row| {
            Ok(ReadRow {
                thread_id: row.get("thread_id")?,
                agent: row.get("agent")?,
                last_read_message_id: row.get("last_read_message_id")?,
                last_read_event_id: row.get("last_read_event_id")?,
            })
        })?;
        Ok(Snapshot {
            threads: threads
                .into_iter()
                .map(|t| (t.thread_id.clone(), t))
                .collect(),
            leases: leases
                .into_iter()
                .map(|l| (l.thread_id.clone(), l))
                .collect(),
            messages: messages.into_iter().map(|m| (m.event_id, m)).collect(),
            events,
            artifacts: artifacts
                .into_iter()
                .map(|a| (a.artifact_id.clone(), a))
                .collect(),
            reads: reads
                .into_iter()
                .map(|r| ((r.thread_id.clone(), r.agent.clone()), r))
                .collect(),
        })
    }

    /// The event with this id.
    pub fn event(&self, event_id: i64) -> Option<&EventRow> {
        self.events
            .binary_search_by_key(&event_id, |e| e.event_id)
            .ok()
            .and_then(|i| self.events.get(i))
    }

    /// The newest event id (0 when there is none).
    pub fn max_event_id(&self) -> i64 {
        self.events.last().map_or(0, |e| e.event_id)
    }

    /// The messages of one thread, oldest first.
    pub fn thread_messages(&self, thread_id: &str) -> Vec<&MessageRow> {
        self.messages
            .values()
            .filter(|m| m.thread_id == thread_id)
            .collect()
    }

    /// How many messages each thread has.
    pub fn message_counts(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for m in self.messages.values() {
            *counts.entry(m.thread_id.as_str()).or_insert(0) += 1;
        }
        counts
    }
}

/// Whether SQLite finds the file sound: `PRAGMA integrity_check` says `ok`
/// and `PRAGMA foreign_key_check` finds nothing.
pub fn check_storage(conn: &Connection) -> Vec<Violation> {
    let mut out = Vec::new();
    match all(conn, "PRAGMA integrity_check", |row| {
        row.get::<_, String>(0)
    }) {
        Ok(lines) if lines == ["ok"] => {}
        Ok(lines) => out.push(Violation::new(
            "PRAGMA integrity_check is ok",
            lines.join("\n"),
        )),
        Err(e) => out.push(Violation::new("PRAGMA integrity_check is ok", e)),
    }
    match all(conn, "PRAGMA foreign_key_check", raw) {
        Ok(rows) if rows.is_empty() => {}
        Ok(rows) => out.push(Violation::new(
            "PRAGMA foreign_key_check is empty",
            rows.join("\n"),
        )),
        Err(e) => out.push(Violation::new("PRAGMA foreign_key_check is empty", e)),
    }
    out
}

/// The invariants of one snapshot taken at `now` (see the module docs for
/// where they come from).
pub fn check_state(s: &Snapshot, now: &str) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v =
        |invariant: &'static str, detail: String| out.push(Violation::new(invariant, detail));

    // Events: 1, 2, 3, ... in commit order, each about a thread that exists.
    if let Some((i, e)) = s
        .events
        .iter()
        .enumerate()
        .find(|(i, e)| e.event_id != *i as i64 + 1)
    {
        v(
            "event ids are 1..=max with no gaps",
            format!(
                "position {i} holds event {} ({} events)",
                e.event_id,
                s.events.len()
            ),
        );
    }
    let message_ids: BTreeMap<&str, &MessageRow> = s
        .messages
        .values()
        .map(|m| (m.message_id.as_str(), m))
        .collect();
    for e in &s.events {
        if !s.threads.contains_key(&e.thread_id) {
            v(
                "every message and event belongs to a thread that exists",
                format!("event {} names missing thread {}", e.event_id, e.thread_id),
            );
        }
        if let Some(message_id) = &e.message_id {
            match s.messages.get(&e.event_id) {
                Some(m)
                    if &m.message_id == message_id
                        && m.thread_id == e.thread_id
                        && Some(&m.kind) == e.message_kind.as_ref() => {}
                other => v(
                    "every message event has its message, whole",
                    format!(
                        "event {} names message {message_id}; found {other:?}",
                        e.event_id
                    ),
                ),
            }
        }
    }
    for m in s.messages.values() {
        if !s.threads.contains_key(&m.thread_id) {
            v(
                "every message and event belongs to a thread that exists",
                format!(
                    "message {} names missing thread {}",
                    m.message_id, m.thread_id
                ),
            );
        }
        match s.event(m.event_id) {
            Some(e)
                if e.message_id.as_deref() == Some(m.message_id.as_str())
                    && e.thread_id == m.thread_id => {}
            other => v(
                "every message has its event",
                format!(
                    "message {} (event {}); event found: {other:?}",
                    m.message_id, m.event_id
                ),
            ),
        }
    }
    for a in s.artifacts.values() {
        match message_ids.get(a.message_id.as_str()) {
            Some(m) if m.thread_id == a.thread_id => {}
            other => v(
                "every artifact belongs to a message of its thread",
                format!(
                    "artifact {} names message {}; found {other:?}",
                    a.artifact_id, a.message_id
                ),
            ),
        }
    }
    for r in s.reads.values() {
        match message_ids.get(r.last_read_message_id.as_str()) {
            Some(m) if m.thread_id == r.thread_id && m.event_id == r.last_read_event_id => {}
            other => v(
                "a read cursor points at a message of its thread",
                format!(
                    "cursor of {} on {}: {r:?}; message found: {other:?}",
                    r.agent, r.thread_id
                ),
            ),
        }
    }

    // Per thread: its messages and events, newest last.
    let mut newest_message: BTreeMap<&str, &MessageRow> = BTreeMap::new();
    for m in s.messages.values() {
        newest_message.insert(m.thread_id.as_str(), m);
    }
    let mut first_event: BTreeMap<&str, &EventRow> = BTreeMap::new();
    let mut last_event: BTreeMap<&str, &EventRow> = BTreeMap::new();
    for e in &s.events {
        first_event.entry(e.thread_id.as_str()).or_insert(e);
        last_event.insert(e.thread_id.as_str(), e);
    }

    for t in s.threads.values() {
        let id = t.thread_id.as_str();
        if !(0..=t.max_attempts).contains(&t.attempts) {
            v(
                "attempts never exceed max_attempts",
                format!("{id}: attempts {} of {}", t.attempts, t.max_attempts),
            );
        }
        match (s.leases.get(id), t.attempts) {
            (None, 0) => {}
            (None, n) => v(
                "every attempt has its lease, the latest one is kept",
                format!("{id}: {n} attempts but no lease row"),
            ),
            (Some(l), _) => {
                if l.attempt != t.attempts || l.lease_token != l.attempt {
                    v(
                        "the kept lease is the latest attempt, and tokens count claims",
                        format!("{id}: attempts {}, lease {l:?}", t.attempts),
                    );
                }
                if l.agent != t.assigned_to {
                    v(
                        "only the assignee holds a lease",
                        format!(
                            "{id}: assigned to {}, lease held by {}",
                            t.assigned_to, l.agent
                        ),
                    );
                }
                if l.is_live(now) && !ACTIVE_STATUSES.contains(&t.status.as_str()) {
                    v(
                        "at most one live lease per thread, only on claimed/in_progress/blocked threads",
                        format!("{id} is {} with a live lease at {now}: {l:?}", t.status),
                    );
                }
                if t.is_terminal() && l.released_at.is_none() {
                    v(
                        "a finished thread's lease is released",
                        format!("{id} is {} with lease {l:?}", t.status),
                    );
                }
            }
        }
        match newest_message.get(id) {
            Some(m) if t.latest_message_id.as_deref() == Some(m.message_id.as_str()) => {}
            other => v(
                "each thread's latest_message_id is its newest message",
                format!(
                    "{id}: latest_message_id {:?}, newest message {:?}",
                    t.latest_message_id,
                    other.map(|m| &m.message_id)
                ),
            ),
        }
        match (first_event.get(id), last_event.get(id)) {
            (Some(first), Some(last)) => {
                if first.event_type != "thread_created" {
                    v(
                        "each thread's first event is thread_created",
                        format!("{id}: first event {first:?}"),
                    );
                }
                if last.event_id != t.last_event_id || last.status != t.status {
                    v(
                        "each thread's last_event_id and status are those of its newest event",
                        format!(
                            "{id}: last_event_id {} status {}; newest event {} status {}",
                            t.last_event_id, t.status, last.event_id, last.status
                        ),
                    );
                }
            }
            _ => v(
                "each thread's first event is thread_created",
                format!("{id} has no event"),
            ),
        }
    }
    out
}

/// What must hold between an `earlier` snapshot and a `later` one of the
/// same database: history only grows, finished threads never change, lease
/// tokens and read cursors never go back.
pub fn check_history(earlier: &Snapshot, later: &Snapshot) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut v =
        |invariant: &'static str, detail: String| out.push(Violation::new(invariant, detail));

    if later.max_event_id() < earlier.max_event_id() {
        v(
            "event ids never decrease",
            format!(
                "max event id went from {} to {}",
                earlier.max_event_id(),
                later.max_event_id()
            ),
        );
    }
    for e in &earlier.events {
        match later.event(e.event_id) {
            Some(now) if now.raw == e.raw => {}
            now => v(
                "events are append-only",
                format!("event {} was {}; now {now:?}", e.event_id, e.raw),
            ),
        }
    }
    for (id, m) in &earlier.messages {
        match later.messages.get(id) {
            Some(now) if now.raw == m.raw => {}
            now => v(
                "messages are append-only",
                format!("message {} was {}; now {now:?}", m.message_id, m.raw),
            ),
        }
    }
    for (id, a) in &earlier.artifacts {
        match later.artifacts.get(id) {
            Some(now) if now.raw == a.raw => {}
            now => v(
                "artifacts are append-only",
                format!("artifact {id} was {}; now {now:?}", a.raw),
            ),
        }
    }
    let (counts_then, counts_now) = (earlier.message_counts(), later.message_counts());
    for (id, t) in &earlier.threads {
        let Some(now) = later.threads.get(id) else {
            v("threads are never deleted", format!("{id} disappeared"));
            continue;
        };
        let (lease_then, lease_now) = (earlier.leases.get(id), later.leases.get(id));
        if t.is_terminal() {
            let messages = (
                counts_then.get(id.as_str()).copied().unwrap_or(0),
                counts_now.get(id.as_str()).copied().unwrap_or(0),
            );
            if now.raw != t.raw
                || lease_then.map(|l| &l.raw) != lease_now.map(|l| &l.raw)
                || messages.0 != messages.1
            {
                v(
                    "a terminal thread never changes again",
                    format!(
                        "{id} was {}\n  lease {lease_then:?}, {} messages\nnow {}\n  lease {lease_now:?}, {} messages",
                        t.raw, messages.0, now.raw, messages.1
                    ),
                );
            }
        }
        let token = |l: Option<&LeaseRow>| l.map_or(0, |l| l.lease_token);
        if token(lease_now) < token(lease_then) {
            v(
                "lease tokens never decrease",
                format!(
                    "{id}: token {} then {}",
                    token(lease_then),
                    token(lease_now)
                ),
            );
        }
    }
    for (key, r) in &earlier.reads {
        match later.reads.get(key) {
            Some(now) if now.last_read_event_id >= r.last_read_event_id => {}
            now => v(
                "read cursors never move back",
                format!("{key:?} was {r:?}; now {now:?}"),
            ),
        }
    }
    out
}

/// The current time as the database writes it (RFC 3339, milliseconds, UTC).
pub fn now_text() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    inbox_engine::Timestamp::from_millis(millis).to_string()
}

/// Reads `path` and runs every single-snapshot check on it.
pub fn audit(path: &Path) -> Result<(Snapshot, Vec<Violation>), String> {
    let conn = open_read_only(path)?;
    let mut violations = check_storage(&conn);
    let now = now_text();
    let snapshot = Snapshot::read(&conn)?;
    violations.extend(check_state(&snapshot, &now));
    Ok((snapshot, violations))
}
