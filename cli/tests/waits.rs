//! Blocking waits across processes, on the real clock: `wait-reply` and
//! `watch` wake when another process commits what they wait for, time out
//! with exit 10, keep a waiting holder's lease alive (and stop doing so when
//! the waiter dies), and sleep without burning CPU.
//!
//! Every command here runs without `INBOX_NOW`, so leases and timeouts
//! elapse in real time. Bounds on time are generous on purpose: these tests
//! pin what happens, not how fast a loaded machine is.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::TestEnv;

/// How long a freshly started waiter gets to start and arm its watch.
const ARM: Duration = Duration::from_millis(300);

/// `inbox args... --json` on the real clock.
fn inbox(env: &TestEnv, args: &[&str]) -> Command {
    let mut command = env.command(args);
    command.arg("--json").env_remove("INBOX_NOW");
    command
}

/// Runs `inbox args... --json` on the real clock to completion, panicking
/// unless it exits with `status`; returns the parsed stdout.
fn run(env: &TestEnv, args: &[&str], status: i32) -> serde_json::Value {
    let output = inbox(env, args).output().unwrap();
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

/// Starts `inbox args... --json` on the real clock in the background.
fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    inbox(env, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a background `inbox` and returns its exit code and JSON.
fn finish(child: Child) -> (i32, serde_json::Value) {
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let code = output.status.code().unwrap_or_else(|| {
        panic!(
            "killed by a signal\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "exit {code}, not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (code, json)
}

/// Panics if a background `inbox` has already exited: it should be waiting.
fn assert_still_waiting(child: &mut Child, what: &str) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!("{what} exited early with {status}");
    }
}

/// Opens a thread from `lead` to `worker` and returns its id.
fn send(env: &TestEnv, subject: &str) -> String {
    let sent = run(
        env,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            subject,
        ],
        0,
    );
    sent["thread"]["thread_id"].as_str().unwrap().to_owned()
}

/// A thread that `worker` claimed (for `lease_seconds`) and blocked on a
/// question; returns its id.
fn blocked_thread(env: &TestEnv, lease_seconds: u64) -> String {
    let thread = send(env, "Add login");
    let claim = run(
        env,
        &[
            "claim",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-seconds",
            &lease_seconds.to_string(),
        ],
        0,
    );
    assert_eq!(claim["lease"]["lease_token"], 1);
    run(
        env,
        &[
            "update",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--status",
            "blocked",
            "--summary",
            "Email or username?",
        ],
        0,
    );
    thread
}

/// `claim` by `worker`, expected to fail because the lease is live.
fn assert_claim_conflicts(env: &TestEnv, thread: &str) {
    let refused = run(env, &["claim", "--agent", "worker", "--thread", thread], 20);
    assert_eq!(refused["error"]["code"], "lease_conflict", "{refused}");
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[test]
fn wait_reply_wakes_when_another_process_replies() {
    let env = TestEnv::initialized();
    let mut latencies = Vec::new();
    for round in 0..5 {
        let thread = blocked_thread(&env, 900);
        let mut waiter = spawn(
            &env,
            &[
                "wait-reply",
                "--agent",
                "worker",
                "--thread",
                &thread,
                "--timeout-seconds",
                "30",
            ],
        );
        std::thread::sleep(ARM);
        assert_still_waiting(&mut waiter, "wait-reply");

        let reply_started = Instant::now();
        run(
            &env,
            &[
                "reply",
                "--from",
                "lead",
                "--thread",
                &thread,
                "--summary",
                "Answer",
            ],
            0,
        );
        let replied = Instant::now();
        let (code, woke) = finish(waiter);
        let waiter_exited = Instant::now();

        assert_eq!(code, 0, "{woke}");
        assert_eq!(woke["woke"], true, "{woke}");
        assert_eq!(woke["message"]["kind"], "answer", "{woke}");
        assert_eq!(woke["message"]["summary"], "Answer", "{woke}");
        // The waiter may notice the commit before the replying process has
        // even exited; it is only reaped after, so this is never negative.
        let latency = millis(waiter_exited - replied);
        let from_start = millis(waiter_exited - reply_started);
        eprintln!(
            "round {round}: wake latency: {latency:.1} ms after reply exited \
             ({from_start:.1} ms after reply started)"
        );
        assert!(
            waiter_exited - replied < Duration::from_secs(5),
            "the waiter took {latency:.0} ms to wake"
        );
        latencies.push(latency);
    }
    latencies.sort_by(f64::total_cmp);
    eprintln!(
        "wake latency: min {:.1} ms, median {:.1} ms, max {:.1} ms",
        latencies[0],
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
}

#[test]
fn watch_wakes_the_leader_when_a_worker_finishes() {
    let env = TestEnv::initialized();
    let sent = run(
        &env,
        &[
            "send",
            "--from",
            "lead",
            "--to",
            "worker",
            "--subject",
            "Add login",
        ],
        0,
    );
    let thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let created = sent["event_id"].to_string();
    // Resume after the thread's creation rather than "from the latest
    // event", so that the outcome does not depend on how fast the watcher
    // starts.
    let mut watcher = spawn(
        &env,
        &[
            "watch",
            "--agent",
            "lead",
            "--status",
            "done,failed",
            "--after-event",
            &created,
            "--timeout-seconds",
            "30",
        ],
    );
    std::thread::sleep(ARM);
    assert_still_waiting(&mut watcher, "watch");

    let claim = run(
        &env,
        &["claim", "--agent", "worker", "--thread", &thread],
        0,
    );
    // A claim leaves the thread `claimed`, outside the filter: no wake.
    std::thread::sleep(ARM);
    assert_still_waiting(&mut watcher, "watch after the claim");

    let token = claim["lease"]["lease_token"].to_string();
    let done = run(
        &env,
        &[
            "done",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--lease-token",
            &token,
            "--summary",
            "Login added",
        ],
        0,
    );
    let (code, woke) = finish(watcher);
    assert_eq!(code, 0, "{woke}");
    assert_eq!(woke["woke"], true, "{woke}");
    let events = woke["events"].as_array().unwrap();
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "thread_completed", "{woke}");
    assert_eq!(last["thread_id"], thread.as_str());
    assert_eq!(last["event_id"], done["event_id"]);
    assert_eq!(woke["next_event_id"], last["event_id"], "{woke}");
    assert!(
        events.iter().all(|e| e["status"] == "done"),
        "only events matching the filter: {woke}"
    );
}

#[test]
fn waits_time_out_with_exit_10() {
    let env = TestEnv::initialized();
    let thread = send(&env, "Nobody answers");
    for args in [
        vec!["wait-reply", "--agent", "lead", "--thread", &thread],
        vec!["watch", "--agent", "lead"],
    ] {
        let mut args = args;
        args.extend(["--timeout-seconds", "1"]);
        let started = Instant::now();
        let (code, out) = finish(spawn(&env, &args));
        let elapsed = started.elapsed();
        eprintln!("{} timed out after {elapsed:?}", args[0]);
        assert_eq!(code, 10, "{out}");
        assert_eq!(out["ok"], true, "{out}");
        assert_eq!(out["woke"], false, "{out}");
        assert!(
            elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(10),
            "{} with a 1 s timeout returned after {elapsed:?}",
            args[0]
        );
    }
}

#[test]
fn a_waiting_holder_keeps_its_lease_alive() {
    let env = TestEnv::initialized();
    let thread = blocked_thread(&env, 2);
    let waiter = spawn(
        &env,
        &[
            "wait-reply",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--timeout-seconds",
            "5",
        ],
    );
    let started = Instant::now();
    // Twice the lease: without the waiter's heartbeats it would have lapsed.
    std::thread::sleep(Duration::from_secs(4));
    assert_claim_conflicts(&env, &thread);
    eprintln!("lease still held {:?} into the wait", started.elapsed());

    let (code, out) = finish(waiter);
    assert_eq!(code, 10, "{out}");
    assert_eq!(out["woke"], false, "{out}");

    // Nobody renews it now: once the lease length has passed, it is gone.
    std::thread::sleep(Duration::from_secs(3));
    let claim = run(
        &env,
        &["claim", "--agent", "worker", "--thread", &thread],
        0,
    );
    assert_eq!(claim["lease"]["lease_token"], 2, "{claim}");
}

#[test]
fn a_dead_waiter_lets_the_lease_expire() {
    let env = TestEnv::initialized();
    let thread = blocked_thread(&env, 2);
    let mut waiter = spawn(
        &env,
        &[
            "wait-reply",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--timeout-seconds",
            "30",
        ],
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_still_waiting(&mut waiter, "wait-reply");
    waiter.kill().unwrap();
    waiter.wait().unwrap();

    // Its last heartbeat was at most now: after the lease length, and a
    // margin, the lease has lapsed and a fresh process may claim.
    std::thread::sleep(Duration::from_secs(3));
    let claim = run(
        &env,
        &["claim", "--agent", "worker", "--thread", &thread],
        0,
    );
    assert_eq!(claim["lease"]["lease_token"], 2, "{claim}");
    assert_eq!(claim["thread"]["status"], "blocked", "{claim}");
}

#[cfg(target_os = "linux")]
#[test]
fn an_idle_waiter_does_not_burn_cpu() {
    let env = TestEnv::initialized();
    let thread = blocked_thread(&env, 900);
    let mut waiter = spawn(
        &env,
        &[
            "wait-reply",
            "--agent",
            "worker",
            "--thread",
            &thread,
            "--timeout-seconds",
            "3",
        ],
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_still_waiting(&mut waiter, "wait-reply");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", waiter.id())).unwrap();
    // The same in nanoseconds, where the kernel keeps it (for the record).
    let on_cpu = std::fs::read_to_string(format!("/proc/{}/schedstat", waiter.id()))
        .ok()
        .and_then(|s| s.split(' ').next()?.parse::<u64>().ok())
        .map(Duration::from_nanos);
    let (code, out) = finish(waiter);
    assert_eq!(code, 10, "{out}");

    // Fields after the command name (which is in parentheses): state is the
    // 3rd field of the line, utime and stime the 14th and 15th.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = clock_ticks_per_second();
    let cpu = Duration::from_secs_f64(ticks as f64 / per_second as f64);
    eprintln!(
        "an idle wait-reply used {ticks} clock ticks ({cpu:?} of CPU; schedstat: {on_cpu:?}) in 2.5 s"
    );
    assert!(
        cpu < Duration::from_millis(200),
        "an idle waiter used {cpu:?} of CPU in 2.5 s"
    );
}

/// `getconf CLK_TCK`, the unit of `/proc/<pid>/stat` times (100 almost
/// everywhere).
#[cfg(target_os = "linux")]
fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}
