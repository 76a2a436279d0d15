//! The inbox engine for native processes: an SQLite [`SqliteStore`], the
//! host clock and ids, and blocking waits that wake when another process
//! commits.
//!
//! - [`schema`]: tables, indexes and migrations (portable);
//! - [`store`]: the engine's `Store` over one connection of any SQLite
//!   binding (portable);
//! - [`open`]: finding, creating and opening the database file, with the
//!   connection settings that make one process per command cheap and safe;
//! - [`file`]: whether a database file can be trusted, and whether it is
//!   still the file a connection opened;
//! - [`watch`]: cross-process waiting (inotify on Linux, polling elsewhere);
//! - [`folder`]: a folder other programs write into and a bridge keeps,
//!   read and written without trusting it, and its changes waited for;
//! - [`clock`]: the host clock (optionally started at `INBOX_NOW`) and id seeds;
//! - [`transfer`]: a self-contained copy of a database out, and one in;
//! - [`dump`]: a whole database as JSON lines, out and back in;
//! - [`lines`]: files of JSON lines read a line at a time (portable);
//! - [`writer_gate`]: the file by which a native writer that waited too
//!   long for SQLite's write lock holds the others back;
//! - [`pg`]: the engine's `Store` over PostgreSQL, for
//!   agents on several machines (docs/postgres.md).
//!
//! Everything here is an adapter: no inbox rule may live in this crate. The
//! portable modules run over any SQLite binding ([`store::sql::Sql`]), so
//! the wasm host reuses them over SQLite compiled to wasm and over Node's
//! `node:sqlite`: built without the default `native` feature, this crate is
//! just [`schema`], [`store`] and [`lines`]. Our code never writes a
//! database file's bytes itself; SQLite does, under its own locks.

#[cfg(feature = "native")]
pub mod checkpointer;
#[cfg(feature = "native")]
pub mod clock;
#[cfg(feature = "native")]
pub mod dump;
#[cfg(feature = "native")]
pub mod file;
#[cfg(feature = "native")]
pub mod folder;
#[cfg(feature = "native")]
pub mod git;
#[cfg(feature = "native")]
mod header;
#[cfg(feature = "native")]
pub mod import_source;
pub mod lines;
#[cfg(feature = "native")]
pub mod open;
#[cfg(feature = "native")]
pub mod pg;
pub mod schema;
pub mod store;
#[cfg(feature = "native")]
pub mod transfer;
#[cfg(feature = "native")]
pub mod watch;
#[cfg(feature = "native")]
pub mod writer_gate;
#[cfg(feature = "native")]
pub mod writer_turn;

#[cfg(feature = "native")]
pub use clock::{HostClock, host_ids, os_seed};
#[cfg(feature = "native")]
pub use open::{
    DbPath, DbSource, Durability, Lifetime, open_existing, open_or_create, resolve_db_path,
    set_lifetime,
};
#[cfg(feature = "native")]
pub use pg::PgStore;
pub use store::SqliteStore;

/// The engine over SQLite as a native process runs it.
#[cfg(feature = "native")]
pub type NativeEngine = inbox_engine::Engine<SqliteStore, HostClock, inbox_engine::UlidIds>;
