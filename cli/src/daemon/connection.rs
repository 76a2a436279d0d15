//! One command's connection to the daemon, read and written without ever
//! blocking: the daemon holds many at once and turns to each as its bytes
//! come, so a command that sends its call a byte at a time, or stops
//! reading its answer, holds up nobody else.
//!
//! Each connection has a few seconds ([`CONNECTION_WAIT`]) from when it was
//! accepted to send its whole call line, and as long again from when its
//! answer was ready to take it; then it is closed. Those seconds are
//! counted on the daemon's [`Idle`] clock, which stands still while the
//! daemon runs a call: a wait judges how slow the command is, never how
//! busy the daemon was. A line is handed on only once it is whole, newline
//! included, and never past [`CALL_MAX_BYTES`]; a connection closed before
//! its line was taken is first told so ([`Connection::turn_away`]). This
//! module never reads a call or runs one.

use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::event::PollFlags;

/// The longest call line a daemon reads, its newline included: a message's
/// largest body, payload and artifacts, escaped, fit many times over.
pub(super) const CALL_MAX_BYTES: usize = 16 << 20;

/// How long a daemon gives one connection to send its call, and again to
/// take its answer, in its idle time.
pub(super) const CONNECTION_WAIT: Duration = Duration::from_secs(5);

/// The daemon's idle time: how long it has been serving, less the time it
/// spent running calls. While a call runs (SQLite's lock held by another
/// process can keep it for the whole busy budget), no command can send
/// its line or take its answer, so that time is nobody's fault but the
/// daemon's and is not counted against any connection.
pub(super) struct Idle {
    started: Instant,
    busy: Duration,
}

impl Idle {
    /// A clock that starts now.
    pub(super) fn start() -> Idle {
        Idle {
            started: Instant::now(),
            busy: Duration::ZERO,
        }
    }

    /// The idle time now.
    pub(super) fn now(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.busy)
    }

    /// Counts the time since `since` as busy.
    pub(super) fn busy_since(&mut self, since: Instant) {
        self.busy = self.busy.saturating_add(since.elapsed());
    }
}

/// A connection the daemon holds.
pub(super) struct Connection {
    pub(super) stream: UnixStream,
    /// When the connection is closed, whatever it is doing, on the
    /// daemon's [`Idle`] clock.
    until: Duration,
    state: State,
}

/// Where a connection is.
enum State {
    /// Its call line, as much as has come.
    Reading(Vec<u8>),
    /// Its answer, and how much of it was sent.
    Writing(Vec<u8>, usize),
}

/// What a connection needs next.
pub(super) enum Step {
    /// More bytes, or room to send them: poll it again.
    Wait,
    /// Its whole call line (newline dropped), to run and answer.
    Line(Vec<u8>),
    /// No line to run, and none will come (it ended before its newline, was
    /// longer than any call, or could not be read): turn it away and close
    /// it.
    Unread(&'static str),
    /// Nothing more: close it (answered, or gone while answered).
    Close,
}

impl Connection {
    /// A connection just accepted at `now` (idle time), made non-blocking.
    pub(super) fn accepted(stream: UnixStream, now: Duration) -> std::io::Result<Connection> {
        stream.set_nonblocking(true)?;
        Ok(Connection {
            stream,
            until: now.saturating_add(CONNECTION_WAIT),
            state: State::Reading(Vec::new()),
        })
    }

    /// When, in idle time, the connection is closed if it has not
    /// finished.
    pub(super) fn until(&self) -> Duration {
        self.until
    }

    /// Whether its call was taken: its answer is being sent.
    pub(super) fn answering(&self) -> bool {
        matches!(self.state, State::Writing(..))
    }

    /// What to poll it for.
    pub(super) fn interest(&self) -> PollFlags {
        match self.state {
            State::Reading(_) => PollFlags::IN,
            State::Writing(..) => PollFlags::OUT,
        }
    }

    /// Goes on with what the connection is doing, as far as it can without
    /// waiting.
    pub(super) fn proceed(&mut self) -> Step {
        match &mut self.state {
            State::Reading(line) => read(&self.stream, line),
            State::Writing(answer, sent) => write(&self.stream, answer, sent),
        }
    }

    /// Starts sending `answer` at `now` (idle time), as far as it goes
    /// without waiting.
    pub(super) fn answer(&mut self, answer: Vec<u8>, now: Duration) -> Step {
        self.until = now.saturating_add(CONNECTION_WAIT);
        self.state = State::Writing(answer, 0);
        self.proceed()
    }

    /// Before the connection is closed with its call not taken: tells the
    /// command so with `not_run`, one short line, so that it runs the call
    /// itself rather than wonder whether it ran. One write that does not
    /// wait: nothing was sent on the connection before, so the line fits
    /// (and a command that is gone is not written to at all). Once the
    /// call was taken, nothing is said here: its answer is under way.
    pub(super) fn turn_away(&mut self, not_run: &[u8]) {
        if !self.answering() {
            let _ = (&self.stream).write(not_run);
        }
    }
}

/// Reads what has come of a call line into `line`.
fn read(stream: &UnixStream, line: &mut Vec<u8>) -> Step {
    let before = line.len();
    let room = CALL_MAX_BYTES.saturating_sub(before);
    let read = stream
        .take(u64::try_from(room).unwrap_or(u64::MAX))
        .read_to_end(line);
    if let Some(end) = line[before..].iter().position(|&b| b == b'\n') {
        line.truncate(before + end);
        return Step::Line(std::mem::take(line));
    }
    match read {
        // All that has come so far, and room for more.
        Err(e) if e.kind() == ErrorKind::WouldBlock && line.len() < CALL_MAX_BYTES => Step::Wait,
        _ if line.len() >= CALL_MAX_BYTES => Step::Unread("its call line is longer than any call"),
        Ok(_) => Step::Unread("its call line ended before its newline"),
        Err(_) => Step::Unread("its call line could not be read"),
    }
}

/// Sends what is left of `answer`.
fn write(mut stream: &UnixStream, answer: &[u8], sent: &mut usize) -> Step {
    while *sent < answer.len() {
        match stream.write(&answer[*sent..]) {
            Ok(0) => return Step::Close,
            Ok(n) => *sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Wait,
            Err(_) => return Step::Close,
        }
    }
    Step::Close
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn line(step: Step) -> Option<Vec<u8>> {
        match step {
            Step::Line(line) => Some(line),
            _ => None,
        }
    }

    #[test]
    fn a_line_is_handed_on_only_when_whole() {
        let (mut near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        assert!(matches!(connection.proceed(), Step::Wait));
        near.write_all(b"{\"a\":").unwrap();
        assert!(matches!(connection.proceed(), Step::Wait));
        near.write_all(b"1}\nafter").unwrap();
        assert_eq!(line(connection.proceed()).unwrap(), b"{\"a\":1}");
        // Cut before its newline: nothing to run.
        let (mut near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        near.write_all(b"cut").unwrap();
        drop(near);
        assert!(matches!(connection.proceed(), Step::Unread(_)));
    }

    #[test]
    fn a_line_longer_than_any_call_is_closed_unread_past_its_bound() {
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 16];
            let mut written = 0;
            while let Ok(n) = (&near).write(&chunk) {
                written += n;
            }
            written
        });
        let closed = loop {
            match connection.proceed() {
                Step::Wait => std::thread::sleep(Duration::from_millis(1)),
                Step::Line(_) => panic!("no newline was sent"),
                Step::Close => panic!("a connection not answered is turned away"),
                Step::Unread(why) => {
                    assert!(why.contains("longer"), "{why}");
                    break connection;
                }
            }
        };
        drop(closed);
        assert!(writer.join().unwrap() >= CALL_MAX_BYTES);
    }

    #[test]
    fn an_answer_is_sent_as_the_reader_takes_it() {
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        let answer = vec![b'y'; 4 << 20];
        assert!(matches!(
            connection.answer(answer.clone(), Duration::ZERO),
            Step::Wait
        ));
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            (&near).read_to_end(&mut got).unwrap();
            got
        });
        loop {
            match connection.proceed() {
                Step::Wait => std::thread::sleep(Duration::from_millis(1)),
                Step::Line(_) | Step::Unread(_) => panic!("writing reads no line"),
                Step::Close => break,
            }
        }
        drop(connection);
        assert_eq!(reader.join().unwrap(), answer);
    }

    #[test]
    fn a_connection_whose_call_was_not_taken_is_told_so_and_no_other() {
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        connection.turn_away(b"{\"not_run\":\"no\"}\n");
        drop(connection);
        let mut got = Vec::new();
        (&near).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"{\"not_run\":\"no\"}\n");
        // Once answering, its answer is all it gets.
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far, Duration::ZERO).unwrap();
        assert!(matches!(
            connection.answer(b"answer\n".to_vec(), Duration::ZERO),
            Step::Close
        ));
        connection.turn_away(b"{\"not_run\":\"no\"}\n");
        drop(connection);
        let mut got = Vec::new();
        (&near).read_to_end(&mut got).unwrap();
        assert_eq!(got, b"answer\n");
    }

    #[test]
    fn busy_time_is_not_idle_time() {
        let before = Instant::now();
        let mut idle = Idle::start();
        let busy = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        idle.busy_since(busy);
        assert!(idle.now() + Duration::from_millis(200) <= before.elapsed());
    }
}
