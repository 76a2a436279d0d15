//! Runs a transition script against the in-memory store and prints the
//! transcript: `cargo run -p inbox-engine --example run_script -- FILE`.
// A host of its own (arguments, files, output): the engine's purity lints
// (engine/clippy.toml) are about the engine, not about its hosts.
#![allow(
    clippy::print_stdout,
    clippy::disallowed_methods,
    clippy::disallowed_types,
    missing_docs
)]
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: run_script FILE.inbox");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    match inbox_engine::run_script(&text, inbox_engine::MemoryStore::new()) {
        Ok(t) => {
            print!("{}", t.text);
            for f in &t.failures {
                eprintln!("expectation failed: {f}");
            }
            if t.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::from(2)
        }
    }
}
