//! `inbox-conformance` as a user runs it: it passes on the real hosts, and
//! it fails, readably, when a transcript differs. The failing cases use a
//! doctored copy of the golden transcripts, so the check is shown to bite
//! without breaking a host.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

fn conformance(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_inbox-conformance"))
        .args(args)
        .output()
        .unwrap();
    Run {
        status: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A copy of the golden transcripts with `claim_race`'s first lease token
/// changed from 1 to 7.
fn doctored_golden(dir: &Path) {
    let golden = inbox_conformance::corpus_dir().join("snapshots");
    for entry in std::fs::read_dir(golden).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let claim_race = dir.join("claim_race.snap");
    let text = std::fs::read_to_string(&claim_race).unwrap();
    let doctored = text.replacen("\"lease_token\": 1,", "\"lease_token\": 7,", 1);
    assert_ne!(text, doctored, "the golden transcript changed shape");
    std::fs::write(&claim_race, doctored).unwrap();
}

#[test]
fn the_native_and_component_hosts_give_the_golden_transcripts() {
    let run = conformance(&[
        "--host",
        "memory",
        "--host",
        "sqlite",
        "--host",
        "component/memory",
        "--host",
        "component/sqlite",
    ]);
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    let scripts = inbox_conformance::corpus().len();
    for host in ["memory", "sqlite", "component/memory", "component/sqlite"] {
        let line = format!("{host:<18} {scripts}/{scripts} identical\n");
        assert!(run.stdout.contains(&line), "{line}{}", run.stdout);
    }
    assert!(run.stdout.contains("byte-identical"), "{}", run.stdout);
}

/// The corpus on PostgreSQL through the runner: each script in its own
/// schema of the throwaway cluster the runner starts. Skipped (the runner
/// says why) when PostgreSQL is not installed, unless
/// `INBOX_REQUIRE_POSTGRES` is set.
#[test]
fn the_postgres_host_gives_the_golden_transcripts() {
    let run = conformance(&["--host", "memory", "--host", "postgres"]);
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    let skipped = run.stdout.contains("postgres           skipped:");
    if skipped && std::env::var_os("INBOX_REQUIRE_POSTGRES").is_none() {
        eprintln!(
            "SKIPPED the_postgres_host_gives_the_golden_transcripts:\n{}",
            run.stdout
        );
        return;
    }
    let scripts = inbox_conformance::corpus().len();
    let line = format!("postgres           {scripts}/{scripts} identical\n");
    assert!(
        run.stdout.contains(&line),
        "{line}{}{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn a_difference_fails_naming_the_host_the_script_and_the_step() {
    let dir = tempfile::tempdir().unwrap();
    doctored_golden(dir.path());
    let run = conformance(&[
        "--golden",
        dir.path().to_str().unwrap(),
        "--host",
        "component/sqlite",
        "--script",
        "claim_race",
        "--script",
        "worker_loop",
    ]);
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    // Everything after the header (which names the temporary folder).
    let report = run.stdout.split_once("\n\n").unwrap().1;
    insta::assert_snapshot!(report, @r#"
    component/sqlite   1/2 identical; different: claim_race

    --- component/sqlite: claim_race.inbox differs from the golden transcript
    first difference in the step at tests/corpus/claim_race.inbox line 5: `> claim agent=worker thread_id=thr_000001 lease_seconds=300`
    --- the golden transcript
    +++ component/sqlite
    @@ -64,7 +64,7 @@
         "lease": {
           "thread_id": "thr_000001",
           "agent": "worker",
    -      "lease_token": 7,
    +      "lease_token": 1,
           "attempt": 1,
           "lease_seconds": 300,
           "claimed_at": "2026-01-01T00:00:00.000Z",

    FAILED: transcripts differ on component/sqlite (claim_race)
    "#);
}

#[test]
fn a_host_that_cannot_run_is_skipped_or_with_require_all_fails() {
    let missing = ["--host", "node/memory", "--wasm-package", "/no/such/pkg"];
    let run = conformance(&[&missing[..], &["--host", "memory"]].concat());
    assert_eq!(run.status, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("node/memory        skipped: /no/such/pkg/node/inbox.js is missing; build the wasm package with scripts/build-wasm"),
        "{}",
        run.stdout
    );
    let run = conformance(&[&missing[..], &["--require-all"]].concat());
    assert_eq!(run.status, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .contains("FAILED: --require-all, and these hosts could not run: node/memory"),
        "{}",
        run.stdout
    );
}

#[test]
fn an_unknown_script_or_host_is_a_usage_error() {
    let run = conformance(&["--script", "no_such_script"]);
    assert_eq!(run.status, 2, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("error: no script no_such_script.inbox in"),
        "{}",
        run.stderr
    );
    let run = conformance(&["--host", "oracle"]);
    assert_eq!(run.status, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("possible values: memory, sqlite, postgres, component/memory"),
        "{}",
        run.stderr
    );
}
