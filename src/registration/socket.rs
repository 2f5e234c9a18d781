//! The registration socket `<dir>/<name>-reg.sock`, owned for its whole life:
//! stale-socket cleanup that refuses to touch anything but a socket, a length
//! check, owner-only permissions, and removal only while the path is still ours.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::validate::UNIX_PATH_MAX;

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "registration socket path {path} is {len} bytes long; unix socket paths must be shorter than {UNIX_PATH_MAX} bytes: shorten --plugin-registration-path or the driver name"
    )]
    TooLong { path: PathBuf, len: usize },
    #[error(
        "{path} exists and is not a socket (it is a {kind}); refusing to remove it: move it away or point --plugin-registration-path elsewhere"
    )]
    NotASocket { path: PathBuf, kind: &'static str },
    #[error("cannot remove stale registration socket {path}: {source}")]
    RemoveStale {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on registration socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Sockets this process has bound and not yet removed, so that a panic (which
/// aborts without running destructors in release builds) can still clean up.
static LIVE: Mutex<Vec<(PathBuf, (u64, u64))>> = Mutex::new(Vec::new());

/// Removes every registration socket this process still owns. For the panic
/// hook: the kubelet must not keep dialing a socket nobody serves.
pub fn remove_live_sockets() {
    let live = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for (path, identity) in live {
        if matches!(std::fs::symlink_metadata(&path), Ok(m) if (m.dev(), m.ino()) == identity) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The socket path for a driver name (already validated, so it has no `/`).
pub fn socket_path(dir: &Path, driver_name: &str) -> PathBuf {
    dir.join(format!("{driver_name}-reg.sock"))
}

/// A bound registration socket. Dropping it removes the file if it is still
/// the one this process created.
#[derive(Debug)]
pub struct RegistrationSocket {
    path: PathBuf,
    /// (device, inode) of the socket file we bound, to tell it from a newer
    /// instance's socket at the same path.
    identity: (u64, u64),
}

impl RegistrationSocket {
    /// Removes a stale socket at `path`, then binds a new one with mode 0700.
    /// Must be called inside a tokio runtime.
    pub fn bind(path: PathBuf) -> Result<(Self, tokio::net::UnixListener), SocketError> {
        let len = path.as_os_str().len();
        if len >= UNIX_PATH_MAX {
            return Err(SocketError::TooLong { path, len });
        }
        remove_stale(&path)?;
        let bind_err = |source| SocketError::Bind {
            path: path.clone(),
            source,
        };
        let listener = {
            // Upstream binds under umask 0077 so the socket is never reachable by
            // others, not even for an instant; chmod afterwards covers a umask
            // changed by another thread meanwhile.
            let old = unsafe { libc::umask(0o077) };
            let bound = std::os::unix::net::UnixListener::bind(&path);
            unsafe { libc::umask(old) };
            bound.map_err(bind_err)?
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let listener = tokio::net::UnixListener::from_std(listener).map_err(bind_err)?;
        let meta = std::fs::symlink_metadata(&path).map_err(bind_err)?;
        let identity = (meta.dev(), meta.ino());
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((path.clone(), identity));
        Ok((RegistrationSocket { path, identity }, listener))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is at the path now, compared with what we bound.
    pub fn state(&self) -> SocketState {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => SocketState::Ours,
            Ok(_) => SocketState::Replaced,
            Err(e) if e.kind() == io::ErrorKind::NotFound => SocketState::Missing,
            Err(_) => SocketState::Replaced,
        }
    }

    /// Removes the socket file if it is still ours; a newer instance's socket
    /// at the same path is left alone.
    pub fn remove(&self) {
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, id)| !(p == &self.path && *id == self.identity));
        match self.state() {
            SocketState::Ours => match std::fs::remove_file(&self.path) {
                Ok(()) => {
                    tracing::info!(socket = %self.path.display(), "registration socket removed")
                }
                Err(e) => {
                    tracing::warn!(socket = %self.path.display(), error = %e, "cannot remove registration socket")
                }
            },
            SocketState::Replaced => tracing::info!(
                socket = %self.path.display(),
                "registration socket now belongs to another instance; leaving it"
            ),
            SocketState::Missing => {}
        }
    }
}

impl Drop for RegistrationSocket {
    fn drop(&mut self) {
        self.remove();
    }
}

/// What is at a registration socket's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketState {
    /// The socket this process bound.
    Ours,
    /// Nothing: someone deleted it.
    Missing,
    /// Another file, typically a newer instance's socket.
    Replaced,
}

/// Removes a socket left behind at `path`; anything else there is an error and
/// is kept.
pub fn remove_stale(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(SocketError::RemoveStale {
                path: path.to_owned(),
                source,
            });
        }
    };
    let ft = meta.file_type();
    if !ft.is_socket() {
        let kind = if ft.is_dir() {
            "directory"
        } else if ft.is_symlink() {
            "symbolic link"
        } else if ft.is_file() {
            "regular file"
        } else {
            "special file"
        };
        return Err(SocketError::NotASocket {
            path: path.to_owned(),
            kind,
        });
    }
    tracing::info!(socket = %path.display(), "removing stale registration socket");
    std::fs::remove_file(path).map_err(|source| SocketError::RemoveStale {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lifecycle() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d.csi.io");
        // A stale socket is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let (sock, _l) = RegistrationSocket::bind(path.clone()).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(sock.state(), SocketState::Ours);

        // Replaced by another instance: not ours, and not removed.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(sock.state(), SocketState::Missing);
        let _other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(sock.state(), SocketState::Replaced);
        drop(sock);
        assert!(
            path.exists(),
            "a newer instance's socket must survive our exit"
        );
    }

    #[tokio::test]
    async fn refuses_non_sockets_and_long_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d");
        std::fs::write(&path, b"keep me").unwrap();
        let err = RegistrationSocket::bind(path.clone())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a socket (it is a regular file)"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");

        let long = socket_path(dir.path(), &"n".repeat(100));
        let err = RegistrationSocket::bind(long).unwrap_err().to_string();
        assert!(err.contains("must be shorter than 108 bytes"), "{err}");
    }
}
