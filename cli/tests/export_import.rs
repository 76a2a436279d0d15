//! `inbox export --sqlite FILE` and `inbox import --sqlite FILE`: a copy
//! holds every row of every table (those still in the source's `-wal`
//! included), is owner-only and self-contained, never lands on an existing
//! file or through a link unless asked; an import changes nothing when it
//! refuses, keeps the replaced content, and runs beside a live waiter.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use crate::common::TestEnv;

/// Every row of every table but `settings`, as text, table by table.
pub(crate) fn rows(db: &Path) -> Vec<(String, Vec<String>)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok", "{}", db.display());
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name <> 'settings' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    tables
        .into_iter()
        .map(|table| {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM \"{table}\" ORDER BY 1"))
                .unwrap();
            let width = stmt.column_count();
            let all = stmt
                .query_map([], |row| {
                    Ok((0..width)
                        .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (table, all)
        })
        .collect()
}

/// A project whose database holds one of everything: threads, a lease,
/// messages with an artifact, a read cursor.
pub(crate) fn busy_project() -> (TestEnv, String) {
    let env = TestEnv::initialized();
    std::fs::write(env.dir().join("notes.md"), "notes\n").unwrap();
    let sent = env.json(
        &["send", "--from", "lead", "--to", "w", "--subject", "One"],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    env.json(
        &["send", "--from", "lead", "--to", "w", "--subject", "Two"],
        0,
    );
    env.json(&["claim", "--agent", "w", "--thread", &thread], 0);
    env.json(
        &[
            "update",
            "--agent",
            "w",
            "--thread",
            &thread,
            "--lease-token",
            "1",
            "--summary",
            "Working",
            "--artifact",
            "notes.md",
        ],
        0,
    );
    env.json(
        &[
            "show",
            "--agent",
            "lead",
            "--thread",
            &thread,
            "--mark-read",
        ],
        0,
    );
    (env, thread)
}

#[test]
fn a_round_trip_keeps_every_row_including_those_still_in_the_wal() {
    let (env, _) = busy_project();
    // orch's tables too: a run whose task has an attempt and needs another.
    let lead = ["--agent", "lead"];
    env.orch_json(
        &[&lead[..], &["run", "create", "--goal", "Move", "--id", "r"]].concat(),
        0,
    );
    std::fs::write(
        env.dir().join("plan.json"),
        r#"[{"task_id": "a", "title": "A", "assignee": "w"}, {"task_id": "b", "title": "B", "assignee": "w", "needs": ["a"]}]"#,
    )
    .unwrap();
    env.orch_json(&[&lead[..], &["plan", "--file", "plan.json"]].concat(), 0);
    env.orch_json(&[&lead[..], &["dispatch", "--all-ready"]].concat(), 0);
    // The registry's tables and an idempotency key too (the last write, so
    // it is in the -wal even if the dispatch's commit was the one that
    // checkpointed it).
    env.json(
        &[
            "agent",
            "register",
            "--agent",
            "w",
            "--role",
            "builder",
            "--idempotency-key",
            "register-w",
        ],
        0,
    );
    let wal = env.dir().join(".agents/coord.db-wal");
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 32,
        "the commits must still be in the -wal for this test to mean anything"
    );
    let copy = env.dir().join("copy.db");
    let exported = env.json(&["export", "--sqlite", "copy.db"], 0);
    assert_eq!(exported["threads"], 3);
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!env.dir().join("copy.db-wal").exists(), "self-contained");

    let imported = env.json(
        &["--db", "other/new.db", "import", "--sqlite", "copy.db"],
        0,
    );
    assert_eq!(
        (imported["threads"].as_u64(), imported["backup"].is_null()),
        (Some(3), true)
    );
    let original = rows(&env.db());
    assert!(
        original.iter().all(|(_, rows)| !rows.is_empty()),
        "{original:?}"
    );
    assert_eq!(rows(&env.dir().join("other/new.db")), original);
    assert_eq!(rows(&copy), original);
    // The imported database is an ordinary one: the CLI goes on with it.
    env.json(
        &[
            "--db",
            "other/new.db",
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "Three",
        ],
        0,
    );
}

#[test]
fn export_never_writes_over_a_file_or_through_a_link_unless_forced() {
    let (env, _) = busy_project();
    std::fs::write(env.dir().join("target.txt"), "keep me").unwrap();
    std::os::unix::fs::symlink("target.txt", env.dir().join("link.db")).unwrap();
    std::fs::write(env.dir().join("exists.db"), "old").unwrap();
    for file in ["link.db", "exists.db"] {
        let refused = env.json(&["export", "--sqlite", file], 30);
        assert_eq!(refused["error"]["code"], "invalid_value", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--force")
        );
    }
    assert_eq!(
        std::fs::read_to_string(env.dir().join("exists.db")).unwrap(),
        "old"
    );
    env.json(&["export", "--sqlite", "link.db", "--force"], 0);
    env.json(&["export", "--sqlite", "exists.db", "--force"], 0);
    // The link was replaced by the copy; what it pointed to is untouched.
    assert!(
        !std::fs::symlink_metadata(env.dir().join("link.db"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(env.dir().join("target.txt")).unwrap(),
        "keep me"
    );
    assert_eq!(rows(&env.dir().join("exists.db")), rows(&env.db()));
    // A name with a -wal beside it is a database in use: never its place.
    let refused = env.json(&["export", "--sqlite", ".agents/coord.db", "--force"], 30);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("-wal"),
        "{refused}"
    );
}

#[test]
fn import_into_a_database_with_threads_needs_replace_and_keeps_what_it_replaced() {
    let (env, _) = busy_project();
    env.json(&["export", "--sqlite", "copy.db"], 0);
    env.json(&["--db", "other.db", "init"], 0);
    env.json(
        &[
            "--db",
            "other.db",
            "send",
            "--from",
            "lead",
            "--to",
            "x",
            "--subject",
            "Only here",
        ],
        0,
    );
    let before = rows(&env.dir().join("other.db"));

    let refused = env.json(&["--db", "other.db", "import", "--sqlite", "copy.db"], 30);
    assert_eq!(refused["error"]["code"], "invalid_state", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--replace")
    );
    assert_eq!(rows(&env.dir().join("other.db")), before, "nothing changed");

    let replaced = env.json(
        &[
            "--db",
            "other.db",
            "import",
            "--sqlite",
            "copy.db",
            "--replace",
        ],
        0,
    );
    assert_eq!(rows(&env.dir().join("other.db")), rows(&env.db()));
    let backup = replaced["backup"].as_str().unwrap();
    assert!(backup.contains("other.db.before-import-"), "{backup}");
    assert_eq!(
        rows(Path::new(backup)),
        before,
        "the replaced content was kept"
    );
    assert_eq!(
        std::fs::metadata(backup).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn a_watch_on_the_database_wakes_on_an_import_and_keeps_working() {
    let (env, _) = busy_project();
    env.json(&["export", "--sqlite", "copy.db"], 0);
    env.json(&["--db", "empty.db", "init"], 0);
    let mut watch = env.command(&[
        "--db",
        "empty.db",
        "watch",
        "--agent",
        "lead",
        "--timeout-seconds",
        "20",
        "--json",
    ]);
    watch
        .env_remove("INBOX_NOW")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = watch.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    env.json(&["--db", "empty.db", "import", "--sqlite", "copy.db"], 0);
    let output = child.wait_with_output().unwrap();
    let woke: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0), "{woke}");
    assert_eq!(woke["woke"], true, "{woke}");
    assert!(!woke["events"].as_array().unwrap().is_empty());
}

#[test]
fn bad_sources_are_refused_with_their_own_message_and_change_nothing() {
    let (env, _) = busy_project();
    let dir = env.dir();
    std::fs::write(dir.join("text.db"), "hello, not a database\n".repeat(100)).unwrap();
    let foreign = rusqlite::Connection::open(dir.join("foreign.db")).unwrap();
    foreign
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('x');")
        .unwrap();
    drop(foreign);
    env.json(&["export", "--sqlite", "newer.db"], 0);
    rusqlite::Connection::open(dir.join("newer.db"))
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    env.json(&["export", "--sqlite", "damaged.db"], 0);
    let mut bytes = std::fs::read(dir.join("damaged.db")).unwrap();
    let page = 4096;
    for b in &mut bytes[2 * page + 100..3 * page - 100] {
        *b = 0x5a;
    }
    std::fs::write(dir.join("damaged.db"), bytes).unwrap();

    env.json(&["--db", "dest.db", "init"], 0);
    let empty = rows(&dir.join("dest.db"));
    let cases = [
        ("missing.db", 30, "invalid_value", "cannot be read"),
        ("text.db", 30, "invalid_value", "not an SQLite database"),
        ("foreign.db", 30, "invalid_value", "another program"),
        ("newer.db", 50, "schema_too_new", "schema version 99"),
        ("damaged.db", 30, "invalid_value", "damaged"),
    ];
    for (file, exit, code, says) in cases {
        let refused = env.json(&["--db", "dest.db", "import", "--sqlite", file], exit);
        assert_eq!(refused["error"]["code"], code, "{file}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{file}: {message}");
        assert_eq!(
            rows(&dir.join("dest.db")),
            empty,
            "{file} changed the database"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// A copy written over a live database is refused even when the database's
/// log was just checkpointed (an empty `-wal`): the commits it held are in
/// the file the copy replaced, and carrying on with the copy would drop
/// them without a word. Nothing is opened, and the next command says so too.
#[test]
fn a_copy_written_over_a_checkpointed_database_is_refused() {
    let (env, _) = busy_project();
    env.json(&["export", "--sqlite", "old.db"], 0);
    // Send until a commit folds the log into the file and empties it, as
    // the CLI does every few commits.
    let wal = env.dir().join(".agents/coord.db-wal");
    for _ in 0..40 {
        env.json(
            &["send", "--from", "lead", "--to", "w", "--subject", "After"],
            0,
        );
        if std::fs::metadata(&wal).unwrap().len() == 0 {
            break;
        }
    }
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "log emptied");

    std::fs::copy(env.dir().join("old.db"), env.db()).unwrap();
    for args in [
        &["list"][..],
        &["send", "--from", "lead", "--to", "w", "--subject", "Lost?"],
    ] {
        let refused = env.json(args, 50);
        assert_eq!(refused["error"]["code"], "storage_error");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("written over by a copy"), "{message}");
        assert!(message.contains("inbox import --sqlite"), "{message}");
    }
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "nothing written");
}
