//! `inbox skill` hands agents their instructions; `inbox script` runs a
//! transition script on a scratch in-memory inbox.

use crate::common::TestEnv;

#[test]
fn skill_prints_a_skill_md_true_to_the_cli() {
    let env = TestEnv::new();
    let run = env.run(&["skill"]);
    assert_eq!(run.status, 0);
    assert!(run.stdout.starts_with("---\nname: inbox\n"), "{run}");
    // Every command the skill tells agents to run must be a real command
    // with real flags: parse each example line with the real binary's --help.
    for line in run
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("inbox "))
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        let command = words[1];
        let help = env.run(&[command, "--help"]);
        assert_eq!(help.status, 0, "SKILL.md uses an unknown command: {line}");
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            assert!(
                help.stdout.contains(flag),
                "SKILL.md uses `{flag}`, which `inbox {command}` lacks: {line}"
            );
        }
    }
}

#[test]
fn skill_install_writes_it_into_a_skills_folder() {
    let env = TestEnv::new();
    let run = env.run(&["skill", "--install", "skills", "--json"]);
    assert_eq!(run.status, 0, "{run}");
    let path = env.dir().join("skills/inbox/SKILL.md");
    assert_eq!(run.json()["installed"], path.display().to_string());
    assert_eq!(
        std::fs::read_to_string(path).unwrap(),
        env.run(&["skill"]).stdout
    );
}

#[test]
fn script_runs_a_protocol_and_reports_broken_expectations() {
    let env = TestEnv::new();
    std::fs::write(
        env.dir().join("ok.inbox"),
        "send from_agent=lead to_agent=w subject=Hi\nclaim agent=w thread_id=thr_000001 => ok\n",
    )
    .unwrap();
    let run = env.run(&["script", "ok.inbox"]);
    assert_eq!(run.status, 0, "{run}");
    assert!(run.stdout.contains("\"lease_token\": 1"), "{run}");
    assert!(!env.db().exists(), "script must not touch a database");

    std::fs::write(
        env.dir().join("broken.inbox"),
        "claim agent=w thread_id=thr_000001 => ok\n",
    )
    .unwrap();
    let broken = env.run(&["script", "broken.inbox"]);
    assert_eq!(broken.status, 1, "{broken}");
    assert!(
        broken.stderr.contains("expected ok, got thread_not_found"),
        "{broken}"
    );

    std::fs::write(env.dir().join("bad.inbox"), "claim agent=w thread_id\n").unwrap();
    let bad = env.run(&["script", "bad.inbox"]);
    assert_eq!(bad.status, 30, "{bad}");
    assert!(bad.stderr.contains("line 1"), "{bad}");
}

#[test]
fn script_reproduces_the_golden_corpus() {
    let env = TestEnv::new();
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/worker_loop.inbox");
    let run = env.run(&["script", corpus.to_str().unwrap()]);
    assert_eq!(run.status, 0, "{run}");
    let snapshot = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/corpus/snapshots/worker_loop.snap"),
    )
    .unwrap();
    let golden = snapshot.splitn(3, "---\n").nth(2).unwrap();
    assert_eq!(run.raw_stdout.trim_end(), golden.trim_end());
}

#[test]
fn skill_and_script_keep_the_json_contract() {
    let env = TestEnv::new();
    let skill = env.run(&["skill", "--json"]);
    assert_eq!(skill.status, 0);
    assert!(
        skill.json()["skill"]
            .as_str()
            .unwrap()
            .starts_with("---\nname: inbox"),
        "{skill}"
    );
    std::fs::write(
        env.dir().join("ok.inbox"),
        "send from_agent=a to_agent=b subject=Hi => ok\nclaim agent=b thread_id=thr_000009 => ok\n",
    )
    .unwrap();
    let script = env.run(&["script", "ok.inbox", "--json"]);
    assert_eq!(script.status, 1, "{script}");
    let value = script.json();
    assert_eq!(value["ok"], true);
    assert_eq!(
        value["failures"][0],
        "line 2: expected ok, got thread_not_found"
    );
    assert!(
        value["transcript"]
            .as_str()
            .unwrap()
            .contains("-- line 1 --")
    );
    let missing = env.run(&["script", "nope.inbox", "--json"]);
    assert_eq!(missing.status, 30, "{missing}");
    assert_eq!(missing.json()["error"]["code"], "invalid_value");
}
