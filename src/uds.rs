//! gRPC over a unix socket, client side: the CSI driver's socket, and the
//! registration socket for `/healthz`'s own GetInfo, the stand-ins and tests.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel over the unix socket at `path`. It reconnects on its own
/// after the peer restarts.
pub async fn channel(path: &Path) -> io::Result<Channel> {
    watched_channel(path, Arc::default()).await
}

/// [`channel`], and `closed` is told when a connection of the channel ends:
/// the peer closed it (it exited or restarted) or it failed.
pub(crate) async fn watched_channel(path: &Path, closed: Arc<Closed>) -> io::Result<Channel> {
    let path = path.to_owned();
    // The URI is required by the API but unused: the connector dials the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let (path, closed) = (path.clone(), closed.clone());
            async move {
                let stream = UnixStream::connect(path).await?;
                Ok::<_, io::Error>(TokioIo::new(Watched { stream, closed }))
            }
        }))
        .await
        .map_err(io::Error::other)
}

/// Whether a connection ended, and a wake-up for whoever waits on it.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    closed: AtomicBool,
    notify: Notify,
}

impl Closed {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Resolves once a connection ended (at once if one already has).
    /// Cancel-safe.
    pub(crate) async fn wait(&self) {
        let notified = self.notify.notified();
        if self.is_closed() {
            return;
        }
        notified.await;
    }

    fn set(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }
}

/// A unix stream that reports its end: end of file, a failure, or being
/// dropped. The HTTP/2 connection task always has a read pending, so a peer
/// that exits is noticed at once, with no polling.
struct Watched {
    stream: UnixStream,
    closed: Arc<Closed>,
}

impl Watched {
    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &result {
            self.closed.set();
        }
        result
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // Our side ended it: after the peer's GOAWAY, say.
        self.closed.set();
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            this.closed.set(); // end of file
        }
        this.note(result)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_write(cx, data);
        this.note(result)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_flush(cx);
        this.note(result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
