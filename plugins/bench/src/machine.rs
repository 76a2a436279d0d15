//! What the report says about the machine and the versions measured: the
//! kit's [`Machine`] and this benchmark's versions (wasmtime as Cargo.lock
//! pins it, the bundled SQLite, the build profile). Read-only: it must
//! never change anything.

use std::path::Path;

use inbox_bench_kit::machine::{self, Machine};
use inbox_bench_kit::stores;
use serde::Serialize;

/// The machine and versions of one run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Environment {
    /// The machine.
    #[serde(flatten)]
    pub(crate) machine: Machine,
    /// The commit measured, and whether the tree had changes.
    pub(crate) commit: String,
    /// `rustc --version`.
    pub(crate) rustc: String,
    /// wasmtime, as Cargo.lock pins it.
    pub(crate) wasmtime: String,
    /// The bundled SQLite.
    pub(crate) sqlite: String,
    /// `release` or `debug`: how this harness (and the host) was built.
    pub(crate) profile: &'static str,
}

/// Collects the environment; `tmp` is the folder the stores live in,
/// `root` the workspace.
pub(crate) fn environment(root: &Path, tmp: &Path) -> Environment {
    // The report changes with every run; it is not the code measured.
    let commit = machine::commit(root, &["docs/plugin-benchmarks.md"]);
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
    Environment {
        machine: Machine::collect(tmp),
        commit: format!(
            "{}{}",
            commit.sha,
            if commit.dirty {
                " + uncommitted changes"
            } else {
                ""
            }
        ),
        rustc: machine::rustc(),
        wasmtime: machine::locked_version(&lock, "wasmtime").unwrap_or_else(|| "unknown".into()),
        sqlite: stores::sqlite_version().to_owned(),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    }
}
