//! Roles, broadcasts and the mailbox, end to end: the registry and the
//! addresses of `docs/addresses-and-mailbox.md` checked with the real binary,
//! one OS process per command, against one real SQLite file.
//!
//! - A role is a pool: eight member processes draining `role:crew` at once
//!   finish every thread exactly once, and every member gets work.
//! - A broadcast is information: each registered agent reads it and keeps
//!   its own read state, an unregistered agent never sees it, and nobody
//!   may claim it.
//! - Only members claim from a pool, and `send --pick` rotates over the
//!   members across processes, also when the sends race.
//! - A role nobody holds accepts work, says so, and counts what waits.
//! - With `--agent-registration required`, an address nobody registered
//!   (a mistyped name, a role nobody holds) is refused with
//!   `unknown_recipient` naming the closest registered names, wherever it
//!   is written (`send`, `reply`, orch's assignees), and writes nothing; a
//!   name nobody registered may not act.
//! - `list --assigned-to role:NAME` lists a role's threads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use serde_json::Value;

use crate::common::TestEnv;

/// `inbox args... --json` in `dir` on the real clock, buildable from any
/// thread (`TestEnv` is not `Sync`): exit code and parsed stdout. Panics on
/// a storage error or SQLite's lock error leaking through, which no
/// concurrent use may ever produce.
fn inbox(dir: &Path, args: &[&str]) -> (i32, Value) {
    let output = Command::new(crate::common::inbox_bin())
        .args(args)
        .arg("--json")
        .current_dir(dir)
        .env_remove("INBOX_DB")
        .env_remove("INBOX_AGENT")
        .env_remove("INBOX_NOW")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code().unwrap_or(-1);
    let shown = format!(
        "inbox {} --json\nexit: {code}\nstdout: {stdout}\nstderr: {stderr}",
        args.join(" ")
    );
    assert!(
        code != 50
            && !stdout.contains("database is locked")
            && !stderr.contains("database is locked"),
        "storage trouble: {shown}"
    );
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {shown}"));
    (code, json)
}

/// As [`inbox`], panicking unless the exit code is `expected`.
fn inbox_ok(dir: &Path, args: &[&str], expected: i32) -> Value {
    let (code, json) = inbox(dir, args);
    assert_eq!(code, expected, "inbox {} --json: {json}", args.join(" "));
    json
}

fn str_of<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {value}"))
}

/// Registers `agent` with `roles` (comma-separated, may be empty).
fn register(env: &TestEnv, agent: &str, roles: &str) {
    let mut args = vec!["agent", "register", "--agent", agent];
    if !roles.is_empty() {
        args.extend(["--role", roles]);
    }
    let registered = env.json(&args, 0);
    assert_eq!(registered["agent"]["name"], agent, "{registered}");
    // Roles come back sorted by name.
    let mut expected: Vec<&str> = roles.split(',').filter(|r| !r.is_empty()).collect();
    expected.sort_unstable();
    assert_eq!(registered["agent"]["roles"], serde_json::json!(expected));
}

/// Asserts a refused `--json` command is exactly one line holding
/// `{"ok":false,"command":COMMAND,"error":{"code":CODE,"message":...}}`
/// and exited with `exit`; returns the error message.
fn assert_refused(env: &TestEnv, args: &[&str], command: &str, code: &str, exit: i32) -> String {
    let mut all = args.to_vec();
    all.push("--json");
    let run = env.run(&all);
    assert_eq!(run.status, exit, "{run}");
    assert_eq!(run.raw_stdout.trim_end().lines().count(), 1, "{run}");
    let json = run.json();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["command", "error", "ok"], "{run}");
    assert_eq!(json["ok"], false, "{run}");
    assert_eq!(json["command"], command, "{run}");
    let error = json["error"].as_object().unwrap();
    let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message"], "{run}");
    assert_eq!(json["error"]["code"], code, "{run}");
    json["error"]["message"].as_str().unwrap().to_owned()
}

/// One successful `claim --next` of a crew worker.
struct Claimed {
    thread: String,
    token: u64,
    worker: String,
}

/// A crew worker: waits for the others at `start`, then `claim --next`
/// and `done` with the lease token, until `claim --next` says there is
/// nothing left (exit 10). Every command is its own `inbox` process.
fn crew_worker(dir: &Path, worker: &str, start: &Barrier) -> Vec<Claimed> {
    start.wait();
    let mut claimed = Vec::new();
    for _ in 0..1000 {
        let (code, claim) = inbox(dir, &["claim", "--agent", worker, "--next"]);
        match code {
            10 => {
                assert_eq!(claim["ok"], true, "{claim}");
                assert_eq!(claim["thread"], Value::Null, "{claim}");
                return claimed;
            }
            0 => {}
            _ => panic!("{worker}, claim --next: exit {code}: {claim}"),
        }
        let thread = str_of(&claim, "/thread/thread_id").to_owned();
        assert_eq!(claim["thread"]["assigned_to"], "role:crew", "{claim}");
        assert_eq!(claim["thread"]["status"], "claimed", "{claim}");
        assert_eq!(claim["lease"]["agent"], worker, "{claim}");
        let token = claim["lease"]["lease_token"].as_u64().unwrap();
        let done = inbox_ok(
            dir,
            &[
                "done",
                "--agent",
                worker,
                "--thread",
                &thread,
                "--lease-token",
                &token.to_string(),
                "--summary",
                &format!("Done by {worker}"),
            ],
            0,
        );
        assert_eq!(done["thread"]["status"], "done", "{done}");
        claimed.push(Claimed {
            thread,
            token,
            worker: worker.to_owned(),
        });
    }
    panic!("{worker} never drained the queue");
}

#[test]
fn eight_workers_in_one_role_drain_200_threads() {
    const WORKERS: usize = 8;
    const THREADS: usize = 200;
    let started = Instant::now();
    let env = TestEnv::initialized();
    let dir = env.dir();
    let workers: Vec<String> = (1..=WORKERS).map(|n| format!("w{n}")).collect();
    for worker in &workers {
        let registered = inbox_ok(
            dir,
            &["agent", "register", "--agent", worker, "--role", "crew"],
            0,
        );
        assert_eq!(registered["agent"]["roles"], serde_json::json!(["crew"]));
    }

    let mut sent = BTreeSet::new();
    for i in 0..THREADS {
        let subject = format!("Crew task {i}");
        let send = inbox_ok(
            dir,
            &[
                "send",
                "--from",
                "lead",
                "--to",
                "role:crew",
                "--subject",
                &subject,
            ],
            0,
        );
        assert_eq!(send["thread"]["assigned_to"], "role:crew", "{send}");
        assert_eq!(send["route"]["members"], WORKERS, "{send}");
        assert_eq!(send["route"]["picked"], Value::Null, "{send}");
        sent.insert(str_of(&send, "/thread/thread_id").to_owned());
    }
    assert_eq!(sent.len(), THREADS);
    let crew = inbox_ok(dir, &["agent", "list", "--role", "crew"], 0);
    assert_eq!(crew["roles"][0]["members"], WORKERS, "{crew}");
    assert_eq!(crew["roles"][0]["waiting"], THREADS, "{crew}");
    let sending = started.elapsed();

    // Each worker loop runs on its own thread of the test and starts one
    // `inbox` process per command; the barrier releases them together so
    // that no member starts after the others have drained the pool.
    let start = Arc::new(Barrier::new(WORKERS));
    let dir_buf: Arc<PathBuf> = Arc::new(dir.to_owned());
    let loops: Vec<_> = workers
        .iter()
        .map(|worker| {
            let (worker, start, dir) = (worker.clone(), Arc::clone(&start), Arc::clone(&dir_buf));
            std::thread::spawn(move || crew_worker(&dir, &worker, &start))
        })
        .collect();
    let claims: Vec<Claimed> = loops.into_iter().flat_map(|l| l.join().unwrap()).collect();

    let mut per_worker: BTreeMap<&str, usize> = workers.iter().map(|w| (w.as_str(), 0)).collect();
    for claim in &claims {
        *per_worker.get_mut(claim.worker.as_str()).unwrap() += 1;
    }
    eprintln!(
        "{THREADS} sends took {sending:?}; {WORKERS} workers drained them in {:?}: {per_worker:?}",
        started.elapsed() - sending
    );

    // Every thread was claimed exactly once, with the first lease token,
    // and nothing else was claimed.
    let mut claimer: BTreeMap<&str, &Claimed> = BTreeMap::new();
    for claim in &claims {
        if let Some(other) = claimer.insert(&claim.thread, claim) {
            panic!(
                "{} was claimed by {} and by {}",
                claim.thread, other.worker, claim.worker
            );
        }
        assert_eq!(claim.token, 1, "{} by {}", claim.thread, claim.worker);
    }
    assert_eq!(
        claims.len(),
        THREADS,
        "the claims add up to the threads sent"
    );
    let claimed: BTreeSet<String> = claimer.keys().map(|t| (*t).to_owned()).collect();
    assert_eq!(claimed, sent);

    // Every member got work.
    for (worker, count) in &per_worker {
        assert!(*count >= 1, "{worker} finished no thread: {per_worker:?}");
    }

    // The database agrees: every thread is done after one attempt, still
    // addressed to the pool.
    let listed = inbox_ok(dir, &["list", "--limit", "1000"], 0);
    let threads = listed["threads"].as_array().unwrap();
    assert_eq!(threads.len(), THREADS, "{listed}");
    for thread in threads {
        assert_eq!(thread["status"], "done", "{thread}");
        assert_eq!(thread["attempts"], 1, "{thread}");
        assert_eq!(thread["assigned_to"], "role:crew", "{thread}");
        assert_eq!(thread["lease"], Value::Null, "{thread}");
    }
    let done = inbox_ok(dir, &["list", "--status", "done", "--limit", "1000"], 0);
    assert_eq!(done["threads"].as_array().unwrap().len(), THREADS);

    // The leader's mailbox holds exactly one result per thread, from the
    // worker that claimed it.
    let results = inbox_ok(dir, &["read", "--agent", "lead", "--limit", "1000"], 0);
    assert_eq!(results["more"], false, "{results}");
    let messages = results["messages"].as_array().unwrap();
    assert_eq!(messages.len(), THREADS, "one result per thread");
    let mut finished = BTreeSet::new();
    for message in messages {
        let thread = str_of(message, "/thread_id");
        assert_eq!(message["kind"], "result", "{message}");
        assert_eq!(message["to_agent"], "lead", "{message}");
        assert_eq!(message["thread_status"], "done", "{message}");
        let by = &claimer[thread].worker;
        assert_eq!(message["from_agent"], by.as_str(), "{message}");
        assert_eq!(message["summary"], format!("Done by {by}"), "{message}");
        assert!(
            finished.insert(thread.to_owned()),
            "{thread} finished twice"
        );
    }

    // Nothing waits on the role and nobody holds a lease.
    let crew = inbox_ok(dir, &["agent", "list", "--role", "crew"], 0);
    assert_eq!(crew["roles"][0]["waiting"], 0, "{crew}");
    for agent in crew["agents"].as_array().unwrap() {
        assert_eq!(agent["holds"], serde_json::json!([]), "{agent}");
    }
    eprintln!("the whole test took {:?}", started.elapsed());
}

#[test]
fn a_broadcast_is_read_by_five_agents_each_with_its_own_read_state() {
    let env = TestEnv::initialized();
    // Three reviewers and two others; `ghost` never registers.
    let agents = [
        ("a1", "rev"),
        ("a2", "rev,ops"),
        ("a3", "ops"),
        ("a4", "rev"),
        ("a5", ""),
    ];
    for (agent, roles) in agents {
        register(&env, agent, roles);
    }

    let all = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "broadcast",
            "--subject",
            "Freeze at noon",
        ],
        0,
    );
    assert_eq!(all["thread"]["assigned_to"], "broadcast", "{all}");
    assert_eq!(all["message"]["kind"], "event", "{all}");
    assert_eq!(all["route"]["members"], 5, "{all}");
    let reviewers = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "broadcast:role:rev",
            "--subject",
            "Reviewers: new checklist",
        ],
        0,
    );
    assert_eq!(
        reviewers["thread"]["assigned_to"], "broadcast:role:rev",
        "{reviewers}"
    );
    assert_eq!(reviewers["route"]["members"], 3, "{reviewers}");
    let all_thread = str_of(&all, "/thread/thread_id").to_owned();
    let all_message = str_of(&all, "/message/message_id").to_owned();
    let rev_thread = str_of(&reviewers, "/thread/thread_id").to_owned();
    let rev_message = str_of(&reviewers, "/message/message_id").to_owned();

    // Agents take their turn in order, each command its own process: every
    // agent finds its broadcasts unread although the agents before it have
    // already marked them read.
    for (i, (agent, roles)) in agents.into_iter().enumerate() {
        let member = roles.split(',').any(|r| r == "rev");
        let mut expected = vec![(all_thread.as_str(), all_message.as_str(), "broadcast")];
        if member {
            expected.push((
                rev_thread.as_str(),
                rev_message.as_str(),
                "broadcast:role:rev",
            ));
        }

        let read = env.json(&["read", "--agent", agent], 0);
        let messages = read["messages"].as_array().unwrap();
        let seen: Vec<(&str, &str, &str)> = messages
            .iter()
            .map(|m| {
                (
                    str_of(m, "/thread_id"),
                    str_of(m, "/message_id"),
                    str_of(m, "/to_agent"),
                )
            })
            .collect();
        assert_eq!(seen, expected, "{agent}: {read}");
        for message in messages {
            assert_eq!(message["from_agent"], "lead", "{message}");
            assert_eq!(message["kind"], "event", "{message}");
            assert_eq!(message["thread_status"], "pending", "{message}");
        }
        assert_eq!(messages[0]["subject"], "Freeze at noon");
        assert_eq!(read["more"], false, "{read}");
        let last_event = messages.last().unwrap()["event_id"].clone();
        assert_eq!(read["next_event_id"], last_event, "{read}");

        // Half mark by id, half through the cursor `read` returned.
        let marked = if i % 2 == 0 {
            let ids: Vec<&str> = expected.iter().map(|(_, m, _)| *m).collect();
            env.json(
                &[
                    "mark-read",
                    "--agent",
                    agent,
                    "--message-ids",
                    &ids.join(","),
                ],
                0,
            )
        } else {
            env.json(
                &[
                    "mark-read",
                    "--agent",
                    agent,
                    "--through-event",
                    &last_event.to_string(),
                ],
                0,
            )
        };
        let cursors = marked["cursors"].as_array().unwrap();
        let moved: BTreeSet<&str> = cursors.iter().map(|c| str_of(c, "/thread_id")).collect();
        let wanted: BTreeSet<&str> = expected.iter().map(|(t, _, _)| *t).collect();
        assert_eq!(moved, wanted, "{agent}: {marked}");
        for cursor in cursors {
            assert_eq!(cursor["agent"], agent, "{marked}");
        }

        let again = env.json(&["read", "--agent", agent], 10);
        assert_eq!(again["messages"], serde_json::json!([]), "{agent}: {again}");
        assert_eq!(again["ok"], true, "{again}");
        // Read, not gone: `--include-read` still lists them.
        let history = env.json(&["read", "--agent", agent, "--include-read"], 0);
        assert_eq!(
            history["messages"].as_array().unwrap().len(),
            expected.len(),
            "{agent}: {history}"
        );

        // The agents after this one still have them unread.
        for (later, _) in &agents[i + 1..] {
            let theirs = env.json(&["read", "--agent", later], 0);
            let unread: Vec<&str> = theirs["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| str_of(m, "/thread_id"))
                .collect();
            assert!(unread.contains(&all_thread.as_str()), "{later}: {theirs}");
        }
    }

    // An unregistered agent is reached by neither broadcast.
    for extra in [&["--include-read"][..], &[]] {
        let mut args = vec!["read", "--agent", "ghost"];
        args.extend(extra);
        let nothing = env.json(&args, 10);
        assert_eq!(nothing["messages"], serde_json::json!([]), "{nothing}");
    }

    // A broadcast is information: nobody claims it, member or not.
    for (thread, agent) in [
        (&all_thread, "a1"),
        (&all_thread, "ghost"),
        (&rev_thread, "a1"),
        (&rev_thread, "a3"),
    ] {
        let message = assert_refused(
            &env,
            &["claim", "--agent", agent, "--thread", thread],
            "claim",
            "not_assigned",
            30,
        );
        assert!(
            message.contains("a broadcast is information"),
            "{agent}: {message}"
        );
    }
    // Nor is it in anyone's queue.
    let queue = env.json(&["claim", "--agent", "a1", "--next"], 10);
    assert_eq!(queue["thread"], Value::Null, "{queue}");
    env.json(&["fetch", "--agent", "a2"], 10);
    // The refused claims wrote nothing: both threads are pending, unclaimed.
    for thread in [&all_thread, &rev_thread] {
        let shown = env.json(&["show", "--thread", thread], 0);
        assert_eq!(shown["thread"]["status"], "pending", "{shown}");
        assert_eq!(shown["thread"]["attempts"], 0, "{shown}");
        assert_eq!(shown["thread"]["lease"], Value::Null, "{shown}");
    }
}

#[test]
fn only_members_claim_from_a_pool() {
    let env = TestEnv::initialized();
    register(&env, "m1", "crew");
    register(&env, "m2", "crew");
    register(&env, "outsider", "docs");
    let sent = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "role:crew",
            "--subject",
            "Pool task",
        ],
        0,
    );
    assert_eq!(sent["route"]["members"], 2, "{sent}");
    let thread = str_of(&sent, "/thread/thread_id").to_owned();

    // A registered agent of another role, and an agent nobody registered.
    for agent in ["outsider", "stranger"] {
        let message = assert_refused(
            &env,
            &["claim", "--agent", agent, "--thread", &thread],
            "claim",
            "not_assigned",
            30,
        );
        assert!(
            message.contains(&format!(
                "join with `inbox agent register --agent {agent} --role crew`"
            )),
            "{message}"
        );
        // Their queues do not hold the pool's thread.
        env.json(&["fetch", "--agent", agent], 10);
        env.json(&["claim", "--agent", agent, "--next"], 10);
    }
    // A member sees it in its queue.
    let fetched = env.json(&["fetch", "--agent", "m2"], 0);
    assert_eq!(fetched["threads"][0]["thread_id"], thread.as_str());
    // Leaving the role ends the right to claim.
    register(&env, "m2", "docs");
    assert_refused(
        &env,
        &["claim", "--agent", "m2", "--thread", &thread],
        "claim",
        "not_assigned",
        30,
    );
    env.json(&["fetch", "--agent", "m2"], 10);

    // The refusals wrote nothing; the member left in the role claims it.
    let shown = env.json(&["show", "--thread", &thread], 0);
    assert_eq!(shown["thread"]["attempts"], 0, "{shown}");
    let claim = env.json(&["claim", "--agent", "m1", "--thread", &thread], 0);
    assert_eq!(claim["lease"]["agent"], "m1", "{claim}");
    assert_eq!(claim["lease"]["lease_token"], 1, "{claim}");
    assert_eq!(claim["thread"]["attempts"], 1, "{claim}");
}

#[test]
fn send_pick_rotates_over_the_members_across_processes() {
    let env = TestEnv::initialized();
    for agent in ["p1", "p2", "p3"] {
        register(&env, agent, "trio");
    }
    let mut picks = Vec::new();
    let mut threads = Vec::new();
    for i in 1..=4 {
        let sent = env.json(
            &[
                "send",
                "--from",
                "lead",
                "--to",
                "role:trio",
                "--pick",
                "--subject",
                &format!("Picked {i}"),
            ],
            0,
        );
        let picked = str_of(&sent, "/route/picked").to_owned();
        assert_eq!(sent["route"]["address"], "role:trio", "{sent}");
        assert_eq!(sent["route"]["members"], 3, "{sent}");
        assert_eq!(sent["thread"]["assigned_to"], picked.as_str(), "{sent}");
        assert_eq!(sent["message"]["to_agent"], picked.as_str(), "{sent}");
        threads.push(str_of(&sent, "/thread/thread_id").to_owned());
        picks.push(picked);
    }
    let first_three: BTreeSet<&str> = picks[..3].iter().map(String::as_str).collect();
    assert_eq!(
        first_three.len(),
        3,
        "three sends, three members: {picks:?}"
    );
    assert_eq!(picks[3], picks[0], "the fourth goes back to the first");
    // Ties between members who never got work are broken by name.
    assert_eq!(picks, ["p1", "p2", "p3", "p1"]);

    // A picked thread is the picked agent's alone, not the pool's.
    let message = assert_refused(
        &env,
        &["claim", "--agent", "p2", "--thread", &threads[0]],
        "claim",
        "not_assigned",
        30,
    );
    assert!(
        message.contains("only its assignee may claim it"),
        "{message}"
    );
    let claim = env.json(&["claim", "--agent", "p1", "--thread", &threads[0]], 0);
    assert_eq!(claim["lease"]["agent"], "p1", "{claim}");
    // Every member's queue holds exactly what was picked for it.
    for (agent, expected) in [("p1", 1), ("p2", 1), ("p3", 1)] {
        let queue = env.json(&["fetch", "--agent", agent], 0);
        let queued: Vec<&str> = queue["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| str_of(t, "/thread_id"))
            .collect();
        let picked: Vec<&str> = threads
            .iter()
            .zip(&picks)
            .filter(|(t, p)| p.as_str() == agent && **t != threads[0])
            .map(|(t, _)| t.as_str())
            .collect();
        assert_eq!(queued.len(), expected, "{agent}: {queue}");
        assert_eq!(queued, picked, "{agent}: {queue}");
    }
}

#[test]
fn concurrent_picks_spread_evenly_over_the_members() {
    const MEMBERS: usize = 3;
    const ROUNDS: usize = 3;
    let env = TestEnv::initialized();
    let dir = env.dir();
    // On the real clock throughout: a pick skips members who are `gone`,
    // so registration and sends must share one clock.
    for n in 1..=MEMBERS {
        inbox_ok(
            dir,
            &[
                "agent",
                "register",
                "--agent",
                &format!("p{n}"),
                "--role",
                "trio",
            ],
            0,
        );
    }
    // Every send is its own process, released together: each pick reads
    // the rotation and moves it in one transaction, so no two sends may
    // pick on the same view of it.
    let start = Arc::new(Barrier::new(MEMBERS * ROUNDS));
    let senders: Vec<_> = (0..MEMBERS * ROUNDS)
        .map(|i| {
            let (start, dir) = (Arc::clone(&start), dir.to_owned());
            std::thread::spawn(move || {
                start.wait();
                inbox_ok(
                    &dir,
                    &[
                        "send",
                        "--from",
                        "lead",
                        "--to",
                        "role:trio",
                        "--pick",
                        "--subject",
                        &format!("Concurrent {i}"),
                    ],
                    0,
                )
            })
        })
        .collect();
    let mut sent: Vec<(u64, String)> = senders
        .into_iter()
        .map(|s| {
            let sent = s.join().unwrap();
            let picked = str_of(&sent, "/route/picked").to_owned();
            assert_eq!(sent["thread"]["assigned_to"], picked.as_str(), "{sent}");
            (sent["event_id"].as_u64().unwrap(), picked)
        })
        .collect();
    sent.sort();
    let order: Vec<&str> = sent.iter().map(|(_, p)| p.as_str()).collect();
    let mut per_member: BTreeMap<&str, usize> = BTreeMap::new();
    for picked in &order {
        *per_member.entry(picked).or_default() += 1;
    }
    assert_eq!(
        per_member,
        BTreeMap::from([("p1", ROUNDS), ("p2", ROUNDS), ("p3", ROUNDS)]),
        "picks in commit order: {order:?}"
    );
    // In commit order, the rotation is p1, p2, p3 over and over.
    for (i, picked) in order.iter().enumerate() {
        assert_eq!(*picked, format!("p{}", i % MEMBERS + 1), "{order:?}");
    }
}

#[test]
fn a_role_nobody_holds_accepts_work_and_says_so() {
    let env = TestEnv::initialized();
    register(&env, "busy", "crew");

    let run = env.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "role:nobody",
        "--subject",
        "Anyone?",
    ]);
    insta::assert_snapshot!(run.to_string(), @r"
    exit: 0
    --- stdout ---
    Opened thr_00000000000000000000000001 for role:nobody: Anyone?
      pending · priority normal · message msg_00000000000000000000000001 · event 1
      no registered agent is reached by role:nobody yet: the thread waits until one registers
    --- stderr ---
    database: .agents/coord.db (the nearest .agents/coord.db)
    ");

    let roles = env.json(&["agent", "list", "--role", "nobody"], 0);
    assert_eq!(roles["agents"], serde_json::json!([]), "{roles}");
    assert_eq!(roles["roles"].as_array().unwrap().len(), 1, "{roles}");
    assert_eq!(roles["roles"][0]["role"], "nobody", "{roles}");
    assert_eq!(roles["roles"][0]["members"], 0, "{roles}");
    assert_eq!(roles["roles"][0]["present"], 0, "{roles}");
    assert_eq!(roles["roles"][0]["waiting"], 1, "{roles}");

    // With --json the route says it; --pick without a member leaves the
    // thread on the role. (A second later: the queue is oldest first, and
    // two threads of one millisecond tie on their ids' random bits.)
    env.set_now("2026-01-01T00:00:01.000Z");
    let picked = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "role:nobody",
            "--pick",
            "--subject",
            "Anyone at all?",
        ],
        0,
    );
    assert_eq!(picked["route"]["members"], 0, "{picked}");
    assert_eq!(picked["route"]["picked"], Value::Null, "{picked}");
    assert_eq!(picked["thread"]["assigned_to"], "role:nobody", "{picked}");
    assert_eq!(picked["thread"]["status"], "pending", "{picked}");
    let roles = env.json(&["agent", "list", "--role", "nobody"], 0);
    assert_eq!(roles["roles"][0]["waiting"], 2, "{roles}");
    // The agent of another role was never offered them.
    env.json(&["fetch", "--agent", "busy"], 10);

    // The first member to register takes them, oldest first.
    register(&env, "late", "nobody");
    let claim = env.json(&["claim", "--agent", "late", "--next"], 0);
    assert_eq!(claim["thread"]["subject"], "Anyone?", "{claim}");
    let roles = env.json(&["agent", "list", "--role", "nobody"], 0);
    assert_eq!(roles["roles"][0]["members"], 1, "{roles}");
    assert_eq!(roles["roles"][0]["waiting"], 1, "{roles}");
}

// `list --assigned-to` takes an address, as docs/addresses-and-mailbox.md
// says: a role's threads are listed by its address.
#[test]
fn list_assigned_to_a_role_lists_its_threads() {
    let env = TestEnv::initialized();
    register(&env, "m1", "crew");
    let pool = env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "role:crew",
            "--subject",
            "Pool",
        ],
        0,
    );
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "role:nobody",
            "--subject",
            "Nobody",
        ],
        0,
    );
    env.json(
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "m1",
            "--subject",
            "Personal",
        ],
        0,
    );
    let listed = env.json(&["list", "--assigned-to", "role:crew"], 0);
    let threads = listed["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{listed}");
    assert_eq!(
        threads[0]["thread_id"], pool["thread"]["thread_id"],
        "{listed}"
    );
    let waiting = env.json(&["list", "--assigned-to", "role:nobody"], 0);
    assert_eq!(waiting["threads"].as_array().unwrap().len(), 1, "{waiting}");
    assert_eq!(waiting["threads"][0]["subject"], "Nobody", "{waiting}");
}

/// `send` from lead to `to`.
fn send_to(to: &str) -> [&str; 7] {
    [
        "send",
        "--from",
        "lead",
        "--to",
        to,
        "--subject",
        "Build it",
    ]
}

#[test]
fn with_registration_required_an_address_nobody_registered_is_refused() {
    let env = TestEnv::initialized();
    register(&env, "lead", "");
    register(&env, "bob", "crew");
    register(&env, "alice", "review");
    let set = env.json(&["settings", "--agent-registration", "required"], 0);
    assert_eq!(
        set["changed"],
        serde_json::json!(["agent_registration"]),
        "{set}"
    );
    assert_eq!(set["settings"]["agent_registration"], "required", "{set}");
    let shown = env.run(&["settings"]);
    assert!(shown.stdout.contains("registration   required"), "{shown}");

    // A mistyped name: refused, naming the registered name it is close to.
    for (to, closest) in [
        ("bbo", "closest registered agents: bob"),
        ("agent:Bob", "closest registered agents: bob"),
        ("alcie", "closest registered agents: alice"),
        ("role:crw", "closest roles held: role:crew"),
        ("broadcast:role:reveiw", "closest roles held: role:review"),
    ] {
        let message = assert_refused(&env, &send_to(to), "send", "unknown_recipient", 40);
        assert!(message.contains(closest), "{to}: {message}");
        assert!(message.contains("inbox agent register"), "{to}: {message}");
    }
    // Without --json, the same on stderr, exit 40.
    let plain = env.run(&send_to("bbo"));
    assert_eq!(plain.status, 40, "{plain}");
    assert!(
        plain.stderr.contains("closest registered agents: bob"),
        "{plain}"
    );
    // Nothing was opened.
    let listed = env.json(&["list"], 0);
    assert_eq!(listed["threads"], serde_json::json!([]), "{listed}");

    // A message into a thread, to an address: the same rule.
    let sent = env.json(&send_to("bob"), 0);
    let thread = str_of(&sent, "/thread/thread_id").to_owned();
    let reply = [
        "reply",
        "--from",
        "lead",
        "--thread",
        &thread,
        "--to",
        "bbo",
        "--kind",
        "question",
        "--summary",
        "FYI",
    ];
    assert_refused(&env, &reply, "reply", "unknown_recipient", 40);
    let shown = env.json(&["show", "--thread", &thread], 0);
    assert_eq!(shown["messages"].as_array().unwrap().len(), 1, "{shown}");

    // orch: an assignee is an address.
    env.orch_json(&["--agent", "lead", "run", "create", "--goal", "Ship"], 0);
    let add = |assignee: &str| {
        let mut all = vec![
            "--agent", "lead", "task", "add", "--task", "a", "--title", "A",
        ];
        all.extend(["--assignee", assignee, "--json"]);
        env.orch(&all)
    };
    let refused = add("bbo");
    assert_eq!(refused.status, 40, "{refused}");
    assert_eq!(
        refused.json()["error"]["code"],
        "unknown_recipient",
        "{refused}"
    );
    assert_eq!(add("bob").status, 0);

    // A name nobody registered may not act; a registered agent registers
    // it, and then it may.
    let as_mallory = [
        "send",
        "--from",
        "mallory",
        "--to",
        "bob",
        "--subject",
        "Hi",
    ];
    let message = assert_refused(&env, &as_mallory, "send", "agent_not_registered", 30);
    assert!(
        message.contains("registered by a registered agent"),
        "{message}"
    );
    register(&env, "mallory", "");
    env.json(&as_mallory, 0);

    // Back to optional, any name acts and receives again.
    env.json(&["settings", "--agent-registration", "optional"], 0);
    env.json(&send_to("bbo"), 0);
}
