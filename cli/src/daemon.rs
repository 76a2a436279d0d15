//! `inbox daemon`: one long-lived process per SQLite database that the
//! other `inbox` commands on it hand their call to, and the command's side
//! of that hand-over.
//!
//! A command that opens the database itself pays, in every process, for
//! opening the file, reading its schema and preparing each statement
//! afresh: about a millisecond, most of what a command costs above starting
//! the binary (docs/lab-log.md). The daemon keeps one
//! connection warm and runs each call exactly as the command would have:
//! the same call, the same built-in engine, the same store, so every rule
//! and every guarantee is the engine's and SQLite's. The daemon is only one
//! more SQLite connection: commands without it, other daemons' clients,
//! the `sqlite3` shell and the wasm package keep working beside it.
//!
//! The protocol, on `<db>-daemon`, a Unix socket next to the database: the
//! command writes one line, `{"protocol", "build", "clock", "deadline",
//! "request", "idempotency_key", "agent_token"}`, and reads back either
//! `{"ran": {"exit", "changed", "now", "durability"}}` followed by a line
//! with the response in the JSON contract; or `{"refused": "why"}` when the
//! daemon ran nothing (another build of inbox, another clock, the database
//! replaced and not reopened) and never will, and the command then runs
//! the call itself; or `{"expired": "why"}` when the daemon did not run the
//! call and never will, because its deadline passed first, and the command
//! says so. Before it closes a connection whose call it did not take (its
//! line not all come within the daemon's idle time, too long, one
//! connection too many, the daemon stopping) the daemon says
//! `{"not_run": "why"}`: the call was not run and never will be, and the
//! command runs it itself.
//!
//! Run at most once, and never after the command gave up: a call is only
//! run once its whole line (newline included) has arrived, so a command
//! whose line was not all sent runs it itself. The line carries the call's
//! deadline on `CLOCK_MONOTONIC` ([`deadline`]): the daemon neither begins
//! nor commits the call at or after it, nor once its command hung up. The
//! command says the call may or may not have run only when the daemon
//! closed the connection without a word (it does so only when done with
//! its call, or when it died), or once it waited until [`COMMIT_MARGIN`]
//! past that deadline and then took SQLite's write lock, which a commit
//! under way holds until every reader sees it: either way the call has
//! been applied for all to see or never will be. (If the lock stays
//! held, the command says a commit begun in time may yet finish.)
//!
//! Trust: the command uses the socket only if it is a socket (not a link)
//! owned by its user, and both ends check that the other is a process of
//! the same user (`SO_PEERCRED`) before a byte is read. Every line is read
//! with a bound; the daemon gives each connection a few seconds of its own
//! idle time and never waits for one ([`connection`]), so a stalled command
//! holds nobody up, and a daemon held up by SQLite's lock fails nobody.
//! The daemon never replaces a file it did not make: only a dead daemon's
//! socket.
//!
//! Handed over: `inbox`'s reading and writing commands on an SQLite file,
//! with the built-in engine. A wait (`watch`, `wait-reply`) would hold the
//! daemon, so it runs in the command, as do `init`, `--engine`, `orch`
//! (whose worktrees run git beside the command) and a test build's
//! `INBOX_NOW`. This module must never apply an inbox rule or change a call.

use std::io::{BufRead as _, BufReader, ErrorKind, Read, Write as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use inbox_engine::{Call, Effect, EngineError, Response, StoreError, StoreErrorKind, Timestamp};
use inbox_host_native::HostClock;
use inbox_sqlite::Durability;
use serde::{Deserialize, Serialize};

use inbox_host_native::run::{Executed, Target};

mod connection;
mod deadline;
mod serve;

pub(crate) use serve::run;

use deadline::Moment;

/// The socket's name is the database's with this suffix.
pub(crate) const SUFFIX: &str = "-daemon";

/// The protocol's name and version, the first thing a daemon checks.
const PROTOCOL: &str = "inbox-daemon/2";

/// The longest answer line a command reads.
const ANSWER_MAX_BYTES: u64 = 256 << 20;

/// How long a daemon may take to begin and commit a call: longer than a
/// write can wait for SQLite's lock (`open::BUSY_BUDGET`), with room for a
/// queue. The call's deadline is this long after the command sent it.
const ANSWER_WAIT: Duration = Duration::from_secs(55);

/// How long past the deadline a command still waits for its answer: room
/// for a commit the daemon began just before the deadline to finish (and
/// its answer to come), so that when the command gives up, the call has
/// either been applied for all to see or never will be.
const COMMIT_MARGIN: Duration = Duration::from_secs(5);

/// How long a command gives the daemon to take its call line.
const SEND_WAIT: Duration = connection::CONNECTION_WAIT;

/// In a test build only (as `INBOX_NOW`): a shorter [`ANSWER_WAIT`], in
/// milliseconds, so that tests can see a deadline pass.
const WAIT_ENV: &str = "INBOX_DAEMON_WAIT_MS";

/// What a command sends: the call, its request as the engine's wire
/// writes it (`R`: the request itself when written, its raw JSON when
/// read) beside the envelope's fields.
#[derive(Serialize, Deserialize)]
struct Ask<R> {
    protocol: String,
    /// The executable's identity ([`build`]): only the same build answers.
    build: String,
    /// The clock `deadline` is on ([`deadline::clock`]).
    clock: String,
    /// When the daemon may no longer begin or commit the call.
    deadline: Moment,
    request: R,
    idempotency_key: Option<String>,
    agent_token: Option<String>,
}

/// What a daemon answers.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    /// Nothing was run, and nothing will be; the command runs the call
    /// itself. Said to a call line the daemon read and will not run.
    Refused(String),
    /// The daemon closes the connection without having taken its call
    /// (its line not all come in time, too long, one connection too many,
    /// the daemon stopping): the call was not run and never will be, and
    /// the command runs it itself.
    NotRun(String),
    /// Nothing was run, and nothing ever will be: the call's deadline
    /// passed (or its command went away) before it could run or commit.
    Expired(String),
    /// The call ran.
    Ran(Ran),
}

/// A call the daemon ran, said on the line before its response: what the
/// command needs beside the response to finish as if it had run the call.
#[derive(Serialize, Deserialize)]
pub(crate) struct Ran {
    /// [`Response::exit_code`].
    pub(crate) exit: u8,
    /// Whether the call was a successful write ([`inbox_host_native::run::changed`]).
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
        executed()
            .ok_or_else(|| ran_unread(&self.socket, "its response was not one this build writes"))
    }
}

/// What handing a call over gave.
pub(crate) enum Handed {
    /// No daemon ran it: the command runs it itself.
    NotRun,
    /// The daemon ran it.
    Ran(Answered),
    /// The call was sent and the command ends with this error: no answer
    /// came (it may have run, and never will after this), or the daemon
    /// said it never will.
    Failed(EngineError),
}

/// The socket of the database at `db`.
pub(crate) fn socket_path(db: &Path) -> PathBuf {
    inbox_sqlite::file::companion(db, SUFFIX)
}

/// Hands `call` on `on` to the database's daemon, if the call may be
/// handed over (see the module's notes for why some run in the command)
/// and a daemon of this build and this user serves the database.
pub(crate) fn hand_over(on: Target<'_>, call: &Call, clock: &HostClock) -> Handed {
    let inbox_host_native::database::Database::File(db) = on.db else {
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
    let Some(stream) = connect(&socket) else {
        return Handed::NotRun;
    };
    let deadline = Moment::now().after(answer_wait());
    let Some(line) = ask_line(call, deadline) else {
        return Handed::NotRun;
    };
    // A line not all sent cannot have run: the daemon runs whole lines.
    if (&stream).write_all(&line).is_err() {
        return Handed::NotRun;
    }
    let gives_up = deadline.after(COMMIT_MARGIN);
    match read_answer(&stream, gives_up) {
        Ok((Answer::Refused(_) | Answer::NotRun(_), _)) => Handed::NotRun,
        Ok((Answer::Expired(why), _)) => Handed::Failed(expired(&socket, &why)),
        Ok((Answer::Ran(ran), json)) => Handed::Ran(Answered { json, ran, socket }),
        Err(unanswered) => Handed::Failed(unanswered.error(&socket, &db.path, gives_up, call)),
    }
}

/// Takes SQLite's write lock on the database at `db` and lets it go: a
/// commit under way (the daemon's, begun before its call's deadline) holds
/// it until every reader can see what it wrote. Whether the lock was had,
/// within SQLite's busy budget.
fn no_commit_under_way(db: &Path) -> bool {
    let Ok((store, _)) = inbox_sqlite::open::open_existing(db, None) else {
        return false;
    };
    let had = store
        .connection()
        .execute_batch("BEGIN IMMEDIATE; ROLLBACK")
        .is_ok();
    store.leave_for_exit();
    had
}

/// Why no usable answer came.
struct Unanswered {
    why: String,
    /// Whether the daemon closed the connection or began to answer: it
    /// does either only once it is done with the call, will never run it
    /// (and then it says `not_run` first), or died. Not when the wait ran
    /// out, nor for any other failure to read.
    closed: bool,
    /// Whether the daemon said it ran the call before its answer failed.
    ran: bool,
}

impl Unanswered {
    /// The daemon closed the connection first.
    fn closed() -> Unanswered {
        Unanswered::answered("closed the connection before answering")
    }

    /// The daemon answered, or closed the connection, but `why`.
    fn answered(why: &str) -> Unanswered {
        Unanswered {
            why: why.into(),
            closed: true,
            ran: false,
        }
    }

    /// A read failed with `error`; `got`: after a byte of the answer came.
    fn failed(error: &std::io::Error, got: bool) -> Unanswered {
        let why = match error.kind() {
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => return Unanswered::closed(),
            ErrorKind::TimedOut => format!(
                "gave no answer within {} s",
                answer_wait().saturating_add(COMMIT_MARGIN).as_secs()
            ),
            _ => format!("its answer could not be read ({error})"),
        };
        Unanswered {
            why,
            closed: got,
            ran: false,
        }
    }

    /// After the daemon said it ran the call.
    fn after_running(self) -> Unanswered {
        Unanswered { ran: true, ..self }
    }

    /// What the command says about `call`, sent to the daemon at `socket`
    /// for the database at `db`, when its answer failed and its wait was
    /// until `gives_up`.
    fn error(self, socket: &Path, db: &Path, gives_up: Moment, call: &Call) -> EngineError {
        if self.ran {
            return ran_unread(socket, &self.why);
        }
        // The daemon closed the connection: done with the call, or it
        // never will run it. Otherwise only time settles it: past the
        // deadline, nothing begins or commits it, and a commit begun
        // before holds SQLite's write lock until all can see it. A read
        // changes nothing either way.
        let settled = self.closed || call.request.effect() == Effect::Read || {
            if let Some(left) = gives_up.left() {
                std::thread::sleep(left);
            }
            no_commit_under_way(db)
        };
        lost(socket, &self.why, settled, call)
    }
}

/// Reads the daemon's answer until `gives_up`: the answer and, when the
/// call ran, its response.
fn read_answer(stream: &UnixStream, gives_up: Moment) -> Result<(Answer, String), Unanswered> {
    let until = Until {
        stream,
        at: gives_up,
        got: false,
    };
    let mut from = BufReader::new(until.take(ANSWER_MAX_BYTES));
    let mut line = || match read_line(&mut from) {
        Ok(Some(line)) => Ok(line),
        Ok(None) => Err(Unanswered::closed()),
        Err(e) => Err(Unanswered::failed(&e, from.get_ref().get_ref().got)),
    };
    let answer = serde_json::from_slice::<Answer>(&line()?)
        .map_err(|_| Unanswered::answered("its answer was not one this build writes"))?;
    if !matches!(answer, Answer::Ran(_)) {
        return Ok((answer, String::new()));
    }
    let json = line()
        .and_then(|line| {
            String::from_utf8(line).map_err(|_| Unanswered::answered("its response was not text"))
        })
        .and_then(one_object)
        .map_err(Unanswered::after_running)?;
    Ok((answer, json))
}

/// `json` if it is one JSON object, as the contract promises (checked
/// without decoding it).
fn one_object(json: String) -> Result<String, Unanswered> {
    if json.starts_with('{') && serde_json::from_str::<serde::de::IgnoredAny>(&json).is_ok() {
        Ok(json)
    } else {
        Err(Unanswered::answered(
            "its response was not one this build writes",
        ))
    }
}

/// A connection read until a moment on the deadline's clock: each read
/// waits at most until then (what has already come is still read after
/// it), and then fails with `TimedOut`.
struct Until<'a> {
    stream: &'a UnixStream,
    at: Moment,
    /// Whether a byte came.
    got: bool,
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            // A socket's timeout is counted in the kernel's ticks: the
            // deadline's own clock says when it has passed.
            let left = self.at.left();
            let tick = Duration::from_millis(1);
            let wait = left.unwrap_or(tick).max(tick);
            self.stream.set_read_timeout(Some(wait))?;
            match Read::read(&mut self.stream, buf) {
                Ok(n) => {
                    self.got |= n > 0;
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    if left.is_none() {
                        return Err(ErrorKind::TimedOut.into());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The wait before a call's deadline: [`ANSWER_WAIT`], or in a test build
/// a shorter one from [`WAIT_ENV`].
fn answer_wait() -> Duration {
    let chosen = || {
        let ms = std::env::var(WAIT_ENV).ok()?.parse().ok()?;
        Some(Duration::from_millis(ms).min(ANSWER_WAIT))
    };
    if cfg!(debug_assertions) {
        chosen().unwrap_or(ANSWER_WAIT)
    } else {
        ANSWER_WAIT
    }
}

/// A call sent to the daemon at `socket` that got no usable answer: it may
/// have run, so the command must not run it again. `settled`: it never
/// will after this (else a commit begun in time may still be finishing, as
/// the database stayed locked). What the user can do depends on the call.
fn lost(socket: &Path, why: &str, settled: bool, call: &Call) -> EngineError {
    let when = if settled {
        "it will not run after this"
    } else {
        "it will not begin after this, but the database was still locked for writing when \
         the command stopped waiting, so a commit it began in time may yet finish"
    };
    let look = "look before running it again (inbox show, inbox list); a write given an \
                --idempotency-key can be run again safely with the same key";
    let next = if call.request.effect() == Effect::Read {
        "it changes nothing, so run it again"
    } else if call.idempotency_key.is_some() {
        "run it again with the same --idempotency-key: if it ran, the rerun answers with its \
         first outcome and applies nothing twice"
    } else if settled {
        look
    } else {
        &format!("once the other writers are done, {look}")
    };
    took_but(
        socket,
        &format!("{why}, so it may or may not have run; {when}: {next}"),
    )
}

/// The daemon at `socket` said it ran the call, and then `why`: the call
/// ran, so it must not be run again.
fn ran_unread(socket: &Path, why: &str) -> EngineError {
    took_but(
        socket,
        &format!(
            "ran it, and then {why}: look at what it did (inbox show, inbox list) rather than \
             run it again"
        ),
    )
}

/// The daemon at `socket` took the command, but `what` (which says what
/// to do): a storage error (exit 50).
fn took_but(socket: &Path, what: &str) -> EngineError {
    EngineError::Store(StoreError::other(format!(
        "the inbox daemon at {} took the command but {what}",
        socket.display()
    )))
}

/// The daemon at `socket` said it did not run the call and never will:
/// nothing was written, and it may be run again (exit 50, `storage_busy`).
fn expired(socket: &Path, why: &str) -> EngineError {
    EngineError::Store(StoreError::new(
        StoreErrorKind::Busy,
        format!(
            "the inbox daemon at {} did not run the command and never will: {}; nothing was \
             written, so run it again",
            socket.display(),
            why
        ),
    ))
}

/// The line that asks a daemon to run `call` before `deadline`.
fn ask_line(call: &Call, deadline: Moment) -> Option<Vec<u8>> {
    let ask = Ask {
        protocol: PROTOCOL.into(),
        build: build(),
        clock: deadline::clock(),
        deadline,
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
/// user and a process of this user listens on it. Connecting, then sending
/// the call, each wait at most [`SEND_WAIT`]: a daemon too busy to take
/// connections (its queue full, or stopped) has run nothing, and the
/// command runs the call itself.
fn connect(socket: &Path) -> Option<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType, sockopt};
    if !ours(socket) {
        return None;
    }
    let address = SocketAddrUnix::new(socket).ok()?;
    let stream = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .ok()?;
    sockopt::set_socket_timeout(&stream, sockopt::Timeout::Send, Some(SEND_WAIT)).ok()?;
    rustix::net::connect(&stream, &address).ok()?;
    let stream = UnixStream::from(stream);
    same_user(&stream).then_some(stream)
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

/// One line from `from` (limited to the bytes it may send), its newline
/// dropped; `None` at the end of the stream before a whole line.
fn read_line<R: Read>(from: &mut BufReader<std::io::Take<R>>) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    from.read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return if from.get_ref().limit() == 0 {
            Err(std::io::Error::other("longer than an answer may be"))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

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

    /// A daemon whose queue of connections is full is not waited for.
    #[test]
    fn a_full_queue_is_waited_for_a_few_seconds_only() {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("coord.db-daemon");
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::bind(&listener, &SocketAddrUnix::new(&socket).unwrap()).unwrap();
        rustix::net::listen(&listener, 0).unwrap();
        let queued: Vec<_> = std::iter::from_fn(|| {
            let started = std::time::Instant::now();
            let stream = connect(&socket);
            assert!(started.elapsed() < SEND_WAIT * 4);
            stream
        })
        .take(8)
        .collect();
        assert!(!queued.is_empty() && queued.len() < 8, "{}", queued.len());
    }

    /// A read waits until its moment and not past it, by the deadline's
    /// own clock.
    #[test]
    fn an_answer_is_waited_for_until_its_moment_only() {
        let (_near, far) = UnixStream::pair().unwrap();
        let at = Moment::now().after(Duration::from_millis(50));
        let failed = read_answer(&far, at).err().unwrap();
        assert!(at.passed());
        assert!(failed.why.contains("no answer"), "{}", failed.why);
        assert!(!failed.closed, "the wait ran out");
        // What came before is still read after the moment.
        let (mut near, far) = UnixStream::pair().unwrap();
        near.write_all(b"{\"refused\":\"no\"}\n").unwrap();
        let answer = read_answer(&far, Moment::now()).ok().unwrap();
        assert!(matches!(answer.0, Answer::Refused(_)));
    }
}
