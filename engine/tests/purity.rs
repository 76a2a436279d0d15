//! The engine must stay pure: no file system, network, threads, process,
//! environment, system clock or OS randomness. These checks fail the build
//! the day someone reaches for one, and say why it is not allowed. (The wasm
//! builds in `.ci/run` are the other half of the proof: the crate compiles for
//! `wasm32-unknown-unknown`, where most of these do not exist.)

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// What the engine may depend on; each entry is OS-free and compiles to wasm.
const ALLOWED_DEPENDENCIES: &[&str] = &[
    "fastrand",            // seeded PRNG for ULID ids; never seeds itself
    "serde",               // wire format
    "serde_json",          // wire format
    "serde_path_to_error", // names the failing field in decode errors
    "thiserror",           // error types
    "ulid",                // id encoding, without its `std` feature
    // Optional, only with the `typescript` feature (the wasm package): a
    // derive that writes TypeScript declarations of the wire types into a
    // custom section of the module. Compile-time only; no code runs.
    "tsify",
    "wasm-bindgen",
];

const FORBIDDEN: &[(&str, &str)] = &[
    ("std::fs", "storage comes through the Store trait"),
    ("std::net", "the engine never talks to the network"),
    ("std::thread", "waiting is the host's job (see wait.rs)"),
    ("std::process", "the engine never starts processes"),
    ("std::env::var", "configuration comes from the host"),
    ("SystemTime", "time comes through the Clock trait"),
    ("Instant::now", "time comes through the Clock trait"),
    (
        "getrandom",
        "randomness comes from the host (UlidIds::from_seed)",
    ),
    (
        "thread_rng",
        "randomness comes from the host (UlidIds::from_seed)",
    ),
    ("println!", "the engine returns values; hosts render them"),
    ("eprintln!", "the engine returns values; hosts render them"),
];

#[test]
fn engine_sources_never_touch_the_os() {
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 15, "found only {} source files", files.len());
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (needle, why) in FORBIDDEN {
            for (n, line) in text.lines().enumerate() {
                if line.contains(needle) && !line.trim_start().starts_with("//") {
                    found.push(format!("{}:{}: `{needle}`: {why}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the engine must stay pure:\n{}",
        found.join("\n")
    );
}

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
