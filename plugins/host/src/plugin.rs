//! [`Plugin`]: a component compiled once; [`PluginEngine`]: an instance of
//! it over one store, called with limits, replaced after a trap.

use std::path::Path;
use std::sync::Arc;

use inbox_engine::{Call, Clock, EngineError, ErrorCode, Executor, Response, Store, Timestamp};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Trap};

use crate::bindings;
use crate::host::HostState;
use crate::limits::{Limits, MemoryCap};

/// What went wrong on the host's side of a component call. The store is
/// never left with a transaction open: every error after a call started
/// comes after a rollback.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read the engine component {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a component wasmtime can compile.
    #[error(
        "not a WebAssembly component wasmtime can load: {message}; build one with scripts/build-plugin"
    )]
    Invalid {
        /// What wasmtime said.
        message: String,
    },
    /// The component is not of the world `inbox:engine/plugin@0.5.0`: it
    /// imports something the host does not provide, or lacks an export.
    #[error("the component does not fit this host (world inbox:engine/plugin@0.5.0): {message}")]
    Incompatible {
        /// What wasmtime said.
        message: String,
    },
    /// The call used all its fuel: a runaway loop, or a command far larger
    /// than [`Limits::fuel`] allows.
    #[error(
        "the engine component ran out of fuel ({fuel} units) and was stopped; the transaction was rolled back"
    )]
    OutOfFuel {
        /// The limit that was hit.
        fuel: u64,
    },
    /// The instance asked for more memory than [`Limits::memory_bytes`].
    #[error(
        "the engine component needed more than {memory_bytes} bytes of memory and was stopped; the transaction was rolled back"
    )]
    OutOfMemory {
        /// The limit that was hit.
        memory_bytes: usize,
    },
    /// The component trapped (a bug in it, or a deliberate abort).
    #[error("the engine component trapped: {message}; the transaction was rolled back")]
    Trapped {
        /// The trap, as wasmtime reports it.
        message: String,
    },
    /// The component returned but broke the protocol (left a transaction
    /// open, or answered with something that is not a response).
    #[error("the engine component broke the protocol: {message}")]
    Protocol {
        /// What it did.
        message: String,
    },
    /// `run-script` refused the script (it does not parse).
    #[error("{message}")]
    Script {
        /// The parser's message, with the line.
        message: String,
    },
}

impl PluginError {
    /// A stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            PluginError::Read { .. } => "plugin_unreadable",
            PluginError::Invalid { .. } => "plugin_invalid",
            PluginError::Incompatible { .. } => "plugin_incompatible",
            PluginError::OutOfFuel { .. } => "plugin_out_of_fuel",
            PluginError::OutOfMemory { .. } => "plugin_out_of_memory",
            PluginError::Trapped { .. } => "plugin_trapped",
            PluginError::Protocol { .. } => "plugin_protocol",
            PluginError::Script { .. } => "script_invalid",
        }
    }

    /// The error as the wire contract reports it to agents: a command that
    /// failed because the engine did is `internal_error` (exit 50) with
    /// this error's message.
    pub fn into_response(self, command: Option<String>) -> Response {
        Response::failure(
            command,
            EngineError::Relayed {
                code: ErrorCode::InternalError,
                message: self.to_string(),
            },
        )
    }
}

/// One command's outcome, as the component returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginResponse {
    /// The contract's exit code.
    pub exit_code: u8,
    /// The JSON response, exactly as `inbox --json` prints it.
    pub json: String,
}

/// A component compiled for this machine. Compile once ([`Plugin::from_file`]
/// is the expensive step), then [`Plugin::instantiate`] per store; cloning
/// is cheap and shares the compiled code.
#[derive(Clone)]
pub struct Plugin {
    engine: Engine,
    component: Component,
    limits: Limits,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Reads and compiles a component file.
    ///
    /// # Errors
    ///
    /// [`PluginError::Read`] or [`PluginError::Invalid`].
    pub fn from_file(path: &Path, limits: Limits) -> Result<Plugin, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Plugin::from_bytes(&bytes, limits)
    }

    /// Compiles a component from its bytes.
    ///
    /// # Errors
    ///
    /// [`PluginError::Invalid`] when wasmtime cannot compile them.
    pub fn from_bytes(bytes: &[u8], limits: Limits) -> Result<Plugin, PluginError> {
        Plugin::compile(Config::new(), bytes, limits)
    }

    /// Like [`Plugin::from_file`], but keeps the compiled code in `cache_dir`
    /// (wasmtime's cache; keyed by the component's bytes, the wasmtime
    /// version and the settings), so the next process that loads the same
    /// file skips compiling it. A cache that cannot be used is skipped.
    ///
    /// # Errors
    ///
    /// As [`Plugin::from_file`].
    #[cfg(feature = "cache")]
    pub fn from_file_cached(
        path: &Path,
        limits: Limits,
        cache_dir: &Path,
    ) -> Result<Plugin, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Config::new();
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(cache_dir);
        if let Ok(cache) = wasmtime::Cache::new(cache) {
            config.cache(Some(cache));
        }
        Plugin::compile(config, &bytes, limits)
    }

    fn compile(mut config: Config, bytes: &[u8], limits: Limits) -> Result<Plugin, PluginError> {
        // Say plainly what the two common mistakes are; wasmtime's parser
        // messages dump byte arrays.
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err(PluginError::Invalid {
                    message: "it is a core WebAssembly module, not a component (componentize it with wit-component)".into(),
                });
            }
            Some([0, b'a', b's', b'm', ..]) => {}
            _ => {
                return Err(PluginError::Invalid {
                    message: "the file is not WebAssembly (it does not start with \\0asm)".into(),
                });
            }
        }
        config.wasm_component_model(true);
        config.consume_fuel(true);
        let invalid = |e: wasmtime::Error| PluginError::Invalid {
            message: format!("{e:#}"),
        };
        let engine = Engine::new(&config).map_err(invalid)?;
        let component = Component::new(&engine, bytes).map_err(invalid)?;
        check_world(&engine, &component)?;
        Ok(Plugin {
            engine,
            component,
            limits,
        })
    }

    /// What the component imports, as `interface` names (for a component of
    /// our world: `inbox:engine/types@0.5.0`, `.../store@0.5.0`,
    /// `.../clock@0.5.0`, `.../entropy@0.5.0`, and nothing else).
    pub fn imports(&self) -> Vec<String> {
        self.component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// The limits every call runs with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// An instance over `store`, with `clock` for the time and `seed` for
    /// the engine's ids (give every process a different one). Cheap next to
    /// compiling; see `docs/plugin-benchmarks.md`.
    ///
    /// # Errors
    ///
    /// [`PluginError::Incompatible`] when the component is not of our world;
    /// [`PluginError::OutOfMemory`] when its initial memory is over the cap.
    pub fn instantiate<S, C>(
        &self,
        store: S,
        clock: C,
        seed: u64,
    ) -> Result<PluginEngine<S, C>, PluginError>
    where
        S: Store + 'static,
        C: Clock + 'static,
    {
        let state = HostState::new(store, clock, seed, MemoryCap::new(self.limits.memory_bytes));
        let mut engine = PluginEngine {
            plugin: self.clone(),
            wasm: new_wasm_store(&self.engine, state),
            instance: None,
            fuel_used: 0,
        };
        engine.instance()?;
        Ok(engine)
    }
}

/// Refuses a component that is not of our world (an import we do not
/// serve, an export missing or of another type) when it is loaded, before a
/// caller opens a database for it. Type-checking does not depend on the
/// store or clock types, so any will do here.
fn check_world(engine: &Engine, component: &Component) -> Result<(), PluginError> {
    type Probe = HostState<inbox_engine::MemoryStore, inbox_engine::ManualClock>;
    let incompatible = |e: wasmtime::Error| PluginError::Incompatible {
        message: format!("{e:#}"),
    };
    let mut linker = Linker::<Probe>::new(engine);
    bindings::Plugin::add_to_linker::<_, HasSelf<Probe>>(&mut linker, |state| state)
        .map_err(incompatible)?;
    let pre = linker.instantiate_pre(component).map_err(incompatible)?;
    bindings::PluginPre::new(pre).map_err(incompatible)?;
    Ok(())
}

/// The engine component running over one store: call [`PluginEngine::execute_json`]
/// (or use it as an [`Executor`]) as you would call `Engine::execute`.
pub struct PluginEngine<S: 'static, C: 'static> {
    plugin: Plugin,
    wasm: wasmtime::Store<HostState<S, C>>,
    /// `None` after a trap: the next call instantiates afresh. (An `Arc` so
    /// a call can hold it while borrowing the wasmtime store mutably.)
    instance: Option<Arc<bindings::Plugin>>,
    /// Fuel the last call burned.
    fuel_used: u64,
}

impl<S: Store + 'static, C: Clock + 'static> PluginEngine<S, C> {
    /// The store the component reads and writes.
    pub fn store(&self) -> &S {
        &self.wasm.data().store
    }

    /// The store, mutably (for host-side setup between calls).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.wasm.data_mut().store
    }

    /// The clock the component reads.
    pub fn clock_mut(&mut self) -> &mut C {
        &mut self.wasm.data_mut().clock
    }

    /// Where the component's secrets (agent tokens) come from: a
    /// cryptographic random source of the host's, asked each time the
    /// engine issues one. Without it the engine issues no tokens (a
    /// database that requires them refuses `agent register`).
    pub fn set_secrets(&mut self, source: inbox_engine::ids::SecretSource) {
        self.wasm.data_mut().secrets = Some(source);
    }

    /// The fuel the last call burned: a deterministic measure of the work
    /// the engine did (about one unit per wasm instruction).
    pub fn fuel_used(&self) -> u64 {
        self.fuel_used
    }

    /// Takes the store back.
    pub fn into_store(self) -> S {
        self.wasm.into_data().store
    }

    /// Executes one request in the JSON wire format, as one transaction.
    ///
    /// # Errors
    ///
    /// When the component trapped, ran out of fuel or memory, or broke the
    /// protocol; the transaction was rolled back. Refusals by the engine
    /// (bad input, a conflict) are not errors: they are responses.
    pub fn execute_json(&mut self, request: &str) -> Result<PluginResponse, PluginError> {
        let instance = self.instance()?;
        self.prepare_call();
        let called = instance
            .inbox_engine_engine()
            .call_execute(&mut self.wasm, request);
        let response = self.finish_call(called)?;
        Ok(PluginResponse {
            exit_code: response.exit_code,
            json: response.json,
        })
    }

    /// Runs a transition script inside the component, over this store
    /// (which should be empty), on the script clock with sequential ids.
    ///
    /// # Errors
    ///
    /// [`PluginError::Script`] when the script does not parse; the call
    /// errors of [`PluginEngine::execute_json`].
    pub fn run_script(&mut self, script: &str) -> Result<inbox_engine::Transcript, PluginError> {
        let instance = self.instance()?;
        self.prepare_call();
        let called = instance
            .inbox_engine_engine()
            .call_run_script(&mut self.wasm, script);
        match self.finish_call(called)? {
            Ok(transcript) => Ok(inbox_engine::Transcript {
                text: transcript.text,
                failures: transcript.failures,
            }),
            Err(message) => Err(PluginError::Script { message }),
        }
    }

    /// The live instance, made afresh after a trap.
    fn instance(&mut self) -> Result<Arc<bindings::Plugin>, PluginError> {
        if let Some(instance) = &self.instance {
            return Ok(Arc::clone(instance));
        }
        let mut linker = Linker::new(&self.plugin.engine);
        bindings::Plugin::add_to_linker::<_, HasSelf<HostState<S, C>>>(&mut linker, |state| state)
            .map_err(|e| PluginError::Incompatible {
                message: format!("{e:#}"),
            })?;
        // Instantiation runs the component's start code: give it fuel.
        self.prepare_call();
        let instance =
            bindings::Plugin::instantiate(&mut self.wasm, &self.plugin.component, &linker)
                .map_err(|e| {
                    if self.wasm.data().memory.refused() {
                        PluginError::OutOfMemory {
                            memory_bytes: self.plugin.limits.memory_bytes,
                        }
                    } else {
                        PluginError::Incompatible {
                            message: format!("{e:#}"),
                        }
                    }
                })?;
        let instance = Arc::new(instance);
        self.instance = Some(Arc::clone(&instance));
        Ok(instance)
    }

    fn prepare_call(&mut self) {
        self.wasm.data_mut().memory.reset();
        // Only fails when fuel is not enabled, which `from_bytes` does.
        let _ = self.wasm.set_fuel(self.plugin.limits.fuel);
    }

    /// Turns a call's outcome into a result, rolling back whatever the
    /// component left open and retiring an instance that trapped.
    fn finish_call<T>(&mut self, called: wasmtime::Result<T>) -> Result<T, PluginError> {
        let left = self.wasm.get_fuel().unwrap_or(0);
        self.fuel_used = self.plugin.limits.fuel.saturating_sub(left);
        let state = self.wasm.data_mut();
        match called {
            Ok(value) if !state.in_transaction() => Ok(value),
            Ok(_) => {
                let rollback = state.abandon_transaction();
                Err(PluginError::Protocol {
                    message: format!(
                        "it returned with a transaction open; the host rolled it back{}",
                        rollback_note(rollback)
                    ),
                })
            }
            Err(error) => {
                // A trapped instance must not run again (its memory may be
                // mid-update); the next call makes a new one over the same
                // store.
                self.instance = None;
                let rollback = state.abandon_transaction();
                let error = if state.memory.refused() {
                    PluginError::OutOfMemory {
                        memory_bytes: self.plugin.limits.memory_bytes,
                    }
                } else if error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                    PluginError::OutOfFuel {
                        fuel: self.plugin.limits.fuel,
                    }
                } else {
                    // The trap code says what happened ("wasm `unreachable`
                    // instruction executed"); the outer error is a backtrace.
                    let trap = match error.downcast_ref::<Trap>() {
                        Some(trap) => trap.to_string(),
                        None => format!("{error:#}"),
                    };
                    PluginError::Trapped {
                        message: format!("{trap}{}", rollback_note(rollback)),
                    }
                };
                // Drop the dead instance's memory with the old wasmtime store.
                self.renew_store();
                Err(error)
            }
        }
    }

    /// Moves the host state into a fresh wasmtime store, freeing the trapped
    /// instance's memory (a wasmtime store frees its instances only when it
    /// is dropped).
    fn renew_store(&mut self) {
        let engine = self.plugin.engine.clone();
        // `into_data` consumes the old store; replace_with moves it out and
        // the new one in without a placeholder value. Nothing in the closure
        // panics, so the abort it guards against cannot happen.
        replace_with::replace_with_or_abort(&mut self.wasm, |old| {
            new_wasm_store(&engine, old.into_data())
        });
    }
}

/// A wasmtime store over `state`, with the memory cap as its limiter.
fn new_wasm_store<S: 'static, C: 'static>(
    engine: &Engine,
    state: HostState<S, C>,
) -> wasmtime::Store<HostState<S, C>> {
    let mut store = wasmtime::Store::new(engine, state);
    store.limiter(|state| &mut state.memory);
    store
}

fn rollback_note(rollback: Result<(), inbox_engine::StoreError>) -> String {
    match rollback {
        Ok(()) => String::new(),
        Err(e) => format!(" (and the rollback failed: {e})"),
    }
}

impl<S: Store + 'static, C: Clock + 'static> Executor for PluginEngine<S, C> {
    fn execute_call(&mut self, call: Call) -> Response {
        let command = call.request.command();
        let json = match serde_json::to_string(&call.to_value()) {
            Ok(json) => json,
            Err(e) => {
                return PluginError::Protocol {
                    message: format!("the request could not be encoded: {e}"),
                }
                .into_response(Some(command.as_str().to_owned()));
            }
        };
        match self.execute_json(&json) {
            Ok(response) => Response::from_json(&response.json).unwrap_or_else(|message| {
                PluginError::Protocol {
                    message: format!("its response is not the JSON contract: {message}"),
                }
                .into_response(Some(command.as_str().to_owned()))
            }),
            Err(error) => error.into_response(Some(command.as_str().to_owned())),
        }
    }

    fn now(&mut self) -> Timestamp {
        self.wasm.data_mut().clock.now()
    }

    fn ticks(&mut self) -> u64 {
        self.wasm.data_mut().clock.ticks()
    }
}
