//! The engine must stay pure: no file system, network, threads, process,
//! environment, system clock or OS randomness. The compiler checks the
//! engine's own code: `engine/clippy.toml` disallows every such method and
//! type, with the reason, and `scripts/test` runs clippy with `-D warnings`.
//! The wasm builds in `.ci/run` are the other half of the proof: the crate
//! compiles for `wasm32-unknown-unknown`, where most of these do not exist.
//! What clippy cannot see is what a dependency does, so this test keeps the
//! dependencies to a list of OS-free crates.

// Tests report failures by panicking; this test reads the manifest, which
// the engine's purity lints are not about.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods
)]

use std::path::Path;

/// What the engine may depend on; each entry is OS-free and compiles to wasm.
const ALLOWED_DEPENDENCIES: &[&str] = &[
    "fastrand",            // seeded PRNG for ULID ids; never seeds itself
    "serde",               // wire format
    "serde_json",          // wire format
    "serde_path_to_error", // names the failing field in decode errors
    "sha2",                // fingerprints a request kept with its idempotency key
    "strsim",              // edit distance: the registered names a refusal suggests
    "thiserror",           // error types
    "ulid",                // id encoding, without its `std` feature
    // Optional, only with the `typescript` feature (the wasm package): a
    // derive that writes TypeScript declarations of the wire types into a
    // custom section of the module. Compile-time only; no code runs.
    "tsify",
    "wasm-bindgen",
    // Optional, only with the `schema` feature (the MCP server): a derive
    // that describes the wire requests as JSON Schemas, plain data built
    // with serde_json. Compile-time only; the engine never calls it.
    "schemars",
];

#[test]
fn engine_depends_only_on_os_free_crates() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps: Vec<&str> = manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .expect("a [dependencies] section")
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    for dep in &deps {
        assert!(
            ALLOWED_DEPENDENCIES.contains(dep),
            "engine dependency `{dep}` is not on the allowlist in engine/tests/purity.rs; \
             the engine must compile to wasm and never touch the OS, so check that before adding it"
        );
    }
    assert!(deps.len() >= 5, "parsed too few dependencies: {deps:?}");
}
