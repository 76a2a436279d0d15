//! The daemon itself: `inbox daemon` opens the database, listens on its
//! socket, and runs the calls commands send it, one at a time on one warm
//! connection.
//!
//! One thread, never blocked by a command: every connection is read and
//! written as its bytes come ([`super::connection`]), and a call runs only
//! once its whole line has arrived, so a command that drips its call or
//! stalls on its answer holds up no other. A call runs only if its
//! command is still there and its deadline has not passed, and a commit
//! the call makes after either is rolled back ([`Guard`]): a command that
//! gave up waiting has said the call might not have run, and it never runs
//! later.
//!
//! A connection's few seconds are counted in the daemon's idle time, and
//! what it sent is read before it is judged late, so a call that waits out
//! SQLite's lock taken by another process fails no command that came
//! meanwhile. A connection closed before its call was taken (too slow,
//! a line too long, one too many, the daemon stopping) is told first that
//! its call was not run, and its command runs the call itself: a command
//! hears nothing only from a daemon done with its call, or one that died.
//! This module must never apply an inbox rule or change a call.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use inbox_engine::{Call, Effect, EngineError, Executor as _, Response};
use inbox_host_native::HostClock;
use inbox_sqlite::open;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use serde_json::value::RawValue;

use super::connection::{Connection, Idle, Step};
use super::deadline::{self, Guard, Moment};
use super::{ANSWER_WAIT, Answer, Ask, PROTOCOL, Ran, build, ours, same_user, socket_path};
use inbox_host_native::Global;

/// The most connections a daemon holds at once; past it, the oldest whose
/// call was not taken is turned away for the newest (its command runs the
/// call itself). One being answered is left to finish in its own time.
const CONNECTIONS_MAX: usize = 64;

/// The most connections accepted in one turn, before the connections
/// already held are read again: a flood of new connections does not push
/// out one whose line came just after it was accepted.
const ACCEPTS_AT_ONCE: usize = 16;

/// `inbox daemon`: serves the database `global` names until SIGINT or
/// SIGTERM, and returns the exit code.
pub(crate) fn run(global: &Global) -> u8 {
    let fail = |error: EngineError| {
        let response = Response::failure(Some("daemon".into()), error);
        crate::finish(&response, global.json, None, &[])
    };
    let db = match inbox_host_native::database::Database::resolve(global).0 {
        inbox_host_native::database::Database::File(db) => db,
        inbox_host_native::database::Database::Postgres { .. } => {
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
    /// The clock this daemon reads ([`deadline::clock`]).
    clock: String,
    /// The call being run, as the connection's commit hook sees it.
    guard: Arc<Guard>,
    /// Calls run, for the line said at the end.
    ran: u64,
    /// The clock connections' waits are counted on.
    idle: Idle,
    /// SIGINT and SIGTERM.
    stop: crate::bridge::Stop,
}

/// The engine over the database, and what the file recorded when it was
/// opened.
struct Served {
    engine: inbox_host_native::runner::Runner,
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
        let guard = Arc::new(Guard::default());
        let served = Served::open(&db, &guard)?;
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
            clock: deadline::clock(),
            guard,
            ran: 0,
            idle: Idle::start(),
            stop,
        })
    }

    /// Serves connections until a stop is asked for, then removes the
    /// socket. Calls run one at a time: every call is a short transaction,
    /// and one connection keeps SQLite's write lock free of races between
    /// this database's commands.
    fn serve(mut self, json: bool) -> u8 {
        self.say_serving(json);
        let mut open: Vec<Connection> = Vec::new();
        while !self.stop.asked() {
            let (incoming, ready) = self.wait(&open);
            // Asked while it slept: no call starts after the ask.
            if self.stop.asked() {
                break;
            }
            let mut i = 0;
            open.retain_mut(|connection| {
                let step = if ready.get(i).copied().unwrap_or(false) {
                    connection.proceed()
                } else {
                    Step::Wait
                };
                i += 1;
                self.go_on(connection, step)
            });
            if incoming {
                self.accept(&mut open);
            }
            self.close_late(&mut open);
        }
        self.stop_serving(open);
        crate::output::stderr(&format!(
            "inbox daemon: stopped after running {} commands\n",
            self.ran
        ));
        0
    }

    /// Sleeps until a connection comes or can go on, a stop is asked for,
    /// or the first connection's time is up: whether one is coming, and
    /// which of `open` can go on.
    fn wait(&self, open: &[Connection]) -> (bool, Vec<bool>) {
        let stop = self.stop.fd();
        let mut fds = Vec::with_capacity(open.len() + 2);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        fds.push(PollFd::from_borrowed_fd(stop, PollFlags::IN));
        fds.extend(open.iter().map(|c| PollFd::new(&c.stream, c.interest())));
        let first = open.iter().map(Connection::until).min();
        let timeout =
            first.and_then(|until| Timespec::try_from(until.saturating_sub(self.idle.now())).ok());
        if poll(&mut fds, timeout.as_ref()).is_err() {
            return (false, Vec::new());
        }
        let incoming = !fds[0].revents().is_empty();
        let ready = fds[2..].iter().map(|fd| !fd.revents().is_empty()).collect();
        (incoming, ready)
    }

    /// Accepts the connections waiting, up to [`ACCEPTS_AT_ONCE`], from
    /// this user only, and goes on with each at once (its call may have
    /// come with it).
    fn accept(&mut self, open: &mut Vec<Connection>) {
        for _ in 0..ACCEPTS_AT_ONCE {
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                // Out of descriptors: a connection makes room, or the
                // listener would wake the loop again at once.
                Err(_) => {
                    make_room(open, None);
                    return;
                }
            };
            if !same_user(&stream) {
                continue;
            }
            let Ok(mut connection) = Connection::accepted(stream, self.idle.now()) else {
                continue;
            };
            let step = connection.proceed();
            if self.go_on(&mut connection, step) {
                if open.len() >= CONNECTIONS_MAX {
                    make_room(open, Some(connection));
                } else {
                    open.push(connection);
                }
            }
        }
    }

    /// Closes the connections whose time is up, once what each has sent
    /// has been read: a line that came while the daemon was busy is run,
    /// not held against its command. Those whose call was not taken are
    /// told so.
    fn close_late(&mut self, open: &mut Vec<Connection>) {
        open.retain_mut(|connection| {
            if connection.until() > self.idle.now() {
                return true;
            }
            match connection.proceed() {
                Step::Wait => {
                    connection.turn_away(&not_run(
                        "its command did not send its whole call within a few seconds",
                    ));
                    false
                }
                step => self.go_on(connection, step),
            }
        });
    }

    /// At a stop: answers already made go out if they can at once; a call
    /// not yet taken never runs, and its command is told so, as is each
    /// command still waiting to be accepted (the socket is removed first,
    /// so no other comes).
    fn stop_serving(&mut self, open: Vec<Connection>) {
        self.remove_socket();
        let stopping = not_run("the daemon is stopping");
        for mut connection in open {
            if connection.answering() {
                let _ = connection.proceed();
            } else {
                connection.turn_away(&stopping);
            }
        }
        while let Ok((stream, _)) = self.listener.accept() {
            if same_user(&stream) {
                let _ = stream.set_nonblocking(true);
                let _ = (&stream).write(&stopping);
            }
        }
    }

    /// Acts on what `connection` needs next: runs and answers a whole call
    /// line. Whether to keep the connection.
    fn go_on(&mut self, connection: &mut Connection, step: Step) -> bool {
        match step {
            Step::Wait => true,
            Step::Close => false,
            Step::Unread(why) => {
                connection.turn_away(&not_run(why));
                false
            }
            Step::Line(line) => {
                let busy = Instant::now();
                let (answer, response) = self.run_line(&line, &connection.stream);
                self.idle.busy_since(busy);
                let mut out = answer_line(&answer);
                if let Some(response) = response {
                    out.extend_from_slice(response.as_bytes());
                    out.push(b'\n');
                }
                matches!(connection.answer(out, self.idle.now()), Step::Wait)
            }
        }
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
                inbox_host_native::terminal::safe(&self.db.display().to_string()),
                inbox_host_native::terminal::safe(&self.socket.display().to_string()),
            )
        };
        let _ = crate::output::write_stdout(&line);
    }

    /// Runs one call line from `command`: the answer, and the response
    /// when it ran.
    fn run_line(&mut self, line: &[u8], command: &UnixStream) -> (Answer, Option<String>) {
        let refused = |why: &str| (Answer::Refused(why.to_owned()), None);
        let ask: Ask<Box<RawValue>> = match serde_json::from_slice(line) {
            Ok(ask) => ask,
            Err(e) => return refused(&format!("not a call of {PROTOCOL}: {e}")),
        };
        if ask.protocol != PROTOCOL || ask.build != self.build {
            return refused("another build of inbox: the command runs it itself");
        }
        // A deadline on another clock means nothing here; one further off
        // than any command sets is read on another clock too.
        if ask.clock != self.clock || ask.deadline > Moment::now().after(ANSWER_WAIT) {
            return refused("a command on another clock: the command runs it itself");
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
        if let Some(why) = deadline::too_late(ask.deadline, command) {
            return (Answer::Expired(why.into()), None);
        }
        let Ok(watched) = command.try_clone() else {
            return refused("cannot watch the connection while the call runs");
        };
        let guard = Arc::clone(&self.guard);
        let served = match self.current() {
            Ok(served) => served,
            Err(error) => return refused(&error.to_string()),
        };
        guard.start(ask.deadline, watched);
        let response = served.engine.execute_call(call);
        // A failure wrote nothing of its own, whatever refused it; a
        // success committed in time (a later commit refused was a step of
        // its own, such as removing old threads).
        if let Some(why) = guard.end()
            && !response.is_ok()
        {
            return (Answer::Expired(why.into()), None);
        }
        let ran = Ran {
            exit: response.exit_code(),
            changed: inbox_host_native::run::changed(&response),
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
            self.served = Some(Served::open(&self.db, &self.guard)?);
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
    /// Opens the database at `db` as a long-lived host does, its commits
    /// watched by `guard`.
    fn open(db: &Path, guard: &Arc<Guard>) -> Result<Served, EngineError> {
        let (mut store, _) = open::open_existing(db, None).map_err(EngineError::Store)?;
        inbox_sqlite::set_lifetime(&mut store, inbox_sqlite::Lifetime::LongLived)
            .map_err(EngineError::Store)?;
        let recorded = open::recorded(&store).map_err(EngineError::Store)?;
        let guard = Arc::clone(guard);
        store
            .connection_mut()
            .commit_hook(Some(move || guard.refuses_commit()))
            .map_err(|e| refused(&format!("cannot watch commits ({e})")))?;
        // The daemon runs on the system clock: a command whose clock is
        // not (a test build's INBOX_NOW) runs its call itself.
        let engine =
            inbox_host_native::runner::EngineChoice::BuiltIn.start(store, HostClock::system())?;
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

/// Makes room among `open` (full) for `newest`, if it is given: the oldest
/// connection whose call was not taken is turned away, or else the newest
/// (the others are being answered and finish in their own time).
fn make_room(open: &mut Vec<Connection>, newest: Option<Connection>) {
    let why = not_run("the daemon holds as many connections as it can");
    match open.iter().position(|connection| !connection.answering()) {
        Some(oldest) => {
            open.remove(oldest).turn_away(&why);
            open.extend(newest);
        }
        None => {
            if let Some(mut newest) = newest {
                newest.turn_away(&why);
            }
        }
    }
}

/// The line that tells a command, before its connection is closed, that
/// the daemon did not take its call and never will run it, so the command
/// runs it itself.
fn not_run(why: &str) -> Vec<u8> {
    answer_line(&Answer::NotRun(why.to_owned()))
}

/// `answer` as a line.
fn answer_line(answer: &Answer) -> Vec<u8> {
    let mut line = serde_json::to_vec(answer).unwrap_or_default();
    line.push(b'\n');
    line
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
    use inbox_sqlite::Durability;

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
}
