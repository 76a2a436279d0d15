//! The two engines under comparison, one row of [`EngineKind`] each, both
//! driven through the JSON wire format (the kit's [`Json`] caller): request
//! text in, response text out, which is the work a `--json` caller gets.
//!
//! The built-in engine decodes and encodes in this process (the kit's
//! `JsonEngine` for the native engine); the component does both inside wasm
//! and the host copies the text across ([`Component`]). Every store comes
//! from the kit's [`StoreKind`], set up the same way for either engine, so
//! a difference between them is the engine's. A new host is one row here
//! and one `JsonEngine` adapter. This module must never touch a store after
//! handing it to an engine.

use std::path::Path;

use anyhow::{Context, Result};
use inbox_bench_kit::rates::{Answer, Caller, Json, JsonEngine};
use inbox_bench_kit::stores::{AnyStore, StoreKind};
use inbox_engine::{Clock, Store};
use inbox_host_native::{HostClock, os_seed};
use inbox_plugin_host::{Plugin, PluginEngine};
use serde::Serialize;

/// Which engine runs the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum EngineKind {
    /// `inbox_engine::Engine`, compiled into this process.
    BuiltIn,
    /// The engine component in wasmtime (`inbox_plugin_host::PluginEngine`).
    Component,
}

impl EngineKind {
    /// Both, the baseline first.
    pub(crate) const ALL: [EngineKind; 2] = [EngineKind::BuiltIn, EngineKind::Component];

    /// The name in the raw results and the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            EngineKind::BuiltIn => "built-in",
            EngineKind::Component => "component",
        }
    }

    /// The name in the report's tables.
    pub(crate) fn label(self) -> &'static str {
        match self {
            EngineKind::BuiltIn => "built-in (`Engine::execute_json`)",
            EngineKind::Component => "component (`PluginEngine::execute_json`)",
        }
    }
}

/// The stores the command workloads run over: the file first (what agents
/// run on).
pub(crate) const STORES: [StoreKind; 2] = [StoreKind::SqliteFile, StoreKind::Memory];

/// The engine component through its own JSON entry point
/// (`PluginEngine::execute_json`: decoding and encoding happen inside wasm).
pub(crate) struct Component<S: Store + 'static, C: Clock + 'static>(pub(crate) PluginEngine<S, C>);

impl<S: Store + 'static, C: Clock + 'static> JsonEngine for Component<S, C> {
    fn call(&mut self, request: &str) -> Result<Answer> {
        let response = self
            .0
            .execute_json(request)
            .with_context(|| format!("the component failed on {request}"))?;
        Ok(Answer {
            exit_code: response.exit_code,
            json: response.json,
        })
    }
}

/// A new store of kind `store` (a file `name.db` under `dir` for the
/// SQLite store) under a new engine of kind `engine`, on the system clock,
/// with production ids: `host_ids()` for the built-in engine, an OS seed
/// for the component, as the CLI gives them.
pub(crate) fn fresh(
    engine: EngineKind,
    store: StoreKind,
    plugin: &Plugin,
    dir: &Path,
    name: &str,
) -> Result<Box<dyn Caller>> {
    let store = store.open(dir, name)?;
    let clock = HostClock::system();
    Ok(match (engine, store) {
        (EngineKind::BuiltIn, store) => Box::new(Json(store.engine())),
        (EngineKind::Component, AnyStore::Sqlite(store)) => Box::new(Json(Component(
            plugin.instantiate(store, clock, os_seed())?,
        ))),
        (EngineKind::Component, AnyStore::Memory(store)) => Box::new(Json(Component(
            plugin.instantiate(store, clock, os_seed())?,
        ))),
    })
}
