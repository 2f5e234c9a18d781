//! gRPC over a unix socket, client side: the CSI driver's socket, and the
//! registration socket for `/healthz`'s own GetInfo, the stand-ins and tests.

use std::path::Path;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel over the unix socket at `path`. It reconnects on its own
/// after the peer restarts.
pub async fn channel(path: &Path) -> std::io::Result<Channel> {
    let path = path.to_owned();
    // The URI is required by the API but unused: the connector dials the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(std::io::Error::other)
}
