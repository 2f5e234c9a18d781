//! The client side of the CSI driver socket, and the watch that notices the
//! driver change.

mod watch;

pub(crate) use watch::DriverWatch;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::messages;
use crate::uds::{dial_error, watched_channel};

use crate::proto::csi::{GetPluginInfoRequest, identity_client::IdentityClient};

/// How often a "still connecting" line is logged while the driver is away.
pub(crate) const STILL_CONNECTING_EVERY: Duration = Duration::from_secs(10);
const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(1);

/// The CSI driver cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// `--csi-address` is not a unix socket.
    #[error("invalid --csi-address {0:?}: only unix sockets are supported (a path or unix://path)")]
    Address(String),
    /// The driver did not accept a connection within `--driver-wait-timeout`.
    #[error("CSI driver socket {path} did not accept a connection within {waited:?}: {last_error}")]
    ConnectTimeout {
        /// The driver's socket.
        path: PathBuf,
        /// How long the registrar tried.
        waited: Duration,
        /// The last dial's error, as the OS gave it.
        last_error: String,
    },
    /// A new connection failed.
    #[error("cannot connect to the CSI driver socket: {0}")]
    Dial(std::io::Error),
    /// GetPluginInfo answered with an error.
    #[error("GetPluginInfo failed: {0}")]
    Rpc(#[from] tonic::Status),
    /// GetPluginInfo did not answer within `--timeout`.
    #[error("GetPluginInfo did not answer within {0:?} (--timeout)")]
    Timeout(Duration),
    /// The driver's name is empty.
    #[error("driver name is empty")]
    EmptyName,
    /// The driver's name breaks the CSI naming rule.
    #[error("the CSI driver's name is unusable: {0}")]
    Name(#[from] crate::validate::NameError),
}

/// How long to wait between GetPluginInfo attempts at start-up, at most.
const INFO_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Connects to the driver at `path` and asks its name, retrying with backoff
/// until `deadline` (`None`: forever). A name that breaks the rules is final.
pub(crate) async fn discover(
    path: &Path,
    timeout: Duration,
    deadline: Option<Instant>,
) -> Result<(Driver, PluginInfo), CsiError> {
    let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let driver = Driver::connect(path, remaining()).await?;
    tracing::info!(v = 1, "{}", messages::DISCOVERING_DRIVER_NAME);
    let mut backoff = Duration::from_millis(100);
    loop {
        match driver.plugin_info(timeout).await {
            Ok(info) => {
                check_name(&info.name)?;
                tracing::info!(v = 2, csiDriverName = %info.name, vendorVersion = %info.vendor_version, "{}", messages::CSI_DRIVER_NAME);
                return Ok((driver, info));
            }
            Err(e) if remaining().is_some_and(|r| r.is_zero()) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "GetPluginInfo failed; retrying");
                tokio::time::sleep(remaining().map_or(backoff, |r| r.min(backoff))).await;
                backoff = (backoff * 2).min(INFO_BACKOFF_CAP);
            }
        }
    }
}

/// A driver name the kubelet and the CSI spec accept.
pub(crate) fn check_name(name: &str) -> Result<(), CsiError> {
    if name.is_empty() {
        return Err(CsiError::EmptyName);
    }
    Ok(crate::validate::driver_name(name)?)
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

/// The connection to the CSI driver, and what it was made to.
pub(crate) struct Driver {
    path: PathBuf,
    channel: Channel,
    /// Cancelled when the connection ends.
    closed: CancellationToken,
    /// The socket file dialled (device, inode): another file at the path is
    /// another driver, even while the old one still runs.
    dialled: Option<(u64, u64)>,
}

impl Driver {
    /// Connects to the driver, retrying with backoff (capped at 1 s) until it
    /// answers or `wait` runs out (`None`: forever). Logs the real dial error every 10 s.
    pub(crate) async fn connect(path: &Path, wait: Option<Duration>) -> Result<Driver, CsiError> {
        let start = Instant::now();
        let mut backoff = BACKOFF_START;
        let mut next_log = start + STILL_CONNECTING_EVERY;
        tracing::info!(v = 1, csiAddress = %path.display(), "{}", messages::OPENING_CSI_CONNECTION);
        loop {
            let err = match Driver::dial(path).await {
                Ok(driver) => {
                    tracing::info!(csiAddress = %path.display(), waited = ?start.elapsed(), "Connected to the CSI driver");
                    return Ok(driver);
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

    /// One attempt at a new connection.
    async fn dial(path: &Path) -> std::io::Result<Driver> {
        let dialled = file_identity(path);
        let closed = CancellationToken::new();
        let channel = watched_channel(path, closed.clone())
            .await
            .map_err(dial_error)?;
        Ok(Driver {
            path: path.to_owned(),
            channel,
            closed,
            dialled,
        })
    }

    /// Connects anew if the connection ended or another socket file is at
    /// the path (a new driver process). Keeps the connection while it lives
    /// and the path has no file, or a file that refuses connections: a new
    /// driver between removing the old socket and listening on its own,
    /// while the running one still answers. `Err`: no driver can be reached.
    pub(crate) async fn refresh(&mut self) -> std::io::Result<Refreshed> {
        let at_path = file_identity(&self.path);
        let alive = !self.closed.is_cancelled();
        if alive && (at_path.is_none() || at_path == self.dialled) {
            return Ok(Refreshed::Current);
        }
        match Driver::dial(&self.path).await {
            Ok(driver) => {
                *self = driver;
                Ok(Refreshed::Current)
            }
            Err(e) if alive => {
                tracing::debug!(csiAddress = %self.path.display(), error = %e, "A new CSI driver socket does not accept connections yet; the running driver still answers");
                Ok(Refreshed::Kept)
            }
            Err(e) => Err(e),
        }
    }

    /// Resolves when the connection ends: the driver exited or restarted.
    /// Cancel-safe.
    pub(crate) async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// `Identity/GetPluginInfo` under `timeout`.
    pub(crate) async fn plugin_info(&self, timeout: Duration) -> Result<PluginInfo, CsiError> {
        get_plugin_info(&self.channel, timeout).await
    }
}

/// What [`Driver::refresh`] left the connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refreshed {
    /// The socket at the path (or the only driver there is).
    Current,
    /// The running driver, while a new socket at the path is not listening
    /// yet: look again soon.
    Kept,
}

fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The driver's `GetPluginInfo` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginInfo {
    pub name: String,
    pub vendor_version: String,
}

impl PluginInfo {
    /// A driver known by name only (a DRA driver, named by `--driver-name`).
    pub(crate) fn named(name: &str) -> Self {
        PluginInfo {
            name: name.to_owned(),
            vendor_version: String::new(),
        }
    }
}

/// `Identity/GetPluginInfo` under `timeout`.
async fn get_plugin_info(channel: &Channel, timeout: Duration) -> Result<PluginInfo, CsiError> {
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
