//! Where the database is and how it is created: `--db`, then `$INBOX_DB`,
//! then the nearest `.agents/coord.db` walking up from the current folder,
//! then `.agents/coord.db` here (created only by `init`, owner-only), and the
//! durability every process applies.

use crate::common::TestEnv;

#[test]
fn init_creates_an_owner_only_database_in_dot_agents() {
    let env = TestEnv::new();
    let run = env.run(&["init"]);
    assert_eq!(run.status, 0, "{run}");
    insta::assert_snapshot!(run.to_string(), @r"
    exit: 0
    --- stdout ---
    Initialized $TEST_DIR/.agents/coord.db (schema version 4, durability normal)
    --- stderr ---
    database: .agents/coord.db (new in this folder)
    ");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&env.dir().join(".agents")), 0o700);
        assert_eq!(mode(&env.db()), 0o600);
    }
    // Running it again is safe and changes nothing.
    let again = env.json(&["init"], 0);
    assert_eq!(again["schema_version"], 4);
    assert_eq!(again["database"], env.db().display().to_string());
}

#[test]
fn commands_find_the_nearest_database_walking_up() {
    let env = TestEnv::initialized();
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "from the root",
        ],
        0,
    );
    let deep = env.dir().join("src/module/inner");
    std::fs::create_dir_all(&deep).unwrap();
    let mut command = env.command(&["list", "--json"]);
    command.current_dir(&deep);
    let run = env.run_command(command);
    assert_eq!(run.status, 0, "{run}");
    assert_eq!(run.json()["threads"][0]["subject"], "from the root");
    assert!(!deep.join(".agents").exists(), "a read created a database");
}

#[test]
fn db_flag_beats_inbox_db_which_beats_the_search() {
    let env = TestEnv::initialized();
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "in the default db",
        ],
        0,
    );
    env.json(&["init", "--db", "other.db"], 0);
    env.json(
        &[
            "send",
            "--db",
            "other.db",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "in other.db",
        ],
        0,
    );

    let mut by_env = env.command(&["list", "--json"]);
    by_env.env("INBOX_DB", "other.db");
    let run = env.run_command(by_env);
    assert_eq!(run.json()["threads"][0]["subject"], "in other.db");

    let mut flag_wins = env.command(&["list", "--json", "--db", ".agents/coord.db"]);
    flag_wins.env("INBOX_DB", "other.db");
    let run = env.run_command(flag_wins);
    assert_eq!(run.json()["threads"][0]["subject"], "in the default db");
}

#[test]
fn durability_is_recorded_in_the_database_and_reported() {
    let env = TestEnv::new();
    let run = env.run(&["init", "--durability", "full"]);
    assert_eq!(run.status, 0, "{run}");
    assert!(run.stdout.contains("durability full"), "{run}");
    let again = env.run(&["init"]);
    assert!(
        again.stdout.contains("durability full"),
        "init without the flag keeps the setting: {again}"
    );
    let stored: String = rusqlite::Connection::open(env.db())
        .unwrap()
        .query_row(
            "SELECT value FROM settings WHERE key = 'durability'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(stored, "full");
    let bad = env.run(&["init", "--durability", "sometimes"]);
    assert_eq!(bad.status, 30, "{bad}");
}

#[test]
fn the_database_is_in_wal_mode_after_init() {
    let env = TestEnv::initialized();
    let mode: String = rusqlite::Connection::open(env.db())
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
