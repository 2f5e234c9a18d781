//! The client side of the CSI driver socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::messages;
use crate::uds::channel;

use crate::proto::csi::{GetPluginInfoRequest, identity_client::IdentityClient};

/// How often a "still connecting" line is logged while the driver is away.
pub(crate) const STILL_CONNECTING_EVERY: Duration = Duration::from_secs(10);
const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    #[error("invalid --csi-address {0:?}: only unix sockets are supported (a path or unix://path)")]
    Address(String),
    #[error("CSI driver socket {path} did not accept a connection within {waited:?}: {last_error}")]
    ConnectTimeout {
        path: PathBuf,
        waited: Duration,
        last_error: String,
    },
    #[error("GetPluginInfo failed: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("GetPluginInfo did not answer within {0:?} (--timeout)")]
    Timeout(Duration),
}

/// Turns `--csi-address` into a socket path: a bare path or `unix://` + path
/// (`unix:///csi/csi.sock` and `unix:/csi/csi.sock` both name `/csi/csi.sock`).
pub(crate) fn socket_path(address: &str) -> Result<PathBuf, CsiError> {
    let path = if let Some(rest) = address.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = address.strip_prefix("unix:") {
        rest
    } else if address.contains("://") {
        return Err(CsiError::Address(address.to_owned()));
    } else {
        address
    };
    if path.is_empty() {
        return Err(CsiError::Address(address.to_owned()));
    }
    Ok(PathBuf::from(path))
}

/// Connects to the driver, retrying with backoff (capped at 1 s) until it answers
/// or `wait` runs out (`None`: forever). Logs the real dial error every 10 s.
pub(crate) async fn connect(path: &Path, wait: Option<Duration>) -> Result<Channel, CsiError> {
    let start = Instant::now();
    let mut backoff = BACKOFF_START;
    let mut next_log = start + STILL_CONNECTING_EVERY;
    tracing::info!(v = 1, csiAddress = %path.display(), "{}", messages::OPENING_CSI_CONNECTION);
    loop {
        // Dial first: a channel to a socket that does not exist yet would only
        // fail later, on the first call.
        let err = match UnixStream::connect(path).await {
            Ok(probe) => {
                drop(probe);
                match channel(path).await {
                    Ok(ch) => {
                        tracing::info!(csiAddress = %path.display(), waited = ?start.elapsed(), "Connected to the CSI driver");
                        return Ok(ch);
                    }
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        let now = Instant::now();
        if let Some(wait) = wait
            && now.duration_since(start) >= wait
        {
            return Err(CsiError::ConnectTimeout {
                path: path.to_owned(),
                waited: now.duration_since(start),
                last_error: err.to_string(),
            });
        }
        if now >= next_log {
            tracing::warn!(csiAddress = %path.display(), error = %err, waited = ?now.duration_since(start), "Still connecting to the CSI driver");
            next_log = now + STILL_CONNECTING_EVERY;
        } else {
            tracing::debug!(csiAddress = %path.display(), error = %err, "CSI driver not reachable yet");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_CAP);
    }
}

/// The driver's `GetPluginInfo` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginInfo {
    pub name: String,
    pub vendor_version: String,
}

/// `Identity/GetPluginInfo` under `timeout`.
pub(crate) async fn get_plugin_info(
    channel: &Channel,
    timeout: Duration,
) -> Result<PluginInfo, CsiError> {
    let mut client = IdentityClient::new(channel.clone());
    let mut request = tonic::Request::new(GetPluginInfoRequest {});
    request.set_timeout(timeout);
    let response = tokio::time::timeout(timeout, client.get_plugin_info(request))
        .await
        .map_err(|_| CsiError::Timeout(timeout))?
        .map_err(|status| {
            if is_deadline(&status) {
                CsiError::Timeout(timeout)
            } else {
                CsiError::Rpc(status)
            }
        })?
        .into_inner();
    Ok(PluginInfo {
        name: response.name,
        vendor_version: response.vendor_version,
    })
}

/// The client's own deadline (the grpc-timeout we set) or the server's.
fn is_deadline(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
        || (status.code() == tonic::Code::Cancelled && status.message() == "Timeout expired")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            socket_path("/csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("unix:///csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("unix:/csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert!(socket_path("tcp://1.2.3.4:5").is_err());
        assert!(socket_path("unix://").is_err());
    }
}
