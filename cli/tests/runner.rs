//! The `inbox` command line, end to end: every module runs the real binary
//! as separate processes against real database files and snapshots what a
//! user sees (see `common`). One test binary, in the style of jj's
//! `cli/tests/runner.rs`, so the shared harness is compiled once.
//!
//! `plugin` runs the same commands through the engine component and is
//! compiled only with the `plugin` feature (`scripts/test` runs it with
//! `--features inbox-cli/plugin --test cli plugin::`); `postgres` runs
//! them over a throwaway PostgreSQL cluster.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod arguments_and_output;
mod artifacts;
mod bad_input;
mod board;
mod bridge;
mod bridge_teams;
mod clock;
mod completions_and_man;
mod concurrency;
mod daemon;
mod database;
mod export_import;
mod file_safety;
mod help;
mod interchange;
mod mcp;
mod orch;
mod plugin;
mod postgres;
mod roles;
mod same_refusals;
mod skill_and_script;
mod terminal;
mod tokens_and_retention;
mod waits;
mod worker_loop;
