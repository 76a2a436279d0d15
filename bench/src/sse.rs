//! A minimal Server-Sent Events client over a plain `TcpStream`, for the
//! board workload: one `GET` in HTTP/1.1, the chunked body decoded as it
//! arrives, and each event handed over on a channel with the instant its
//! last byte was read, taken on the reading thread (like [`crate::proc::Lines`])
//! so a busy main thread does not inflate a latency.
//!
//! It exists so the harness can time an event's arrival with nothing
//! between the socket and the clock (no HTTP stack of its own; the server
//! under test has one). It must never reconnect or send `Last-Event-ID`: a
//! stream that breaks is an error of the run, not something to smooth over.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long connecting and the response's headers may take.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// `event:` (empty for the default, `message`).
    pub(crate) name: String,
    /// `id:`, when it is a number.
    pub(crate) id: Option<u64>,
    /// `data:` lines, joined with newlines.
    pub(crate) data: String,
}

/// An open event stream; the socket is shut down when dropped, which ends
/// the reading thread.
pub(crate) struct EventStream {
    rx: Receiver<(Instant, SseEvent)>,
    socket: TcpStream,
    what: String,
}

impl EventStream {
    /// `GET path` on `host` (`127.0.0.1:PORT`, also sent as `Host`) with
    /// the board's `token` as its bearer (every read needs it), which must
    /// answer 200 with `text/event-stream`.
    pub(crate) fn connect(host: &str, path: &str, token: &str) -> Result<EventStream> {
        let what = format!("the event stream http://{host}{path}");
        let address: SocketAddr = host
            .parse()
            .with_context(|| format!("not an address: {host}"))?;
        let mut socket = TcpStream::connect_timeout(&address, HANDSHAKE)
            .with_context(|| format!("cannot connect to {what}"))?;
        // An event is a small write; no delay on either side of the clock.
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(HANDSHAKE))?;
        socket
            .write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\
                     Authorization: Bearer {token}\r\nCache-Control: no-store\r\n\r\n"
                )
                .as_bytes(),
            )
            .with_context(|| format!("cannot send the request for {what}"))?;
        let mut reader = BufReader::new(socket.try_clone()?);
        let chunked = headers(&mut reader).with_context(|| format!("{what}: bad response"))?;
        // The timeout belongs to the socket (shared by the clone): the
        // stream waits as long as it must from here.
        socket.set_read_timeout(None)?;
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("sse-reader".into())
            .spawn(move || follow(reader, chunked, &tx))
            .context("cannot start the event stream's reader")?;
        Ok(EventStream { rx, socket, what })
    }

    /// The next event and when its last byte arrived; an error on timeout
    /// or when the stream ended.
    pub(crate) fn next(&self, timeout: Duration) -> Result<(Instant, SseEvent)> {
        match self.rx.recv_timeout(timeout) {
            Ok(event) => Ok(event),
            Err(RecvTimeoutError::Timeout) => {
                bail!("{} sent nothing within {timeout:?}", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => bail!("{} ended", self.what),
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

/// Reads the status line and headers; an error unless 200 with
/// `text/event-stream`. Returns whether the body is chunked.
fn headers(reader: &mut impl BufRead) -> Result<bool> {
    let mut status = String::new();
    reader.read_line(&mut status)?;
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("status `{}`", status.trim());
    }
    let (mut chunked, mut event_stream) = (false, false);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("the connection closed in the headers");
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        match name.as_str() {
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-type" => event_stream = value.starts_with("text/event-stream"),
            _ => {}
        }
    }
    if !event_stream {
        bail!("not text/event-stream");
    }
    Ok(chunked)
}

/// The reading thread: body bytes to events, until the stream ends or
/// nobody listens.
fn follow(mut reader: impl BufRead, chunked: bool, tx: &Sender<(Instant, SseEvent)>) {
    let mut pending = Vec::new();
    loop {
        let bytes = if chunked {
            next_chunk(&mut reader)
        } else {
            next_bytes(&mut reader)
        };
        let Ok(Some(bytes)) = bytes else { return };
        let at = Instant::now();
        // Events end with a blank line, `\n\n` or `\r\n\r\n`; without the
        // `\r`s both are one case (the data is JSON, which escapes its own).
        pending.extend(bytes.into_iter().filter(|&b| b != b'\r'));
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = pending.drain(..end + 2).collect();
            if let Some(event) = parse(&String::from_utf8_lossy(&block))
                && tx.send((at, event)).is_err()
            {
                return;
            }
        }
    }
}

/// One chunk of a chunked body; `None` at the last (empty) chunk.
fn next_chunk(reader: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut size = String::new();
    if reader.read_line(&mut size)? == 0 {
        return Ok(None);
    }
    let hex = size.split(';').next().unwrap_or_default().trim();
    let size = usize::from_str_radix(hex, 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size `{hex}`")))?;
    if size == 0 {
        return Ok(None);
    }
    let mut bytes = vec![0; size];
    reader.read_exact(&mut bytes)?;
    let mut crlf = [0; 2];
    reader.read_exact(&mut crlf)?;
    Ok(Some(bytes))
}

/// Whatever arrived of a body that is not chunked; `None` at its end.
fn next_bytes(reader: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = vec![0; 8192];
    let n = reader.read(&mut bytes)?;
    bytes.truncate(n);
    Ok((n > 0).then_some(bytes))
}

/// One event's lines; `None` for a block of comments only (the
/// keep-alive).
fn parse(block: &str) -> Option<SseEvent> {
    let mut event = SseEvent::default();
    let mut fields = false;
    for line in block
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(':'))
    {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        fields = true;
        match field {
            "event" => event.name = value.to_owned(),
            "id" => event.id = value.parse().ok(),
            "data" => {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(value);
            }
            _ => {}
        }
    }
    fields.then_some(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_chunks_into_events_and_skips_keep_alives() {
        let body = "29\r\nevent: hello\nid: 2\ndata: {\"event_id\":2}\n\n\r\n\
                    3\r\n:\n\n\r\n\
                    f\r\nid: 3\ndata: {}\n\r\n\
                    1\r\n\n\r\n\
                    0\r\n\r\n";
        let (tx, rx) = channel();
        follow(BufReader::new(body.as_bytes()), true, &tx);
        drop(tx);
        let events: Vec<SseEvent> = rx.iter().map(|(_, e)| e).collect();
        assert_eq!(
            events,
            [
                SseEvent {
                    name: "hello".into(),
                    id: Some(2),
                    data: "{\"event_id\":2}".into()
                },
                SseEvent {
                    name: String::new(),
                    id: Some(3),
                    data: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn reads_the_headers() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                  transfer-encoding: chunked\r\n\r\n";
        assert!(headers(&mut BufReader::new(ok.as_bytes())).unwrap());
        let refused = "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\n\r\n";
        assert!(headers(&mut BufReader::new(refused.as_bytes())).is_err());
    }
}
