//! The native host: what every native surface (the `inbox` and `orch`
//! command lines, `inbox daemon`, the MCP server, the board, the bridges)
//! shares around the engine and its stores:
//!
//! - [`Global`]: the flags every surface takes;
//! - [`run`]: one call run on the database those flags name, the way every
//!   surface runs it ([`database`] says which database; [`runner`] which
//!   engine; [`postgres`] runs it on a URL);
//! - [`clock`]: the host clock (optionally started at `INBOX_NOW` in test
//!   builds), ids and secrets; [`secret`]: secrets kept in files;
//! - [`artifact`]: what a host can say about a file an artifact names;
//! - [`terminal`]: agents' text made safe for a terminal; [`hosted`]: what
//!   the servers share around serving;
//! - [`folder`]: a folder other programs write into and a bridge keeps,
//!   read and written without trusting it, and its changes waited for;
//! - [`git_workspace`]: orch's git workspace as a native process runs it.
//!
//! The stores are crates of their own: `inbox-sqlite` (the default, an
//! SQLite file) and `inbox-postgres` (`--db postgres://…`), and so is the
//! git workspace (`inbox-git`). No inbox rule may live in this crate: it
//! opens, runs and says; the engine decides.

pub mod artifact;
pub mod clock;
pub mod database;
pub mod folder;
mod global;
pub mod hosted;
pub mod postgres;
pub mod run;
pub mod runner;
pub mod secret;
pub mod terminal;

pub use global::Global;

pub use clock::{HostClock, host_ids, os_seed};
pub use inbox_sqlite::SqliteStore;

/// The engine over SQLite as a native process runs it.
pub type NativeEngine = inbox_engine::Engine<SqliteStore, HostClock, inbox_engine::UlidIds>;

/// Runs one call on a [`NativeEngine`]. A plain function, not a generic
/// one, on purpose: a release build compiles a generic function's code in
/// every crate that calls it, so the engine's code for the SQLite store is
/// compiled once, here, rather than again in each crate that runs calls
/// (the bridges, import): the CLI library's release compile went from
/// 54 s to 41 s (`cargo build --timings`, 2026-12-08).
pub fn execute_call(engine: &mut NativeEngine, call: inbox_engine::Call) -> inbox_engine::Response {
    engine.execute_call(call)
}

/// The test builds' variable that stops a process at a step of an orch
/// dispatch (see [`inbox_git::GitWorkspace::stalling_at`]): the crash
/// tests kill it there.
pub const DISPATCH_STALL_ENV: &str = "INBOX_TEST_DISPATCH_STALL";

/// orch's git workspace, stopping at a dispatch step that
/// [`DISPATCH_STALL_ENV`] names (test builds only, see
/// [`folder::stall_at`]).
pub fn git_workspace() -> inbox_git::GitWorkspace {
    inbox_git::GitWorkspace::new().stalling_at(|step| folder::stall_at(DISPATCH_STALL_ENV, step))
}
