//! gRPC over a unix socket, client side: the CSI driver's socket, and the
//! registration socket for `/healthz`'s own GetInfo, the stand-ins and tests.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel over the unix socket at `path`. It reconnects on its own
/// after the peer restarts.
pub async fn channel(path: &Path) -> io::Result<Channel> {
    watched_channel(path, CancellationToken::new())
        .await
        .map_err(io::Error::other)
}

/// [`channel`], and `closed` is cancelled when a connection of the channel
/// ends: the peer closed it (it exited or restarted), it failed, or it was
/// dropped. The connection is made before this returns.
pub(crate) async fn watched_channel(
    path: &Path,
    closed: CancellationToken,
) -> Result<Channel, tonic::transport::Error> {
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
}

/// The dial error inside a transport error ("No such file or directory",
/// "Connection refused"): what an operator needs to see.
pub(crate) fn dial_error(e: tonic::transport::Error) -> io::Error {
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return io::Error::new(io.kind(), io.to_string());
        }
        source = cause.source();
    }
    io::Error::other(e)
}

/// A unix stream that reports its end: end of file, a failure, or being
/// dropped. The HTTP/2 connection task always has a read pending, so a peer
/// that exits is noticed at once, with no polling.
struct Watched {
    stream: UnixStream,
    closed: CancellationToken,
}

impl Watched {
    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(_)) = &result {
            self.closed.cancel();
        }
        result
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        // Our side ended it: after the peer's GOAWAY, say.
        self.closed.cancel();
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
            this.closed.cancel(); // end of file
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
