//! A connection's writes must make progress: [`Stall`] wraps a
//! connection's stream and fails a write with `TimedOut` once it has
//! waited [`crate::net::WRITE_STALL`] with not one byte taken.
//!
//! hyper bounds how long a client may take to send a request's head, but
//! not how long it may take to read an answer: a client that asks (the
//! page's files need no token) and never reads would hold its connection,
//! and so one of the board's places, for ever. The clock starts when a
//! write finds the socket full and stops at the next byte written: a slow
//! reader is let be, an event stream waiting for news runs no clock, and
//! a client that takes nothing for that long is let go. A client that
//! takes a byte now and then is let go too: the kernel wakes a full
//! socket's writer only once a good part of its buffer has gone (a third,
//! on Linux), so a write waits until the client has taken that much.
//! Every connection is under it, event streams included.
//!
//! No crate in the lock file does this (`tokio-io-timeout`, which does,
//! is not in it; hyper's own timer covers only the head's read), and it is
//! one deadline around the write calls, so it is written here. It must
//! never read or change what passes through.

use std::future::Future as _;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A stream whose writes fail once they have made no progress for a
/// while.
pub(crate) struct Stall<T> {
    io: T,
    /// How long a write may wait with nothing taken.
    limit: Duration,
    /// When the waiting write fails, if one is waiting.
    deadline: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<T> Stall<T> {
    /// `io`, whose writes may wait at most `limit` with nothing taken.
    pub(crate) fn new(io: T, limit: Duration) -> Stall<T> {
        Stall {
            io,
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
            waiting: false,
        }
    }

    /// A write's outcome, watched: a write that waits starts the clock
    /// (if it is not running), one that is done stops it, and a write
    /// still waiting when the clock runs out fails.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        if polled.is_ready() {
            self.waiting = false;
            return polled;
        }
        if !self.waiting {
            self.waiting = true;
            self.deadline.as_mut().reset(Instant::now() + self.limit);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client took nothing of the answer for {} s",
                    self.limit.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Stall<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stall<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::TcpStream;

    /// A connected pair of loopback sockets: (ours, the peer's).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (ours, theirs) = tokio::join!(TcpStream::connect(address), listener.accept());
        (ours.unwrap(), theirs.unwrap().0)
    }

    /// Writes `bytes` to `stream`, all of it.
    async fn write_all(stream: &mut Stall<TcpStream>, bytes: &[u8]) -> std::io::Result<()> {
        let mut written = 0;
        while written < bytes.len() {
            let rest = bytes.get(written..).unwrap_or_default();
            written +=
                std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, rest)).await?;
        }
        Ok(())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_write_nobody_reads_fails_and_one_that_is_read_goes_on() {
        runtime().block_on(async {
            let chunk = vec![7u8; 64 * 1024];
            // Nobody reads: once the sockets are full, a write fails.
            let (ours, _theirs) = pair().await;
            let mut stalled = Stall::new(ours, Duration::from_millis(300));
            let failed = tokio::time::timeout(Duration::from_secs(60), async {
                loop {
                    if let Err(error) = write_all(&mut stalled, &chunk).await {
                        return error;
                    }
                }
            });
            let error = failed.await.expect("the stalled write never failed");
            assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");

            // The peer reads, with pauses, far shorter than the limit:
            // the writes go on for as long as it does.
            let (ours, theirs) = pair().await;
            let mut read = Stall::new(ours, Duration::from_secs(5));
            let reader = tokio::spawn(async move {
                let mut buffer = vec![0u8; 256 * 1024];
                let mut total = 0usize;
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if theirs.readable().await.is_err() {
                        return total;
                    }
                    match theirs.try_read(&mut buffer) {
                        Ok(0) => return total,
                        Ok(n) => total += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => return total,
                    }
                }
            });
            for _ in 0..256 {
                write_all(&mut read, &chunk).await.unwrap();
            }
            drop(read);
            assert_eq!(reader.await.unwrap(), 256 * chunk.len());
        });
    }
}
