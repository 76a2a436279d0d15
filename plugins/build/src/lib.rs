//! Builds guest crates into WebAssembly components, from source, every
//! time it is asked (cargo makes a rebuild of unchanged sources free).
//!
//! 1. `cargo build` the guest crate for `wasm32-unknown-unknown` (profile
//!    `wasm`), in its own target folder `target/plugins/cargo` so that it
//!    never waits on the lock of a `cargo test` that called it;
//! 2. `wit-component` turns the core module, whose custom section names the
//!    world `inbox:engine/plugin`, into a component, and validates it;
//! 3. the component is written to `target/plugins/<name>.wasm` atomically
//!    (temporary file, then rename), so concurrent builds never see half a
//!    file.
//!
//! Tests, benchmarks, the conformance runner and `scripts/build-plugin` use
//! it; no component binary is ever checked in. This crate must never load or
//! run a component; that is `inbox-plugin-host`'s.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A guest crate of this workspace that builds into a component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guest {
    /// `plugins/engine-component`: the inbox engine.
    Engine,
    /// `plugins/fault-component`: the misbehaving component the host's
    /// tests use.
    Fault,
}

impl Guest {
    /// The cargo package.
    pub fn package(self) -> &'static str {
        match self {
            Guest::Engine => "inbox-engine-component",
            Guest::Fault => "inbox-fault-component",
        }
    }

    /// The component's file name under `target/plugins/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Guest::Engine => "inbox-engine.wasm",
            Guest::Fault => "inbox-fault.wasm",
        }
    }

    fn core_module(self) -> String {
        format!("{}.wasm", self.package().replace('-', "_"))
    }
}

/// Why a component could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `cargo` could not be started or failed (its output went to stderr).
    #[error(
        "cargo build of {package} for wasm32-unknown-unknown failed: {detail}; install the target with `rustup target add wasm32-unknown-unknown`"
    )]
    Cargo {
        /// The guest package.
        package: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `wit-component` refused the core module.
    #[error("{path} is not a core module of the world inbox:engine/plugin: {detail}")]
    Componentize {
        /// The core module.
        path: PathBuf,
        /// What wit-component said.
        detail: String,
    },
}

impl BuildError {
    /// A stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            BuildError::Cargo { .. } => "cargo_failed",
            BuildError::Io { .. } => "io_error",
            BuildError::Componentize { .. } => "not_a_component",
        }
    }
}

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    // plugins/build -> the workspace.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .to_path_buf()
}

/// Where components are written: `target/plugins`.
pub fn out_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("plugins")
}

/// Builds `guest` and returns the component's path. Call it once per
/// process; it runs cargo each time (quick when nothing changed).
///
/// # Errors
///
/// When cargo fails (the wasm target missing, a compile error) or the core
/// module is not a module of our world.
pub fn build(guest: Guest) -> Result<PathBuf, BuildError> {
    let out = out_dir();
    let cargo_target = out.join("cargo");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--quiet", "--locked", "--profile", "wasm"])
        .args(["--target", "wasm32-unknown-unknown", "-p", guest.package()])
        .env("CARGO_TARGET_DIR", &cargo_target)
        .status()
        .map_err(|e| BuildError::Cargo {
            package: guest.package(),
            detail: format!("cannot run cargo: {e}"),
        })?;
    if !status.success() {
        return Err(BuildError::Cargo {
            package: guest.package(),
            detail: format!("cargo exited with {status}"),
        });
    }
    let core = cargo_target
        .join("wasm32-unknown-unknown/wasm")
        .join(guest.core_module());
    let bytes = std::fs::read(&core).map_err(|source| BuildError::Io {
        path: core.clone(),
        source,
    })?;
    let component = componentize(&bytes).map_err(|detail| BuildError::Componentize {
        path: core.clone(),
        detail,
    })?;
    let path = out.join(guest.file_name());
    let temp = out.join(format!("{}.{}.tmp", guest.file_name(), std::process::id()));
    std::fs::write(&temp, &component)
        .and_then(|()| std::fs::rename(&temp, &path))
        .map_err(|source| BuildError::Io {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// Turns a core module built with wit-bindgen into a validated component.
///
/// # Errors
///
/// wit-component's message, when the module has no world in its custom
/// section or does not match it.
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(core)
        .and_then(|mut encoder| encoder.encode())
        .map_err(|e| format!("{e:#}"))
}
