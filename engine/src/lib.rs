//! The inbox engine: the pure, deterministic core of a durable coordination
//! bus for AI agent teams. It owns every rule (the thread / lease / message
//! state machine, validation, error codes, events) and performs no I/O: no
//! files, no network, no threads, no system clock, no randomness. Time comes
//! from a [`Clock`], ids from an [`IdSource`], storage from a [`Store`], all
//! injected by the host, so every host (the native CLI, the wasm package, the
//! wasmtime plugin) behaves identically, byte for byte.
//!
//! # Map
//!
//! - [`model`]: the records (thread, message, artifact, lease, event, read
//!   cursor) and vocabularies (status, kind, priority, event type);
//!   [`vocabulary`]: how a closed set of names is declared once.
//! - [`address`]: who a thread or message is for (`NAME`, `role:NAME`,
//!   `broadcast`).
//! - [`rules`]: the state machine as a table, effective status of lapsed leases.
//! - [`validate`]: input limits and checks, applied before any transaction.
//! - [`command`]: the command set, defined once; everything that lists
//!   commands is generated from its table.
//! - [`wire`]: the JSON contract: `Request` in, `Response` out; [`call`]:
//!   a request with its envelope (the idempotency key).
//! - [`error`]: error codes and exit-code classes.
//! - [`store`]: the storage trait and its queries; [`memory`]: an in-memory store.
//! - [`orch`]: the leader's control plane (runs, task graph, dispatch,
//!   review, retries) in the same store and event sequence.
//! - [`engine`]: executes one request as one transaction.
//! - [`wait`]: a sans-IO driver for blocking `watch` / `wait-reply`.
//! - [`script`]: transition scripts, and the runner that turns one into a transcript.
//! - [`time`], [`ids`]: timestamps, the clock and id interfaces.
//!
//! The optional `typescript` feature (used by the wasm package) derives
//! TypeScript declarations of the wire types with `tsify`, and the optional
//! `schema` feature (used by the MCP server) derives JSON Schemas of the
//! wire requests with `schemars`; neither adds code that the engine runs.
//!
//! # Use
//!
//! ```
//! use inbox_engine::{Engine, ManualClock, MemoryStore, Request, SequentialIds};
//!
//! let clock = ManualClock::new(ManualClock::SCRIPT_EPOCH);
//! let mut engine = Engine::new(MemoryStore::new(), clock, SequentialIds::new());
//! let request = Request::from_json(
//!     r#"{"command":"send","from_agent":"lead","to_agent":"worker","subject":"Add login"}"#,
//! ).unwrap();
//! let response = engine.execute(request);
//! assert_eq!(response.exit_code(), 0);
//! assert!(response.to_json().starts_with(r#"{"ok":true,"command":"send","#));
//! ```

#![warn(clippy::print_stderr)]

pub mod address;
pub mod call;
pub mod command;
mod decode;
pub mod engine;
pub mod error;
pub mod ids;
pub mod memory;
pub mod model;
pub mod orch;
pub mod response;
pub mod rules;
pub mod script;
pub mod store;
pub mod time;
pub mod validate;
pub mod vocabulary;
pub mod wait;
pub mod wire;

pub use call::Call;
pub use command::{Command, Effect};
pub use command::{Output, Request};
pub use engine::Engine;
pub use error::{EngineError, ErrorCode, StoreError, StoreErrorKind};
pub use ids::{IdKind, IdSource, SequentialIds, UlidIds};
pub use memory::MemoryStore;
pub use model::{
    Agent, AgentRegistration, AgentTokens, Artifact, Event, EventId, EventType, IdempotencyRecord,
    JsonObject, Kind, Lease, LeaseToken, Message, Presence, Priority, ReadCursor, Settings, Status,
    Thread,
};
pub use response::Response;
pub use script::{Script, ScriptError, Transcript, run_script};
pub use store::{Store, StoreInfo, ThreadState, TxMode};
pub use time::{Clock, ManualClock, Timestamp, TimestampError};
pub use vocabulary::Vocabulary;
pub use wait::{Executor, WaitStep, Waiter};
