//! Fewer round trips per command: the writes a write transaction queues
//! ([`Queued`]) and what its `BEGIN` reads ahead ([`Ahead`]).
//!
//! The engine issues its writes without reading their results, so the
//! store need not wait for each: it queues each as `EXECUTE` of the
//! statement, prepared with SQL `PREPARE` in the same queue on its first
//! use in the session, with its parameters written as literals, and sends
//! the queue as one simple query before the next statement that reads, or
//! with `COMMIT`. Prepared rather than plain statements: a plain statement
//! is parsed and planned at every run, which measured slower than the
//! round trips it saves (docs/postgres.md). A `PREPARE` that a failed
//! queue may not have reached is forgotten, and its statement prepared
//! again under a new name. Every write transaction also starts by reading
//! the highest event id, the engine's settings and the lapsed leases;
//! `BEGIN`'s round trip carries those reads, one prepared statement (for
//! the leases, the earliest expiry of an unreleased lease, which answers
//! "none lapsed" whenever it is later than the time asked about), and the
//! store answers from them until the transaction writes. Both are exact
//! under the writer row: no other writer commits while it is held, so a
//! value read at `BEGIN` is the value a later statement would read, until
//! this transaction writes.
//!
//! This module renders literals and parses `BEGIN`'s answers; it must
//! never decide anything, and never render a value it cannot render
//! exactly (a text with a NUL is refused, as PostgreSQL refuses it).

use inbox_engine::store::{AgentQuery, ThreadQuery, ThreadState};
use inbox_engine::{Agent, EventId, StoreError};
use postgres::SimpleQueryMessage;

use super::rows;
use postgres::types::{ToSql, Type};

/// One parameter of a queued write, as an SQL literal.
#[derive(Clone)]
pub(super) enum Lit {
    Null,
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
}

impl From<&str> for Lit {
    fn from(text: &str) -> Lit {
        Lit::Text(text.to_owned())
    }
}

impl From<&String> for Lit {
    fn from(text: &String) -> Lit {
        Lit::Text(text.clone())
    }
}

impl From<String> for Lit {
    fn from(text: String) -> Lit {
        Lit::Text(text)
    }
}

impl From<i64> for Lit {
    fn from(n: i64) -> Lit {
        Lit::Int(n)
    }
}

impl<T: Into<Lit>> From<Option<T>> for Lit {
    fn from(value: Option<T>) -> Lit {
        value.map_or(Lit::Null, Into::into)
    }
}

impl Lit {
    /// The literal's SQL text. Strings are `E''` strings with every
    /// backslash and quote escaped, so they read the same whatever
    /// `standard_conforming_strings` says; bytes are hex.
    fn render(&self, out: &mut String) -> Result<(), StoreError> {
        match self {
            Lit::Null => out.push_str("NULL"),
            Lit::Int(n) => out.push_str(&n.to_string()),
            Lit::Text(text) => {
                if text.contains('\0') {
                    return Err(StoreError::other(
                        "a text value contains a NUL character, which PostgreSQL cannot store",
                    ));
                }
                out.push_str("E'");
                for c in text.chars() {
                    match c {
                        '\\' => out.push_str("\\\\"),
                        '\'' => out.push_str("''"),
                        c => out.push(c),
                    }
                }
                out.push('\'');
            }
            Lit::Bytes(bytes) => {
                out.push_str("E'\\\\x");
                for b in bytes {
                    out.push_str(&format!("{b:02x}"));
                }
                out.push('\'');
            }
        }
        Ok(())
    }
}

/// The parameters as bound values for a statement whose parameters have
/// `types`, for running it at once (without the queue): a NULL takes the
/// parameter's type.
pub(super) fn bound(params: Vec<Lit>, types: &[Type]) -> Vec<Box<dyn ToSql + Sync>> {
    params
        .into_iter()
        .zip(types)
        .map(|(param, ty)| -> Box<dyn ToSql + Sync> {
            match param {
                Lit::Text(text) => Box::new(text),
                Lit::Int(n) => Box::new(n),
                Lit::Bytes(bytes) => Box::new(bytes),
                Lit::Null if *ty == Type::INT8 => Box::new(None::<i64>),
                Lit::Null if *ty == Type::BYTEA => Box::new(None::<Vec<u8>>),
                Lit::Null => Box::new(None::<String>),
            }
        })
        .collect()
}

/// `EXECUTE name(literals)`: a queued run of a prepared statement.
pub(super) fn execute(name: &str, params: &[Lit]) -> Result<String, StoreError> {
    Ok(format!("EXECUTE {name}{}", arguments(params)?))
}

/// `(literal, literal, ...)`: the arguments of an `EXECUTE`.
pub(super) fn arguments(params: &[Lit]) -> Result<String, StoreError> {
    let mut sql = "(".to_owned();
    for (i, param) in params.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        param.render(&mut sql)?;
    }
    sql.push(')');
    Ok(sql)
}

/// The writes queued in the open transaction, in the engine's order.
#[derive(Default)]
pub(super) struct Queued {
    statements: Vec<String>,
    /// The texts of the statements the queue prepares: not prepared
    /// until it has run.
    preparing: Vec<String>,
}

impl Queued {
    pub(super) fn push(&mut self, statement: String) {
        self.statements.push(statement);
    }

    /// Queues `PREPARE name AS sql`, ahead of its first `EXECUTE`.
    pub(super) fn prepare(&mut self, name: &str, sql: &str) {
        self.statements.push(format!("PREPARE {name} AS {sql}"));
        self.preparing.push(sql.to_owned());
    }

    pub(super) fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    /// The queued statements as one simple query, followed by `tail`
    /// (`COMMIT`, say), and the texts it prepares; empties the queue.
    pub(super) fn take_with(&mut self, tail: &[&str]) -> (String, Vec<String>) {
        let mut all = std::mem::take(&mut self.statements);
        all.extend(tail.iter().map(|s| (*s).to_owned()));
        (all.join("; "), std::mem::take(&mut self.preparing))
    }

    /// Empties the queue; returns the texts it would have prepared.
    pub(super) fn clear(&mut self) -> Vec<String> {
        self.statements.clear();
        std::mem::take(&mut self.preparing)
    }
}

/// The reads a write transaction's `BEGIN` carried, valid until the
/// transaction writes.
#[derive(Default)]
pub(super) struct Ahead {
    /// The thread the engine said it would read first
    /// ([`inbox_engine::store::ReadAhead`]), by id.
    pub(super) thread: Option<(String, Option<ThreadState>)>,
    /// The agents it said it would look up, by their query.
    pub(super) agents: Option<(AgentQuery, Vec<Agent>)>,
    /// The threads it said it would list, by their query.
    pub(super) threads: Option<(ThreadQuery, Vec<ThreadState>)>,
    /// The highest event id.
    pub(super) latest_event_id: Option<EventId>,
    /// The engine's settings row as stored (`Some(None)`: there is none).
    pub(super) settings: Option<Option<String>>,
    /// The earliest `expires_at` of an unreleased lease, as stored
    /// (`Some(None)`: every lease is released).
    pub(super) earliest_expiry: Option<Option<String>>,
}

/// What a read ahead answered, if `asked` is the read it made.
fn answered<K, Q, V>(read: &Option<(K, V)>, asked: &Q) -> Option<V>
where
    K: PartialEq<Q>,
    Q: ?Sized,
    V: Clone,
{
    let (made, answer) = read.as_ref()?;
    (made == asked).then(|| answer.clone())
}

/// Where `begin`'s answers hold the reads the engine announced
/// ([`inbox_engine::store::ReadAhead`]): each read with the index of its
/// statement.
#[derive(Default)]
pub(super) struct Planned {
    pub(super) thread: Option<(String, usize)>,
    pub(super) agents: Option<(AgentQuery, usize)>,
    pub(super) threads: Option<(ThreadQuery, usize)>,
}

impl Planned {
    /// Decodes the planned reads' rows from `results` into `ahead`.
    pub(super) fn fill(
        self,
        ahead: &mut Ahead,
        results: &[Vec<Vec<Option<String>>>],
    ) -> Result<(), StoreError> {
        let rows = |at: usize| {
            results
                .get(at)
                .ok_or_else(|| StoreError::other("BEGIN did not answer a read ahead"))
        };
        if let Some((id, at)) = self.thread {
            let state = rows(at)?
                .first()
                .map(|row| rows::thread_state(row.as_slice()));
            ahead.thread = Some((id, state.transpose()?));
        }
        if let Some((query, at)) = self.agents {
            let agents = rows(at)?
                .iter()
                .map(|row| rows::record(row.as_slice()))
                .collect::<Result<_, _>>()?;
            ahead.agents = Some((query, agents));
        }
        if let Some((query, at)) = self.threads {
            let states = rows(at)?
                .iter()
                .map(|row| rows::thread_state(row.as_slice()))
                .collect::<Result<_, _>>()?;
            ahead.threads = Some((query, states));
        }
        Ok(())
    }
}

/// The name of the statement a write transaction's `BEGIN` reads ahead
/// with, prepared once per session from [`AHEAD_SQL`].
pub(super) const AHEAD: &str = "inbox_ahead";

/// What `BEGIN` reads ahead, one column each, in [`Ahead::parse`]'s order:
/// the highest event id, the settings row, the earliest expiry of an
/// unreleased lease (the store's own queries for them).
pub(super) const AHEAD_SQL: &str = "SELECT greatest(coalesce((SELECT max(event_id) FROM events), 0), \
     coalesce((SELECT max(event_id) FROM orch_events), 0)), \
     (SELECT value FROM settings WHERE key = 'engine'), \
     (SELECT min(expires_at) FROM leases WHERE released_at IS NULL)";

/// `BEGIN`'s answers, statement by statement: the rows each returned.
pub(super) fn results(messages: &[SimpleQueryMessage]) -> Vec<Vec<Vec<Option<String>>>> {
    let mut out = Vec::new();
    let mut rows = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => {
                rows.push(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                );
            }
            SimpleQueryMessage::CommandComplete(_) => out.push(std::mem::take(&mut rows)),
            _ => {}
        }
    }
    out
}

impl Ahead {
    /// Reads the row [`AHEAD_SQL`] answered (its statement's `rows`).
    pub(super) fn parse(rows: &[Vec<Option<String>>]) -> Result<Ahead, StoreError> {
        let Some([latest, settings, expiry]) = rows
            .first()
            .and_then(|row| <&[Option<String>; 3]>::try_from(row.as_slice()).ok())
        else {
            return Err(StoreError::other("BEGIN did not answer its reads"));
        };
        let latest = latest
            .as_deref()
            .and_then(|text| text.parse::<EventId>().ok())
            .ok_or_else(|| StoreError::other("BEGIN did not say the highest event id"))?;
        Ok(Ahead {
            latest_event_id: Some(latest),
            settings: Some(settings.clone()),
            earliest_expiry: Some(expiry.clone()),
            ..Ahead::default()
        })
    }

    /// The thread `id` as read ahead, if it was.
    pub(super) fn thread(&self, id: &str) -> Option<Option<ThreadState>> {
        answered(&self.thread, id)
    }

    /// The agents `query` finds, if that query was read ahead.
    pub(super) fn agents(&self, query: &AgentQuery) -> Option<Vec<Agent>> {
        answered(&self.agents, query)
    }

    /// The threads `query` finds, if that query was read ahead.
    pub(super) fn threads(&self, query: &ThreadQuery) -> Option<Vec<ThreadState>> {
        answered(&self.threads, query)
    }

    /// Whether no unreleased lease has expired at `now` (a timestamp's
    /// stored text), when `BEGIN` read enough to tell: then the lapsed
    /// leases at `now` are none. Texts compare byte by byte, as the
    /// column's "C" collation compares them.
    pub(super) fn none_lapsed_at(&self, now: &str) -> bool {
        match &self.earliest_expiry {
            Some(None) => true,
            Some(Some(earliest)) => earliest.as_str() > now,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(lit: Lit) -> String {
        let mut out = String::new();
        lit.render(&mut out).unwrap();
        out
    }

    #[test]
    fn literals_escape_quotes_and_backslashes_and_refuse_nul() {
        assert_eq!(
            rendered(Lit::from("it's a \\ test")),
            "E'it''s a \\\\ test'"
        );
        assert_eq!(rendered(Lit::from(None::<String>)), "NULL");
        assert_eq!(rendered(Lit::Int(-7)), "-7");
        assert_eq!(rendered(Lit::Bytes(vec![0, 0xab])), "E'\\\\x00ab'");
        assert!(Lit::from("a\0b").render(&mut String::new()).is_err());
        assert_eq!(
            execute("inbox_w1", &[Lit::Int(1), Lit::from("x")]).unwrap(),
            "EXECUTE inbox_w1(1, E'x')"
        );
    }
}
