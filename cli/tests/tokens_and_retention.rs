//! Agent tokens and retention, end to end with the real binary: one OS
//! process per command against one real SQLite file.
//!
//! - With tokens required, a process that acts as a registered agent
//!   without its token, or with another agent's, is refused and changes
//!   nothing; the token itself never reaches the database file, the help
//!   text or an error message.
//! - With tokens required, a process that acts as a name nobody
//!   registered is refused on every command that acts (`inbox`'s and
//!   `orch`'s), never told to register itself, and changes nothing.
//! - With tokens required, once an agent holds a token, a process can
//!   neither register a name of its own (a new one, or one that holds no
//!   token) nor change a setting (turn tokens off) without a registered
//!   agent's token; the registry records who vouched (`registered_by`).
//! - A token file with any permission for its group or other users is
//!   refused.
//! - `gc` keeps a busy database's file from growing: with `--auto-gc on`
//!   the file stops growing while tasks keep coming, and `gc` removes
//!   finished work across processes without touching open work.

use std::path::Path;

use serde_json::Value;

use crate::common::TestEnv;

/// Every byte of the database's files, `-wal` included.
fn database_bytes(db: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", db.display());
        if let Ok(content) = std::fs::read(&path) {
            bytes.extend(content);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

fn code(json: &Value) -> &str {
    json["error"]["code"].as_str().unwrap_or_default()
}

#[test]
fn an_agent_cannot_act_as_another_when_tokens_are_required() {
    let env = TestEnv::initialized();
    let set = env.json(&["settings", "--agent-tokens", "required"], 0);
    assert_eq!(set["changed"], serde_json::json!(["agent_tokens"]), "{set}");
    // The first agent registers freely; the lead registers the others.
    let lead = env.json(&["agent", "register", "--agent", "lead"], 0);
    let lead_token = lead["agent_token"].as_str().unwrap().to_owned();
    let by_lead = |agent: &str| {
        let args = [
            "agent",
            "register",
            "--agent",
            agent,
            "--agent-token",
            &lead_token,
        ];
        env.json(&args, 0)["agent_token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let token = by_lead("worker");
    assert!(token.starts_with("tok_") && token.len() == 68, "{token}");
    let other_token = by_lead("other");
    assert_ne!(token, other_token);
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Build it",
            "--agent-token",
            &lead_token,
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let claim = ["claim", "--agent", "worker", "--thread", thread.as_str()];

    // Without a token, with another agent's, with a mistyped one: refused.
    let refused = env.json(&claim, 30);
    assert_eq!(code(&refused), "agent_token_required", "{refused}");
    let mut as_other = claim.to_vec();
    as_other.push("--json");
    let output = env
        .command(&as_other)
        .env("INBOX_AGENT_TOKEN", &other_token)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(30));
    let refused: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(code(&refused), "agent_token_invalid", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.contains(&other_token), "{message}");
    // One hex digit changed; it must differ from the real last digit, or
    // one token in sixteen would "mistype" into itself.
    let last = if token.ends_with('0') { '1' } else { '0' };
    let mistyped = format!("{}{last}", &token[..67]);
    assert_ne!(mistyped, token);
    let mut wrong = claim.to_vec();
    wrong.extend(["--agent-token", mistyped.as_str()]);
    assert_eq!(code(&env.json(&wrong, 30)), "agent_token_invalid");

    // Nothing was done by the refused claims.
    let shown = env.json(&["show", "--thread", thread.as_str()], 0);
    assert_eq!(shown["thread"]["status"], "pending", "{shown}");

    // With its own token, from the environment: it works.
    let mut own = claim.to_vec();
    own.push("--json");
    let output = env
        .command(&own)
        .env("INBOX_AGENT_TOKEN", &token)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let done = [
        "done",
        "--agent",
        "worker",
        "--thread",
        &thread,
        "--summary",
        "Built",
        "--agent-token",
        &token,
    ];
    assert_eq!(env.json(&done, 0)["thread"]["status"], "done");

    // The token is nowhere but with whoever was given it.
    let bytes = database_bytes(&env.db());
    assert!(
        !contains(&bytes, &token),
        "the token is in the database file"
    );
    assert!(contains(
        &bytes,
        &inbox_engine::call::sha256_hex(token.as_bytes())
    ));
    let help = env
        .command(&["claim", "--help"])
        .env("INBOX_AGENT_TOKEN", &token)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--agent-token") && !help.contains(&token),
        "{help}"
    );
}

#[cfg(unix)]
#[test]
fn the_token_may_come_from_a_private_file_and_a_shared_one_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let env = TestEnv::initialized();
    env.json(&["settings", "--agent-tokens", "required"], 0);
    let worker = env.json(&["agent", "register", "--agent", "worker"], 0);
    let token = worker["agent_token"].as_str().unwrap().to_owned();
    let file = env.dir().join("worker.token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let path = file.to_str().unwrap();
    let fetch = ["fetch", "--agent", "worker"];
    let with = |flags: &[&str], token_env: Option<(&str, &str)>| {
        let mut args = fetch.to_vec();
        args.extend_from_slice(flags);
        args.push("--json");
        let mut command = env.command(&args);
        if let Some((name, value)) = token_env {
            command.env(name, value);
        }
        let output = command.output().unwrap();
        let json: Value = serde_json::from_slice(&output.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), json, stderr)
    };

    for mode in [0o600, 0o400] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (status, json, _) = with(&["--agent-token-file", path], None);
        assert_eq!(status, Some(10), "mode {mode:o}: {json}");
        let (status, json, _) = with(&[], Some(("INBOX_AGENT_TOKEN_FILE", path)));
        assert_eq!(
            status,
            Some(10),
            "mode {mode:o}, from the environment: {json}"
        );
    }
    // Any permission for its group or other users (read, write, even
    // execute): refused, naming the file and never the token.
    for mode in [
        0o640,
        0o610,
        0o601,
        0o644,
        0o604,
        0o620,
        0o666,
        0o700 | 0o050,
    ] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        let (status, json, stderr) = with(&["--agent-token-file", path], None);
        assert_eq!(status, Some(30), "mode {mode:o}: {json}");
        assert_eq!(code(&json), "invalid_value", "{json}");
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("chmod 600"), "{message}");
        assert!(message.contains(&format!("{mode:04o}")), "{message}");
        assert!(!json.to_string().contains(&token) && !stderr.contains(&token));
        // From the environment too, and for a server as for a command.
        let (status, json, _) = with(&[], Some(("INBOX_AGENT_TOKEN_FILE", path)));
        assert_eq!((status, code(&json)), (Some(30), "invalid_value"), "{json}");
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Given two ways: refused rather than one silently chosen.
    let (status, json, _) = with(
        &["--agent-token-file", path],
        Some(("INBOX_AGENT_TOKEN", &token)),
    );
    assert_eq!((status, code(&json)), (Some(30), "invalid_value"), "{json}");
    // Missing, a folder, empty, huge: refused with exit 30.
    let empty = env.dir().join("empty.token");
    std::fs::write(&empty, "\n").unwrap();
    let huge = env.dir().join("huge.token");
    std::fs::write(&huge, "a".repeat(1 << 20)).unwrap();
    for bad in [
        &env.dir().join("missing"),
        &env.dir().to_path_buf(),
        &empty,
        &huge,
    ] {
        std::fs::set_permissions(bad, std::fs::Permissions::from_mode(0o600)).ok();
        let (status, json, _) = with(&["--agent-token-file", bad.to_str().unwrap()], None);
        assert_eq!(status, Some(30), "{}: {json}", bad.display());
        assert!(
            ["invalid_value", "too_long"].contains(&code(&json)),
            "{json}"
        );
    }
    // A FIFO with no writer is not waited on.
    let fifo = env.dir().join("fifo.token");
    if std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (status, json, _) = with(&["--agent-token-file", fifo.to_str().unwrap()], None);
        assert_eq!((status, code(&json)), (Some(30), "invalid_value"), "{json}");
    }
}

/// `args` as a separate process, with `token` (if any) in
/// `$INBOX_AGENT_TOKEN` as an agent would hold it: exit code and JSON.
fn run_with_token(env: &TestEnv, orch: bool, args: &[&str], token: Option<&str>) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let mut command = if orch {
        env.orch_command(&all)
    } else {
        env.command(&all)
    };
    if let Some(token) = token {
        command.env("INBOX_AGENT_TOKEN", token);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    (output.status.code().unwrap_or(-1), json)
}

#[test]
fn a_name_nobody_registered_cannot_act_when_tokens_are_required() {
    let env = TestEnv::initialized();
    env.json(&["settings", "--agent-tokens", "required"], 0);
    let token_of = |agent: &str, voucher: Option<&str>| {
        let mut args = vec!["agent", "register", "--agent", agent];
        args.extend(
            voucher
                .map(|token| ["--agent-token", token])
                .iter()
                .flatten(),
        );
        let registered = env.json(&args, 0);
        registered["agent_token"].as_str().unwrap().to_owned()
    };
    let lead = token_of("lead", None);
    let bob = token_of("bob", Some(&lead));
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "bob",
            "--subject",
            "Build it",
            "--agent-token",
            &lead,
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let t = thread.as_str();
    env.json(
        &[
            "claim",
            "--agent",
            "bob",
            "--thread",
            t,
            "--agent-token",
            &bob,
        ],
        0,
    );
    let blocked = [
        "update",
        "--agent",
        "bob",
        "--thread",
        t,
        "--lease-token",
        "1",
        "--status",
        "blocked",
        "--summary",
        "Which DB?",
        "--agent-token",
        &bob,
    ];
    env.json(&blocked, 0);
    let before = env.json(&["show", "--thread", t], 0);

    // Every command that acts, as mallory whom nobody registered: with no
    // token, with bob's, and with a made-up one.
    let acts: &[(bool, &[&str])] = &[
        (
            false,
            &[
                "reply",
                "--from",
                "mallory",
                "--thread",
                t,
                "--kind",
                "answer",
                "--summary",
                "Use SQLite",
            ],
        ),
        (
            false,
            &[
                "cancel", "--agent", "mallory", "--thread", t, "--reason", "Mine now",
            ],
        ),
        (
            false,
            &[
                "send",
                "--from",
                "mallory",
                "--to",
                "bob",
                "--subject",
                "Do this instead",
            ],
        ),
        (
            false,
            &[
                "send",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--summary",
                "psst",
            ],
        ),
        (false, &["claim", "--agent", "mallory", "--thread", t]),
        (false, &["claim", "--agent", "mallory", "--next"]),
        (
            false,
            &[
                "renew",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--lease-token",
                "1",
            ],
        ),
        (
            false,
            &[
                "update",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--lease-token",
                "1",
                "--summary",
                "Mine",
            ],
        ),
        (
            false,
            &[
                "done",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--lease-token",
                "1",
                "--summary",
                "Done",
            ],
        ),
        (
            false,
            &[
                "fail",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--lease-token",
                "1",
                "--summary",
                "No",
            ],
        ),
        (
            false,
            &["mark-read", "--agent", "mallory", "--through-event", "3"],
        ),
        (
            false,
            &["show", "--agent", "mallory", "--thread", t, "--mark-read"],
        ),
        (
            false,
            &[
                "wait-reply",
                "--agent",
                "mallory",
                "--thread",
                t,
                "--timeout-seconds",
                "0",
            ],
        ),
        (
            false,
            &["watch", "--agent", "mallory", "--timeout-seconds", "0"],
        ),
        (
            true,
            &["--agent", "mallory", "run", "create", "--goal", "Take over"],
        ),
        (
            true,
            &[
                "--agent",
                "mallory",
                "answer",
                "t",
                "--summary",
                "Use SQLite",
            ],
        ),
        (true, &["--agent", "mallory", "cancel", "t"]),
    ];
    for (orch, args) in acts {
        for token in [None, Some(bob.as_str()), Some("tok_made_up")] {
            let (status, refused) = run_with_token(&env, *orch, args, token);
            assert_eq!(status, 30, "{args:?} with {token:?}: {refused}");
            assert_eq!(
                code(&refused),
                "agent_not_registered",
                "{args:?}: {refused}"
            );
            let message = refused["error"]["message"].as_str().unwrap_or_default();
            // It never teaches the way around: registering mallory.
            assert!(
                !message.contains("agent register") && !message.contains(&bob),
                "{message}"
            );
            assert!(message.contains("own registered name"), "{message}");
        }
    }
    // A near miss of a registered name is told the name it is near.
    let (status, near) = run_with_token(
        &env,
        false,
        &["cancel", "--agent", "bbo", "--thread", t, "--reason", "x"],
        None,
    );
    assert_eq!(status, 30, "{near}");
    assert!(
        near["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Did you mean bob?"),
        "{near}"
    );
    // Without --json the refusal goes to stderr, with the same advice.
    let plain = env.run(&[
        "cancel", "--agent", "mallory", "--thread", t, "--reason", "x",
    ]);
    assert_eq!(plain.status, 30, "{plain}");
    assert!(
        plain.stderr.contains("own registered name") && !plain.stderr.contains("agent register"),
        "{plain}"
    );

    // Nothing was done; reads stay open to any name.
    assert_eq!(env.json(&["show", "--thread", t], 0), before);
    env.json(&["fetch", "--agent", "mallory"], 10);

    // mallory cannot register herself (see
    // `a_new_name_joins_only_with_a_registered_agents_token`); the lead
    // registers her, and from then on she acts with her own token only.
    let mallory = token_of("mallory", Some(&lead));
    let cancel = [
        "cancel", "--agent", "mallory", "--thread", t, "--reason", "Mine now",
    ];
    let (status, refused) = run_with_token(&env, false, &cancel, None);
    assert_eq!(
        (status, code(&refused)),
        (30, "agent_token_required"),
        "{refused}"
    );
    let (status, refused) = run_with_token(&env, false, &cancel, Some(&bob));
    assert_eq!(
        (status, code(&refused)),
        (30, "agent_token_invalid"),
        "{refused}"
    );
    let (status, _) = run_with_token(&env, false, &cancel, Some(&mallory));
    assert_eq!(status, 0);
}

/// Writes `token` to a private file of its own in the test folder, as a
/// lead keeps it, and returns its path.
#[cfg(unix)]
fn token_file(env: &TestEnv, name: &str, token: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = env.dir().join(format!("{name}.token"));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Whether a refusal's message would teach a refused caller the way around
/// the tokens: register a name of its own, or turn tokens off.
fn teaches_the_bypass(message: &str) -> bool {
    message.contains("agent register --agent")
        || message.contains("--agent-tokens off")
        || message.contains("register it first")
}

#[cfg(unix)]
#[test]
fn a_new_name_joins_only_with_a_registered_agents_token() {
    let env = TestEnv::initialized();
    // Registered before tokens: it holds no token.
    env.json(&["agent", "register", "--agent", "old-hand"], 0);
    env.json(&["settings", "--agent-tokens", "required"], 0);
    // Bootstrap: no agent holds a token yet, so the first one (the lead)
    // registers itself, and nobody vouched for it.
    let lead = env.json(&["agent", "register", "--agent", "lead"], 0);
    assert!(lead["agent"].get("registered_by").is_none(), "{lead}");
    let lead_token = lead["agent_token"].as_str().unwrap().to_owned();
    let lead_file = token_file(&env, "lead", &lead_token);
    let registry = || env.json(&["agent", "list"], 0);
    let before = registry();

    // A new name, or a name without a token, registering itself: with no
    // token, with a made-up one, through a flag or the environment.
    for name in ["mallory", "old-hand", "lead-2"] {
        let args = ["agent", "register", "--agent", name, "--role", "crew"];
        let (status, refused) = run_with_token(&env, false, &args, None);
        assert_eq!(
            (status, code(&refused)),
            (30, "agent_token_required"),
            "{name}: {refused}"
        );
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(!teaches_the_bypass(message), "{message}");
        assert!(message.contains("--agent-token-file"), "{message}");
        let (status, refused) = run_with_token(&env, false, &args, Some("tok_made_up"));
        assert_eq!(
            (status, code(&refused)),
            (30, "agent_token_invalid"),
            "{name}: {refused}"
        );
        assert!(!teaches_the_bypass(
            refused["error"]["message"].as_str().unwrap()
        ));
    }
    // The old hand cannot act under its tokenless name either, and is not
    // told to register itself.
    let (status, refused) = run_with_token(
        &env,
        false,
        &["claim", "--agent", "old-hand", "--next"],
        None,
    );
    assert_eq!(
        (status, code(&refused)),
        (30, "agent_token_required"),
        "{refused}"
    );
    assert!(
        !teaches_the_bypass(refused["error"]["message"].as_str().unwrap()),
        "{refused}"
    );
    assert_eq!(registry(), before, "nothing was registered");

    // The lead vouches, with its token from its file: the new agent gets
    // its own token, and the registry says who let it in.
    let worker = env.json(
        &[
            "agent",
            "register",
            "--agent",
            "worker",
            "--agent-token-file",
            &lead_file,
        ],
        0,
    );
    assert_eq!(worker["agent"]["registered_by"], "lead", "{worker}");
    let worker_token = worker["agent_token"].as_str().unwrap().to_owned();
    assert_ne!(worker_token, lead_token);
    let mut old_hand = env.command(&["agent", "register", "--agent", "old-hand", "--json"]);
    old_hand.env("INBOX_AGENT_TOKEN_FILE", &lead_file);
    let old_hand = env.run_command(old_hand);
    assert_eq!(old_hand.status, 0, "{old_hand}");
    assert_eq!(
        old_hand.json()["agent"]["registered_by"],
        "lead",
        "{old_hand}"
    );
    let listed = registry();
    let by: Vec<(&str, Option<&str>)> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap(), a["registered_by"].as_str()))
        .collect();
    assert_eq!(
        by,
        [
            ("lead", None),
            ("old-hand", Some("lead")),
            ("worker", Some("lead"))
        ],
        "{listed}"
    );
    let text = env.run(&["agent", "list"]);
    assert!(text.stdout.contains("registered by lead"), "{text}");
    // A registered name registers again only with its own token: the
    // lead's is not the worker's.
    let (status, refused) = run_with_token(
        &env,
        false,
        &["agent", "register", "--agent", "worker", "--role", "admin"],
        Some(&lead_token),
    );
    assert_eq!(
        (status, code(&refused)),
        (30, "agent_token_invalid"),
        "{refused}"
    );

    // Settings: showing them needs no token; changing one does, so that
    // nobody turns the tokens off, or registration on, without one.
    let settings = env.json(&["settings"], 0);
    for change in [
        &["settings", "--agent-tokens", "off"][..],
        &["settings", "--agent-registration", "required"],
        &["settings", "--keep-days", "1"],
    ] {
        for token in [None, Some("tok_made_up")] {
            let (status, refused) = run_with_token(&env, false, change, token);
            assert_eq!(status, 30, "{change:?} with {token:?}: {refused}");
            let expected = if token.is_some() {
                "agent_token_invalid"
            } else {
                "agent_token_required"
            };
            assert_eq!(code(&refused), expected, "{refused}");
            assert!(!teaches_the_bypass(
                refused["error"]["message"].as_str().unwrap()
            ));
        }
    }
    assert_eq!(env.json(&["settings"], 0), settings, "nothing changed");
    let plain = env.run(&["settings", "--agent-tokens", "off"]);
    assert_eq!(plain.status, 30, "{plain}");
    assert!(
        plain.stderr.contains("agent_token_required") || plain.stderr.contains("needs the token"),
        "{plain}"
    );
    // Any registered agent's token vouches: the worker's, from a file.
    let worker_file = token_file(&env, "worker", &worker_token);
    let changed = env.json(
        &[
            "settings",
            "--agent-tokens",
            "off",
            "--agent-token-file",
            &worker_file,
        ],
        0,
    );
    assert_eq!(
        changed["changed"],
        serde_json::json!(["agent_tokens"]),
        "{changed}"
    );
    // Off, names are trusted again: registering is open and records no
    // voucher.
    let carol = env.json(&["agent", "register", "--agent", "carol"], 0);
    assert!(carol["agent"].get("registered_by").is_none(), "{carol}");
}

/// Sends, claims and finishes `n` tasks, one process per command as
/// agents do; returns the last event id.
fn finish_tasks(env: &TestEnv, from: usize, n: usize) -> u64 {
    let mut last = 0;
    for i in from..from + n {
        let subject = format!("Task {i}");
        let sent = env.json(
            &["send", "--from", "lead", "--to", "w", "--subject", &subject],
            0,
        );
        let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
        env.json(&["claim", "--agent", "w", "--thread", &thread], 0);
        let done = env.json(
            &[
                "done",
                "--agent",
                "w",
                "--thread",
                &thread,
                "--summary",
                "ok",
            ],
            0,
        );
        last = done["event_id"].as_u64().unwrap();
    }
    last
}

#[test]
fn auto_gc_keeps_a_busy_database_within_its_limits() {
    let env = TestEnv::initialized();
    env.json(&["settings", "--auto-gc", "on", "--keep-messages", "40"], 0);
    let open = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "w",
            "--subject",
            "Open work",
        ],
        0,
    );
    let open = open["thread"]["thread_id"].as_str().unwrap().to_owned();
    let last = finish_tasks(&env, 0, 60);
    let counted = env.json(&["gc", "--dry-run"], 0);
    let left = counted["messages_left"].as_u64().unwrap();
    // Each step removes what is over the limit; a step comes every 32
    // events (about 10 tasks), so at most that much more is there.
    assert!(left <= 40 + 2 * 12, "{counted}");
    let listed = env.json(&["list", "--limit", "1000"], 0);
    let threads = listed["threads"].as_array().unwrap();
    assert!(threads.len() < 40, "{} threads kept", threads.len());
    assert!(
        threads.iter().any(|t| t["thread_id"] == open.as_str()),
        "open work was removed"
    );
    // New work goes on with event ids above every removed one, and a
    // waiter's old cursor still works.
    let sent = env.json(
        &["send", "--from", "lead", "--to", "w", "--subject", "After"],
        0,
    );
    assert_eq!(sent["event_id"].as_u64().unwrap(), last + 1, "{sent}");
    let watched = env.json(
        &[
            "watch",
            "--agent",
            "w",
            "--after-event",
            "1",
            "--timeout-seconds",
            "0",
        ],
        0,
    );
    assert!(watched["woke"].as_bool().unwrap(), "{watched}");
}

/// The ids of the threads a `gc` answer removed.
fn removed(gc: &Value) -> Vec<&str> {
    gc["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["thread_id"].as_str().unwrap())
        .collect()
}

/// Retention never removes what nobody read: a broadcast with no agent
/// registered, or read only by its sender, and a request its creator
/// withdrew before anyone wrote in it, are not "read by everyone they are
/// for", however long they idle; once a registered agent reads the
/// broadcast, it goes.
#[test]
fn gc_never_removes_as_read_what_nobody_read() {
    let env = TestEnv::initialized();
    let send = |to: &str, subject: &str| -> String {
        let sent = env.json(
            &["send", "--from", "lead", "--to", to, "--subject", subject],
            0,
        );
        sent["thread"]["thread_id"].as_str().unwrap().to_owned()
    };
    let everyone = send("broadcast", "Freeze at noon");
    let ops = send("broadcast:role:ops", "Ops: rotate the keys");
    let withdrawn = send("w", "Asked, then withdrawn");
    env.json(
        &[
            "cancel",
            "--agent",
            "lead",
            "--thread",
            &withdrawn,
            "--reason",
            "Not needed",
        ],
        0,
    );
    send("w", "Newest");
    let all = [everyone.as_str(), ops.as_str(), withdrawn.as_str()];

    // A day and a half later, nobody registered: nothing was read.
    env.set_now("2026-01-02T12:00:00Z");
    let gc = env.json(&["gc", "--dry-run"], 0);
    assert_eq!(removed(&gc), Vec::<&str>::new(), "{gc}");
    let gc = env.json(&["gc", "--keep-read-hours", "0"], 0);
    assert_eq!(removed(&gc), Vec::<&str>::new(), "{gc}");

    // The sender alone registered (a member of ops too), having marked
    // everything read: it read nothing anyone else wrote.
    env.json(
        &["agent", "register", "--agent", "lead", "--role", "ops"],
        0,
    );
    for thread in all {
        env.json(
            &["show", "--agent", "lead", "--thread", thread, "--mark-read"],
            0,
        );
    }
    let gc = env.json(&["gc"], 0);
    assert_eq!(removed(&gc), Vec::<&str>::new(), "{gc}");
    for thread in all {
        env.json(&["show", "--thread", thread], 0);
    }

    // A registered agent that reads the broadcasts: now they were read.
    env.json(&["agent", "register", "--agent", "w", "--role", "ops"], 0);
    assert_eq!(removed(&env.json(&["gc"], 0)), Vec::<&str>::new());
    env.json(&["mark-read", "--agent", "w", "--through-event", "9"], 0);
    let gc = env.json(&["gc"], 0);
    let mut gone = removed(&gc);
    gone.sort_unstable();
    let mut read = [everyone.as_str(), ops.as_str()];
    read.sort_unstable();
    assert_eq!(gone, read, "{gc}");
    assert!(
        gc["removed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["reason"] == "read"),
        "{gc}"
    );
    // The withdrawn request waits for keep_days, as every finished thread.
    env.json(&["show", "--thread", &withdrawn], 0);
    env.set_now("2026-01-09T12:00:00Z");
    let gc = env.json(&["gc"], 0);
    assert_eq!(removed(&gc), [withdrawn.as_str()], "{gc}");
    assert_eq!(gc["removed"][0]["reason"], "age", "{gc}");
}
