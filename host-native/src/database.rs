//! Which database a command runs on: an SQLite file (`--db PATH`,
//! `$INBOX_DB`, else the nearest `.agents/coord.db`) or a PostgreSQL
//! database named by a `postgres://` / `postgresql://` URL in `--db` or
//! `$INBOX_DB`. It also says which it is for people, without ever
//! printing the URL as given (it may hold a password), and refuses a URL
//! for the tools that work on the SQLite file itself. It must never open
//! anything: running on the database is `execute_on`'s.

use std::path::{Path, PathBuf};

use inbox_engine::EngineError;
use inbox_sqlite::{DbPath, DbSource};

use crate::global::Global;

/// The database a command names.
pub enum Database {
    /// An SQLite file.
    File(DbPath),
    /// A PostgreSQL database.
    Postgres {
        /// Its URL, as given (it may hold a password: never printed).
        url: String,
        /// Whether `--db` or `$INBOX_DB` named it.
        source: DbSource,
    },
}

impl Database {
    /// The database the command line names, and the current folder it
    /// was resolved from.
    pub fn resolve(global: &Global) -> (Database, PathBuf) {
        let env_db = std::env::var_os("INBOX_DB").map(PathBuf::from);
        if let Some(url) = inbox_postgres::url_named(global.db.as_deref(), env_db.as_deref()) {
            let source = if global.db.is_some() {
                DbSource::Flag
            } else {
                DbSource::Env
            };
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            return (Database::Postgres { url, source }, cwd);
        }
        let (db, cwd) = resolve_db(global);
        (Database::File(db), cwd)
    }

    /// Databases passed over while looking for the file, and why.
    pub fn notes(&self) -> &[String] {
        match self {
            Database::File(db) => &db.notes,
            Database::Postgres { .. } => &[],
        }
    }

    /// Which database and why, for people: a file relative to the current
    /// folder when it is inside it; a PostgreSQL database as
    /// `postgres://user@host:port/db`, never with its password.
    pub fn line(&self, cwd: &Path) -> String {
        match self {
            Database::File(db) => database_line(db, cwd),
            Database::Postgres { url, source } => {
                format!("{} ({})", inbox_postgres::describe_url(url), why(source))
            }
        }
    }
}

/// Why this database: the flag, the variable, or the search.
pub fn why(source: &DbSource) -> &'static str {
    match source {
        DbSource::Flag => "--db",
        DbSource::Env => "$INBOX_DB",
        DbSource::Found => "the nearest .agents/coord.db",
        DbSource::Default => "new in this folder",
    }
}

/// Refuses a PostgreSQL database for `command`, a tool that reads or
/// writes the SQLite file itself (copies, line formats, bridges), before
/// it takes the URL for a file name.
pub fn file_only(global: &Global, command: &str) -> Result<(), EngineError> {
    match Database::resolve(global).0 {
        Database::File(_) => Ok(()),
        Database::Postgres { .. } => Err(EngineError::InvalidValue {
            field: "db".into(),
            problem: format!(
                "`inbox {command}` works on an SQLite database file, and this one is \
                 PostgreSQL; use PostgreSQL's own tools (pg_dump, pg_restore) to copy it, or \
                 name an SQLite file with --db"
            ),
        }),
    }
}

/// The database the command line names (`--db`, `$INBOX_DB`, or found),
/// and the current folder it was resolved from.
pub fn resolve_db(global: &Global) -> (inbox_sqlite::DbPath, PathBuf) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let env_db = std::env::var_os("INBOX_DB").map(PathBuf::from);
    let db = inbox_sqlite::resolve_db_path(global.db.as_deref(), env_db.as_deref(), &cwd);
    (db, cwd)
}

/// Which database a command used and why, for people: shown relative to
/// the current folder when it is inside it.
pub fn database_line(db: &inbox_sqlite::DbPath, cwd: &Path) -> String {
    let shown = db.path.strip_prefix(cwd).unwrap_or(&db.path).display();
    format!("{shown} ({})", why(&db.source))
}
