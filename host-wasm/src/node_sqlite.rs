//! [`NodeSqlite`]: the store's [`Sql`] over Node's own SQLite (`node:sqlite`),
//! for the `file` store: a database file shared with the CLI, other Node
//! processes and any other SQLite client (the `sqlite3` shell, Python),
//! through SQLite's own file locks and WAL index. Every byte of the file is
//! written by SQLite; this module only passes statements and values across.
//!
//! `node:sqlite` is in Node 22.13 and later without a flag; the store needs
//! what Node 22.16 (and 24.0) added: rows as arrays
//! (`StatementSync.setReturnArrays`) and `DatabaseSync.isTransaction`. An
//! older runtime gets an error that names the minimum, and never a
//! fallback that writes the file some other way.
//!
//! Integers are bound as BigInts, so SQLite stores them as integers (a JS
//! number binds as a REAL), and read back as numbers: a value beyond 2^53
//! is an error from Node, never a rounded id.

use std::cell::RefCell;
use std::collections::HashMap;

use inbox_sqlite::sql::{Flow, Param, Sql, SqlError, SqlRow};
use js_sys::{Array, Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// The most statements kept prepared; the store runs a few dozen.
const STATEMENT_CACHE: usize = 128;

/// What a runtime without a usable `node:sqlite` is told.
pub const NEEDS_NODE: &str = "store: \"file\" needs Node 22.16 or later (Node's built-in node:sqlite, \
     which shares the file with the CLI through SQLite's own locks); in a browser use store: \"opfs\" \
     or \"sqlite\"";

/// A `DatabaseSync` and the statements prepared on it.
pub struct NodeSqlite {
    db: JsValue,
    statements: RefCell<HashMap<String, JsValue>>,
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

/// Calls `object.name(...args)`.
fn call(object: &JsValue, name: &str, args: &Array) -> Result<JsValue, JsValue> {
    let function: Function = get(object, name)
        .dyn_into()
        .map_err(|_| JsValue::from_str(&format!("{name} is not a function here")))?;
    function.apply(object, args)
}

/// A thrown SQLite error as an [`SqlError`]: Node gives SQLite's extended
/// result code as `errcode`.
fn sql_error(error: &JsValue) -> SqlError {
    let code = get(error, "errcode").as_f64().map(|c| c as i32);
    let message = get(error, "message")
        .as_string()
        .unwrap_or_else(|| crate::js::error_text(error));
    SqlError { code, message }
}

fn js_param(param: &Param<'_>) -> JsValue {
    match param {
        Param::Null => JsValue::NULL,
        Param::Int(n) => js_sys::BigInt::from(*n).into(),
        Param::Text(text) => JsValue::from_str(text),
    }
}

/// The arguments of `run` or `iterate`: one object that binds `?1`, `?2`,
/// ... by name. (Node before 24 binds a list of values only to plain `?`
/// parameters and refuses numbered ones, which every statement here uses.)
fn js_params(params: &[Param<'_>]) -> Array {
    if params.is_empty() {
        return Array::new();
    }
    let named = js_sys::Object::new();
    for (i, param) in params.iter().enumerate() {
        let name = JsValue::from_str(&format!("?{}", i + 1));
        let _ = Reflect::set(&named, &name, &js_param(param));
    }
    Array::of1(&named)
}

/// A number of rows changed, as Node reports it (a number or a BigInt).
fn count(value: &JsValue) -> usize {
    value.as_f64().map_or_else(
        || {
            js_sys::BigInt::new(value)
                .ok()
                .and_then(|b| b.to_string(10).ok())
                .and_then(|s| String::from(s).parse().ok())
                .unwrap_or(0)
        },
        |n| n as usize,
    )
}

impl NodeSqlite {
    /// Node's `node:sqlite`, or [`NEEDS_NODE`] when this runtime has none
    /// the store can use.
    pub fn runtime() -> Result<JsValue, String> {
        let process = get(&js_sys::global(), "process");
        let builtin = get(&process, "getBuiltinModule");
        if !builtin.is_function() {
            return Err(NEEDS_NODE.into());
        }
        let args = Array::of1(&JsValue::from_str("node:sqlite"));
        let sqlite = call(&process, "getBuiltinModule", &args).unwrap_or(JsValue::UNDEFINED);
        let statement = get(&get(&sqlite, "StatementSync"), "prototype");
        if !get(&statement, "setReturnArrays").is_function() {
            return Err(NEEDS_NODE.into());
        }
        Ok(sqlite)
    }

    /// Opens the database file at `path` (created by SQLite if missing)
    /// with `sqlite`, the module [`NodeSqlite::runtime`] gave, waiting up
    /// to `busy_ms` for another writer's lock.
    pub fn open(sqlite: &JsValue, path: &str, busy_ms: u32) -> Result<NodeSqlite, SqlError> {
        let options = js_sys::Object::new();
        // The store turns foreign keys on itself (PORTABLE_PRAGMAS), and
        // waits for locks with the busy timeout set below.
        let _ = Reflect::set(
            &options,
            &"enableForeignKeyConstraints".into(),
            &true.into(),
        );
        let constructor: Function =
            get(sqlite, "DatabaseSync")
                .dyn_into()
                .map_err(|_| SqlError {
                    code: None,
                    message: NEEDS_NODE.into(),
                })?;
        let args = Array::of2(&JsValue::from_str(path), &options);
        let db = Reflect::construct(&constructor, &args).map_err(|e| sql_error(&e))?;
        // Node 22.16 has `isTransaction` on each database, not on the
        // prototype: look at the one just opened.
        if get(&db, "isTransaction").as_bool().is_none() {
            let _ = call(&db, "close", &Array::new());
            return Err(SqlError {
                code: None,
                message: NEEDS_NODE.into(),
            });
        }
        let conn = NodeSqlite {
            db,
            statements: RefCell::new(HashMap::new()),
        };
        conn.execute_batch(&format!("PRAGMA busy_timeout = {busy_ms}"))?;
        Ok(conn)
    }

    /// The prepared statement for `sql`, from the cache or new.
    fn statement(&self, sql: &str) -> Result<JsValue, SqlError> {
        if let Some(statement) = self.statements.borrow().get(sql) {
            return Ok(statement.clone());
        }
        let args = Array::of1(&JsValue::from_str(sql));
        let statement = call(&self.db, "prepare", &args).map_err(|e| sql_error(&e))?;
        let arrays = Array::of1(&JsValue::TRUE);
        call(&statement, "setReturnArrays", &arrays).map_err(|e| sql_error(&e))?;
        let mut statements = self.statements.borrow_mut();
        if statements.len() >= STATEMENT_CACHE {
            // Dynamic queries (filters, limits) make new texts; the ones in
            // use are prepared again at their next run.
            statements.clear();
        }
        statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

impl Drop for NodeSqlite {
    fn drop(&mut self) {
        // Closing rolls back an open transaction and lets go of the file's
        // locks now rather than when the garbage collector gets to it.
        self.statements.borrow_mut().clear();
        let _ = call(&self.db, "close", &Array::new());
    }
}

/// One row, its cells read out of the JS array once.
struct Row {
    cells: Vec<Cell>,
}

enum Cell {
    Null,
    Number(f64),
    Text(String),
    Other(String),
}

impl Row {
    fn of(values: &JsValue) -> Row {
        let values: Array = values.clone().unchecked_into();
        let cells = values
            .iter()
            .map(|value| {
                if value.is_null() || value.is_undefined() {
                    Cell::Null
                } else if let Some(n) = value.as_f64() {
                    Cell::Number(n)
                } else if let Some(text) = value.as_string() {
                    Cell::Text(text)
                } else {
                    Cell::Other(crate::js::error_text(&value))
                }
            })
            .collect();
        Row { cells }
    }

    fn cell(&self, index: usize) -> Result<&Cell, SqlError> {
        self.cells
            .get(index)
            .ok_or_else(|| SqlError::column(index, "no such column in the row"))
    }
}

impl SqlRow for Row {
    fn int(&self, index: usize) -> Result<Option<i64>, SqlError> {
        match self.cell(index)? {
            Cell::Null => Ok(None),
            Cell::Number(n) if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 => {
                Ok(Some(*n as i64))
            }
            Cell::Number(n) => Err(SqlError::column(index, format!("{n} is not an integer"))),
            Cell::Text(_) => Err(SqlError::column(index, "text where an integer belongs")),
            Cell::Other(what) => Err(SqlError::column(index, format!("{what} is not an integer"))),
        }
    }

    fn text(&self, index: usize) -> Result<Option<&str>, SqlError> {
        match self.cell(index)? {
            Cell::Null => Ok(None),
            Cell::Text(text) => Ok(Some(text)),
            Cell::Number(n) => Err(SqlError::column(index, format!("{n} where text belongs"))),
            Cell::Other(what) => Err(SqlError::column(index, format!("{what} is not text"))),
        }
    }
}

impl Sql for NodeSqlite {
    fn execute(&self, sql: &str, params: &[Param<'_>]) -> Result<usize, SqlError> {
        let statement = self.statement(sql)?;
        let result = call(&statement, "run", &js_params(params)).map_err(|e| sql_error(&e))?;
        Ok(count(&get(&result, "changes")))
    }

    fn each_row(
        &self,
        sql: &str,
        params: &[Param<'_>],
        row: &mut dyn FnMut(&dyn SqlRow) -> Result<Flow, SqlError>,
    ) -> Result<(), SqlError> {
        let statement = self.statement(sql)?;
        let rows = call(&statement, "iterate", &js_params(params)).map_err(|e| sql_error(&e))?;
        let result = read_rows(&rows, row);
        // An iterator left unfinished keeps its statement running; `return`
        // resets it (an error from it changes nothing already read).
        if get(&rows, "return").is_function() {
            let _ = call(&rows, "return", &Array::new());
        }
        result
    }

    fn execute_batch(&self, sql: &str) -> Result<(), SqlError> {
        call(&self.db, "exec", &Array::of1(&JsValue::from_str(sql)))
            .map(drop)
            .map_err(|e| sql_error(&e))
    }

    fn in_transaction(&self) -> bool {
        get(&self.db, "isTransaction").as_bool().unwrap_or(false)
    }
}

/// Hands each row of the iterator `rows` to `row` until it says stop.
fn read_rows(
    rows: &JsValue,
    row: &mut dyn FnMut(&dyn SqlRow) -> Result<Flow, SqlError>,
) -> Result<(), SqlError> {
    loop {
        let next = call(rows, "next", &Array::new()).map_err(|e| sql_error(&e))?;
        if get(&next, "done").as_bool().unwrap_or(true) {
            return Ok(());
        }
        if row(&Row::of(&get(&next, "value")))? == Flow::Stop {
            return Ok(());
        }
    }
}
