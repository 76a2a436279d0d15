//! The fault and abuse harness of inbox: it attacks the real `inbox`
//! binary, as separate processes on a real SQLite file, the ways agent
//! processes fail in practice, and audits the database after each attack.
//!
//! - [`crash`]: a mixed workload of concurrent processes, some SIGKILLed at
//!   pseudo-random moments, for hundreds of iterations;
//! - [`stop`]: workers SIGSTOPped past their lease, attempt exhaustion, and a
//!   writer stuck holding the write lock;
//! - [`load`]: 32 worker processes draining a queue for a sustained period;
//! - [`db`]: reading a database from outside and checking its invariants;
//! - [`process`]: running, killing, stopping and locating `inbox`;
//! - [`failure`], [`rng`]: reporting violations, scratch folders, seeds.
//!
//! The fuzzing (JSON decoder, engine command sequences on both stores, the
//! argument parser) and the catalogue of bad inputs (`docs/bad-inputs.md`)
//! are this crate's tests (`tests/`). Every check runs in a short mode, what
//! `cargo test -p inbox-fault` runs in CI, and a long mode on demand: see
//! `fault/README.md`.
//!
//! This crate must never change inbox's behaviour or weaken a check to make
//! a run pass: a violation is reported with the seed, the evidence and the
//! kept database file.

pub mod crash;
pub mod db;
pub mod failure;
pub mod load;
pub mod process;
pub mod rng;
pub mod stop;

pub use failure::Failure;
pub use process::{Inbox, locate_inbox};
