//! How a database's commits survive (its recorded [`Durability`]), how long
//! a writer waits for SQLite's write lock ([`BUSY_BUDGET`]), and what a
//! database file's header says about its journal: the connection settings
//! every host that opens a database file applies the same way, the native
//! CLI and Node's `file` store alike. Portable: no file system here.

use std::time::Duration;

use inbox_engine::StoreError;

use super::SqliteStore;
use crate::sql::Sql;

/// How long a writer waits for the write lock before giving up with
/// `storage_busy`. Write transactions last well under a millisecond, so
/// reaching this means a writer is stuck, not that the bus is busy.
pub const BUSY_BUDGET: Duration = Duration::from_secs(10);

/// How hard a commit works to survive a power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// `PRAGMA synchronous = NORMAL` in WAL mode: a crash of any process
    /// never loses or corrupts a committed command; a power loss or OS crash
    /// may roll back the last commits (never corrupt the file). The default:
    /// commits need no fsync, so a command costs about as much as starting
    /// the process.
    #[default]
    Normal,
    /// `PRAGMA synchronous = FULL`: every commit is fsynced before the
    /// command reports success, so it survives a power loss too.
    Full,
}

impl inbox_engine::Vocabulary for Durability {
    const NOUN: &'static str = "durability";
    const ALL: &'static [Durability] = &[Durability::Normal, Durability::Full];

    fn as_str(self) -> &'static str {
        match self {
            Durability::Normal => "normal",
            Durability::Full => "full",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Durability::Normal => {
                "Crash-safe, no fsync per commit; a power loss may roll back the last commits."
            }
            Durability::Full => {
                "Every commit is fsynced before it is reported, so it survives a power loss."
            }
        }
    }
}

impl Durability {
    /// Parses `normal` or `full`.
    pub fn parse(text: &str) -> Option<Durability> {
        inbox_engine::Vocabulary::parse(text)
    }

    /// `normal` or `full`.
    pub fn as_str(self) -> &'static str {
        inbox_engine::Vocabulary::as_str(self)
    }
}

/// The durability recorded in the database (`normal` if never set).
pub fn stored_durability<C: Sql>(store: &SqliteStore<C>) -> Result<Durability, StoreError> {
    match store.setting("durability")? {
        None => Ok(Durability::Normal),
        Some(text) => Durability::parse(&text).ok_or_else(|| {
            StoreError::other(format!(
                "{} records an unknown durability `{text}`; run `inbox init --durability normal` (or full)",
                store.location()
            ))
        }),
    }
}

/// Applies `durability` to the store's connection (`PRAGMA synchronous`).
pub fn apply_durability<C: Sql>(
    store: &SqliteStore<C>,
    durability: Durability,
) -> Result<(), StoreError> {
    let level = match durability {
        Durability::Normal => "NORMAL",
        Durability::Full => "FULL",
    };
    store
        .connection()
        .execute_batch(&format!("PRAGMA synchronous = {level}"))
        .map_err(|e| crate::error::sql_store_error(&e, store.location()))
}
