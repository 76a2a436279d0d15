//! orch: the leader's control plane, beside inbox in the same engine and the
//! same store. A run holds a task graph; orch computes what is ready,
//! dispatches each attempt as an inbox thread (through the engine's own
//! `send`, `reply` and `cancel`), follows the thread's status, and applies
//! review, retries with backoff, skipping and cancellation.
//!
//! - [`model`]: runs, tasks, attempts, orch events and their vocabularies.
//! - [`rules`]: the task state machine as a table, backoff, cycles, outcomes.
//! - [`query`]: what orch asks a store.
//! - [`wire`]: the orch commands' requests and outputs.
//! - [`workspace`]: git worktrees for code-writing attempts: what orch asks
//!   of a host that runs git, and the rules about worktrees.
//! - [`council`]: council review's shapes (seats, closed lists, answers and
//!   their reading); [`council_report`]: how answers are grouped and tallied.
//!
//! The handlers are in the engine (`engine::orch`). The boundary runs one
//! way: orch reads and writes inbox threads; inbox's commands know nothing
//! of runs or tasks, and workers never need orch. Like the rest of the
//! engine, nothing here does I/O or reads a clock.

pub mod council;
pub mod council_report;
pub mod model;
pub mod query;
pub mod rules;
pub mod wire;
pub mod workspace;
