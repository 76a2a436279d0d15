//! `inbox --db postgres://...`: the same commands over a PostgreSQL
//! database, as separate processes against a throwaway cluster
//! (`inbox-pg-cluster`). What a user does: `init` by
//! URL, a worker's whole loop with `$INBOX_DB`, a `wait-reply` woken by
//! an answer from another process, `orch` on the same database, and the
//! refusals: tools that need an SQLite file, options PostgreSQL cannot
//! honour, a server that cannot be reached (never printing the password).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inbox_pg_cluster::PgCluster;

use crate::common::TestEnv;

/// A cluster with one empty database, `inbox`, and its URL; `None` (the
/// test then returns) when PostgreSQL is not installed and not required.
fn database(test: &str) -> Option<(PgCluster, String)> {
    let cluster = PgCluster::start_or_skip(test)?;
    cluster
        .admin()
        .batch_execute("CREATE DATABASE inbox")
        .unwrap();
    let url = cluster.url("inbox");
    Some((cluster, url))
}

/// `inbox args... --json` with `$INBOX_DB` set to `url`, on the real clock
/// (PostgreSQL's: records are stamped with the server's time).
fn inbox(env: &TestEnv, url: &str, args: &[&str]) -> Command {
    let mut command = env.command(args);
    command
        .arg("--json")
        .env("INBOX_DB", url)
        .env_remove("INBOX_NOW");
    command
}

/// Runs `inbox args... --json` to completion, panicking unless it exits
/// with `status`; returns the parsed stdout.
fn run(env: &TestEnv, url: &str, args: &[&str], status: i32) -> serde_json::Value {
    let output = inbox(env, url, args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(status),
        "inbox {}\nstdout: {stdout}\nstderr: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn init_by_url_then_a_workers_whole_loop_with_a_wait_woken_by_another_process() {
    let Some((_cluster, url)) = database("postgres: worker loop") else {
        return;
    };
    let env = TestEnv::new();

    // Before init: the schema is missing, and the error says what to run.
    let missing = run(&env, &url, &["list"], 50);
    assert_eq!(missing["error"]["code"], "not_initialized", "{missing}");

    // `init --db URL` for people: names the database without a password.
    let init = env.run(&["init", "--db", &url]);
    assert_eq!(init.status, 0, "{init}");
    assert!(
        init.stdout
            .contains("durability the server's synchronous_commit)"),
        "{init}"
    );
    assert!(init.stderr.contains("postgres://postgres@"), "{init}");
    // A second init changes nothing and succeeds.
    run(&env, &url, &["init"], 0);
    assert!(!env.db().exists(), "no SQLite file was made");

    let sent = run(
        &env,
        &url,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Post CRUD",
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let claimed = run(&env, &url, &["claim", "--next", "--agent", "worker"], 0);
    assert_eq!(claimed["thread"]["thread_id"], thread.as_str(), "{claimed}");
    let token = claimed["lease"]["lease_token"].to_string();
    // One live lease: a second worker finds nothing to claim.
    run(&env, &url, &["claim", "--next", "--agent", "other"], 10);

    let blocked = [
        "update",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--lease-token",
        &token,
        "--status",
        "blocked",
        "--summary",
        "Need auth decision",
    ];
    run(&env, &url, &blocked, 0);
    let waiter = inbox(
        &env,
        &url,
        &[
            "wait-reply",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            &token,
            "--timeout-seconds",
            "60",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let answered = Instant::now();
    let answer = [
        "reply",
        "--from",
        "lead",
        "--thread",
        &thread,
        "--kind",
        "answer",
        "--summary",
        "Use email/password",
    ];
    run(&env, &url, &answer, 0);
    let output = waiter.wait_with_output().unwrap();
    let woke = answered.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    let reply: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(reply["woke"], true, "{reply}");
    assert_eq!(reply["message"]["summary"], "Use email/password", "{reply}");
    // Woken by the notification, not by its 60 s timeout (the bound is
    // loose: it pins the mechanism, not the machine's speed).
    assert!(woke < Duration::from_secs(10), "woke after {woke:?}");

    let done = [
        "done",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--lease-token",
        &token,
        "--summary",
        "Implemented",
    ];
    run(&env, &url, &done, 0);
    let shown = run(&env, &url, &["show", "--thread", &thread], 0);
    assert_eq!(shown["thread"]["status"], "done", "{shown}");
}

#[test]
fn orch_runs_on_the_same_database() {
    let Some((_cluster, url)) = database("postgres: orch") else {
        return;
    };
    let env = TestEnv::new();
    run(&env, &url, &["init"], 0);
    let orch = |args: &[&str]| {
        let mut command = env.orch_command(args);
        command
            .arg("--json")
            .env("INBOX_DB", &url)
            .env_remove("INBOX_NOW");
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert_eq!(output.status.code(), Some(0), "orch {args:?}: {stdout}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    std::fs::write(
        env.dir().join("plan.json"),
        r#"{"tasks": [{"task_id": "T1", "title": "First", "assignee": "worker"}]}"#,
    )
    .unwrap();
    orch(&[
        "--agent", "lead", "run", "create", "--goal", "Ship it", "--id", "r1",
    ]);
    orch(&["--agent", "lead", "plan", "--file", "plan.json"]);
    let ready = orch(&["ready"]);
    assert_eq!(ready["tasks"][0]["task_id"], "T1", "{ready}");
    // Dispatch opens an inbox thread the worker claims from the same bus.
    orch(&["--agent", "lead", "dispatch", "--task", "T1"]);
    let claimed = run(&env, &url, &["claim", "--next", "--agent", "worker"], 0);
    assert_eq!(claimed["thread"]["subject"], "First", "{claimed}");
}

#[test]
fn what_postgres_cannot_do_is_refused_and_a_password_is_never_printed() {
    let Some((_cluster, url)) = database("postgres: refusals") else {
        return;
    };
    let env = TestEnv::new();
    run(&env, &url, &["init"], 0);

    // Tools that copy or bridge the SQLite file itself.
    for args in [&["export", "dump.jsonl"][..], &["import", "dump.jsonl"]] {
        let refused = run(&env, &url, args, 30);
        assert_eq!(refused["error"]["code"], "invalid_value", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("pg_dump"),
            "{refused}"
        );
    }
    assert!(!env.dir().join("dump.jsonl").exists());
    // Durability is the server's; an engine component runs over SQLite.
    let durability = run(&env, &url, &["init", "--durability", "full"], 30);
    assert_eq!(durability["error"]["code"], "invalid_value", "{durability}");
    let engine = run(&env, &url, &["list", "--engine", "x.wasm"], 30);
    assert_eq!(engine["error"]["code"], "invalid_value", "{engine}");

    // A server nobody listens on: a storage error, without the password
    // of the URL, in JSON and for people alike.
    let unreachable = "postgres://agent:s3cret-pw@127.0.0.1:1/inbox";
    let failed = run(&env, unreachable, &["list"], 50);
    assert_eq!(failed["error"]["code"], "storage_error", "{failed}");
    let text = env.run_command({
        let mut command = env.command(&["list", "--db", unreachable]);
        command.env_remove("INBOX_NOW");
        command
    });
    assert_eq!(text.status, 50, "{text}");
    for shown in [failed.to_string(), text.stdout, text.stderr] {
        assert!(
            !shown.contains("s3cret-pw"),
            "the password was printed: {shown}"
        );
    }
}

/// A cluster set up with the roles recipe of docs/postgres.md as written: the roles,
/// the `inbox` database, `inbox init` as its owner, the owner's grants.
struct Recipe {
    cluster: PgCluster,
    env: TestEnv,
}

impl Recipe {
    fn set_up(test: &str) -> Option<Recipe> {
        let cluster = PgCluster::start_or_skip(test)?;
        let (as_superuser, as_owner) = inbox_pg_cluster::roles_recipe();
        // One statement at a time, as psql runs them (CREATE DATABASE cannot
        // run inside the transaction a multi-statement batch is).
        let mut admin = cluster.admin();
        for statement in as_superuser.split(";\n").filter(|s| !s.trim().is_empty()) {
            admin.batch_execute(statement).unwrap();
        }
        let recipe = Recipe {
            cluster,
            env: TestEnv::new(),
        };
        run(&recipe.env, &recipe.url_as("inbox_owner"), &["init"], 0);
        recipe
            .client_as("inbox_owner")
            .batch_execute(&as_owner)
            .unwrap();
        Some(recipe)
    }

    /// The URL of the `inbox` database as `role`.
    fn url_as(&self, role: &str) -> String {
        self.cluster
            .url("inbox")
            .replace("postgres@", &format!("{role}@"))
    }

    /// A plain client of the `inbox` database as `role`, as `psql` would be.
    fn client_as(&self, role: &str) -> inbox_pg_cluster::postgres::Client {
        let mut config = self.cluster.config("inbox");
        config.user(role);
        config.connect(inbox_pg_cluster::postgres::NoTls).unwrap()
    }
}

#[test]
fn database_roles_as_the_readme_sets_them_up_decide_who_may_write() {
    let Some(recipe) = Recipe::set_up("postgres: roles") else {
        return;
    };
    let env = &recipe.env;

    // A machine's role runs the worker's commands.
    let machine = recipe.url_as("machine_a");
    let sent = run(
        env,
        &machine,
        &["send", "--from", "lead", "--to", "worker", "--subject", "s"],
        0,
    );
    run(env, &machine, &["claim", "--next", "--agent", "worker"], 0);
    // A reader sees everything and changes nothing.
    let board = recipe.url_as("board");
    let listed = run(env, &board, &["list"], 0);
    assert_eq!(
        listed["threads"][0]["thread_id"], sent["thread"]["thread_id"],
        "{listed}"
    );
    let refused = run(
        env,
        &board,
        &[
            "send",
            "--from",
            "board",
            "--to",
            "worker",
            "--subject",
            "s",
        ],
        50,
    );
    assert_eq!(refused["error"]["code"], "storage_error", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{refused}"
    );
    // An agent's role may run `init` on a sound schema: it only reads.
    let init = run(env, &machine, &["init"], 0);
    assert_eq!(init["schema_version"], 1, "{init}");
}

/// What an agents' role (any agent with `psql`) must not be able to do:
/// change the schema, its version row or the row every writer locks.
#[test]
fn an_agents_role_cannot_touch_what_the_store_relies_on() {
    let Some(recipe) = Recipe::set_up("postgres: what agents may not do") else {
        return;
    };
    let forbidden = [
        "DELETE FROM inbox_writer",
        "INSERT INTO inbox_writer (id) VALUES (1)",
        "TRUNCATE inbox_writer",
        "UPDATE inbox_schema SET version = 99",
        "UPDATE inbox_schema SET application = 'other'",
        "DELETE FROM inbox_schema",
        "INSERT INTO inbox_schema (application, version) VALUES ('inbox', 1)",
        "TRUNCATE threads",
        "DROP TABLE threads",
        "ALTER TABLE threads ADD COLUMN planted INTEGER",
        "CREATE TABLE planted (id INTEGER)",
        "CREATE FUNCTION planted() RETURNS INTEGER LANGUAGE sql AS 'SELECT 1'",
        "CREATE INDEX planted ON messages (summary)",
        // History is append-only for agents: messages and events are never
        // updated by any command.
        "UPDATE messages SET summary = 'rewritten'",
        "UPDATE events SET event_id = event_id + 1000",
    ];
    let mut agent = recipe.client_as("machine_a");
    for statement in forbidden {
        let error = agent
            .batch_execute(statement)
            .expect_err(&format!("an agents' role ran `{statement}`"));
        let text = error
            .as_db_error()
            .map_or_else(|| error.to_string(), |db| db.message().to_owned());
        assert!(
            text.contains("permission denied") || text.contains("must be owner"),
            "`{statement}` failed for another reason: {text}"
        );
    }
    // Readers write nothing at all, not even the lock row.
    let mut reader = recipe.client_as("board");
    for statement in [
        "SELECT id FROM inbox_writer FOR UPDATE",
        "DELETE FROM threads",
    ] {
        assert!(
            reader.batch_execute(statement).is_err(),
            "a reader's role ran `{statement}`"
        );
    }
}

/// Tables the recipe must name: every table of the schema, so that a
/// migration that adds one cannot leave agents' roles without it, or with
/// more than the table's commands need.
#[test]
fn the_recipe_names_every_table_of_the_schema() {
    let Some(recipe) = Recipe::set_up("postgres: recipe covers the schema") else {
        return;
    };
    let (_, as_owner) = inbox_pg_cluster::roles_recipe();
    let rows = recipe
        .client_as("inbox_owner")
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
            &[],
        )
        .unwrap();
    let granted = |table: &str| {
        as_owner.lines().any(|line| {
            line.contains("TO inbox_agents") && line.split([' ', ',']).any(|word| word == table)
        })
    };
    let tables: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert!(tables.len() > 10, "{tables:?}");
    let unnamed: Vec<&String> = tables
        .iter()
        .filter(|table| table.as_str() != "inbox_schema" && !granted(table))
        .collect();
    assert!(
        unnamed.is_empty(),
        "the roles recipe of docs/postgres.md grants agents nothing on {unnamed:?}"
    );
}

/// A writer row removed (by a role given more than the recipe, or by the
/// owner's mistake) stops every write before it writes, leaves reads
/// working, and the owner's `init` puts it back; a version row changed by
/// hand is refused with advice that does not send the operator to upgrade.
#[test]
fn the_store_refuses_to_write_without_its_writer_row_and_init_restores_it() {
    let Some(recipe) = Recipe::set_up("postgres: writer row") else {
        return;
    };
    let env = &recipe.env;
    let machine = recipe.url_as("machine_a");
    let owner = recipe.url_as("inbox_owner");
    run(
        env,
        &machine,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "before",
        ],
        0,
    );
    recipe
        .client_as("inbox_owner")
        .batch_execute("DELETE FROM inbox_writer")
        .unwrap();

    let refused = run(
        env,
        &machine,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "during",
        ],
        50,
    );
    assert_eq!(refused["error"]["code"], "storage_error", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("inbox_writer") && message.contains("inbox init"),
        "{refused}"
    );
    let listed = run(env, &machine, &["list"], 0);
    assert_eq!(listed["threads"].as_array().unwrap().len(), 1, "{listed}");
    // An agents' role cannot repair it; the owner's init does.
    let denied = run(env, &machine, &["init"], 50);
    assert!(
        denied["error"]["message"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{denied}"
    );
    run(env, &owner, &["init"], 0);
    run(
        env,
        &machine,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "after",
        ],
        0,
    );
    let listed = run(env, &machine, &["list"], 0);
    assert_eq!(listed["threads"].as_array().unwrap().len(), 2, "{listed}");

    // A version row changed by hand: refused, saying it may have been.
    recipe
        .client_as("inbox_owner")
        .batch_execute("UPDATE inbox_schema SET version = 99")
        .unwrap();
    let refused = run(env, &machine, &["list"], 50);
    assert_eq!(refused["error"]["code"], "schema_too_new", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed it by hand"),
        "{refused}"
    );
}
