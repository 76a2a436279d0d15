//! Runs the inbox engine as a sandboxed WebAssembly component inside your
//! process, with the storage on your side of the sandbox.
//!
//! A component of the world `inbox:engine/plugin` (`plugins/wit/inbox.wit`;
//! `inbox-plugin-build` makes one from `plugins/engine-component`) owns every
//! inbox rule; this crate gives it what it imports (a store, a clock, a seed)
//! and calls what it exports. Any [`inbox_engine::Store`] serves the store:
//! the native SQLite store, the in-memory store, or one of your own. Swap
//! the `.wasm` file to upgrade the engine without rebuilding the host.
//!
//! ```no_run
//! use inbox_engine::{ManualClock, MemoryStore, Timestamp};
//! use inbox_plugin_host::{Limits, Plugin};
//!
//! # fn main() -> Result<(), inbox_plugin_host::PluginError> {
//! // Compile once (the costly step), then instantiate per store.
//! let plugin = Plugin::from_file("target/plugins/inbox-engine.wasm".as_ref(), Limits::default())?;
//! let clock = ManualClock::new(Timestamp::from_millis(1_767_225_600_000));
//! let mut engine = plugin.instantiate(MemoryStore::new(), clock, 42)?;
//! let sent = engine.execute_json(
//!     r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login"}"#,
//! )?;
//! assert_eq!(sent.exit_code, 0);
//! # Ok(())
//! # }
//! ```
//!
//! # The sandbox
//!
//! Every call runs with a fuel budget (a runaway loop stops) and a memory
//! cap (an allocation storm stops); a trap of any kind, including those two,
//! comes back as a [`PluginError`], the open transaction is rolled back, and
//! the instance is replaced on the next call, so the store is never left
//! half-written. The host also holds the component to the transaction
//! protocol: reads only inside a transaction, writes only inside a write
//! transaction, no transaction left open when a call returns.
//!
//! - [`plugin`]: [`Plugin`] (a compiled component) and [`PluginEngine`] (an
//!   instance over one store; an [`inbox_engine::Executor`], so the engine's
//!   waiter drives `watch` and `wait-reply` through it);
//! - [`host`]: what the component imports, served from an engine store;
//! - [`limits`]: [`Limits`] and the memory cap.
//!
//! This crate must never hold an inbox rule of its own, and it is the only
//! one (with the CLI's optional `plugin` feature) that builds wasmtime.

pub mod host;
pub mod limits;
pub mod plugin;

pub use limits::Limits;
pub use plugin::{Plugin, PluginEngine, PluginError, PluginResponse};

/// What wasmtime's `bindgen!` generates for the world: the import traits
/// [`host`] implements and the typed export calls [`plugin`] makes.
pub mod bindings {
    #![allow(missing_docs, unreachable_pub, clippy::all)]
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin",
    });
}
