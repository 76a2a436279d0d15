//! The inbox engine's store over SQLite ([`SqliteStore`]), and for native
//! processes the database file around it.
//!
//! - [`schema`]: tables, indexes and migrations (portable);
//! - [`store`]: the engine's `Store` over one connection of any SQLite
//!   binding ([`sql`]), its errors mapped once ([`error`]) (portable);
//! - [`lines`]: files of JSON lines read a line at a time (portable);
//! - [`open`]: finding, creating and opening the database file, with the
//!   connection settings that make one process per command cheap and safe;
//! - [`file`]: whether a database file can be trusted, and whether it is
//!   still the file a connection opened;
//! - [`watch`]: cross-process waiting (inotify on Linux, polling elsewhere);
//! - [`checkpointer`]: the WAL checkpoints a long-lived connection runs
//!   beside its writers;
//! - [`writer_gate`] and [`writer_turn`]: how native writers that waited
//!   too long for SQLite's write lock get their turn;
//! - [`clock`]: the kernel's wall clock, which every process shares;
//! - [`transfer`]: a self-contained copy of a database out, and one in;
//! - [`dump`]: a whole database as JSON lines, out and back in.
//!
//! Everything here is an adapter: no inbox rule may live in this crate. The
//! portable modules run over any SQLite binding ([`sql::Sql`]), so
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
pub mod error;
#[cfg(feature = "native")]
pub mod file;
pub mod format;
#[cfg(feature = "native")]
mod header;
#[cfg(feature = "native")]
pub mod import_source;
pub mod lines;
#[cfg(feature = "native")]
pub mod open;
pub mod schema;
pub mod sql;
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
pub use open::{
    DbPath, DbSource, Durability, Lifetime, open_existing, open_or_create, resolve_db_path,
    set_lifetime,
};
pub use store::SqliteStore;
