//! The corpus against the engine's in-memory store: the reference host that
//! produces the golden transcripts.

#[test]
fn every_script_matches_its_golden_transcript_on_the_memory_store() {
    inbox_conformance::assert_corpus("memory", inbox_engine::MemoryStore::new);
}
