//! The inbox engine for JavaScript: one [`Inbox`] class that browsers, web
//! workers, Node and editor extensions use in-process, with no native binary
//! and no server.
//!
//! This crate is a thin adapter, as `automerge-wasm` is over `automerge`: it
//! turns JS objects into the engine's wire requests and responses back into
//! JS objects (the CLI's `--json` contract, field for field), and chooses a
//! store. It must never hold an inbox rule of its own; every check, error
//! code and event comes from `inbox-engine`, so a transcript in wasm is byte
//! for byte the native one.
//!
//! - [`inbox`]: the `Inbox` class and its open options;
//! - [`backend`]: the engine over the chosen store;
//! - [`sqlite`]: SQLite in wasm memory or in OPFS, and a database file
//!   shared with the CLI (the `sqlite` feature, on by default), database
//!   bytes in and out;
//! - [`node_sqlite`]: Node's own SQLite (`node:sqlite`) under the same
//!   store, for the `file` store;
//! - [`node_files`]: Node's `fs`, to find and create the shared file;
//! - [`waits`]: `watch` and `waitReply` as Promises, woken by commits of the
//!   same instance or by their deadline, never by polling;
//! - [`js`]: the host side of the engine's interfaces (clock, id seed,
//!   timers) and JS errors;
//! - [`script`]: transition scripts, run in wasm exactly as natively;
//! - [`typescript`]: the declarations the derives in the engine cannot write.
//!
//! On a native target the crate is empty, so a workspace build for the host
//! does not compile SQLite for wasm.

#[cfg(target_family = "wasm")]
pub mod backend;
#[cfg(target_family = "wasm")]
pub mod inbox;
#[cfg(target_family = "wasm")]
pub mod js;
#[cfg(all(target_family = "wasm", feature = "sqlite"))]
pub mod node_files;
#[cfg(all(target_family = "wasm", feature = "sqlite"))]
pub mod node_sqlite;
#[cfg(target_family = "wasm")]
pub mod script;
#[cfg(all(target_family = "wasm", feature = "sqlite"))]
pub mod sqlite;
#[cfg(target_family = "wasm")]
pub mod typescript;
#[cfg(target_family = "wasm")]
pub mod waits;

#[cfg(target_family = "wasm")]
pub use inbox::Inbox;
