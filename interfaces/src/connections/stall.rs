//! A client that stops reading its answers (a slow read: it leaves the
//! responses in its socket buffer so that the connection, busy with a
//! request in flight, is never idle): a write to it that stays blocked for
//! [`super::ListenerLimits::send_timeout`] closes the connection, as
//! nginx's `send_timeout` does.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// `IO` whose blocked writes are timed ([`Stalled`]).
pub struct Watched<IO> {
    inner: IO,
    since: Arc<Mutex<Option<Instant>>>,
}

/// Since when the writes of a [`Watched`] connection have been blocked.
#[derive(Clone)]
pub struct Stalled(Arc<Mutex<Option<Instant>>>);

/// `io` watched, and the handle that tells how long its writes block.
pub fn watch<IO>(io: IO) -> (Watched<IO>, Stalled) {
    let since = Arc::new(Mutex::new(None));
    (
        Watched {
            inner: io,
            since: since.clone(),
        },
        Stalled(since),
    )
}

impl Stalled {
    /// Resolves once a write has been blocked for `timeout` without a
    /// byte getting through (checked a few times per `timeout`).
    pub async fn for_longer_than(&self, timeout: Duration) {
        loop {
            tokio::time::sleep((timeout / 4).max(Duration::from_millis(100))).await;
            if self.0.lock().unwrap().is_some_and(|s| s.elapsed() >= timeout) {
                return;
            }
        }
    }
}

impl<IO> Watched<IO> {
    fn note<T>(&self, p: Poll<T>) -> Poll<T> {
        let mut since = self.since.lock().unwrap();
        match p {
            Poll::Pending => {
                since.get_or_insert_with(Instant::now);
            }
            Poll::Ready(_) => *since = None,
        }
        p
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note(p)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note(p)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_flush(cx);
        self.note(p)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
