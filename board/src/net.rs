//! The board's connections: accepting them, within bounds, and serving
//! HTTP/1.1 on each with hyper.
//!
//! Anyone who can reach the address may connect, token or not, so every
//! resource a connection takes is bounded: at most [`MAX_CONNECTIONS`] are
//! served at once (each holds a descriptor and hyper's buffers, at most
//! [`MAX_BUFFER`]); one more is answered `503` with the JSON error shape
//! and closed, by a short task of which at most [`MAX_REFUSING`] run (past
//! that a connection is closed unanswered). A connection must send a
//! request's head within [`HEAD_TIMEOUT`], the first one or the next on a
//! kept-alive connection, or it is closed: a client that connects and says
//! nothing, or says it a byte at a time, holds its place that long and no
//! longer. Its answers must be taken too: a connection whose writes make
//! no progress for [`WRITE_STALL`] (a client that asks and never reads,
//! say pipelining requests for the page's files, which need no token) is
//! closed ([`crate::stall`]), and the kernel's buffer of its unsent
//! answers is bounded ([`SEND_BUFFER`]). A connection is answered at
//! most [`MAX_REQUESTS`] times, then closed (the client opens another),
//! so that no one connection queues work without end. A client that goes
//! away is seen at once (hyper reads the connection's end even while it
//! streams a response). Event streams have a lower limit of their own
//! ([`crate::live::MAX_STREAMS`]), so open pages never fill the
//! connections that reads need.
//!
//! There is no share of the places per client address: every local
//! client, the owner's browser and a hostile local user alike, comes from
//! 127.0.0.1, so the stranger's share would be the owner's too (it would
//! only tell machines apart, on a board listening beyond loopback, which
//! is warned against).
//!
//! This module must never look into a request: [`crate::guard`] and the
//! routes do.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{BoardError, RETRY_AFTER};
use crate::stall::Stall;

/// The most connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// The most connections past the limit being told so at once.
const MAX_REFUSING: usize = 64;

/// How long a client has to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection's writes may wait with nothing taken.
pub(crate) const WRITE_STALL: Duration = Duration::from_secs(10);

/// The most answers on one connection; the last says `Connection: close`.
const MAX_REQUESTS: usize = 100;

/// The send buffer asked of the kernel for a connection (it doubles it
/// for its own bookkeeping), rather than the megabytes it grows to for a
/// client that does not read: 256 stalled connections then hold 64 MiB
/// of the kernel's memory at most. Plenty for loopback and a local
/// network.
const SEND_BUFFER: usize = 128 * 1024;

/// How long a refused connection is given to take its answer.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);

/// The most a connection's read and write buffers hold (a request's head
/// must fit; a body streams through).
const MAX_BUFFER: usize = 64 * 1024;

/// After an accept fails (out of descriptors, say), the loop waits this
/// long before it accepts again, rather than spinning.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` completes.
pub(crate) async fn serve(listener: TcpListener, app: Router, stop: impl Future<Output = ()>) {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let refusal: Arc<[u8]> = refusal().into();
    let mut stop = std::pin::pin!(stop);
    let mut failing = false;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                failing = false;
                stream
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    inbox_host_native::hosted::log(&format!(
                        "inbox serve: cannot accept a connection ({error}); retrying"
                    ));
                }
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        match Arc::clone(&places).try_acquire_owned() {
            Ok(place) => {
                tokio::spawn(connection(stream, app.clone(), place));
            }
            Err(_) => {
                if let Ok(turn) = Arc::clone(&refusing).try_acquire_owned() {
                    tokio::spawn(refuse(stream, Arc::clone(&refusal), turn));
                }
            }
        }
    }
}

/// Serves one connection; its place is given back when it ends.
async fn connection(stream: TcpStream, app: Router, place: OwnedSemaphorePermit) {
    // Only a bound: a socket that refuses it is served with the default.
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(&stream, SEND_BUFFER);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_BUFFER);
    let io = TokioIo::new(Stall::new(stream, WRITE_STALL));
    let served = http.serve_connection(io, counted(app));
    // A connection that fails (reset, timed out) has nothing to report.
    let _ = served.await;
    drop(place);
}

/// `app` for one connection, whose [`MAX_REQUESTS`]th answer closes it.
fn counted(
    app: Router,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>>,
> {
    let app = TowerToHyperService::new(app);
    let answered = AtomicUsize::new(0);
    hyper::service::service_fn(move |request| {
        let last = answered.fetch_add(1, Ordering::Relaxed) + 1 >= MAX_REQUESTS;
        let answer = hyper::service::Service::call(&app, request);
        async move {
            let mut response = answer.await?;
            if last {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        }
    })
}

/// Tells a connection past the limit so, then closes it: the answer is
/// written at once, and what the client sends is read and dropped until
/// it closes its side, so that closing ours does not reset the connection
/// before the client has read the answer.
async fn refuse(stream: TcpStream, answer: Arc<[u8]>, turn: OwnedSemaphorePermit) {
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        let mut written = 0;
        while written < answer.len() {
            if stream.writable().await.is_err() {
                return;
            }
            match stream.try_write(answer.get(written..).unwrap_or_default()) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        let mut sink = [0u8; 4096];
        loop {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut sink) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    })
    .await;
    drop(turn);
}

/// The answer to a connection past the limit, whole.
fn refusal() -> Vec<u8> {
    let refusal = BoardError::TooManyConnections {
        limit: MAX_CONNECTIONS,
    };
    let body = refusal.body(None);
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER}\r\n\
         cache-control: no-store\r\nx-content-type-options: nosniff\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        refusal.status().as_u16(),
        refusal.status().canonical_reason().unwrap_or_default(),
        body.len()
    )
    .into_bytes()
}
