//! [`Sql`]: the handful of calls [`crate::SqliteStore`] makes on an SQLite
//! connection, so that one store (one copy of every query) runs over any
//! binding of the real SQLite library: rusqlite here and in wasm, and Node's
//! own `node:sqlite` in the npm package's `file` store, where the database
//! file is shared with the CLI and any other SQLite client through SQLite's
//! own file locks.
//!
//! It must stay this small: a statement with its parameters, run for its
//! changes or for its rows, a script of statements, and whether a
//! transaction is open. Every query, every decision about them, and every
//! error message lives in the store, never in a binding.

use std::borrow::Cow;

use rusqlite::types::{ToSqlOutput, ValueRef};

/// One value bound to a statement's parameter (`?1` is the first).
#[derive(Clone, Debug, PartialEq)]
pub enum Param<'a> {
    /// SQL `NULL`.
    Null,
    /// An integer.
    Int(i64),
    /// Text.
    Text(Cow<'a, str>),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(text: &'a str) -> Self {
        Param::Text(Cow::Borrowed(text))
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(text: &'a String) -> Self {
        Param::Text(Cow::Borrowed(text))
    }
}

impl From<String> for Param<'_> {
    fn from(text: String) -> Self {
        Param::Text(Cow::Owned(text))
    }
}

impl From<i64> for Param<'_> {
    fn from(n: i64) -> Self {
        Param::Int(n)
    }
}

impl From<u32> for Param<'_> {
    fn from(n: u32) -> Self {
        Param::Int(i64::from(n))
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Param::Null, Into::into)
    }
}

impl<'a> From<&'a Option<String>> for Param<'a> {
    fn from(value: &'a Option<String>) -> Self {
        value.as_deref().into()
    }
}

/// `[Param; N]` from values that convert: `sql_params![t.thread_id, 3]`
/// borrows where it can (`&t.thread_id`), as rusqlite's `params!` does.
macro_rules! sql_params {
    ($($value:expr),* $(,)?) => {
        [$($crate::sql::Param::from($value)),*]
    };
}
pub(crate) use sql_params;

/// What went wrong in the binding: SQLite's extended result code when
/// SQLite reported it, and its message.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    /// SQLite's extended result code (`SQLITE_BUSY` is 5), if SQLite said.
    pub code: Option<i32>,
    /// What SQLite, the binding or a column's decoding said.
    pub message: String,
}

impl SqlError {
    /// A column that does not hold what the store expects.
    pub fn column(index: usize, what: impl std::fmt::Display) -> SqlError {
        SqlError {
            code: None,
            message: format!("column {index}: {what}"),
        }
    }

    /// SQLite's primary result code (the low byte of the extended one).
    pub fn primary_code(&self) -> Option<i32> {
        self.code.map(|c| c & 0xff)
    }
}

/// One row of a result, read by column index.
pub trait SqlRow {
    /// Column `index` as an integer, `None` for `NULL`.
    fn int(&self, index: usize) -> Result<Option<i64>, SqlError>;
    /// Column `index` as text, `None` for `NULL`.
    fn text(&self, index: usize) -> Result<Option<&str>, SqlError>;
}

/// Whether [`Sql::each_row`] reads on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Read the next row.
    More,
    /// Stop: the rest of the rows are not read.
    Stop,
}

/// An SQLite connection, as the store uses it. Statements may be cached by
/// their text: the store runs the same few dozen again and again.
pub trait Sql {
    /// Runs one statement; the rows it changed.
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<usize, SqlError>;
    /// Runs one statement and hands `row` each row it returns, in order,
    /// until `row` says [`Flow::Stop`] or an error.
    fn each_row(
        &self,
        sql: &str,
        params: &[Param<'_>],
        row: &mut dyn FnMut(&dyn SqlRow) -> Result<Flow, SqlError>,
    ) -> Result<(), SqlError>;
    /// Runs a script of statements with no parameters (PRAGMAs, `BEGIN`,
    /// the schema).
    fn execute_batch(&self, sql: &str) -> Result<(), SqlError>;
    /// Whether a transaction is open (SQLite ends one by itself on some
    /// errors, such as a full disk).
    fn in_transaction(&self) -> bool;
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Param::Null => ValueRef::Null,
            Param::Int(n) => ValueRef::Integer(*n),
            Param::Text(text) => ValueRef::Text(text.as_bytes()),
        }))
    }
}

impl From<rusqlite::Error> for SqlError {
    fn from(error: rusqlite::Error) -> SqlError {
        let code = match &error {
            rusqlite::Error::SqliteFailure(e, _) => Some(e.extended_code),
            _ => None,
        };
        SqlError {
            code,
            message: error.to_string(),
        }
    }
}

impl SqlRow for rusqlite::Row<'_> {
    fn int(&self, index: usize) -> Result<Option<i64>, SqlError> {
        Ok(self.get(index)?)
    }

    fn text(&self, index: usize) -> Result<Option<&str>, SqlError> {
        match self.get_ref(index)? {
            ValueRef::Null => Ok(None),
            value => value
                .as_str()
                .map(Some)
                .map_err(|e| SqlError::column(index, e)),
        }
    }
}

impl Sql for rusqlite::Connection {
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<usize, SqlError> {
        let mut statement = self.prepare_cached(sql)?;
        Ok(statement.execute(rusqlite::params_from_iter(params))?)
    }

    fn each_row(
        &self,
        sql: &str,
        params: &[Param<'_>],
        row: &mut dyn FnMut(&dyn SqlRow) -> Result<Flow, SqlError>,
    ) -> Result<(), SqlError> {
        let mut statement = self.prepare_cached(sql)?;
        let mut rows = statement.query(rusqlite::params_from_iter(params))?;
        while let Some(next) = rows.next()? {
            if row(next)? == Flow::Stop {
                break;
            }
        }
        Ok(())
    }

    fn execute_batch(&self, sql: &str) -> Result<(), SqlError> {
        Ok(rusqlite::Connection::execute_batch(self, sql)?)
    }

    fn in_transaction(&self) -> bool {
        !self.is_autocommit()
    }
}
