//! SQLite's errors as store errors whose messages say what to do, by
//! SQLite's primary result code: one mapping for every binding
//! ([`crate::sql::Sql`]'s
//! errors and rusqlite's). This module must never retry or hide an error.

use inbox_engine::{StoreError, StoreErrorKind};

use crate::sql::SqlError;

/// Turns a rusqlite error into a store error whose message says what to do
/// (see [`sql_store_error`]).
pub fn store_error(error: rusqlite::Error, location: &str) -> StoreError {
    sql_store_error(&SqlError::from(error), location)
}

/// SQLite's primary result codes that get a message of their own.
mod code {
    pub(super) const PERM: i32 = 3;
    pub(super) const BUSY: i32 = 5;
    pub(super) const LOCKED: i32 = 6;
    pub(super) const READONLY: i32 = 8;
    pub(super) const IOERR: i32 = 10;
    pub(super) const FULL: i32 = 13;
    pub(super) const CANTOPEN: i32 = 14;
    pub(super) const NOTADB: i32 = 26;
}

/// Turns an error of any SQLite binding into a store error whose message
/// says what to do, by SQLite's primary result code.
pub fn sql_store_error(error: &SqlError, location: &str) -> StoreError {
    match error.primary_code() {
        Some(code::BUSY | code::LOCKED) => StoreError::new(
            StoreErrorKind::Busy,
            format!(
                "{location} stayed locked by other writers past the retry budget; retry the command"
            ),
        ),
        Some(code::READONLY) => StoreError::other(format!(
            "{location} is read-only for this process; check its permissions (and those of its folder, \
             where SQLite keeps the -wal and -shm files)"
        )),
        Some(code::NOTADB) => StoreError::other(format!(
            "{location} is not an SQLite database; point --db at an inbox database or a new file"
        )),
        Some(code::CANTOPEN | code::PERM) => StoreError::other(match diagnose(location) {
            Some(cause) => format!("cannot open {location}: {cause}"),
            None => format!("cannot open {location}; check that the folder exists and is writable"),
        }),
        Some(code::IOERR) => StoreError::other(match diagnose(location) {
            Some(cause) => format!("{location}: {error}: {cause}"),
            None => format!(
                "{location}: {error}; if the database's -wal or -shm was deleted or replaced \
                     while agents ran, stop them all and run the command again (see the safety \
                     guide, docs/safety.md)"
            ),
        }),
        Some(code::FULL) => StoreError::other(format!(
            "the disk holding {location} is full; nothing was written"
        )),
        _ => StoreError::other(format!("{location}: {error}")),
    }
}

/// What the database's files and folder say about an open failure (see
/// `file::diagnose`); nothing where there are no files to look at (wasm).
#[cfg(feature = "native")]
fn diagnose(location: &str) -> Option<String> {
    crate::file::diagnose(std::path::Path::new(location))
}

#[cfg(not(feature = "native"))]
fn diagnose(_location: &str) -> Option<String> {
    None
}
