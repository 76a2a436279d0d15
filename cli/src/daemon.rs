//! `inbox daemon`: one long-lived process per SQLite database that the
//! other `inbox` commands on it hand their call to, and the command's side
//! of that hand-over.
//!
//! A command that opens the database itself pays, in every process, for
//! opening the file, reading its schema and preparing each statement
//! afresh: about a millisecond, most of what a command costs above starting
//! the binary (docs/durability-and-speed.md). The daemon keeps one
//! connection warm and runs each call exactly as the command would have:
//! the same call, the same built-in engine, the same store, so every rule
//! and every guarantee is the engine's and SQLite's. The daemon is only one
//! more SQLite connection: commands without it, other daemons' clients,
//! the `sqlite3` shell and the wasm package keep working beside it.
//!
//! The protocol, on `<db>-daemon`, a Unix socket next to the database: the
//! command writes one line, `{"protocol", "build", "request",
//! "idempotency_key", "agent_token"}`, and reads back either
//! `{"ran": {"exit", "changed", "now", "durability"}}` followed by a line
//! with the response in the JSON contract, or `{"refused": "why"}` when the
//! daemon ran nothing (another build of inbox, the database replaced and
//! not reopened); the command then runs the call itself. A call is only
//! run once its whole line (newline included) has arrived, so a command
//! whose line was not all sent may run it itself; once it was, an answer
//! that never comes is an error saying the command may have run, never a
//! second run.
//!
//! Trust: the command uses the socket only if it is a socket (not a link)
//! owned by its user, and both ends check that the other is a process of
//! the same user (`SO_PEERCRED`) before a byte is read. Every line is read
//! with a bound; the daemon gives each connection a few seconds, so a
//! stalled client holds nobody up for long. The daemon never replaces a file
//! it did not make: only a dead daemon's socket.
//!
//! Handed over: `inbox`'s reading and writing commands on an SQLite file,
//! with the built-in engine. A wait (`watch`, `wait-reply`) would hold the
//! daemon, so it runs in the command, as do `init`, `--engine`, `orch`
//! (whose worktrees run git beside the command) and a test build's
//! `INBOX_NOW`. This module must never apply an inbox rule or change a call.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use inbox_engine::{Call, Effect, EngineError, Executor as _, Response, Timestamp};
use inbox_host_native::{Durability, HostClock, open};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::args::Global;
use crate::{Executed, Target};

/// The socket's name is the database's with this suffix.
pub(crate) const SUFFIX: &str = "-daemon";

/// The protocol's name and version, the first thing a daemon checks.
const PROTOCOL: &str = "inbox-daemon/1";

/// The longest call line a daemon reads: a message's largest body, payload
/// and artifacts, escaped, fit many times over.
const CALL_MAX_BYTES: u64 = 16 << 20;

/// The longest answer line a command reads.
const ANSWER_MAX_BYTES: u64 = 256 << 20;

/// How long a command waits for its answer: longer than a write can wait
/// for SQLite's lock (`open::BUSY_BUDGET`), with room for a queue.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// How long a daemon gives one connection to send its call or take its
/// answer.
const CONNECTION_WAIT: Duration = Duration::from_secs(5);

/// What a command sends: the call, its request as the engine's wire
/// writes it (`R`: the request itself when written, its raw JSON when
/// read) beside the envelope's fields.
#[derive(Serialize, Deserialize)]
struct Ask<R> {
    protocol: String,
    /// The executable's identity ([`build`]): only the same build answers.
    build: String,
    request: R,
    idempotency_key: Option<String>,
    agent_token: Option<String>,
}

/// What a daemon answers.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    /// Nothing was run; the command runs the call itself.
    Refused(String),
    /// The call ran.
    Ran(Ran),
}

/// A call the daemon ran, said on the line before its response: what the
/// command needs beside the response to finish as if it had run the call.
#[derive(Serialize, Deserialize)]
pub(crate) struct Ran {
    /// [`Response::exit_code`].
    pub(crate) exit: u8,
    /// Whether the call was a successful write ([`crate::changed`]).
    pub(crate) changed: bool,
    /// The engine's time when it ended.
    now: String,
    /// The database's durability.
    durability: String,
}

/// A call the daemon ran, as the command gets it.
pub(crate) struct Answered {
    /// The response in the JSON contract, as `--json` prints it (checked to
    /// be one JSON object; read back into types only for people).
    pub(crate) json: String,
    /// What was said before it.
    pub(crate) ran: Ran,
    socket: PathBuf,
}

impl Answered {
    /// The response read back, with the engine's time and the durability,
    /// for text for people.
    pub(crate) fn executed(self) -> Result<Executed, EngineError> {
        let executed = || {
            Some(Executed {
                response: Response::from_json(&self.json).ok()?,
                now: Timestamp::parse(&self.ran.now).ok()?,
                durability: Durability::parse(&self.ran.durability)?.as_str(),
            })
        };
        executed().ok_or_else(|| lost(&self.socket, "its answer was not one this build writes"))
    }
}

/// What handing a call over gave.
pub(crate) enum Handed {
    /// No daemon ran it: the command runs it itself.
    NotRun,
    /// The daemon ran it.
    Ran(Answered),
    /// The call was sent and no answer came: it may have run.
    Lost(EngineError),
}

/// The socket of the database at `db`.
pub(crate) fn socket_path(db: &Path) -> PathBuf {
    inbox_host_native::file::companion(db, SUFFIX)
}

/// Hands `call` on `on` to the database's daemon, if the call may be
/// handed over (see the module's notes for why some run in the command)
/// and a daemon of this build and this user serves the database.
pub(crate) fn hand_over(on: Target<'_>, call: &Call, clock: &HostClock) -> Handed {
    let crate::database::Database::File(db) = on.db else {
        return Handed::NotRun;
    };
    let handed_over = on.engine.is_none()
        && on.init.is_none()
        && call.request.effect() != Effect::Wait
        && clock.is_system();
    if !handed_over {
        return Handed::NotRun;
    }
    let socket = socket_path(&db.path);
    let Some(mut stream) = connect(&socket) else {
        return Handed::NotRun;
    };
    let Some(line) = ask_line(call) else {
        return Handed::NotRun;
    };
    // A line not all sent cannot have run: the daemon runs whole lines.
    if stream.write_all(&line).is_err() {
        return Handed::NotRun;
    }
    let lost = |why: &str| Handed::Lost(lost(&socket, why));
    let mut stream = BufReader::new((&stream).take(ANSWER_MAX_BYTES));
    let mut line = || match read_line(&mut stream) {
        Ok(Some(line)) => Ok(line),
        Ok(None) => Err(lost("closed the connection before answering")),
        Err(e) => Err(lost(&format!("its answer could not be read ({e})"))),
    };
    let ran = match line().map(|header| serde_json::from_slice::<Answer>(&header)) {
        Err(lost) => return lost,
        Ok(Ok(Answer::Refused(_))) => return Handed::NotRun,
        Ok(Ok(Answer::Ran(ran))) => ran,
        Ok(Err(_)) => return lost("its answer was not one this build writes"),
    };
    let json = match line().map(String::from_utf8) {
        Err(lost) => return lost,
        Ok(Ok(json)) => json,
        Ok(Err(_)) => return lost("its answer was not text"),
    };
    // One JSON object, as the contract promises, without decoding it.
    if !json.starts_with('{') || serde_json::from_str::<serde::de::IgnoredAny>(&json).is_err() {
        return lost("its answer was not one this build writes");
    }
    Handed::Ran(Answered { json, ran, socket })
}

/// A call sent to the daemon at `socket` that got no usable answer: it may
/// have run, so the command must not run it again.
fn lost(socket: &Path, why: &str) -> EngineError {
    EngineError::Store(inbox_engine::StoreError::other(format!(
        "the inbox daemon at {} took the command but {why}, so it may or may not have run; \
         look before running it again (inbox show, inbox list), or give writes an \
         --idempotency-key so that a rerun is safe",
        socket.display()
    )))
}

/// The line that asks a daemon to run `call`.
fn ask_line(call: &Call) -> Option<Vec<u8>> {
    let ask = Ask {
        protocol: PROTOCOL.into(),
        build: build(),
        request: &call.request,
        idempotency_key: call.idempotency_key.clone(),
        agent_token: call.agent_token.clone(),
    };
    let mut line = serde_json::to_vec(&ask).ok()?;
    line.push(b'\n');
    Some(line)
}

/// Whether `socket` is a socket (not a link to one) of this user.
fn ours(socket: &Path) -> bool {
    std::fs::symlink_metadata(socket).is_ok_and(|meta| {
        meta.file_type().is_socket() && meta.uid() == rustix::process::geteuid().as_raw()
    })
}

/// Connects to the daemon's socket at `socket`, if it is a socket of this
/// user, a process of this user listens on it, and it can be given a
/// deadline.
fn connect(socket: &Path) -> Option<UnixStream> {
    if !ours(socket) {
        return None;
    }
    let stream = UnixStream::connect(socket).ok()?;
    same_user(&stream).then_some(())?;
    stream.set_read_timeout(Some(ANSWER_WAIT)).ok()?;
    stream.set_write_timeout(Some(CONNECTION_WAIT)).ok()?;
    Some(stream)
}

/// Whether the process at the other end of `stream` runs as this user.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn same_user(stream: &UnixStream) -> bool {
    rustix::net::sockopt::socket_peercred(stream)
        .is_ok_and(|peer| peer.uid == rustix::process::geteuid())
}

/// Elsewhere the peer's user is not asked here, so no socket is trusted.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn same_user(_: &UnixStream) -> bool {
    false
}

/// A connection read through a buffer, limited to the bytes it may send.
type Limited<'a> = BufReader<std::io::Take<&'a UnixStream>>;

/// One line from `from` (a stream limited to the bytes it may send), its
/// newline dropped; `None` at the end of the stream before a whole line.
fn read_line(from: &mut Limited<'_>) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    from.read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return if from.get_ref().limit() == 0 {
            Err(std::io::Error::other(
                "longer than a call or an answer may be",
            ))
        } else {
            Ok(None)
        };
    }
    line.pop();
    Ok(Some(line))
}

/// This executable's identity: its device, inode, size and modification
/// time. A daemon answers only commands of the very same file, so one
/// started before `cargo install` replaced the binary never decodes a call
/// of another version.
fn build() -> String {
    match std::fs::metadata("/proc/self/exe").or_else(|_| std::env::current_exe()?.metadata()) {
        Ok(meta) => format!(
            "{}:{}:{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        ),
        Err(_) => String::new(),
    }
}

/// `inbox daemon`: serves the database `global` names until SIGINT or
/// SIGTERM, and returns the exit code.
pub(crate) fn run(global: &Global) -> u8 {
    let fail = |error: EngineError| {
        let response = Response::failure(Some("daemon".into()), error);
        crate::finish(&response, global.json, None, &[])
    };
    let db = match crate::database::Database::resolve(global).0 {
        crate::database::Database::File(db) => db,
        crate::database::Database::Postgres { .. } => {
            return fail(EngineError::InvalidValue {
                field: "db".into(),
                problem: "names a PostgreSQL database; `inbox daemon` keeps an SQLite file \
                          open (commands on PostgreSQL already talk to its server): name an \
                          SQLite file with --db"
                    .into(),
            });
        }
    };
    match Daemon::start(db.path) {
        Ok(daemon) => daemon.serve(global.json),
        Err(error) => fail(error),
    }
}

/// A daemon serving one database.
struct Daemon {
    db: PathBuf,
    socket: PathBuf,
    listener: UnixListener,
    /// The socket file as bound (device, inode): only that file is
    /// removed at the end.
    bound: (u64, u64),
    /// The warm engine; `None` after the database was replaced and could
    /// not be reopened.
    served: Option<Served>,
    build: String,
    /// Calls run, for the line said at the end.
    ran: u64,
    /// SIGINT and SIGTERM.
    stop: crate::bridge::Stop,
}

/// The engine over the database, and what the file recorded when it was
/// opened.
struct Served {
    engine: crate::runner::Runner,
    /// The schema and durability the file recorded when it was opened.
    recorded: open::Recorded,
}

impl Daemon {
    /// Opens the database and listens on its socket.
    fn start(db: PathBuf) -> Result<Daemon, EngineError> {
        let build = build();
        if build.is_empty() {
            return Err(refused(
                "cannot identify its own executable (/proc/self/exe)",
            ));
        }
        if !cfg!(target_os = "linux") {
            return Err(refused(
                "needs Linux, to check which user a connection comes from",
            ));
        }
        let stop = crate::bridge::Stop::register()
            .map_err(|e| refused(&format!("cannot catch SIGINT and SIGTERM ({e})")))?;
        let served = Served::open(&db)?;
        let socket = socket_path(&db);
        let listener = listen(&socket)?;
        let bound =
            identity(&socket).map_err(|e| refused(&format!("{}: {e}", socket.display())))?;
        Ok(Daemon {
            db,
            socket,
            listener,
            bound,
            served: Some(served),
            build,
            ran: 0,
            stop,
        })
    }

    /// Answers connections one at a time until a stop is asked for, then
    /// removes the socket. One at a time: every call is a short
    /// transaction, and one connection keeps SQLite's write lock free of
    /// races between this database's commands.
    fn serve(mut self, json: bool) -> u8 {
        self.say_serving(json);
        while !self.stop.asked() {
            use rustix::event::{PollFd, PollFlags, poll};
            let stop_fd = self.stop.fd();
            let mut fds = [
                PollFd::new(&self.listener, PollFlags::IN),
                PollFd::new(&stop_fd, PollFlags::IN),
            ];
            if poll(&mut fds, None).is_err() || self.stop.asked() {
                continue;
            }
            if let Ok((stream, _)) = self.listener.accept() {
                self.answer(stream);
            }
        }
        self.remove_socket();
        crate::output::stderr(&format!(
            "inbox daemon: stopped after running {} commands\n",
            self.ran
        ));
        0
    }

    /// The first line, on stdout: which database, on which socket.
    fn say_serving(&self, json: bool) {
        let line = if json {
            crate::output::success_json(
                Some("daemon"),
                serde_json::json!({
                    "database": self.db.display().to_string(),
                    "socket": self.socket.display().to_string(),
                }),
            )
        } else {
            format!(
                "serving {} to inbox commands at {}; stop with Ctrl-C\n",
                crate::terminal::safe(&self.db.display().to_string()),
                crate::terminal::safe(&self.socket.display().to_string()),
            )
        };
        let _ = crate::output::write_stdout(&line);
    }

    /// Reads one call from `stream`, runs it and answers. A connection
    /// from another user, or one that sends no whole line in time, is
    /// closed unanswered.
    fn answer(&mut self, mut stream: UnixStream) {
        if !same_user(&stream)
            || stream.set_read_timeout(Some(CONNECTION_WAIT)).is_err()
            || stream.set_write_timeout(Some(CONNECTION_WAIT)).is_err()
        {
            return;
        }
        let mut from = BufReader::new((&stream).take(CALL_MAX_BYTES));
        let Ok(Some(line)) = read_line(&mut from) else {
            return;
        };
        let (answer, response) = self.run_line(&line);
        let mut out = serde_json::to_vec(&answer).unwrap_or_default();
        out.push(b'\n');
        if let Some(response) = response {
            out.extend_from_slice(response.as_bytes());
            out.push(b'\n');
        }
        let _ = stream.write_all(&out);
    }

    /// Runs one call line: the answer, and the response when it ran.
    fn run_line(&mut self, line: &[u8]) -> (Answer, Option<String>) {
        let refused = |why: &str| (Answer::Refused(why.to_owned()), None);
        let ask: Ask<Box<RawValue>> = match serde_json::from_slice(line) {
            Ok(ask) => ask,
            Err(e) => return refused(&format!("not a call of {PROTOCOL}: {e}")),
        };
        if ask.protocol != PROTOCOL || ask.build != self.build {
            return refused("another build of inbox: the command runs it itself");
        }
        let Ok(request) = inbox_engine::Request::from_json(ask.request.get()) else {
            return refused("a call this build does not read");
        };
        let call = Call {
            request,
            idempotency_key: ask.idempotency_key,
            agent_token: ask.agent_token,
        };
        if call.request.effect() == Effect::Wait {
            return refused("a wait runs in the command");
        }
        let served = match self.current() {
            Ok(served) => served,
            Err(error) => return refused(&error.to_string()),
        };
        let response = served.engine.execute_call(call);
        let ran = Ran {
            exit: response.exit_code(),
            changed: crate::changed(&response),
            now: served.engine.now().to_string(),
            durability: served.recorded.durability.as_str().into(),
        };
        self.ran += 1;
        (Answer::Ran(ran), Some(response.to_json()))
    }

    /// The engine over the file the database's path names now: reopened
    /// when the path names another file, or `inbox init` changed the
    /// schema or the durability the file records, as a fresh command would
    /// open it (and refuse a schema of a newer inbox).
    fn current(&mut self) -> Result<&mut Served, EngineError> {
        let current = self.served.as_ref().is_some_and(|served| {
            let store = served.engine.store();
            // The files the connection opened (the store's own record of
            // them), still at their names.
            store.files().is_none_or(|files| files.check().is_ok())
                && open::recorded(store).ok() == Some(served.recorded)
        });
        if !current {
            self.served = None;
            self.served = Some(Served::open(&self.db)?);
        }
        self.served
            .as_mut()
            .ok_or_else(|| refused("has no database open"))
    }

    /// Removes the socket, if it is still the one this daemon bound.
    fn remove_socket(&self) {
        if identity(&self.socket).ok() == Some(self.bound) {
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

impl Served {
    /// Opens the database at `db` as a long-lived host does.
    fn open(db: &Path) -> Result<Served, EngineError> {
        let (mut store, _) = open::open_existing(db, None).map_err(EngineError::Store)?;
        inbox_host_native::set_lifetime(&mut store, inbox_host_native::Lifetime::LongLived)
            .map_err(EngineError::Store)?;
        let recorded = open::recorded(&store).map_err(EngineError::Store)?;
        // The daemon runs on the system clock: a command whose clock is
        // not (a test build's INBOX_NOW) runs its call itself.
        let engine = crate::runner::EngineChoice::BuiltIn.start(store, HostClock::system())?;
        Ok(Served { engine, recorded })
    }
}

/// Listens on `socket`, owner-only, replacing only a dead daemon's socket.
fn listen(socket: &Path) -> Result<UnixListener, EngineError> {
    let shown = socket.display();
    if std::fs::symlink_metadata(socket).is_ok() {
        if !ours(socket) {
            return Err(refused(&format!(
                "{shown} exists and is not a socket of this user; it is not inbox's, so it \
                 is left alone: remove it or name another database"
            )));
        }
        if UnixStream::connect(socket).is_ok() {
            return Err(refused(&format!(
                "another daemon already serves this database at {shown}; stop it first"
            )));
        }
        std::fs::remove_file(socket).map_err(|e| refused(&format!("{shown}: {e}")))?;
    }
    let listener = UnixListener::bind(socket).map_err(|e| {
        refused(&format!(
            "cannot listen at {shown} ({e}); a socket's path must be shorter than 108 bytes"
        ))
    })?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| refused(&format!("{shown}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| refused(&format!("{shown}: {e}")))?;
    Ok(listener)
}

/// A file's device and inode, not following a link.
fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    std::fs::symlink_metadata(path).map(|meta| (meta.dev(), meta.ino()))
}

/// Why the daemon cannot start or run a call: a storage error (exit 50).
fn refused(why: &str) -> EngineError {
    EngineError::Store(inbox_engine::StoreError::other(format!(
        "inbox daemon: {why}"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// `inbox init --durability` on a served database: the next call runs
    /// with the durability it recorded, as a fresh command would.
    #[test]
    fn a_recorded_durability_change_reopens_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("coord.db");
        open::init(&db, None).unwrap();
        let mut daemon = Daemon::start(db.clone()).unwrap();
        let durability = |daemon: &mut Daemon| daemon.current().unwrap().recorded.durability;
        assert_eq!(durability(&mut daemon), Durability::Normal);
        open::init(&db, Some(Durability::Full)).unwrap();
        assert_eq!(durability(&mut daemon), Durability::Full);
        daemon.remove_socket();
        assert!(!socket_path(&db).exists());
    }

    /// A line is read whole, up to its bound, and never past it.
    #[test]
    fn lines_are_bounded() {
        let (mut near, far) = UnixStream::pair().unwrap();
        near.write_all(b"{}\n0123456789").unwrap();
        drop(near);
        let mut from = BufReader::new((&far).take(8));
        assert_eq!(read_line(&mut from).unwrap(), Some(b"{}".to_vec()));
        assert!(read_line(&mut from).is_err(), "longer than what is left");
        let (mut near, far) = UnixStream::pair().unwrap();
        near.write_all(b"cut").unwrap();
        drop(near);
        let mut from = BufReader::new((&far).take(8));
        assert_eq!(read_line(&mut from).unwrap(), None);
    }
}
