//! The catalogue of bad inputs: every malformed input tried against the real
//! binary and a real database, with the exit code and error each gets. The
//! table in `docs/bad-inputs.md` (between `<!-- BEGIN GENERATED: catalogue -->`
//! and `<!-- END GENERATED: catalogue -->`) is what this test renders; it
//! fails when the two differ. After an intended change, refresh it with
//! `INBOX_UPDATE_DOCS=1 cargo test -p inbox-fault --test bad_inputs`.
//!
//! Each case runs on a fresh project (one thread, claimed by `worker` with
//! lease token 1, or the broken database file the case is about) with
//! `--json`, and asserts its exit code and error code, that stdout is one
//! JSON object, and that nothing was half-written: the database (or, for a
//! broken file, the file's bytes) is exactly as before. A refused case also
//! runs without `--json`: same exit code, nothing on stdout. The few inputs
//! that are accepted on purpose (paths with `..`, symlinks, limits exactly
//! met) record what was stored, and must have written one whole command.

// Tests report failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use inbox_fault::db::{self, Snapshot};
use serde_json::Value;

/// A fixed instant, so that nothing in the table depends on the clock.
const NOW: &str = "2026-01-01T09:00:00.000Z";

/// What the project holds before the case runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    /// An initialized database with one thread claimed by `worker`.
    Claimed,
    /// No database at all.
    Missing,
    /// `notes.txt`: a text file, not SQLite.
    NotSqlite,
    /// `.agents/coord.db` cut to half its size.
    Truncated,
    /// `.agents/coord.db` with `PRAGMA user_version = 99`.
    NewerSchema,
    /// `other.db`: another program's SQLite database.
    OtherProgram,
    /// `.agents/coord.db` made immutable (`chattr +i`; permissions for non-root).
    ReadOnly,
    /// `empty.db`: a file of 0 bytes.
    EmptyFile,
}

/// What a case must get.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Refused with this exit code and error code; nothing changes.
    Refused(i32, &'static str),
    /// Accepted with this exit code; exactly one whole command was written.
    Written(i32),
    /// Accepted with this exit code; nothing changes (a read).
    Read(i32),
    /// The operating system refuses to start the process at all.
    ExecRefused,
}

struct Case {
    input: &'static str,
    setup: Setup,
    args: Vec<String>,
    /// What stdin holds, and how the table shows it (`< latin1`).
    stdin: Option<Vec<u8>>,
    stdin_shown: &'static str,
    env: Vec<(&'static str, &'static str)>,
    expect: Expect,
}

const THREAD: &str = "$THREAD";

/// A case: `command` is split on spaces (`$THREAD` is the claimed
/// thread); arguments with spaces or odd bytes are added with [`Case::arg`].
fn case(input: &'static str, command: &str, expect: Expect) -> Case {
    Case {
        input,
        setup: Setup::Claimed,
        args: command.split(' ').map(str::to_owned).collect(),
        stdin: None,
        stdin_shown: "",
        env: Vec::new(),
        expect,
    }
}

impl Case {
    fn on(mut self, setup: Setup) -> Case {
        self.setup = setup;
        self
    }
    fn stdin(mut self, bytes: &[u8], shown: &'static str) -> Case {
        self.stdin = Some(bytes.to_vec());
        self.stdin_shown = shown;
        self
    }
    fn env(mut self, name: &'static str, value: &'static str) -> Case {
        self.env.push((name, value));
        self
    }
    fn arg(mut self, arg: impl Into<String>) -> Case {
        self.args.push(arg.into());
        self
    }
    fn args(mut self, args: impl IntoIterator<Item = String>) -> Case {
        self.args.extend(args);
        self
    }
}

use Expect::{ExecRefused, Read, Refused, Written};

/// The holder's update, to which a case adds the bad part.
const UPDATE: &str = "update --agent worker --thread $THREAD --summary s";
/// The leader's send, to which a case adds the bad part.
const SEND: &str = "send --from lead --to worker --subject x";
const DONE: &str = "done --agent worker --thread $THREAD --summary s";
const RENEW: &str = "renew --agent worker --thread $THREAD";

fn cat(a: &str, b: &str) -> String {
    format!("{a} {b}")
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    let artifacts = |n: usize| (0..n).flat_map(|i| ["--artifact".to_owned(), format!("a{i}.txt")]);
    let deep = format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200));
    let big_payload = format!("{{\"x\":\"{}\"}}", "p".repeat(256 << 10));
    vec![
        // Bodies.
        case("body over 1 MiB (1 MiB + 1 byte, via --body-file)", &cat(UPDATE, "--body-file big.md"), Refused(30, "too_long")),
        case("body of exactly 1 MiB (the limit)", &cat(UPDATE, "--body-file limit.md"), Written(0)),
        case("body file that is not UTF-8 (Latin-1 `café`)", &cat(UPDATE, "--body-file latin1.txt"), Refused(30, "invalid_value")),
        case("body from stdin that is not UTF-8 (`--body-file -`)", &cat(UPDATE, "--body-file -"), Refused(30, "invalid_value")).stdin(b"caf\xe9\n", "< latin1"),
        case("body file holding NUL bytes (valid UTF-8)", &cat(UPDATE, "--body-file nul.txt"), Written(0)),
        case("body file that does not exist", &cat(UPDATE, "--body-file nope.md"), Refused(30, "invalid_value")),
        case("body file that is a folder", &cat(UPDATE, "--body-file ."), Refused(30, "invalid_value")),
        case("`--body` and `--body-file` together", &cat(UPDATE, "--body b --body-file nul.txt"), Refused(30, "invalid_request")),
        case("body file that never ends (`/dev/zero`): read only to the limit", &cat(UPDATE, "--body-file /dev/zero"), Refused(30, "too_long")),
        case("body from stdin past the limit (2 MiB of `yes`)", &cat(UPDATE, "--body-file -"), Refused(30, "too_long")).stdin(&b"y\n".repeat(1 << 20), "< yes"),
        case("body that is a diff (`--- a/x.rs`; text may start with `-`)", &cat(UPDATE, "--body"), Written(0)).arg("--- a/x.rs\n+++ b/x.rs"),
        // Payloads.
        case("payload that is an array", &cat(UPDATE, "--payload-json [1,2]"), Refused(30, "invalid_payload")),
        case("payload that is a string", &cat(UPDATE, "--payload-json \"text\""), Refused(30, "invalid_payload")),
        case("payload that is `null`", &cat(UPDATE, "--payload-json null"), Refused(30, "invalid_payload")),
        case("payload that is not JSON", &cat(UPDATE, "--payload-json {oops"), Refused(30, "invalid_payload")),
        case("payload over 256 KiB in one argument (Linux caps an argument at 128 KiB)", &cat(UPDATE, "--payload-json"), ExecRefused).arg(big_payload),
        case("payload over 256 KiB, via --payload-file", &cat(UPDATE, "--payload-file big-payload.json"), Refused(30, "too_long")),
        case("payload of exactly 256 KiB (the limit), via --payload-file", &cat(UPDATE, "--payload-file limit-payload.json"), Written(0)),
        case("payload file that never ends (`/dev/zero`): read only to the limit", &cat(UPDATE, "--payload-file /dev/zero"), Refused(30, "too_long")),
        case("payload nested 200 deep (past the parser's 128)", &cat(UPDATE, "--payload-json"), Refused(30, "invalid_payload")).arg(deep),
        case("payload with a duplicate key", &cat(UPDATE, r#"--payload-json {"a":1,"a":2}"#), Written(0)),
        case("payload numbers past 64 bits and past a double's range (kept as written)", &cat(UPDATE, r#"--payload-json {"big":123456789012345678901234567890,"tiny":0.1e-400,"huge":1e999}"#), Written(0)),
        // Unknown enum values.
        case("unknown `--kind`", &cat(SEND, "--kind memo"), Refused(30, "invalid_request")),
        case("`--kind result` on send (reserved for done/fail)", "send --from lead --thread $THREAD --kind result --summary x", Refused(30, "invalid_value")),
        case("unknown `--status`", "fetch --agent worker --status sleeping", Refused(30, "invalid_request")),
        case("empty item in a `--status` list", "fetch --agent worker --status pending,,blocked", Refused(30, "invalid_request")),
        case("unknown `--priority`", &cat(SEND, "--priority urgent"), Refused(30, "invalid_request")),
        case("unknown `--durability`", "init --durability paranoid", Refused(30, "invalid_request")),
        case("unknown flag", "fetch --agent worker --colour blue", Refused(30, "invalid_request")),
        // Wrong types.
        case("`--limit abc`", "fetch --agent worker --limit abc", Refused(30, "invalid_request")),
        case("`--lease-token x`", &cat(DONE, "--lease-token x"), Refused(30, "invalid_request")),
        case("`--lease-seconds 1.5`", &cat(RENEW, "--lease-seconds 1.5"), Refused(30, "invalid_request")),
        case("`--max-attempts -1`", &cat(SEND, "--max-attempts -1"), Refused(30, "invalid_request")),
        // Absurd numbers.
        case("`--lease-seconds 1000000000000`", &cat(RENEW, "--lease-seconds 1000000000000"), Refused(30, "invalid_value")),
        case("`--lease-seconds 0`", &cat(RENEW, "--lease-seconds 0"), Refused(30, "invalid_value")),
        case("`--lease-seconds -5`", &cat(RENEW, "--lease-seconds -5"), Refused(30, "invalid_request")),
        case("`--limit 0`", "fetch --agent worker --limit 0", Refused(30, "invalid_value")),
        case("`--limit 100000`", "list --limit 100000", Refused(30, "invalid_value")),
        case("`--limit 4294967296` (past u32)", "list --limit 4294967296", Refused(30, "invalid_request")),
        case("`--max-attempts 1000`", &cat(SEND, "--max-attempts 1000"), Refused(30, "invalid_value")),
        case("`--max-attempts 0`", &cat(SEND, "--max-attempts 0"), Refused(30, "invalid_value")),
        case("`--timeout-seconds 999999`", "watch --agent lead --timeout-seconds 999999", Refused(30, "invalid_value")),
        case("`--after-event` = u64::MAX (accepted: a cursor past the end)", "watch --agent lead --after-event 18446744073709551615 --timeout-seconds 0", Read(10)),
        case("`--after-event` past u64", "watch --after-event 18446744073709551616 --timeout-seconds 0", Refused(30, "invalid_request")),
        // Identity and state.
        case("unknown thread id", "show --thread thr_01JH5Q8Z3K4M2N6P7R8S9T0V1W", Refused(40, "thread_not_found")),
        case("empty thread id", "show --thread", Refused(30, "missing_field")).arg(""),
        case("lease token never issued (7; the newest is 1)", &cat(DONE, "--lease-token 7"), Refused(30, "invalid_value")),
        case("lease token 0", &cat(DONE, "--lease-token 0"), Refused(30, "invalid_value")),
        case("lease token u64::MAX", &cat(DONE, "--lease-token 18446744073709551615"), Refused(30, "invalid_value")),
        case("claim by an agent the thread is not assigned to", "claim --agent lead --thread $THREAD", Refused(30, "not_assigned")),
        case("claim of a thread another process holds", "claim --agent worker --thread $THREAD", Refused(20, "lease_conflict")),
        case("unknown `--after-message`", "wait-reply --agent worker --thread $THREAD --after-message msg_01JH5Q8Z3K4M2N6P7R8S9T0V1W --timeout-seconds 0", Refused(40, "message_not_found")),
        case("`INBOX_NOW` that is not a timestamp", "list", Refused(30, "invalid_value")).env("INBOX_NOW", "yesterday"),
        // Text.
        case("subject with a newline", "send --from lead --to worker --subject", Refused(30, "invalid_value")).arg("two\nlines"),
        case("subject of 501 characters", "send --from lead --to worker --subject", Refused(30, "too_long")).arg("s".repeat(501)),
        case("summary of 1001 characters", "update --agent worker --thread $THREAD --summary", Refused(30, "too_long")).arg("s".repeat(1001)),
        case("empty summary", "update --agent worker --thread $THREAD --summary", Refused(30, "missing_field")).arg(""),
        case("summary that starts with `-` (`- fixed the bug`)", "update --agent worker --thread $THREAD --summary", Written(0)).arg("- fixed the bug"),
        case("summary that looks like a number (`-5% latency`)", "update --agent worker --thread $THREAD --summary", Written(0)).arg("-5% latency"),
        case("a flag where the summary should be (`--summary --json`)", "update --agent worker --thread $THREAD --summary --lease-token 1", Refused(30, "invalid_request")),
        case("agent name of 129 bytes", "fetch --agent", Refused(30, "too_long")).arg("a".repeat(129)),
        case("agent name with a space", "fetch --agent", Refused(30, "invalid_value")).arg("bad name"),
        case("agent name with a right-to-left override (U+202E)", "fetch --agent", Refused(30, "invalid_value")).arg("lead\u{202e}rekrow"),
        case("agent name with a Cyrillic look-alike (`lеad`, U+0435)", "fetch --agent", Refused(30, "invalid_value")).arg("l\u{435}ad"),
        case("agent name with a zero-width space", "fetch --agent", Refused(30, "invalid_value")).arg("le\u{200b}ad"),
        case("agent name that starts with a dot", "fetch --agent", Refused(30, "invalid_value")).arg(".hidden"),
        case("task id with a slash and a colon (accepted)", "send --from lead --to worker --subject x --task feat/login:2", Written(0)),
        case("reserved agent name `inbox` (send)", "send --from inbox --to worker --subject x", Refused(30, "invalid_value")),
        case("reserved agent name `inbox` (claim)", "claim --agent inbox --thread $THREAD", Refused(30, "invalid_value")),
        case("argument that is not UTF-8 (`--subject $'\\xff'`)", "send --from lead --to worker --subject", Refused(30, "invalid_request")).arg(NOT_UTF8),
        // Artifacts.
        case("33 artifacts (the limit is 32)", UPDATE, Refused(30, "invalid_value")).args(artifacts(33)),
        case("32 artifacts (the limit)", UPDATE, Written(0)).args(artifacts(32)),
        case("artifact path with `..` (accepted: a reference, stored as given)", &cat(UPDATE, "--artifact ../outside.txt"), Written(0)),
        case("artifact through a symlink (accepted: the link's path, the target's digest)", &cat(UPDATE, "--artifact link.txt"), Written(0)),
        case("artifact path that does not exist (accepted, with a note)", &cat(UPDATE, "--artifact later.txt"), Written(0)),
        case("artifact path of 4097 bytes", &cat(UPDATE, "--artifact"), Refused(30, "too_long")).arg("p".repeat(4097)),
        case("artifact path with a newline", &cat(UPDATE, "--artifact"), Refused(30, "invalid_value")).arg("two\nlines.txt"),
        case("artifact path that is not UTF-8 (`$'\\xff'`)", &cat(UPDATE, "--artifact"), Refused(30, "invalid_value")).arg(NOT_UTF8),
        case("artifact kind `Bad Kind`", &cat(UPDATE, "--artifact a.txt --artifact-kind"), Refused(30, "invalid_value")).arg("Bad Kind"),
        case("`--artifact-kind` without `--artifact`", &cat(UPDATE, "--artifact-kind log"), Refused(30, "invalid_value")),
        case("artifact metadata that is not an object", &cat(UPDATE, "--artifact a.txt --artifact-metadata-json 3"), Refused(30, "invalid_payload")),
        case("2 artifact kinds for 3 artifacts", &cat(UPDATE, "--artifact a --artifact b --artifact c --artifact-kind log --artifact-kind patch"), Refused(30, "invalid_value")),
        // Database files.
        case("missing database", "list", Refused(50, "not_initialized")).on(Setup::Missing),
        case("a file that is not SQLite as `--db`", "list --db notes.txt", Refused(50, "storage_error")).on(Setup::NotSqlite),
        case("`init` on a file that is not SQLite", "init --db notes.txt", Refused(50, "storage_error")).on(Setup::NotSqlite),
        case("an empty (0-byte) file as `--db`", "list --db empty.db", Refused(50, "not_initialized")).on(Setup::EmptyFile),
        case("a folder as `--db`", "list --db .agents", Refused(50, "storage_error")),
        case("truncated database (cut to half its size): a read", "list", Refused(50, "storage_error")).on(Setup::Truncated),
        case("truncated database (cut to half its size): a write", SEND, Refused(50, "storage_error")).on(Setup::Truncated),
        case("database from a newer schema (`user_version` 99)", "list", Refused(50, "schema_too_new")).on(Setup::NewerSchema),
        case("`init` on a database from a newer schema", "init", Refused(50, "schema_too_new")).on(Setup::NewerSchema),
        case("another program's SQLite database", "init --db other.db", Refused(50, "storage_error")).on(Setup::OtherProgram),
        // PostgreSQL by URL (the refusals that need a server are in
        // cli/tests/postgres.rs): the message names the server, never the
        // password the URL holds.
        case("a PostgreSQL server that cannot be reached (the URL's password is never printed)", "list --db postgres://agent:pw@127.0.0.1:1/inbox", Refused(50, "storage_error")),
        case("`export` of a PostgreSQL database (pg_dump's job)", "export out.jsonl --db postgres://agent@127.0.0.1:1/inbox", Refused(30, "invalid_value")),
        case("read-only database file: a read (accepted)", "list", Read(0)).on(Setup::ReadOnly),
        case("read-only database file: a write", SEND, Refused(50, "storage_error")).on(Setup::ReadOnly),
        // The tools that do not use the database.
        case("`script` on a file that does not exist", "script nope.inbox", Refused(30, "invalid_value")),
        case("`script` on a file that never ends (`/dev/zero`): read only to 4 MiB", "script /dev/zero", Refused(30, "too_long")),
        case("`completions` for a shell it has no script for", "completions tcsh", Refused(30, "invalid_request")),
        case("`man --dir` naming a file, not a folder", "man --dir nul.txt", Refused(30, "invalid_value")),
        // Moving databases.
        case("`export` over an existing file (no `--force`)", "export --sqlite nul.txt", Refused(30, "invalid_value")),
        case("`import` of a file that is not a database", "import --sqlite nul.txt", Refused(30, "invalid_value")),
        case("`import` of a folder", "import --sqlite .", Refused(30, "invalid_value")),
        case("`import` of a database that does not exist", "import --sqlite nope.db", Refused(30, "invalid_value")),
        case("`import` of a file that is not a JSONL dump", "import nul.txt", Refused(30, "invalid_value")),
        case("`import` of a dump that never ends (`/dev/zero`): read only to 64 MiB", "import /dev/zero", Refused(30, "too_long")),
        case("`import` of a mailbox log with no message in it: skipped and counted", "import --format mailbox-jsonl nul.txt", Read(0)),
        case("`import` of JSONL inbox lines that never end (`/dev/zero`): read only to 72 MiB", "import --format teams-jsonl /dev/zero", Refused(30, "too_long")),
        // Bridges: refused before they touch a file.
        case("`bridge file-drop` on a file instead of a folder", "bridge file-drop nul.txt --to worker --once", Refused(30, "invalid_value")),
        case("`bridge file-drop` without a database", "bridge file-drop drop --to worker --once", Refused(50, "not_initialized")).on(Setup::Missing),
    ]
}

/// Writes the case's stdin, if any, to the child. A reader that stops at
/// its limit closes the pipe early: that is the behaviour under test, not a
/// harness failure.
fn feed(child: &mut std::process::Child, case: &Case) {
    use std::io::Write as _;
    if let (Some(bytes), Some(mut stdin)) = (&case.stdin, child.stdin.take())
        && let Err(e) = stdin.write_all(bytes)
    {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{}", case.input);
    }
}

/// Stands for the one argument that is not UTF-8 (the byte 0xff).
const NOT_UTF8: &str = "\u{fffd}";

/// A project folder set up for one case.
struct Project {
    root: tempfile::TempDir,
    thread: String,
    undo: Option<Box<dyn FnOnce()>>,
}

impl Project {
    fn dir(&self) -> PathBuf {
        self.root.path().join("project")
    }

    fn db(&self) -> PathBuf {
        self.dir().join(".agents/coord.db")
    }

    fn command(&self, args: &[String], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(common::inbox().bin());
        // Only what the case sets: none of the caller's inbox settings.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("INBOX_") {
                command.env_remove(name);
            }
        }
        command
            .args(args.iter().map(|a| {
                if a == NOT_UTF8 {
                    // The one argument that is not UTF-8.
                    <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(vec![0xff])
                } else {
                    std::ffi::OsString::from(a.replace(THREAD, &self.thread))
                }
            }))
            .current_dir(self.dir())
            .env_remove("INBOX_DB")
            .env_remove("INBOX_AGENT")
            .env("INBOX_NOW", NOW)
            .env("NO_COLOR", "1");
        for (name, value) in env {
            command.env(name, value);
        }
        command
    }

    fn run(&self, args: &[&str]) -> Value {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let mut all = args.clone();
        all.push("--json".into());
        let output = self
            .command(&all, &[])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(output.status.success(), "setup: inbox {args:?}: {output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

fn project(setup: Setup) -> Project {
    let root = tempfile::tempdir().unwrap();
    let mut project = Project {
        root,
        thread: String::new(),
        undo: None,
    };
    let dir = project.dir();
    std::fs::create_dir_all(&dir).unwrap();
    write(
        &project.root.path().join("outside.txt"),
        b"a file outside the project\n",
    );
    std::os::unix::fs::symlink("../outside.txt", dir.join("link.txt")).unwrap();
    write(&dir.join("big.md"), &vec![b'b'; (1 << 20) + 1]);
    write(&dir.join("limit.md"), &vec![b'b'; 1 << 20]);
    // Payloads as files: past the 256 KiB limit, and at it (compact JSON).
    let payload = |len: usize| format!("{{\"x\":\"{}\"}}", "p".repeat(len - 8));
    write(
        &dir.join("big-payload.json"),
        payload((256 << 10) + 1).as_bytes(),
    );
    write(
        &dir.join("limit-payload.json"),
        payload(256 << 10).as_bytes(),
    );
    write(&dir.join("latin1.txt"), b"caf\xe9\n");
    write(&dir.join("nul.txt"), b"a\0b\0c\n");
    write(&dir.join("a.txt"), b"artifact\n");
    for i in 0..33 {
        write(
            &dir.join(format!("a{i}.txt")),
            format!("artifact {i}\n").as_bytes(),
        );
    }
    if setup == Setup::Missing {
        return project;
    }
    project.run(&["init"]);
    let sent = project.run(&[
        "send",
        "--from",
        "lead",
        "--to",
        "worker",
        "--subject",
        "Target",
    ]);
    project.thread = sent["thread"]["thread_id"].as_str().unwrap().to_owned();
    let thread = project.thread.clone();
    project.run(&["claim", "--agent", "worker", "--thread", &thread]);
    let db = project.db();
    match setup {
        Setup::Claimed | Setup::Missing => {}
        Setup::NotSqlite => write(
            &dir.join("notes.txt"),
            "just some notes\n".repeat(100).as_bytes(),
        ),
        Setup::EmptyFile => write(&dir.join("empty.db"), b""),
        Setup::OtherProgram => {
            rusqlite::Connection::open(dir.join("other.db"))
                .unwrap()
                .execute_batch("CREATE TABLE recipes (name TEXT)")
                .unwrap();
        }
        Setup::NewerSchema => {
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.execute_batch("PRAGMA user_version = 99").unwrap();
        }
        Setup::Truncated => {
            for i in 0..40 {
                project.run(&[
                    "send",
                    "--from",
                    "lead",
                    "--to",
                    "worker",
                    "--subject",
                    &format!("filler {i}"),
                    "--body",
                    &"x".repeat(2000),
                ]);
            }
            let conn = rusqlite::Connection::open(&db).unwrap();
            conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
                .unwrap();
            drop(conn);
            let len = std::fs::metadata(&db).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
            file.set_len(len / 2).unwrap();
        }
        Setup::ReadOnly => project.undo = Some(make_read_only(&db)),
    }
    project
}

/// Makes the database files read-only: with the immutable attribute for
/// root (who ignores permissions), with permissions otherwise (as
/// `cli/tests/bad_input.rs` does). Returns the undo.
fn make_read_only(db: &Path) -> Box<dyn FnOnce()> {
    use std::os::unix::fs::PermissionsExt;
    let files: Vec<PathBuf> = ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| PathBuf::from(format!("{}{suffix}", db.display())))
        .filter(|p| p.exists())
        .collect();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if root {
        let status = Command::new("chattr").arg("+i").args(&files).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "as root, this test needs `chattr +i` (e2fsprogs) on a file system that supports it"
        );
        Box::new(move || {
            let _ = Command::new("chattr").arg("-i").args(&files).status();
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

/// What must not change when a command is refused: every row of every
/// table when the database can be read, else the bytes of the files.
fn fingerprint(project: &Project, case: &Case) -> String {
    let target = match case.setup {
        Setup::NotSqlite => project.dir().join("notes.txt"),
        Setup::OtherProgram => project.dir().join("other.db"),
        Setup::EmptyFile => project.dir().join("empty.db"),
        Setup::Missing => {
            return format!(
                "database exists: {}; .agents exists: {}",
                project.db().exists(),
                project.dir().join(".agents").exists()
            );
        }
        _ => project.db(),
    };
    if matches!(case.setup, Setup::Claimed | Setup::ReadOnly) {
        let conn = db::open_read_only(&target).unwrap();
        let snapshot = Snapshot::read(&conn).unwrap();
        return everything(&snapshot);
    }
    let mut out = String::new();
    for suffix in ["", "-wal"] {
        let path = PathBuf::from(format!("{}{suffix}", target.display()));
        let bytes = std::fs::read(&path).unwrap_or_default();
        out.push_str(&format!(
            "{}: {} bytes, hash {:x}\n",
            path.display(),
            bytes.len(),
            hash(&bytes)
        ));
    }
    out
}

fn hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

fn everything(s: &Snapshot) -> String {
    let mut out = String::new();
    for t in s.threads.values() {
        out.push_str(&t.raw);
        out.push('\n');
    }
    for l in s.leases.values() {
        out.push_str(&l.raw);
        out.push('\n');
    }
    for m in s.messages.values() {
        out.push_str(&m.raw);
        out.push('\n');
    }
    for e in &s.events {
        out.push_str(&e.raw);
        out.push('\n');
    }
    for a in s.artifacts.values() {
        out.push_str(&a.raw);
        out.push('\n');
    }
    out.push_str(&format!("{:?}", s.reads));
    out
}

/// The rows only one of `documented` and `rendered` has, each marked `-`
/// (the page's) or `+` (what inbox does now): a whole table is too long for
/// a CI log to show where it differs.
fn row_difference(documented: &str, rendered: &str) -> String {
    let mut out = String::new();
    for line in documented
        .lines()
        .filter(|l| !rendered.lines().any(|r| r == *l))
    {
        out.push_str(&format!("- {line}\n"));
    }
    for line in rendered
        .lines()
        .filter(|l| !documented.lines().any(|d| d == *l))
    {
        out.push_str(&format!("+ {line}\n"));
    }
    if out.is_empty() {
        out.push_str("(the same rows, in another order)\n");
    }
    out
}

/// One row of the table, or what went wrong.
struct Row {
    cells: [String; 5],
    problems: Vec<String>,
}

fn normalize(project: &Project, text: &str) -> String {
    let root = project.root.path().display().to_string();
    let text = text.replace(&root, "$DIR");
    let ids = regex::Regex::new(r"\b(thr|msg|art)_[0-9A-HJKMNP-TV-Z]{26}\b").unwrap();
    let text = ids.replace_all(&text, "${1}_…").into_owned();
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z").unwrap();
    time.replace_all(&text, "<time>").into_owned()
}

fn abbreviate(text: &str, max: usize) -> String {
    let flat = text.replace('\n', "\\n").replace('|', "\\|");
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

fn shown_argument(arg: &str) -> String {
    let mut chars = arg.chars();
    if arg == NOT_UTF8 {
        return "$'\\xff'".into();
    }
    if arg == THREAD {
        return "thr_…".into();
    }
    if arg.len() > 40 {
        if let Some(first) = chars.next()
            && arg.chars().all(|c| c == first)
        {
            return format!("<{first} × {}>", arg.chars().count());
        }
        return format!(
            "<{} bytes: {}…>",
            arg.len(),
            arg.chars().take(12).collect::<String>()
        );
    }
    // Invisible and non-ASCII characters are shown as bash `$'...'` escapes:
    // the table is read in browsers, where a raw U+202E would reorder it.
    if arg.contains(|c: char| !c.is_ascii() || c.is_ascii_control()) {
        let escaped: String = arg
            .chars()
            .map(|c| match c {
                ' '..='~' if c != '\'' && c != '\\' => c.to_string(),
                '\n' => "\\n".to_owned(),
                '\t' => "\\t".to_owned(),
                _ if u32::from(c) <= 0xffff => format!("\\u{:04x}", u32::from(c)),
                _ => format!("\\U{:08x}", u32::from(c)),
            })
            .collect();
        return format!("$'{escaped}'");
    }
    if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "\"'{}[]$\\|".contains(c)) {
        format!("'{}'", arg.replace('\n', "\\n").replace('\'', r"'\''"))
    } else {
        arg.to_owned()
    }
}

fn command_cell(case: &Case) -> String {
    let mut shown = String::new();
    for (name, value) in &case.env {
        shown.push_str(&format!("{name}={value} "));
    }
    shown.push_str("inbox");
    let numbered = regex::Regex::new(r"^a\d+\.txt$").unwrap();
    let mut args = case.args.iter().peekable();
    let mut artifacts = 0;
    while let Some(arg) = args.next() {
        if arg == "--artifact" && args.peek().is_some_and(|a| numbered.is_match(a)) {
            args.next();
            artifacts += 1;
            continue;
        }
        shown.push(' ');
        shown.push_str(&shown_argument(arg));
    }
    if artifacts > 0 {
        shown.push_str(&format!(" --artifact a0.txt … ({artifacts} in all)"));
    }
    if case.stdin.is_some() {
        shown.push(' ');
        shown.push_str(case.stdin_shown);
    }
    format!("`{}`", shown.replace('`', "'").replace('|', "\\|"))
}

/// What an accepted write stored, in words.
fn stored(project: &Project, json: &Value, before: &Snapshot, after: &Snapshot) -> String {
    let message = &json["message"];
    let mut parts = Vec::new();
    if let Some(body) = message["body"].as_str().filter(|b| !b.is_empty()) {
        let nuls = body.matches('\0').count();
        parts.push(format!(
            "body of {} bytes{}",
            body.len(),
            if nuls > 0 {
                format!(" ({nuls} NULs kept)")
            } else {
                String::new()
            }
        ));
    }
    if let Some(payload) = message["payload"].as_object().filter(|p| !p.is_empty()) {
        parts.push(format!("payload {}", Value::Object(payload.clone())));
    }
    let artifacts = message["artifacts"].as_array().cloned().unwrap_or_default();
    if artifacts.len() > 3 {
        parts.push(format!("{} artifacts", artifacts.len()));
    } else {
        for a in &artifacts {
            parts.push(format!(
                "artifact path `{}`, absolute_path `{}`, {}, sha256 {}",
                a["path"].as_str().unwrap_or_default(),
                normalize(project, a["absolute_path"].as_str().unwrap_or("null")),
                a["size_bytes"]
                    .as_u64()
                    .map_or("no size".to_owned(), |n| format!("{n} bytes")),
                a["sha256"]
                    .as_str()
                    .map_or("none".to_owned(), |s| format!("{}…", &s[..12.min(s.len())])),
            ));
        }
    }
    parts.push(format!(
        "{} event written",
        after.events.len() - before.events.len()
    ));
    format!("accepted: {}", parts.join("; "))
}

fn run_case(case: &Case) -> Row {
    let mut project = project(case.setup);
    let mut problems = Vec::new();
    let before_snapshot = (case.setup == Setup::Claimed)
        .then(|| Snapshot::read(&db::open_read_only(&project.db()).unwrap()).unwrap());
    let before = fingerprint(&project, case);

    let mut args = case.args.clone();
    args.push("--json".into());
    let mut command = project.command(&args, &case.env);
    command.stdin(if case.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            if !matches!(case.expect, ExecRefused) || e.raw_os_error() != Some(7) {
                problems.push(format!("cannot start inbox: {e}"));
            }
            if fingerprint(&project, case) != before {
                problems.push("a command that never started changed the database".into());
            }
            if let Some(undo) = project.undo.take() {
                undo();
            }
            return Row {
                cells: [
                    case.input.replace('|', "\\|"),
                    command_cell(case),
                    "—".into(),
                    "(not started)".into(),
                    abbreviate(&format!("the OS refuses to start it: {e}"), 170),
                ],
                problems,
            };
        }
    };
    if matches!(case.expect, ExecRefused) {
        problems.push("expected the OS to refuse this argument list".into());
    }
    feed(&mut child, case);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let exit = output.status.code().unwrap_or(-1);
    let shown = format!("exit {exit}\nstdout: {stdout}\nstderr: {stderr}");
    let json: Option<Value> = stdout
        .strip_suffix('\n')
        .filter(|line| !line.contains('\n'))
        .and_then(|line| serde_json::from_str(line).ok());

    let (code, message) = match case.expect {
        Refused(want, want_code) => {
            let got_code = json
                .as_ref()
                .and_then(|j| j["error"]["code"].as_str())
                .unwrap_or("(no JSON)")
                .to_owned();
            if exit != want
                || got_code != want_code
                || json.as_ref().map(|j| j["ok"].clone()) != Some(Value::Bool(false))
            {
                problems.push(format!("expected exit {want} {want_code}; got {shown}"));
            }
            let message = json
                .as_ref()
                .and_then(|j| j["error"]["message"].as_str())
                .unwrap_or(&stdout)
                .to_owned();
            (format!("`{got_code}`"), message)
        }
        ExecRefused => ("(started)".to_owned(), stdout.clone()),
        Read(want) => {
            if exit != want || json.as_ref().map(|j| j["ok"].clone()) != Some(Value::Bool(true)) {
                problems.push(format!("expected exit {want} ok:true; got {shown}"));
            }
            let summary = match json.as_ref() {
                Some(j) if j.get("threads").is_some() => format!(
                    "accepted: threads listed: {}",
                    j["threads"].as_array().map_or(0, Vec::len)
                ),
                Some(j) if j.get("woke").is_some() => format!(
                    "accepted: woke {}, next_event_id {}",
                    j["woke"], j["next_event_id"]
                ),
                _ => "accepted".to_owned(),
            };
            ("— (read)".to_owned(), summary)
        }
        Written(want) => {
            if exit != want || json.as_ref().map(|j| j["ok"].clone()) != Some(Value::Bool(true)) {
                problems.push(format!("expected exit {want} ok:true; got {shown}"));
            }
            let after = Snapshot::read(&db::open_read_only(&project.db()).unwrap()).unwrap();
            let earlier = before_snapshot.clone().unwrap_or_default();
            let mut violations = db::check_state(&after, &db::now_text());
            violations.extend(db::check_history(&earlier, &after));
            if after.events.len() != earlier.events.len() + 1 || !violations.is_empty() {
                problems.push(format!(
                    "an accepted command must write exactly one whole command: {violations:?}"
                ));
            }
            let message = json
                .as_ref()
                .map_or(stdout.clone(), |j| stored(&project, j, &earlier, &after));
            let note = stderr
                .lines()
                .find(|l| l.starts_with("note:"))
                .map(|n| format!("; {n}"))
                .unwrap_or_default();
            ("— (accepted)".to_owned(), format!("{message}{note}"))
        }
    };
    if !matches!(case.expect, Written(_)) {
        let after = fingerprint(&project, case);
        if after != before {
            problems.push(format!(
                "the command changed what it must not:\nbefore: {before}\nafter: {after}"
            ));
        }
    }
    // Without --json: the same exit code, and errors only on stderr.
    if matches!(case.expect, Refused(..)) {
        let mut command = project.command(&case.args, &case.env);
        command
            .stdin(if case.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        feed(&mut child, case);
        let human = child.wait_with_output().unwrap();
        if human.status.code() != Some(exit) || !human.stdout.is_empty() {
            problems.push(format!(
                "without --json: exit {:?}, stdout {:?}",
                human.status.code(),
                String::from_utf8_lossy(&human.stdout)
            ));
        }
        if fingerprint(&project, case) != before {
            problems.push("the command without --json changed what it must not".into());
        }
    }
    if let Some(undo) = project.undo.take() {
        undo();
    }
    Row {
        cells: [
            case.input.replace('|', "\\|"),
            command_cell(case),
            exit.to_string(),
            code,
            abbreviate(&normalize(&project, &message), 170),
        ],
        problems,
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| input tried | command | exit | error code | message (abbreviated) |\n| --- | --- | --- | --- | --- |\n",
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.cells.join(" | ")));
    }
    out
}

#[test]
fn every_bad_input_gets_its_documented_error_and_changes_nothing() {
    let rows: Vec<Row> = cases().iter().map(run_case).collect();
    let problems: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("{}: {p}", r.cells[0]))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{} cases did not hold:\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/bad-inputs.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = (
        "<!-- BEGIN GENERATED: catalogue -->\n",
        "<!-- END GENERATED: catalogue -->",
    );
    let start = doc.find(begin).expect("begin marker") + begin.len();
    let stop = doc.find(end).expect("end marker");
    let rendered = table(&rows);
    if doc[start..stop] == rendered {
        return;
    }
    if std::env::var_os("INBOX_UPDATE_DOCS").is_some() {
        let updated = format!("{}{rendered}{}", &doc[..start], &doc[stop..]);
        std::fs::write(&path, updated).unwrap();
        eprintln!("updated {}", path.display());
    } else {
        panic!(
            "docs/bad-inputs.md is out of date with what inbox does; read the difference, then refresh it with \
             INBOX_UPDATE_DOCS=1 cargo test -p inbox-fault --test bad_inputs\n\n{}",
            row_difference(&doc[start..stop], &rendered)
        );
    }
}
