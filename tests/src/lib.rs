//! The transition-script corpus and the one assertion every host uses to
//! check its transcripts against the golden ones.
//!
//! The corpus lives in `tests/corpus/*.inbox`; the golden transcripts in
//! `tests/corpus/snapshots/<name>.snap`, produced by the in-memory store and
//! reviewed with `cargo insta review`. A host test (SQLite, wasm, plugin)
//! runs each script against its own store and calls [`assert_transcript`]:
//! since the snapshot path and name do not depend on the caller, every host
//! is compared with the same file, byte for byte. [`query_shapes`] holds
//! the query shapes every store must serve from an index. This crate must
//! never contain a host: it depends on the engine only.

// A test helper: panicking with a clear message is how it reports.
#![allow(clippy::panic)]

use std::path::{Path, PathBuf};

pub mod query_shapes;

/// One script of the corpus.
#[derive(Clone, Debug)]
pub struct CorpusScript {
    /// The file stem, e.g. `worker_loop`; also the snapshot name.
    pub name: String,
    /// The script text.
    pub text: String,
}

/// Where the corpus lives.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Every script in the corpus, sorted by name.
///
/// # Panics
///
/// If the corpus directory cannot be read; that is a broken checkout.
pub fn corpus() -> Vec<CorpusScript> {
    let dir = corpus_dir();
    let mut scripts: Vec<CorpusScript> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus at {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "inbox"))
        .map(|path| CorpusScript {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            text: std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
        })
        .collect();
    scripts.sort_by(|a, b| a.name.cmp(&b.name));
    scripts
}

/// Runs every corpus script against a fresh store from `new_store`, compares
/// each transcript with its golden snapshot, and fails once at the end
/// naming every script (and the host) that differed, so one mismatch does not
/// hide the others.
///
/// # Panics
///
/// If any script fails; insta prints each diff as it goes.
pub fn assert_corpus<S: inbox_engine::Store>(host: &str, mut new_store: impl FnMut() -> S) {
    let scripts = corpus();
    assert!(
        scripts.len() >= 10,
        "the corpus went missing: only {} scripts",
        scripts.len()
    );
    let mut failed = Vec::new();
    for script in &scripts {
        let store = new_store();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_transcript(host, script, store);
        }));
        if outcome.is_err() {
            failed.push(script.name.clone());
        }
    }
    assert!(
        failed.is_empty(),
        "[{host}] {} of {} corpus scripts differ from their golden transcripts: {}",
        failed.len(),
        scripts.len(),
        failed.join(", ")
    );
}

/// Runs `script` against `store` and compares the transcript with the golden
/// snapshot; `host` names the store in failure messages.
///
/// # Panics
///
/// If the script does not parse, an expectation in it does not hold, or the
/// transcript differs from the snapshot (insta prints the diff).
pub fn assert_transcript<S: inbox_engine::Store>(host: &str, script: &CorpusScript, store: S) {
    let transcript = inbox_engine::run_script(&script.text, store)
        .unwrap_or_else(|e| panic!("[{host}] {}.inbox: {e}", script.name));
    assert!(
        transcript.failures.is_empty(),
        "[{host}] {}.inbox: expectations failed:\n{}",
        script.name,
        transcript.failures.join("\n")
    );
    insta::with_settings!({
        snapshot_path => "../corpus/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => format!("transcript of tests/corpus/{}.inbox", script.name),
    }, {
        insta::assert_snapshot!(script.name.as_str(), transcript.text);
    });
}
