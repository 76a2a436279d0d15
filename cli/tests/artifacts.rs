//! Artifacts keep the path as given, its absolute form, and for readable
//! files their size and SHA-256 digest. Nothing is refused silently: a path
//! that cannot be read is still recorded, with a note saying why it has no
//! digest.

use crate::common::TestEnv;
use sha2::{Digest, Sha256};

#[test]
fn dot_dot_is_resolved_in_the_absolute_path_and_symlinks_are_followed_for_the_digest() {
    let env = TestEnv::initialized();
    std::fs::create_dir_all(env.dir().join("src")).unwrap();
    std::fs::write(env.dir().join("notes.md"), "notes\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("notes.md", env.dir().join("link.md")).unwrap();
    let run = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "w",
        "--subject",
        "Paths",
        "--artifact",
        "src/../notes.md",
        "--artifact",
        "link.md",
        "--json",
    ]);
    assert_eq!(run.status, 0, "{run}");
    let artifacts = run.json()["message"]["artifacts"].clone();
    assert_eq!(
        artifacts[0]["path"], "src/../notes.md",
        "the path is kept as given"
    );
    assert_eq!(
        artifacts[0]["absolute_path"],
        env.dir().join("notes.md").display().to_string()
    );
    assert_eq!(artifacts[0]["size_bytes"], 6);
    #[cfg(unix)]
    {
        assert_eq!(
            artifacts[1]["absolute_path"],
            env.dir().join("link.md").display().to_string()
        );
        assert_eq!(
            artifacts[1]["sha256"], artifacts[0]["sha256"],
            "the digest is the target's"
        );
    }
}

#[test]
fn files_get_size_and_digest_and_urls_stay_as_given() {
    let env = TestEnv::initialized();
    std::fs::create_dir_all(env.dir().join("logs")).unwrap();
    let content = "line one\nline two\n";
    std::fs::write(env.dir().join("logs/build.log"), content).unwrap();
    let run = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "w",
        "--subject",
        "Look at these",
        "--artifact",
        "logs/build.log",
        "--artifact-kind",
        "log",
        "--artifact-metadata-json",
        r#"{"lines": 2}"#,
        "--artifact",
        "https://ci.example/run/42",
        "--artifact-kind",
        "url",
        "--artifact-metadata-json",
        "{}",
        "--artifact",
        "missing.patch",
        "--artifact-kind",
        "patch",
        "--artifact-metadata-json",
        "{}",
        "--artifact",
        "logs",
        "--artifact-kind",
        "dir",
        "--artifact-metadata-json",
        "{}",
        "--json",
    ]);
    assert_eq!(run.status, 0, "{run}");
    let artifacts = run.json()["message"]["artifacts"].clone();
    let expected_digest: String = Sha256::digest(content.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(artifacts[0]["path"], "logs/build.log");
    assert_eq!(
        artifacts[0]["absolute_path"],
        env.dir().join("logs/build.log").display().to_string()
    );
    assert_eq!(artifacts[0]["size_bytes"], content.len());
    assert_eq!(artifacts[0]["sha256"], expected_digest);
    assert_eq!(artifacts[0]["metadata"]["lines"], 2);
    assert_eq!(
        artifacts[1]["absolute_path"],
        serde_json::Value::Null,
        "URLs are not file paths"
    );
    assert_eq!(artifacts[1]["sha256"], serde_json::Value::Null);
    assert_eq!(artifacts[2]["sha256"], serde_json::Value::Null);
    assert_eq!(artifacts[3]["size_bytes"], serde_json::Value::Null);
    // The two paths without a digest are explained on stderr, never dropped.
    insta::assert_snapshot!(run.stderr, @r"
    note: artifact missing.patch cannot be read (No such file or directory (os error 2)); recorded without size or digest
    note: artifact logs is not a regular file; recorded without size or digest
    ");
    // show lists them with what is known.
    let thread = run.json()["thread"]["thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let show = env.run(&["show", "--thread", &thread]);
    assert!(
        show.stdout
            .contains("artifact log logs/build.log (18 B, sha256 "),
        "{show}"
    );
    assert!(
        show.stdout
            .contains("artifact url https://ci.example/run/42\n"),
        "{show}"
    );
}
