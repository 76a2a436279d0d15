//! One command's connection to the daemon, read and written without ever
//! blocking: the daemon holds many at once and turns to each as its bytes
//! come, so a command that sends its call a byte at a time, or stops
//! reading its answer, holds up nobody else.
//!
//! Each connection has a few seconds ([`CONNECTION_WAIT`]) from when it was
//! accepted to send its whole call line, and as long again from when its
//! answer was ready to take it; then it is closed. A line is handed on only
//! once it is whole, newline included, and never past [`CALL_MAX_BYTES`].
//! This module never reads a call or runs one.

use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::event::PollFlags;

/// The longest call line a daemon reads, its newline included: a message's
/// largest body, payload and artifacts, escaped, fit many times over.
pub(super) const CALL_MAX_BYTES: usize = 16 << 20;

/// How long a daemon gives one connection to send its call, and again to
/// take its answer.
pub(super) const CONNECTION_WAIT: Duration = Duration::from_secs(5);

/// A connection the daemon holds.
pub(super) struct Connection {
    pub(super) stream: UnixStream,
    /// When the connection is closed, whatever it is doing.
    until: Instant,
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
    /// Nothing more: close it (answered, gone, or its line was too long).
    Close,
}

impl Connection {
    /// A connection just accepted, made non-blocking.
    pub(super) fn accepted(stream: UnixStream) -> std::io::Result<Connection> {
        stream.set_nonblocking(true)?;
        Ok(Connection {
            stream,
            until: Instant::now() + CONNECTION_WAIT,
            state: State::Reading(Vec::new()),
        })
    }

    /// When the connection is closed if it has not finished.
    pub(super) fn until(&self) -> Instant {
        self.until
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

    /// Starts sending `answer`, as far as it goes without waiting.
    pub(super) fn answer(&mut self, answer: Vec<u8>) -> Step {
        self.until = Instant::now() + CONNECTION_WAIT;
        self.state = State::Writing(answer, 0);
        self.proceed()
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
        // The end before a whole line, a line longer than any call, or an
        // error: nothing to run.
        _ => Step::Close,
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
        let mut connection = Connection::accepted(far).unwrap();
        assert!(matches!(connection.proceed(), Step::Wait));
        near.write_all(b"{\"a\":").unwrap();
        assert!(matches!(connection.proceed(), Step::Wait));
        near.write_all(b"1}\nafter").unwrap();
        assert_eq!(line(connection.proceed()).unwrap(), b"{\"a\":1}");
        // Cut before its newline: closed.
        let (mut near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far).unwrap();
        near.write_all(b"cut").unwrap();
        drop(near);
        assert!(matches!(connection.proceed(), Step::Close));
    }

    #[test]
    fn a_line_longer_than_any_call_is_closed_unread_past_its_bound() {
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far).unwrap();
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
                Step::Close => break connection,
            }
        };
        drop(closed);
        assert!(writer.join().unwrap() >= CALL_MAX_BYTES);
    }

    #[test]
    fn an_answer_is_sent_as_the_reader_takes_it() {
        let (near, far) = UnixStream::pair().unwrap();
        let mut connection = Connection::accepted(far).unwrap();
        let answer = vec![b'y'; 4 << 20];
        assert!(matches!(connection.answer(answer.clone()), Step::Wait));
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            (&near).read_to_end(&mut got).unwrap();
            got
        });
        loop {
            match connection.proceed() {
                Step::Wait => std::thread::sleep(Duration::from_millis(1)),
                Step::Line(_) => panic!("writing reads no line"),
                Step::Close => break,
            }
        }
        drop(connection);
        assert_eq!(reader.join().unwrap(), answer);
    }
}
