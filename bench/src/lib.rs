//! The library half of `inbox-bench`: the file peers ([`files`]), the ways
//! agent teams coordinate today through plain files. The harness (the
//! `inbox-bench` binary) drives them in process and through
//! `inbox-bench-peer`, the helper that runs one peer operation per process
//! the way a shell-scripted agent would; both link this library, so the
//! helper carries nothing of the harness (no server clients, no engine).
//!
//! Everything else of the harness lives in the `inbox-bench` binary; what it
//! shares with `inbox-plugin-bench` lives in `inbox-bench-kit`. This library
//! must never depend on the rest of the harness.

pub mod files;
