//! The transition-script corpus against the SQLite store: every transcript
//! must be byte-identical to the in-memory reference. Each script runs on a
//! fresh database file in WAL mode, opened the way the CLI opens it.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use inbox_engine::Store;
use inbox_sqlite::open_or_create;

#[test]
fn every_script_matches_its_golden_transcript_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    inbox_conformance::assert_corpus("sqlite", || {
        n += 1;
        let path = dir.path().join(format!("corpus-{n}.db"));
        let mut store = open_or_create(&path).unwrap();
        store.initialize().unwrap();
        store
    });
}
