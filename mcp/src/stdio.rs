//! The server's stdin and stdout: the MCP transport rmcp serves over.
//!
//! rmcp's own stdio transport cannot answer every request: it drops a line
//! that is not JSON without a word (a choice its maintainers made, to
//! avoid error storms with peers that echo), and a line over its size
//! limit too, so the client that sent either waits forever; it answers
//! other bad input without the request's id. It offers no hook for that,
//! so this module is the transport instead (rmcp's `Transport` trait is
//! made for it): a task reads stdin, line by line and never more than
//! [`MESSAGE_MAX_BYTES`] of one, has [`jsonrpc::triage`] judge each line,
//! writes the answers to bad ones itself and hands rmcp the rest, already
//! decoded. rmcp's answers and this module's share one writer, one whole
//! line at a time.
//!
//! It also keeps the requests in flight, to refuse a request that reuses
//! the id of one still running (rmcp would answer only one of the two) and
//! to bound how many run at once; and it tells the server when stdin has
//! closed, so that waits stop at once. It must never decide what a request
//! means.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorCode, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::{StdioReader, StdioWriter, Transport};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;

use crate::jsonrpc::{self, LIMIT_REACHED, MESSAGE_MAX_BYTES, Verdict};

/// The most requests in flight at once (waits included): past that, a
/// request is refused at once rather than queued without bound.
pub(crate) const REQUESTS_AT_ONCE: usize = 256;

/// Decoded messages waiting for rmcp to take them.
const QUEUED_MAX: usize = 16;

/// The transport: messages from the reading task, answers to stdout.
pub(crate) struct Stdio {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    out: Out,
    in_flight: Arc<Mutex<InFlight>>,
}

impl Stdio {
    /// Starts reading stdin (on the current runtime); `closed` is set once
    /// stdin has ended.
    pub(crate) fn open(closed: Arc<AtomicBool>) -> Stdio {
        // Non-blocking pipes when stdin and stdout are pipes, as runtimes
        // start servers: no thread of the blocking pool is held to read.
        let (reader, writer) = rmcp::transport::stdio_pipes();
        let out = Out(Arc::new(tokio::sync::Mutex::new(writer)));
        let in_flight = Arc::new(Mutex::new(InFlight::default()));
        let (messages, incoming) = mpsc::channel(QUEUED_MAX);
        let reading = Reading {
            lines: Lines::new(reader),
            messages,
            out: out.clone(),
            in_flight: Arc::clone(&in_flight),
            handshake_begun: false,
        };
        tokio::spawn(async move {
            reading.run().await;
            closed.store(true, Ordering::SeqCst);
        });
        Stdio {
            incoming,
            out,
            in_flight,
        }
    }
}

impl Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Free the id before the answer leaves, so that a client may reuse
        // it as soon as it has read the answer.
        let answered = match &item {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered {
            lock(&self.in_flight).end(id);
        }
        let line = serde_json::to_vec(&item);
        let out = self.out.clone();
        async move { out.line(line?).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.out.flush().await
    }
}

/// stdout, shared by rmcp's answers and this module's.
#[derive(Clone)]
struct Out(Arc<tokio::sync::Mutex<StdioWriter>>);

impl Out {
    /// Writes `line` and its newline, whole, and flushes it.
    async fn line(&self, mut line: Vec<u8>) -> std::io::Result<()> {
        line.push(b'\n');
        let mut out = self.0.lock().await;
        out.write_all(&line).await?;
        out.flush().await
    }

    async fn answer(&self, answer: &Value) -> std::io::Result<()> {
        self.line(serde_json::to_vec(answer)?).await
    }

    async fn flush(&self) -> std::io::Result<()> {
        self.0.lock().await.flush().await
    }
}

/// The ids of the requests passed to rmcp and not answered yet.
#[derive(Default)]
struct InFlight {
    ids: HashSet<String>,
}

impl InFlight {
    /// Admits a request with `id`, or returns the answer refusing it.
    fn begin(&mut self, id: &RequestId) -> Result<(), Value> {
        let key = key(id);
        let id = serde_json::to_value(id).unwrap_or_default();
        if self.ids.contains(&key) {
            return Err(jsonrpc::error_answer(
                id,
                ErrorCode::INVALID_REQUEST,
                "Invalid Request: a request with this id is still in flight, and its answer will carry it; give each request an id of its own".into(),
            ));
        }
        if self.ids.len() >= REQUESTS_AT_ONCE {
            return Err(jsonrpc::error_answer(
                id,
                LIMIT_REACHED,
                format!(
                    "inbox mcp already has {REQUESTS_AT_ONCE} requests in flight, the most it takes at once; wait for answers before sending more"
                ),
            ));
        }
        self.ids.insert(key);
        Ok(())
    }

    /// The request `id` was answered, or cancelled (rmcp answers a
    /// cancelled request no more).
    fn end(&mut self, id: &RequestId) {
        self.ids.remove(&key(id));
    }
}

/// A request id as a set key: `1` and `"1"` are different ids.
fn key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

fn lock(in_flight: &Mutex<InFlight>) -> std::sync::MutexGuard<'_, InFlight> {
    // The set stays consistent whatever panicked while holding it.
    in_flight
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The task that reads stdin.
struct Reading {
    lines: Lines<StdioReader>,
    messages: mpsc::Sender<ClientJsonRpcMessage>,
    out: Out,
    in_flight: Arc<Mutex<InFlight>>,
    /// Whether rmcp has the request that starts the session.
    handshake_begun: bool,
}

impl Reading {
    /// Reads until stdin ends, stdout fails or rmcp stops taking messages.
    async fn run(mut self) {
        loop {
            let line = match self.lines.next().await {
                Ok(Line::Whole(line)) => line,
                Ok(Line::TooLong { id }) => {
                    crate::log(&format!(
                        "inbox mcp: refused a message over {MESSAGE_MAX_BYTES} bytes"
                    ));
                    if self.out.answer(&jsonrpc::too_long(id)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Line::End) => return,
                Err(error) => {
                    crate::log(&format!("inbox mcp: cannot read stdin: {error}"));
                    return;
                }
            };
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let going_on = match jsonrpc::triage(line, self.handshake_begun) {
                Verdict::Pass(message) => self.pass(*message).await,
                Verdict::Answer(answer) => self.out.answer(&answer).await.is_ok(),
                Verdict::Drop(why) => {
                    crate::log(&format!("inbox mcp: ignored {why}"));
                    true
                }
            };
            if !going_on {
                return;
            }
        }
    }

    /// Hands `message` to rmcp, unless it is a request refused here;
    /// false once neither rmcp nor stdout takes more.
    async fn pass(&mut self, message: ClientJsonRpcMessage) -> bool {
        match &message {
            JsonRpcMessage::Request(request) => {
                let admitted = lock(&self.in_flight).begin(&request.id);
                if let Err(refusal) = admitted {
                    return self.out.answer(&refusal).await.is_ok();
                }
                self.handshake_begun |= jsonrpc::begins_session(&request.request);
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    lock(&self.in_flight).end(id);
                }
            }
            _ => {}
        }
        self.messages.send(message).await.is_ok()
    }
}

/// What reading one line gave.
enum Line {
    /// A line, without its newline.
    Whole(Vec<u8>),
    /// A line over [`MESSAGE_MAX_BYTES`], and the id read from its start.
    TooLong { id: Value },
    /// stdin ended.
    End,
}

/// stdin as lines of at most [`MESSAGE_MAX_BYTES`].
struct Lines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of a line already refused as too long.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(reader: R) -> Lines<R> {
        Lines {
            reader: BufReader::with_capacity(64 << 10, reader),
            line: Vec::new(),
            skipping: false,
        }
    }

    /// The next line. A line too long is reported as soon as it passes
    /// the limit (so the client hears of it before it finishes sending),
    /// and the rest of it is skipped without being kept. A last line
    /// without a newline still counts.
    async fn next(&mut self) -> std::io::Result<Line> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                if self.skipping || self.line.is_empty() {
                    return Ok(Line::End);
                }
                return Ok(Line::Whole(std::mem::take(&mut self.line)));
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let content = newline.unwrap_or(available.len());
            let consumed = newline.map_or(available.len(), |at| at + 1);
            let found = if self.skipping {
                self.skipping = newline.is_none();
                None
            } else if self.line.len() + content > MESSAGE_MAX_BYTES {
                let room = MESSAGE_MAX_BYTES - self.line.len();
                self.line.extend_from_slice(&available[..room]);
                let id = jsonrpc::id_of_start(&self.line);
                self.line = Vec::new();
                self.skipping = newline.is_none();
                Some(Line::TooLong { id })
            } else {
                self.line.extend_from_slice(&available[..content]);
                newline.map(|_| Line::Whole(std::mem::take(&mut self.line)))
            };
            self.reader.consume(consumed);
            if let Some(line) = found {
                return Ok(line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_in_flight_are_bounded_and_their_ids_unique_until_answered() {
        let mut in_flight = InFlight::default();
        for n in 0..REQUESTS_AT_ONCE {
            in_flight.begin(&RequestId::Number(n as i64)).unwrap();
        }
        let string = RequestId::String("0".into());
        let refused = in_flight.begin(&string).unwrap_err();
        assert_eq!(refused["error"]["code"], LIMIT_REACHED.0, "{refused}");
        assert_eq!(refused["id"], "0", "{refused}");
        in_flight.end(&RequestId::Number(0));
        let again = in_flight.begin(&RequestId::Number(1)).unwrap_err();
        assert_eq!(
            again["error"]["code"],
            ErrorCode::INVALID_REQUEST.0,
            "{again}"
        );
        // `"0"` is not `0`.
        in_flight.begin(&string).unwrap();
    }

    #[tokio::test]
    async fn a_line_too_long_is_reported_at_the_limit_and_the_next_one_read() {
        let mut input = br#"{"id":3,"text":""#.to_vec();
        input.resize(MESSAGE_MAX_BYTES + 10, b'a');
        input.extend_from_slice(b"\"}\nnext\r\nlast");
        let mut lines = Lines::new(&input[..]);
        assert!(matches!(lines.next().await, Ok(Line::TooLong { id }) if id == 3));
        assert!(matches!(lines.next().await, Ok(Line::Whole(line)) if line == b"next\r"));
        assert!(matches!(lines.next().await, Ok(Line::Whole(line)) if line == b"last"));
        assert!(matches!(lines.next().await, Ok(Line::End)));
        // Exactly at the limit is not too long.
        let mut input = vec![b' '; MESSAGE_MAX_BYTES];
        input.push(b'\n');
        let mut lines = Lines::new(&input[..]);
        assert!(
            matches!(lines.next().await, Ok(Line::Whole(line)) if line.len() == MESSAGE_MAX_BYTES)
        );
    }
}
