//! Which statement each reported plan was made for. Besides the plans,
//! each session reports what it is sent (`log_statement = all`, at a level
//! the client is sent too): `execute sN: ...` for a statement of the
//! extended protocol, `statement: ...` for a simple query, which may hold
//! several statements (the pipeline's batches: `BEGIN ...; SELECT ...;
//! EXECUTE inbox_ahead`, queued writes as `PREPARE inbox_wN AS ...;
//! EXECUTE inbox_wN(...)`). `auto_explain`'s "Query Text" of a plan is:
//!
//! - for a statement of the extended protocol, the statement. Its plan may
//!   come late (a query's executor ends when its portal is dropped, as the
//!   next message comes), so it is named by that text wherever it comes;
//! - for a simple query's statement, the whole query. Each runs to its end
//!   before the next, so the query's plans come in the order of its
//!   statements that run with a plan, before anything else is sent;
//! - for an `EXECUTE`, the simple query its `PREPARE` was in: it is named
//!   by the text its session prepared it with;
//! - for a nested statement (a foreign key check), its own text, which the
//!   session was never sent.
//!
//! This module only names statements; it never judges a plan.

use std::collections::{HashMap, HashSet};

/// What one session was sent, as far as naming its plans needs.
#[derive(Default)]
pub(crate) struct Session {
    /// The statements it was sent with the extended protocol.
    extended: HashSet<String>,
    /// SQL `PREPARE`d statements' texts, by name.
    prepared: HashMap<String, String>,
    /// The simple queries that prepared them: the "Query Text" of their
    /// plans.
    preparing: HashSet<String>,
    /// The last simple query.
    sent: Option<Sent>,
}

/// A statement that ran with a plan.
pub(crate) struct Statement {
    /// Its text, on one line.
    pub(crate) text: String,
    /// Whether it ran inside another (a foreign key check): no text the
    /// session was sent holds it.
    pub(crate) nested: bool,
}

/// A simple query the session was sent, and how many of the plans of its
/// statements have been reported.
struct Sent {
    text: String,
    /// The statements that run with a plan, as [`Session::name`] names them.
    planned: Vec<String>,
    next: usize,
}

impl Session {
    /// Takes note of a `log_statement` report: a simple query (`statement:
    /// ...`) or a statement of the extended protocol (`execute name: ...`).
    /// Other messages are ignored.
    pub(crate) fn sent(&mut self, message: &str) {
        if let Some(text) = message.strip_prefix("statement: ") {
            self.sent = Some(self.simple_query(text));
        } else if let Some((_, sql)) = message
            .strip_prefix("execute ")
            .and_then(|rest| rest.split_once(": "))
        {
            self.extended.insert(sql.to_owned());
        }
    }

    /// The statement a plan reported with `query_text` was made for. Call
    /// it for every plan of the session, in order, with [`Session::sent`]
    /// for what was sent between them.
    pub(crate) fn statement(&mut self, query_text: &str) -> Statement {
        let sent = |text| Statement {
            text,
            nested: false,
        };
        if self.extended.contains(query_text) {
            return sent(one_line(query_text));
        }
        let preparing = self.preparing.contains(query_text);
        match self.sent.as_mut() {
            Some(query) if query.text == query_text || preparing => {
                let text = query.planned.get(query.next).cloned().unwrap_or_else(|| {
                    panic!(
                        "more plans than statements that run with one in: {}",
                        query.text
                    )
                });
                query.next += 1;
                sent(text)
            }
            _ => Statement {
                text: one_line(query_text),
                nested: true,
            },
        }
    }

    /// Reads a simple query's statements in order: remembers what it
    /// prepares, names what runs with a plan.
    fn simple_query(&mut self, text: &str) -> Sent {
        let mut planned = Vec::new();
        for part in split(text) {
            if let Some((name, sql)) = prepare(&part) {
                self.prepared.insert(name.to_owned(), sql.to_owned());
                self.preparing.insert(text.to_owned());
            } else if runs_with_plan(&part) {
                planned.push(self.name(&part));
            }
        }
        Sent {
            text: text.to_owned(),
            planned,
            next: 0,
        }
    }

    /// A statement as the check names it: an `EXECUTE` by the text its
    /// name was prepared with (by its name if the session never said),
    /// anything else as it is.
    fn name(&self, statement: &str) -> String {
        let name = statement.strip_prefix("EXECUTE ").map(|rest| {
            let end = rest.find('(').unwrap_or(rest.len());
            rest[..end].trim()
        });
        match name {
            Some(name) => self
                .prepared
                .get(name)
                .cloned()
                .unwrap_or_else(|| format!("EXECUTE {name}")),
            None => statement.to_owned(),
        }
    }
}

/// `PREPARE name AS sql`'s name and text.
fn prepare(statement: &str) -> Option<(&str, &str)> {
    let rest = statement.strip_prefix("PREPARE ")?;
    let (name, sql) = rest.split_once(" AS ")?;
    Some((name.trim(), sql.trim()))
}

/// Whether the executor runs `statement` with a plan (and `auto_explain`
/// reports it): queries and writes, not `BEGIN`, `PREPARE`, DDL and the
/// like.
fn runs_with_plan(statement: &str) -> bool {
    let word = statement
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    matches!(
        word.as_str(),
        "SELECT" | "WITH" | "INSERT" | "UPDATE" | "DELETE" | "VALUES" | "EXECUTE"
    )
}

/// The statements of a query string, split at the semicolons outside
/// literals, quoted names and comments, each on one line.
pub(crate) fn split(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ';' => parts.push(std::mem::take(&mut current)),
            '\'' | '"' => {
                let escapes = c == '\'' && current.ends_with(['E', 'e']);
                current.push(c);
                quoted(&mut chars, c, escapes, &mut current);
            }
            '-' if chars.peek() == Some(&'-') => {
                // A comment, to the end of its line.
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                current.push(' ');
            }
            c => current.push(c),
        }
    }
    parts.push(current);
    parts
        .iter()
        .map(|part| one_line(part))
        .filter(|part| !part.is_empty())
        .collect()
}

/// Copies a literal or quoted name after its opening `quote` into `out`,
/// through its closing one (a doubled quote stays inside; in an `E''`
/// literal, so does a quote after a backslash).
fn quoted(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    quote: char,
    escapes: bool,
    out: &mut String,
) {
    while let Some(c) = chars.next() {
        out.push(c);
        if escapes && c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else if c == quote {
            if chars.peek() != Some(&quote) {
                return;
            }
            if let Some(doubled) = chars.next() {
                out.push(doubled);
            }
        }
    }
}

/// Whitespace collapsed to single spaces: one text per statement however
/// its source was laid out.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_splits_outside_literals_and_comments() {
        let text = "BEGIN; -- it's a comment; still\nEXECUTE w1(E'a;\\'b', 'c''d;'); \
                    SELECT \"x;y\" FROM t";
        assert_eq!(
            split(text),
            [
                "BEGIN",
                "EXECUTE w1(E'a;\\'b', 'c''d;')",
                "SELECT \"x;y\" FROM t"
            ]
        );
    }

    #[test]
    fn plans_are_matched_with_what_was_sent_and_executes_named_by_their_text() {
        let mut session = Session::default();
        let batch = "BEGIN; SELECT 2; PREPARE w1 AS SELECT 1 FROM t WHERE a = $1; \
                     EXECUTE w1(E'x'); COMMIT";
        session.sent(&format!("statement: {batch}"));
        assert_eq!(session.statement(batch).text, "SELECT 2");
        // A foreign key check between two plans of the batch.
        let check = session.statement("SELECT 1 FROM ONLY t x");
        assert!(check.nested);
        assert_eq!(check.text, "SELECT 1 FROM ONLY t x");
        assert_eq!(
            session.statement(batch).text,
            "SELECT 1 FROM t WHERE a = $1"
        );
        // A later EXECUTE's plan has the text of the query that prepared it.
        session.sent("statement: EXECUTE w1(E'y'); EXECUTE w1(E'z')");
        assert_eq!(
            session.statement(batch).text,
            "SELECT 1 FROM t WHERE a = $1"
        );
        assert_eq!(
            session.statement(batch).text,
            "SELECT 1 FROM t WHERE a = $1"
        );
        session.sent("execute s3: SELECT b\n FROM t");
        assert_eq!(
            session.statement("SELECT b\n FROM t").text,
            "SELECT b FROM t"
        );
    }
}
