//! inbox's own lossless JSONL dump of a whole database: [`export`] writes
//! every row of every table as one JSON line (`inbox export --format
//! jsonl`), [`import`] copies such a file's rows into a database (`inbox
//! import --format jsonl FILE`).
//!
//! The file is a header line, one line per row, and an end line:
//!
//! ```text
//! {"record":"header","format":"inbox-jsonl","format_version":1,"schema_version":4,"inbox_version":"0.1.0"}
//! {"record":"threads","thread_id":"thr_…","run_id":null,…}
//! {"record":"end","records":1234}
//! ```
//!
//! A row's `record` is its table's name and its other fields are the
//! table's columns, in the table's order, with SQLite's values as they are
//! stored: an integer as a JSON integer, text as a string, NULL as null, a
//! real as a JSON number with a fraction or exponent, a blob as
//! `{"blob":"<hex>"}`. Tables come in name order and rows in primary-key
//! order, and nothing in the file depends on when it was written, so two
//! databases with the same rows dump to the same bytes: export, import into
//! an empty database and export again gives the file back byte for byte.
//! The end line says how many rows came before it, so a file cut short is
//! refused rather than imported in part.
//!
//! An import is a row copy, as `inbox import --sqlite` is: it never applies
//! an inbox rule. It runs in one write transaction (`BEGIN IMMEDIATE`, like
//! every command), streams the file a line at a time (a line over
//! [`LINE_LIMIT`] is refused), and either commits every row or nothing. A
//! row already present with the same primary key and the same values is
//! skipped, so importing a file twice adds nothing; the same key with other
//! values is a conflict that refuses the whole file. The destination's
//! `durability` setting is its own (a property of where the database runs,
//! as `--sqlite` keeps it): the file's is skipped when the destination has
//! one. A file of a newer format or schema is refused (`schema_too_new`);
//! one of an older schema is read into this one, each record needing
//! exactly its table's columns.
//!
//! This module must never decide what a row means; it moves them.

use std::collections::HashMap;
use std::io::{BufRead, Write};

use inbox_engine::store::TxMode;
use inbox_engine::{ErrorCode, Store, StoreError};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params_from_iter};
use serde_json::{Map, Number, Value as Json};

use crate::SqliteStore;
use crate::error::store_error;
use crate::lines::{Line, Lines};
use crate::schema::SCHEMA_VERSION;
use crate::transfer::TransferError;

/// The `format` of the header line.
pub const FORMAT: &str = "inbox-jsonl";

/// The version of the file's layout (header, records, end line), bumped
/// only for changes an older import could misread.
pub const FORMAT_VERSION: u64 = 1;

/// The longest line an import reads: a row holds at most a 1 MiB body,
/// 256 KiB of payload and a recorded outcome holding both, each escaped as
/// JSON text inside JSON text.
pub const LINE_LIMIT: usize = 64 << 20;

/// The setting an import leaves as the destination's.
const KEPT_SETTING: &str = "durability";

/// Why an export or import did not happen.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The file named cannot be created or read.
    #[error("{0}")]
    File(String),
    /// Writing the dump failed part way (a full disk, a closed pipe).
    #[error("cannot write the dump: {0}")]
    Write(std::io::Error),
    /// Line 1 is not a dump's header.
    #[error("{0}")]
    NotADump(String),
    /// The file was written by a newer inbox.
    #[error(
        "the file has {what} {found}, but this inbox reads only up to {known}; upgrade inbox to import it (nothing was imported)"
    )]
    Newer {
        /// `format_version` or `schema_version`.
        what: &'static str,
        /// The file's.
        found: u64,
        /// This build's.
        known: u64,
    },
    /// A line over [`LINE_LIMIT`].
    #[error(
        "line {line} is longer than {limit} bytes, more than any row of a dump holds; nothing was imported"
    )]
    TooLong {
        /// Its number.
        line: u64,
        /// The limit.
        limit: usize,
    },
    /// A line that is not a record of this database's tables.
    #[error("line {line}: {problem}; nothing was imported")]
    Malformed {
        /// Its number.
        line: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// The file ends before its end line, or the end line disagrees.
    #[error("{0}; nothing was imported")]
    Truncated(String),
    /// A row with the key of one already present, but other values.
    #[error(
        "line {line}: the database already holds {table} {key} with other values than the file's; a dump adds rows the database does not hold and skips those it holds identically, so import it into a new database (--db NEW.db) or the one it came from; nothing was imported"
    )]
    Conflict {
        /// Its number.
        line: u64,
        /// The table.
        table: String,
        /// The row's key, as `column=value` pairs.
        key: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DumpError {
    /// The error code the JSON contract reports it with.
    pub fn code(&self) -> ErrorCode {
        match self {
            DumpError::File(_)
            | DumpError::NotADump(_)
            | DumpError::Malformed { .. }
            | DumpError::Truncated(_) => ErrorCode::InvalidValue,
            DumpError::TooLong { .. } => ErrorCode::TooLong,
            DumpError::Newer { .. } => ErrorCode::SchemaTooNew,
            DumpError::Conflict { .. } => ErrorCode::InvalidState,
            DumpError::Write(_) => ErrorCode::StorageError,
            DumpError::Store(error) => error.code(),
        }
    }
}

impl From<TransferError> for DumpError {
    fn from(error: TransferError) -> Self {
        match error {
            TransferError::File(problem)
            | TransferError::NotEmpty(problem)
            | TransferError::TooLarge(problem) => DumpError::File(problem),
            TransferError::Store(error) => DumpError::Store(error),
        }
    }
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exported {
    /// Rows written (header and end line not counted).
    pub records: u64,
    /// Of them, threads.
    pub threads: u64,
    /// Of them, messages.
    pub messages: u64,
}

/// What an import did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Rows in the file.
    pub records: u64,
    /// Rows added.
    pub added: u64,
    /// Rows the database already held, identical: skipped.
    pub present: u64,
    /// Settings skipped because the destination keeps its own.
    pub kept: u64,
}

/// A table as the dump sees it: its columns, its key, its statements.
struct Table {
    name: String,
    columns: Vec<String>,
    /// Positions in `columns` of the primary key (all columns if none).
    key: Vec<usize>,
    select_all: String,
    select_one: String,
    insert: String,
}

impl Table {
    fn read(conn: &Connection, name: &str) -> rusqlite::Result<Table> {
        let mut stmt = conn.prepare("SELECT name, pk FROM pragma_table_info(?1) ORDER BY cid")?;
        let info: Vec<(String, i64)> = stmt
            .query_map([name], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let columns: Vec<String> = info.iter().map(|(c, _)| c.clone()).collect();
        let mut keyed: Vec<(i64, usize)> = info
            .iter()
            .enumerate()
            .filter(|(_, (_, pk))| *pk > 0)
            .map(|(at, (_, pk))| (*pk, at))
            .collect();
        keyed.sort_unstable();
        let key: Vec<usize> = if keyed.is_empty() {
            (0..columns.len()).collect()
        } else {
            keyed.into_iter().map(|(_, at)| at).collect()
        };
        let list = columns
            .iter()
            .map(|c| quote(c))
            .collect::<Vec<_>>()
            .join(", ");
        let order = key
            .iter()
            .map(|&at| quote(&columns[at]))
            .collect::<Vec<_>>();
        let matching = key
            .iter()
            .enumerate()
            .map(|(n, &at)| format!("{} IS ?{}", quote(&columns[at]), n + 1))
            .collect::<Vec<_>>()
            .join(" AND ");
        let slots = (1..=columns.len())
            .map(|n| format!("?{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let table = quote(name);
        Ok(Table {
            name: name.to_owned(),
            select_all: format!(
                "SELECT {list} FROM main.{table} ORDER BY {}",
                order.join(", ")
            ),
            select_one: format!("SELECT {list} FROM main.{table} WHERE {matching}"),
            insert: format!("INSERT INTO main.{table} ({list}) VALUES ({slots})"),
            columns,
            key,
        })
    }

    /// The key of `row`, for messages: `thread_id=thr_…`.
    fn describe_key(&self, row: &[Value]) -> String {
        self.key
            .iter()
            .map(|&at| format!("{}={}", self.columns[at], shown(&row[at])))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Every table of the schema, SQLite's own left out, by name.
fn tables(conn: &Connection) -> rusqlite::Result<Vec<Table>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let names: Vec<String> = stmt
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    names.iter().map(|name| Table::read(conn, name)).collect()
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A value for a message, as the dump writes it.
fn shown(value: &Value) -> String {
    to_json(value).to_string()
}

/// Writes the whole database of `store` to `out`, in one read transaction
/// (one consistent snapshot, the commits still in the `-wal` included).
///
/// # Errors
///
/// The store's, and [`DumpError::Write`] when `out` fails.
pub fn export(store: &mut SqliteStore, out: &mut dyn Write) -> Result<Exported, DumpError> {
    store.begin(TxMode::Read)?;
    let result = export_in(store, out);
    let ended = store.commit();
    let exported = result?;
    ended?;
    Ok(exported)
}

fn export_in(store: &SqliteStore, out: &mut dyn Write) -> Result<Exported, DumpError> {
    let location = store.location().to_owned();
    let error = |e| DumpError::Store(store_error(e, &location));
    let write = |out: &mut dyn Write, line: &str| {
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(DumpError::Write)
    };
    write(out, &header())?;
    let mut exported = Exported::default();
    for table in tables(store.connection()).map_err(error)? {
        let mut stmt = store
            .connection()
            .prepare(&table.select_all)
            .map_err(error)?;
        let mut rows = stmt.query([]).map_err(error)?;
        let mut written = 0;
        while let Some(row) = rows.next().map_err(error)? {
            let values = (0..table.columns.len())
                .map(|at| row.get::<_, Value>(at))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(error)?;
            write(out, &record(&table, &values))?;
            written += 1;
        }
        exported.records += written;
        match table.name.as_str() {
            "threads" => exported.threads = written,
            "messages" => exported.messages = written,
            _ => {}
        }
    }
    let end = serde_json::json!({"record": "end", "records": exported.records});
    write(out, &end.to_string())?;
    out.flush().map_err(DumpError::Write)?;
    Ok(exported)
}

/// The header line: nothing in it changes between two exports of the
/// same rows by the same build.
fn header() -> String {
    // Written field by field: the order is part of what a reader sees.
    format!(
        "{{\"record\":\"header\",\"format\":{},\"format_version\":{FORMAT_VERSION},\"schema_version\":{SCHEMA_VERSION},\"inbox_version\":{}}}",
        Json::from(FORMAT),
        Json::from(env!("CARGO_PKG_VERSION")),
    )
}

/// One row's line: `record` first, then the columns in the table's order.
fn record(table: &Table, values: &[Value]) -> String {
    let mut line = String::with_capacity(256);
    line.push_str("{\"record\":");
    line.push_str(&Json::from(table.name.as_str()).to_string());
    for (column, value) in table.columns.iter().zip(values) {
        line.push(',');
        line.push_str(&Json::from(column.as_str()).to_string());
        line.push(':');
        line.push_str(&to_json(value).to_string());
    }
    line.push('}');
    line
}

/// An SQLite value as the dump writes it.
fn to_json(value: &Value) -> Json {
    match value {
        Value::Null => Json::Null,
        Value::Integer(n) => Json::from(*n),
        // A real always shows a fraction or an exponent, so it reads back
        // as a real (and a non-finite one, which JSON cannot hold, as null).
        Value::Real(x) => Number::from_f64(*x).map_or(Json::Null, Json::Number),
        Value::Text(text) => Json::from(text.as_str()),
        Value::Blob(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            serde_json::json!({ "blob": hex })
        }
    }
}

/// A JSON value of a record as the SQLite value it stands for.
fn from_json(value: &Json) -> Result<Value, String> {
    match value {
        Json::Null => Ok(Value::Null),
        Json::String(text) => Ok(Value::Text(text.clone())),
        // An integer is written without a fraction or an exponent.
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(int), _) => Ok(Value::Integer(int)),
            (None, Some(real)) if n.to_string().contains(['.', 'e', 'E']) => Ok(Value::Real(real)),
            _ => Err(format!("the number {n} fits no SQLite value")),
        },
        Json::Object(object) if object.len() == 1 => match object.get("blob") {
            Some(Json::String(hex)) => unhex(hex).map(Value::Blob),
            _ => Err("an object value must be {\"blob\": \"<hex>\"}".into()),
        },
        other => Err(format!(
            "a column's value is null, a number, a string or {{\"blob\": \"<hex>\"}}, not {}",
            inbox_engine::model::json_type(other)
        )),
    }
}

fn unhex(hex: &str) -> Result<Vec<u8>, String> {
    let digits = hex.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err("a blob's hex has an odd number of digits".into());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("a blob's hex holds `{}`", String::from_utf8_lossy(pair)))
        })
        .collect()
}

/// Copies the rows of the dump `input` into `store`'s database, in one
/// write transaction; `progress` is told the bytes read after each line.
///
/// # Errors
///
/// See [`DumpError`]; on any error nothing was written.
pub fn import(
    store: &mut SqliteStore,
    input: impl BufRead,
    progress: &mut dyn FnMut(u64),
) -> Result<Imported, DumpError> {
    let mut lines = Lines::new(input, LINE_LIMIT);
    check_header(&mut lines)?;
    store.begin(TxMode::Write)?;
    let result = import_in(store, &mut lines, progress);
    match result {
        Ok(imported) => store.commit().map(|()| imported).map_err(DumpError::Store),
        Err(error) => {
            let _ = store.rollback();
            Err(error)
        }
    }
}

/// Reads line 1 and refuses anything but a dump this build can read.
fn check_header<R: BufRead>(lines: &mut Lines<R>) -> Result<(), DumpError> {
    let not_a_dump = |why: &str| {
        DumpError::NotADump(format!(
            "line 1 {why}, not an inbox-jsonl header (a file made by `inbox export --format jsonl`); \
             for a mailbox.jsonl log pass --format mailbox-jsonl, for JSONL inbox lines \
             --format teams-jsonl; nothing was imported"
        ))
    };
    let text = match next(lines)? {
        None => return Err(not_a_dump("is missing: the file is empty")),
        Some((_, text)) => text,
    };
    let Ok(Json::Object(header)) = serde_json::from_str::<Json>(&text) else {
        return Err(not_a_dump("is not a JSON object"));
    };
    if header.get("record").and_then(Json::as_str) != Some("header")
        || header.get("format").and_then(Json::as_str) != Some(FORMAT)
    {
        return Err(not_a_dump("is another JSON object"));
    }
    let version = |field: &str| header.get(field).and_then(Json::as_u64);
    let (Some(format), Some(schema)) = (version("format_version"), version("schema_version"))
    else {
        return Err(not_a_dump(
            "lacks format_version or schema_version (whole numbers)",
        ));
    };
    let newer = |what, found, known| DumpError::Newer { what, found, known };
    if format > FORMAT_VERSION {
        return Err(newer("format_version", format, FORMAT_VERSION));
    }
    if schema > u64::from(SCHEMA_VERSION) {
        return Err(newer("schema_version", schema, u64::from(SCHEMA_VERSION)));
    }
    Ok(())
}

/// The next line that is not blank, with its number.
fn next<R: BufRead>(lines: &mut Lines<R>) -> Result<Option<(u64, String)>, DumpError> {
    loop {
        let read = lines
            .next_line()
            .map_err(|e| DumpError::File(format!("the file cannot be read: {e}")))?;
        match read {
            None => return Ok(None),
            Some((line, Line::TooLong)) => {
                return Err(DumpError::TooLong {
                    line,
                    limit: LINE_LIMIT,
                });
            }
            Some((line, Line::NotUtf8)) => {
                return Err(DumpError::Malformed {
                    line,
                    problem: "is not UTF-8 text".into(),
                });
            }
            Some((_, Line::Text(text))) if text.trim().is_empty() => {}
            Some((line, Line::Text(text))) => return Ok(Some((line, text))),
        }
    }
}

/// Inside the write transaction: every record, then the end line.
fn import_in<R: BufRead>(
    store: &SqliteStore,
    lines: &mut Lines<R>,
    progress: &mut dyn FnMut(u64),
) -> Result<Imported, DumpError> {
    let conn = store.connection();
    let location = store.location().to_owned();
    let error = |e| DumpError::Store(store_error(e, &location));
    // Rows come table by table in name order: foreign keys are checked
    // once, at the commit.
    conn.execute_batch("PRAGMA defer_foreign_keys = ON")
        .map_err(error)?;
    let tables: HashMap<String, Table> = tables(conn)
        .map_err(error)?
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    let mut imported = Imported::default();
    loop {
        let Some((line, text)) = next(lines)? else {
            return Err(DumpError::Truncated(format!(
                "the file ends after {} records without its end line: it was cut short",
                imported.records
            )));
        };
        progress(lines.bytes_read());
        let malformed = |problem: String| DumpError::Malformed { line, problem };
        let Ok(Json::Object(mut object)) = serde_json::from_str::<Json>(&text) else {
            return Err(malformed("is not a JSON object".into()));
        };
        let tag = match object.remove("record") {
            Some(Json::String(tag)) => tag,
            _ => return Err(malformed("has no \"record\" naming what it is".into())),
        };
        if tag == "end" {
            return finish(lines, &object, imported);
        }
        let Some(table) = tables.get(&tag) else {
            return Err(malformed(format!(
                "is a `{tag}` record, and this database has no such table"
            )));
        };
        let row = row(table, object).map_err(malformed)?;
        imported.records += 1;
        match place(conn, table, &row, line, &location)? {
            Placed::Added => imported.added += 1,
            Placed::Present => imported.present += 1,
            Placed::Kept => imported.kept += 1,
        }
    }
}

/// The end line: it must count the records, and nothing may follow it.
fn finish<R: BufRead>(
    lines: &mut Lines<R>,
    end: &Map<String, Json>,
    imported: Imported,
) -> Result<Imported, DumpError> {
    let said = end.get("records").and_then(Json::as_u64);
    if said != Some(imported.records) {
        return Err(DumpError::Truncated(format!(
            "the end line says {} records, but {} came before it: the file was changed",
            said.map_or("no number of".into(), |n| n.to_string()),
            imported.records
        )));
    }
    if let Some((line, _)) = next(lines)? {
        return Err(DumpError::Malformed {
            line,
            problem: "follows the end line: two files were joined, or one was appended to".into(),
        });
    }
    Ok(imported)
}

/// A record's values in its table's column order; every column given,
/// nothing else.
fn row(table: &Table, mut object: Map<String, Json>) -> Result<Vec<Value>, String> {
    let mut values = Vec::with_capacity(table.columns.len());
    for column in &table.columns {
        let Some(given) = object.remove(column) else {
            return Err(format!("a `{}` record needs `{column}`", table.name));
        };
        values.push(from_json(&given).map_err(|e| format!("`{column}`: {e}"))?);
    }
    if let Some(extra) = object.keys().next() {
        return Err(format!("table `{}` has no column `{extra}`", table.name));
    }
    Ok(values)
}

/// What became of one record.
enum Placed {
    Added,
    Present,
    Kept,
}

/// Adds `row` unless its key is present: identical, it is skipped; with
/// other values, it is a conflict (or, for the kept setting, skipped).
fn place(
    conn: &Connection,
    table: &Table,
    row: &[Value],
    line: u64,
    location: &str,
) -> Result<Placed, DumpError> {
    let error = |e| DumpError::Store(store_error(e, location));
    let key: Vec<&Value> = table.key.iter().map(|&at| &row[at]).collect();
    let width = table.columns.len();
    let existing: Option<Vec<Value>> = conn
        .prepare_cached(&table.select_one)
        .and_then(|mut stmt| {
            stmt.query_row(params_from_iter(key), |found| {
                (0..width).map(|at| found.get::<_, Value>(at)).collect()
            })
            .optional()
        })
        .map_err(error)?;
    let conflict = || DumpError::Conflict {
        line,
        table: table.name.clone(),
        key: table.describe_key(row),
    };
    match existing {
        Some(existing) if existing == row => Ok(Placed::Present),
        Some(_) if table.name == "settings" && row.first() == Some(&kept_key()) => Ok(Placed::Kept),
        Some(_) => Err(conflict()),
        None => {
            let inserted = conn
                .prepare_cached(&table.insert)
                .and_then(|mut stmt| stmt.execute(params_from_iter(row)));
            match inserted {
                Ok(_) => Ok(Placed::Added),
                // Another unique column (a message id under another event
                // id): the same conflict, said the same way.
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    Err(conflict())
                }
                Err(e) => Err(error(e)),
            }
        }
    }
}

fn kept_key() -> Value {
    Value::Text(KEPT_SETTING.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn values_read_back_as_the_sqlite_values_they_were() {
        let values = [
            Value::Null,
            Value::Integer(-7),
            Value::Integer(i64::MAX),
            Value::Real(1.0),
            Value::Real(0.1),
            Value::Text("é\n\"x\"".into()),
            Value::Blob(vec![0, 255, 16]),
        ];
        for value in values {
            let json: Json = serde_json::from_str(&shown(&value)).unwrap();
            assert_eq!(from_json(&json), Ok(value));
        }
        assert!(from_json(&serde_json::json!([1])).is_err());
        assert!(from_json(&serde_json::json!({"blob": "abc"})).is_err());
    }
}
