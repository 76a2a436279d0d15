//! The corpus against the engine's in-memory store: the reference host that
//! produces the golden transcripts.

#[test]
fn every_script_matches_its_golden_transcript_on_the_memory_store() {
    inbox_conformance::assert_corpus("memory", inbox_engine::MemoryStore::new);
}

/// Every command and waiter in the corpus states what it must return, so
/// refreshing the golden transcripts cannot quietly accept a regression.
#[test]
fn every_corpus_step_states_what_it_must_return() {
    let mut unstated = Vec::new();
    for script in inbox_conformance::corpus() {
        let parsed = inbox_engine::script::Script::parse(&script.text)
            .unwrap_or_else(|e| panic!("{}: {e}", script.name));
        for line in parsed.unstated_lines() {
            unstated.push(format!("{}.inbox:{line}", script.name));
        }
    }
    assert!(
        unstated.is_empty(),
        "steps without `=> ...`: {}",
        unstated.join(", ")
    );
}
