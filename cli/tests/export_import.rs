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
    let made = std::process::Command::new("mkfifo")
        .arg(env.dir().join("fifo.db"))
        .status()
        .unwrap();
    assert!(made.success());
    for file in ["link.db", "exists.db", "fifo.db"] {
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
    // A FIFO there is replaced, never opened (which would wait for ever).
    env.json(&["export", "--sqlite", "fifo.db", "--force"], 0);
    assert_eq!(rows(&env.dir().join("fifo.db")), rows(&env.db()));
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

/// Runs `import --sqlite FILE --replace` into `dest.db` as its own
/// process (so that a destination with threads is no reason to stop short
/// of reading the file), waiting
/// at most a minute (liveness only: a file that runs a stranger's query
/// would run for ever), and returns its JSON answer and exit code.
fn import_with_deadline(env: &TestEnv, file: &str) -> (Option<i32>, serde_json::Value) {
    let mut command = env.command(&[
        "--db",
        "dest.db",
        "import",
        "--sqlite",
        file,
        "--replace",
        "--json",
    ]);
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("importing {file} still ran after a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let answer = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (output.status.code(), answer)
}

/// A copy of the project's database, exported as `name` and changed by
/// `sql` (run with SQLite's own tools, as anyone could).
fn tampered(env: &TestEnv, name: &str, sql: &str) {
    env.json(&["export", "--sqlite", name], 0);
    let conn = rusqlite::Connection::open(env.dir().join(name)).unwrap();
    conn.execute_batch("PRAGMA foreign_keys = OFF").unwrap();
    conn.execute_batch(sql).unwrap();
}

/// The columns of inbox's `threads` an import copies, as a view would
/// have to name them to stand in for the table.
const THREAD_COLUMNS: &str = "'thr_' || n AS thread_id, NULL AS run_id, NULL AS task_id, \
     'x' AS subject, 'a' AS created_by, 'b' AS assigned_to, 'pending' AS status, \
     'normal' AS priority, 0 AS attempts, 1 AS max_attempts, NULL AS latest_message_id, \
     n AS last_event_id, '2026-01-01T00:00:00.000Z' AS created_at, \
     '2026-01-01T00:00:00.000Z' AS updated_at";

/// An import reads data and runs nothing of the file's: whatever in it is
/// not exactly inbox's tables (a view in place of a table, over an endless
/// query or not; a trigger; a virtual table; a generated column; an
/// index on an expression; a table of other columns), in the file or only
/// in the `-wal` beside it, is refused at once, before the destination is
/// locked, and the destination is as it was.
#[test]
fn an_import_refuses_whatever_is_not_exactly_inbox_tables() {
    let (env, _) = busy_project();
    let endless = format!(
        "DROP TABLE threads; \
         CREATE VIEW threads AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) \
         SELECT {THREAD_COLUMNS} FROM r;"
    );
    let finite = format!(
        "DROP TABLE threads; \
         CREATE VIEW threads AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r \
         WHERE n < 3) SELECT {THREAD_COLUMNS} FROM r;"
    );
    let cases: Vec<(&str, String, &str)> = vec![
        ("endless.db", endless, "a view where inbox has a table"),
        ("view.db", finite, "a view where inbox has a table"),
        (
            "trigger.db",
            "CREATE TRIGGER grow AFTER INSERT ON messages BEGIN \
             INSERT INTO messages SELECT * FROM messages; END;"
                .into(),
            "holds a trigger",
        ),
        (
            "other_view.db",
            "CREATE VIEW notes AS SELECT 1;".into(),
            "holds a view",
        ),
        (
            "virtual.db",
            // As another SQLite build writes one (this one has no
            // full-text search to make it with).
            "PRAGMA writable_schema = ON; INSERT INTO sqlite_schema VALUES \
             ('table', 'search', 'search', 0, 'CREATE VIRTUAL TABLE search USING fts5(body)');"
                .into(),
            "that inbox's schema has not",
        ),
        (
            "generated.db",
            "ALTER TABLE messages ADD COLUMN shout TEXT GENERATED ALWAYS AS (upper(summary)) VIRTUAL;"
                .into(),
            "defined otherwise",
        ),
        (
            "columns.db",
            "ALTER TABLE threads ADD COLUMN extra TEXT;".into(),
            "defined otherwise",
        ),
        (
            "index.db",
            "CREATE INDEX slow ON messages (length(body) * length(summary));".into(),
            "holds an index",
        ),
        (
            "missing.db",
            "DROP INDEX messages_to;".into(),
            "lacks inbox's index",
        ),
    ];
    for (file, sql, _) in &cases {
        tampered(&env, file, sql);
    }
    // Only in the -wal: the file itself is an intact inbox database.
    env.json(&["export", "--sqlite", "wal.db"], 0);
    {
        let conn = rusqlite::Connection::open(env.dir().join("wal.db")).unwrap();
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .unwrap();
        conn.execute_batch(&format!(
            "PRAGMA foreign_keys = OFF; PRAGMA journal_mode = WAL; \
             DROP TABLE threads; CREATE VIEW threads AS WITH RECURSIVE r(n) AS (SELECT 1 \
             UNION ALL SELECT n + 1 FROM r) SELECT {THREAD_COLUMNS} FROM r;"
        ))
        .unwrap();
    }
    assert!(
        std::fs::metadata(env.dir().join("wal.db-wal"))
            .unwrap()
            .len()
            > 0
    );

    env.json(&["--db", "dest.db", "init"], 0);
    env.json(
        &[
            "--db",
            "dest.db",
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "Mine",
        ],
        0,
    );
    let before = rows(&env.dir().join("dest.db"));
    let all = cases
        .iter()
        .map(|(file, _, says)| (*file, *says))
        .chain([("wal.db", "a view where inbox has a table")]);
    for (file, says) in all {
        let (code, refused) = import_with_deadline(&env, file);
        assert_eq!(code, Some(30), "{file}: {refused}");
        assert_eq!(
            refused["error"]["code"], "invalid_value",
            "{file}: {refused}"
        );
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{file}: {message}");
        assert!(
            message.contains("nothing was imported"),
            "{file}: {message}"
        );
        assert_eq!(
            rows(&env.dir().join("dest.db")),
            before,
            "{file} changed it"
        );
    }
    no_leftovers(env.dir());
    let backups: Vec<_> = std::fs::read_dir(env.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".before-import-"))
        .collect();
    assert!(backups.is_empty(), "refused before anything: {backups:?}");
}

/// What an import or export leaves behind: nothing of its own.
fn no_leftovers(dir: &Path) {
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// Beside the file, only a `-wal` that is a regular file is read (its
/// commits are the database's); a FIFO or a link there, a FIFO as the
/// file, a rollback journal left by an interrupted write, and the
/// destination itself are refused without waiting, and nothing is made
/// beside the file (no `-shm`).
#[test]
fn an_import_reads_the_file_and_its_wal_as_data_only() {
    let (env, _) = busy_project();
    let dir = env.dir();
    // The project's own database, its last commits still in its -wal.
    let wal = dir.join(".agents/coord.db-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 32);
    let imported = env.json(
        &[
            "--db",
            "live/new.db",
            "import",
            "--sqlite",
            ".agents/coord.db",
        ],
        0,
    );
    assert_eq!(imported["threads"], 2, "{imported}");
    assert_eq!(rows(&dir.join("live/new.db")), rows(&env.db()));

    let fifo = |path: &Path| {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(made.success());
    };
    env.json(&["export", "--sqlite", "fifo_wal.db"], 0);
    fifo(&dir.join("fifo_wal.db-wal"));
    env.json(&["export", "--sqlite", "link_wal.db"], 0);
    std::fs::write(dir.join("elsewhere"), b"not a log").unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("link_wal.db-wal")).unwrap();
    env.json(&["export", "--sqlite", "journal.db"], 0);
    std::fs::write(dir.join("journal.db-journal"), vec![1u8; 4096]).unwrap();
    fifo(&dir.join("fifo.db"));

    env.json(&["--db", "dest.db", "init"], 0);
    let before = rows(&dir.join("dest.db"));
    let cases = [
        ("fifo_wal.db", "not a regular file"),
        ("link_wal.db", "not a regular file"),
        ("journal.db", "interrupted"),
        ("fifo.db", "not a regular file"),
        ("dest.db", "the database this import writes to"),
    ];
    for (file, says) in cases {
        let (code, refused) = import_with_deadline(&env, file);
        assert_eq!(code, Some(30), "{file}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{file}: {message}");
        assert_eq!(rows(&dir.join("dest.db")), before, "{file} changed it");
    }
    for file in ["fifo_wal.db", "link_wal.db", "journal.db"] {
        assert!(
            std::fs::symlink_metadata(dir.join(format!("{file}-shm"))).is_err(),
            "something was made beside {file}"
        );
    }
    no_leftovers(dir);
}
