//! Every bad input gets a clear error, the right exit code, the JSON error
//! shape with --json, and changes nothing. Each case below runs against a
//! database holding one claimed thread, and the test checks afterwards that
//! the database still holds exactly what it held before.

use crate::common::TestEnv;

/// A database with one thread claimed by `worker` (lease token 1).
fn setup() -> (TestEnv, String) {
    let env = TestEnv::initialized();
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Target",
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    env.json(&["claim", "--agent", "worker", "--thread", &thread], 0);
    (env, thread)
}

/// Everything a failed command must not change: threads, messages, events.
fn fingerprint(env: &TestEnv) -> String {
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let mut out = String::new();
    for sql in [
        "SELECT count(*) || ':' || group_concat(status || attempts || last_event_id) FROM threads",
        "SELECT CAST(count(*) AS TEXT) FROM messages",
        "SELECT count(*) || ':' || coalesce(max(event_id), 0) FROM events",
        "SELECT CAST(count(*) AS TEXT) FROM artifacts",
        "SELECT group_concat(agent || lease_token || expires_at || coalesce(released_at, '-')) FROM leases",
    ] {
        let value: String = conn.query_row(sql, [], |row| row.get(0)).unwrap();
        out.push_str(&value);
        out.push('|');
    }
    out
}

#[test]
fn bad_inputs_fail_cleanly_and_change_nothing() {
    let (env, thread) = setup();
    std::fs::write(env.dir().join("latin1.txt"), b"caf\xe9\n").unwrap();
    let t = thread.as_str();
    let cases: Vec<(&str, Vec<&str>, i32)> = vec![
        (
            "missing --body-file",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--body-file",
                "nope.md",
            ],
            30,
        ),
        (
            "non-UTF-8 body",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--body-file",
                "latin1.txt",
            ],
            30,
        ),
        (
            "payload is not JSON",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--payload-json",
                "{oops",
            ],
            30,
        ),
        (
            "payload is not an object",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--payload-json",
                "[1,2]",
            ],
            30,
        ),
        (
            "unknown kind",
            vec![
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                "x",
                "--kind",
                "memo",
            ],
            30,
        ),
        (
            "unknown status",
            vec!["fetch", "--agent", "worker", "--status", "sleeping"],
            30,
        ),
        (
            "unknown priority",
            vec![
                "send",
                "--from",
                "lead",
                "--to",
                "worker",
                "--subject",
                "x",
                "--priority",
                "urgent",
            ],
            30,
        ),
        (
            "negative lease seconds",
            vec![
                "claim",
                "--agent",
                "worker",
                "--thread",
                t,
                "--lease-seconds",
                "-5",
            ],
            30,
        ),
        (
            "absurd lease seconds",
            vec![
                "renew",
                "--agent",
                "worker",
                "--thread",
                t,
                "--lease-seconds",
                "999999999",
            ],
            30,
        ),
        (
            "unknown flag",
            vec!["fetch", "--agent", "worker", "--colour", "blue"],
            30,
        ),
        (
            "missing summary",
            vec!["done", "--agent", "worker", "--thread", t],
            30,
        ),
        ("missing agent", vec!["claim", "--thread", t], 30),
        (
            "thread that does not exist",
            vec!["show", "--thread", "thr_01JH5Q8Z3K4M2N6P7R8S9T0V1W"],
            40,
        ),
        (
            "claim held by another process",
            vec!["claim", "--agent", "worker", "--thread", t],
            20,
        ),
        (
            "lease token never issued",
            vec![
                "done",
                "--agent",
                "worker",
                "--thread",
                t,
                "--lease-token",
                "0",
                "--summary",
                "s",
            ],
            30,
        ),
        (
            "artifact kinds that do not pair up",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--artifact",
                "a",
                "--artifact",
                "b",
                "--artifact",
                "c",
                "--artifact-kind",
                "log",
                "--artifact-kind",
                "patch",
            ],
            30,
        ),
        (
            "artifact metadata that is not an object",
            vec![
                "update",
                "--agent",
                "worker",
                "--thread",
                t,
                "--summary",
                "s",
                "--artifact",
                "a",
                "--artifact-metadata-json",
                "3",
            ],
            30,
        ),
    ];
    let before = fingerprint(&env);
    let mut transcript = String::new();
    for (title, args, status) in cases {
        for json in [false, true] {
            let mut all = args.clone();
            if json {
                all.push("--json");
            }
            let run = env.run(&all);
            assert_eq!(run.status, status, "{title}: {run}");
            if json {
                let value = run.json();
                assert_eq!(value["ok"], status < 20, "{title}: {run}");
                if status >= 20 {
                    assert!(
                        value["error"]["code"].is_string() && value["error"]["message"].is_string(),
                        "{title}: {run}"
                    );
                }
                assert!(
                    run.stderr.is_empty() || run.stderr.starts_with("note:"),
                    "{title}: JSON mode wrote to stderr: {run}"
                );
            } else if status >= 20 {
                assert!(run.stdout.is_empty(), "{title}: errors go to stderr: {run}");
            }
            transcript.push_str(&format!(
                "## {title}{}\n$ inbox {}\n{run}\n",
                if json { " (json)" } else { "" },
                env.normalize(&all.join(" "))
            ));
        }
        assert_eq!(fingerprint(&env), before, "{title} changed the database");
    }
    insta::assert_snapshot!(transcript);
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_with_exit_50() {
    let env = TestEnv::new();
    std::fs::write(env.dir().join("notes.txt"), "just some notes\n".repeat(100)).unwrap();
    let run = env.run(&["list", "--db", "notes.txt"]);
    assert_eq!(run.status, 50, "{run}");
    let json = env.run(&["list", "--db", "notes.txt", "--json"]);
    assert_eq!(json.status, 50);
    assert_eq!(json.json()["error"]["code"], "storage_error");
    let init = env.run(&["init", "--db", "notes.txt"]);
    assert_eq!(
        init.status, 50,
        "init must not adopt a foreign file: {init}"
    );
    assert_eq!(
        std::fs::read_to_string(env.dir().join("notes.txt")).unwrap(),
        "just some notes\n".repeat(100)
    );
    insta::assert_snapshot!(format!("{run}\n{json}\n{init}"));
}

#[test]
fn another_programs_sqlite_database_is_refused() {
    let env = TestEnv::new();
    let other = env.dir().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE recipes (name TEXT)")
        .unwrap();
    let run = env.run(&["init", "--db", "other.db"]);
    assert_eq!(run.status, 50, "{run}");
    assert!(run.stderr.contains("another program"), "{run}");
}

#[test]
fn commands_before_init_say_how_to_start() {
    let env = TestEnv::new();
    let run = env.run(&["fetch", "--agent", "worker"]);
    assert_eq!(run.status, 50, "{run}");
    let json = env.run(&["fetch", "--agent", "worker", "--json"]);
    assert_eq!(json.json()["error"]["code"], "not_initialized");
    assert!(
        !env.db().exists(),
        "a command other than init created a database"
    );
    insta::assert_snapshot!(format!("{run}\n{json}"));
}

#[test]
fn a_database_written_by_a_newer_inbox_is_refused_untouched() {
    let env = TestEnv::initialized();
    rusqlite::Connection::open(env.db())
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let run = env.run(&["list", "--json"]);
    assert_eq!(run.status, 50, "{run}");
    assert_eq!(run.json()["error"]["code"], "schema_too_new");
    let version: i64 = rusqlite::Connection::open(env.db())
        .unwrap()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 99);
}

/// Makes the database files read-only for this test: with permissions for an
/// ordinary user, with the immutable attribute for root (who ignores
/// permissions but not `chattr +i`). Returns an undo function.
#[cfg(target_os = "linux")]
fn make_read_only(env: &TestEnv) -> Box<dyn FnOnce()> {
    use std::os::unix::fs::PermissionsExt;
    let agents = env.dir().join(".agents");
    let files: Vec<std::path::PathBuf> = ["coord.db", "coord.db-wal", "coord.db-shm"]
        .iter()
        .map(|name| agents.join(name))
        .filter(|path| path.exists())
        .collect();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if root {
        let status = std::process::Command::new("chattr")
            .arg("+i")
            .args(&files)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "as root, this test needs `chattr +i` (e2fsprogs) on a file system that supports it"
        );
        Box::new(move || {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .args(&files)
                .status();
        })
    } else {
        for path in &files {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        Box::new(move || {
            for path in &files {
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
            }
        })
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_read_only_database_reads_but_refuses_writes_clearly() {
    let (env, _thread) = setup();
    let before = fingerprint(&env);
    let undo = make_read_only(&env);
    let read = env.run(&["list", "--json"]);
    let write = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "worker",
        "--subject",
        "x",
        "--json",
    ]);
    let human = env.run(&["send", "--from", "lead", "--to", "worker", "--subject", "x"]);
    undo();
    assert_eq!(read.status, 0, "reads still work: {read}");
    assert_eq!(write.status, 50, "{write}");
    assert_eq!(write.json()["error"]["code"], "storage_error");
    assert_eq!(fingerprint(&env), before);
    insta::assert_snapshot!(human.to_string(), @r"
    exit: 50
    --- stderr ---
    error[storage_error]: $TEST_DIR/.agents/coord.db is read-only for this process; check its permissions (and those of its folder, where SQLite keeps the -wal and -shm files)
    database: .agents/coord.db (the nearest .agents/coord.db)
    ");
}

#[test]
fn usage_errors_with_json_name_the_command_and_the_fix() {
    let env = TestEnv::initialized();
    let run = env.run(&[
        "claim",
        "--agent",
        "w",
        "--thread",
        "t",
        "--lease-seconds",
        "soon",
        "--json",
    ]);
    assert_eq!(run.status, 30);
    let value = run.json();
    assert_eq!(value["command"], "claim");
    assert_eq!(value["error"]["code"], "invalid_request");
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("inbox claim --help"),
        "{run}"
    );
}

/// The default build has no wasmtime: `--engine` is refused with the way to
/// get a build that has it, before any database is created or touched.
#[cfg(not(feature = "plugin"))]
#[test]
fn engine_flag_without_plugin_support_says_how_to_get_it() {
    let env = TestEnv::new();
    let mut transcript = String::new();
    env.step(&mut transcript, &["init", "--engine", "engine.wasm"]);
    env.step(
        &mut transcript,
        &["list", "--engine", "engine.wasm", "--json"],
    );
    insta::assert_snapshot!(transcript);
    assert!(
        !env.db().exists(),
        "a refused engine must not create the database"
    );
}
