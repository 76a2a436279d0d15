//! `inbox-bench-kit`: what the repository's benchmark harnesses share, so
//! that they measure and report the same things the same way. `inbox-bench`
//! (`bench/`, the comparison with other systems and the native figures of
//! the wasm benchmark) and `inbox-plugin-bench` (`plugins/bench/`, the
//! engine component against the built-in engine) both use it.
//!
//! - [`rates`]: the two in-process workloads every engine benchmark runs
//!   (`send`, and `claim` with `next` followed by `done`), over any engine
//!   behind a small [`rates::Caller`] adapter;
//! - [`stores`]: the kinds of store those workloads run over, each created
//!   the way `inbox init` creates it;
//! - [`stats`]: percentiles, medians and ranges of samples, and ratios;
//! - [`machine`]: what a report says about the machine and the commit;
//! - [`markdown`]: the Markdown writer (headings, paragraphs, lists and
//!   tables) both reports are written with.
//!
//! A new store is one row of [`stores::StoreKind`] (and its constructor); a
//! new host is one [`rates::Caller`] or [`rates::JsonEngine`] adapter and one
//! row of the harness's own list of engines. This crate owns no report
//! layout and no number format: each harness decides what its report says.
//! It must never change a store behind an engine's back (every change to a
//! store after its creation is a request through the engine measured), and
//! never drops a sample.

pub mod machine;
pub mod markdown;
pub mod rates;
pub mod stats;
pub mod stores;
