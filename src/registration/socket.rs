//! The registration socket `<dir>/<name>-reg.sock`, owned for its whole life:
//! a length check, owner-only permissions, an atomic takeover that never
//! touches anything but a socket, and removal only while the path is still ours.
//!
//! # Takeover
//!
//! A new socket is bound under a hidden temporary name in the same directory
//! (the kubelet ignores names starting with `.`), stamped with its instance's
//! *generation* (the time the instance started, as the socket's mtime), and
//! then renamed over the path, so the path never goes missing:
//!
//! - nothing at the path: `renameat2(RENAME_NOREPLACE)`; if something appeared
//!   meanwhile, look again;
//! - a socket at the path that is ours, stale (nobody accepts on it) or of an
//!   older generation (an older instance's, during a surge rollout):
//!   `renameat2(RENAME_EXCHANGE)` swaps the two atomically, then the previous
//!   socket, now under the temporary name, is removed. An older instance sees
//!   its socket *replaced*, not deleted, and leaves it alone; the kubelet sees
//!   a new socket and registers again;
//! - a live socket of a newer generation: [`Bound::Taken`], nothing is
//!   created. So of two live instances the newer one keeps the path, whatever
//!   order their takeovers, deletions and re-creations happen in;
//! - anything else (a file, a directory, a link) is refused and never touched.
//!   Should a non-socket (or a newer instance's socket) appear between the look
//!   and the exchange, the exchange is undone at once, so nothing is removed or
//!   lost: the race can only delay it by microseconds under the temporary name.
//!
//! Where the filesystem has no `renameat2` flags, a plain `rename(2)` after
//! the check is used; the window for the race is then the few microseconds
//! between the `lstat` and the `rename`. The temporary name is removed on
//! every path that does not rename it.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, CWD, RenameFlags, Timestamps, renameat_with, utimensat};

use crate::validate::UNIX_PATH_MAX;

/// The registration socket cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The path is too long for a unix socket.
    #[error(
        "registration socket path {path} is {len} bytes long; unix socket paths must be shorter than {UNIX_PATH_MAX} bytes: shorten --plugin-registration-path or the driver name"
    )]
    TooLong {
        /// The socket's path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Something other than a socket is at the path; it is left alone.
    #[error(
        "{path} exists and is not a socket (it is a {kind}); refusing to remove it: move it away or point --plugin-registration-path elsewhere"
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// The path cannot be looked at.
    #[error("cannot inspect registration socket path {path}: {source}")]
    Inspect {
        /// The path.
        path: PathBuf,
        /// The OS's error.
        #[source]
        source: io::Error,
    },
    /// The socket cannot be bound.
    #[error("cannot listen on registration socket {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The OS's error.
        #[source]
        source: io::Error,
    },
    /// The new socket cannot be moved into place.
    #[error("cannot move the new registration socket to {path}: {source}")]
    Rename {
        /// The path.
        path: PathBuf,
        /// The OS's error.
        #[source]
        source: io::Error,
    },
    /// Another process keeps changing the path.
    #[error(
        "registration socket path {path} kept changing while taking it over; another process is creating and removing files there"
    )]
    Contended {
        /// The path.
        path: PathBuf,
    },
}

/// When an instance started: the socket it binds carries it as its mtime, so
/// that of two live instances the newer one keeps the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Generation(SystemTime);

impl Generation {
    pub(super) fn now() -> Self {
        Generation(SystemTime::now())
    }

    #[cfg(test)]
    fn at(nanos: u64) -> Self {
        Generation(UNIX_EPOCH + std::time::Duration::from_nanos(nanos))
    }

    fn of(meta: &std::fs::Metadata) -> Self {
        Generation(meta.modified().unwrap_or(UNIX_EPOCH))
    }

    fn stamp(self, path: &Path) -> io::Result<()> {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        let ts = rustix::fs::Timespec {
            tv_sec: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: since.subsec_nanos().into(),
        };
        let times = Timestamps {
            last_access: ts,
            last_modification: ts,
        };
        utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)
    }
}

/// The outcome of a [`RegistrationSocket::bind`] that did not fail.
#[derive(Debug)]
pub(super) enum Bound {
    Ours(RegistrationSocket, tokio::net::UnixListener),
    /// A live socket of a newer instance is at the path; nothing was created.
    Taken,
}

/// How often the path may change under a takeover before giving up.
const TAKEOVER_ATTEMPTS: usize = 16;

/// Sockets this process has bound and not yet removed, so that a panic (which
/// aborts without running destructors in release builds) can still clean up.
static LIVE: Mutex<Vec<(PathBuf, (u64, u64))>> = Mutex::new(Vec::new());

/// Removes every registration socket this process still owns. For the panic
/// hook: the kubelet must not keep dialing a socket nobody serves.
pub(crate) fn remove_live_sockets() {
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

/// The longest socket path `RollingUpdateRegistrarSocketFile` lets through.
const ROLLING_UPDATE_PATH_MAX: usize = 108;

/// The registration socket of one pod of a DRA driver, named as
/// `kubeletplugin.RollingUpdateRegistrarSocketFile` names it
/// (k8s.io/dynamic-resource-allocation v0.37.2, draplugin.go), so that a
/// driver's pods registered by us or by the Go helper look alike: the first of
/// `<name>-<uid>-reg.sock`, `<name>-<base64url(sha256(uid))[..8]>-reg.sock` and
/// `dra-<base64url(sha256(name NUL uid))[..16]>-reg.sock` whose whole path is at
/// most 108 bytes (the last one otherwise).
pub(crate) fn rolling_update_socket_path(dir: &Path, driver_name: &str, pod_uid: &str) -> PathBuf {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let uid_hash = Sha256::digest(pod_uid.as_bytes());
    let driver_uid_hash = Sha256::digest(format!("{driver_name}\0{pod_uid}").as_bytes());
    let candidates = [
        format!("{driver_name}-{pod_uid}-reg.sock"),
        format!("{driver_name}-{}-reg.sock", encode(&uid_hash[..8])),
        format!("dra-{}-reg.sock", encode(&driver_uid_hash[..16])),
    ];
    // Go's path.Join cleans the directory ("//" and "." go); `components` does the same.
    let dir: PathBuf = dir.components().collect();
    let fits = |name: &String| dir.join(name).as_os_str().len() <= ROLLING_UPDATE_PATH_MAX;
    let [first, second, last] = candidates;
    let chosen = [first, second].into_iter().find(fits).unwrap_or(last);
    dir.join(chosen)
}

/// A bound registration socket. Dropping it removes the file if it is still
/// the one this process created.
#[derive(Debug)]
pub(super) struct RegistrationSocket {
    path: PathBuf,
    /// (device, inode) of the socket file we bound, to tell it from a newer
    /// instance's socket at the same path.
    identity: (u64, u64),
    /// False once [`RegistrationSocket::disown`]ed: dropping it then leaves the path alone.
    owned: bool,
}

impl RegistrationSocket {
    /// Binds a socket with mode 0700 under a temporary name and moves it to
    /// `path` as the module docs describe; `previous` is this process's own
    /// socket there, if any. Must be called inside a tokio runtime.
    pub(super) fn bind(
        path: PathBuf,
        generation: Generation,
        previous: Option<&RegistrationSocket>,
    ) -> Result<Bound, SocketError> {
        let len = path.as_os_str().len();
        if len >= UNIX_PATH_MAX {
            return Err(SocketError::TooLong { path, len });
        }
        // Decide before creating anything.
        let mine = previous.map(|p| p.identity);
        match occupant(&path)? {
            Occupant::NotASocket(kind) => return Err(SocketError::NotASocket { path, kind }),
            Occupant::Socket(meta) if !replaceable(&path, &meta, generation, mine) => {
                return Ok(Bound::Taken);
            }
            _ => {}
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let bind_err = |source| SocketError::Bind {
            path: path.clone(),
            source,
        };
        // The socket is bound as `s` in a private directory (`.` and 6
        // random characters, mode 0700) beside its final place, so it is never
        // reachable by others, not even for an instant, without changing the
        // process-wide umask under the other threads (upstream binds under
        // umask 0077). That path is never longer than a registration socket's
        // (`.XXXXXX/s` is 9 bytes, `x-reg.sock` 10), so the length check
        // covers it.
        let private = tempfile::Builder::new()
            .prefix(".")
            .tempdir_in(dir)
            .map_err(bind_err)?;
        let temp = private.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&temp).map_err(bind_err)?;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o700))
            .map_err(bind_err)?;
        generation.stamp(&temp).map_err(bind_err)?;
        let meta = std::fs::symlink_metadata(&temp).map_err(bind_err)?;
        let identity = (meta.dev(), meta.ino());

        if !take_over(&temp, &path, generation, mine)? {
            return Ok(Bound::Taken); // `private` and the socket in it are removed on drop
        }
        // The socket has left the private directory, now empty.
        drop(private);
        listener.set_nonblocking(true).map_err(bind_err)?;
        let listener = tokio::net::UnixListener::from_std(listener).map_err(bind_err)?;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((path.clone(), identity));
        Ok(Bound::Ours(
            RegistrationSocket {
                path,
                identity,
                owned: true,
            },
            listener,
        ))
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Forgets the socket without touching the path: for a socket this process
    /// replaced by its own newer one.
    pub(super) fn disown(&mut self) {
        self.forget_live();
        self.owned = false;
    }

    fn forget_live(&self) {
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, id)| !(p == &self.path && *id == self.identity));
    }

    /// What is at the path now, compared with what we bound.
    pub(super) fn state(&self) -> SocketState {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => SocketState::Ours,
            Ok(_) => SocketState::Replaced,
            Err(e) if e.kind() == io::ErrorKind::NotFound => SocketState::Missing,
            Err(_) => SocketState::Replaced,
        }
    }

    /// Removes the socket file if it is still ours; a newer instance's socket
    /// at the same path is left alone.
    pub(super) fn remove(&self) {
        if !self.owned {
            return;
        }
        self.forget_live();
        match self.state() {
            SocketState::Ours => match std::fs::remove_file(&self.path) {
                Ok(()) => {
                    tracing::info!(socket = %self.path.display(), "Registration socket removed")
                }
                Err(e) => {
                    tracing::error!(socket = %self.path.display(), error = %e, "{}", crate::messages::FAILED_TO_REMOVE_SOCKET)
                }
            },
            SocketState::Replaced => tracing::info!(
                socket = %self.path.display(),
                "Registration socket now belongs to another instance; leaving it"
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
pub(super) enum SocketState {
    /// The socket this process bound.
    Ours,
    /// Nothing: someone deleted it.
    Missing,
    /// Another file, typically a newer instance's socket.
    Replaced,
}

enum Occupant {
    Nothing,
    Socket(std::fs::Metadata),
    NotASocket(&'static str),
}

fn occupant(path: &Path) -> Result<Occupant, SocketError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(match kind_unless_socket(&m) {
            Some(kind) => Occupant::NotASocket(kind),
            None => Occupant::Socket(m),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Occupant::Nothing),
        Err(source) => Err(SocketError::Inspect {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Whether the socket `meta` describes, at `path`, may be replaced: it is
/// ours, of an older generation, or nobody accepts on it.
fn replaceable(
    path: &Path,
    meta: &std::fs::Metadata,
    generation: Generation,
    mine: Option<(u64, u64)>,
) -> bool {
    mine == Some((meta.dev(), meta.ino()))
        || Generation::of(meta) < generation
        || matches!(
            std::os::unix::net::UnixStream::connect(path),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
        )
}

fn kind_unless_socket(meta: &std::fs::Metadata) -> Option<&'static str> {
    let ft = meta.file_type();
    if ft.is_socket() {
        None
    } else if ft.is_dir() {
        Some("directory")
    } else if ft.is_symlink() {
        Some("symbolic link")
    } else if ft.is_file() {
        Some("regular file")
    } else {
        Some("special file")
    }
}

/// Moves the socket at `temp` to `path`. `Ok(false)`: a newer instance's
/// live socket is at the path.
fn take_over(
    temp: &Path,
    path: &Path,
    generation: Generation,
    mine: Option<(u64, u64)>,
) -> Result<bool, SocketError> {
    let rename_err = |source: io::Error| SocketError::Rename {
        path: path.to_owned(),
        source,
    };
    let exchange = || {
        renameat_with(CWD, temp, CWD, path, RenameFlags::EXCHANGE).map_err(|e| rename_err(e.into()))
    };
    for _ in 0..TAKEOVER_ATTEMPTS {
        let flags = match occupant(path)? {
            Occupant::NotASocket(kind) => {
                return Err(SocketError::NotASocket {
                    path: path.to_owned(),
                    kind,
                });
            }
            Occupant::Socket(meta) if !replaceable(path, &meta, generation, mine) => {
                return Ok(false);
            }
            Occupant::Socket(_) => RenameFlags::EXCHANGE,
            Occupant::Nothing => RenameFlags::NOREPLACE,
        };
        match renameat_with(CWD, temp, CWD, path, flags) {
            Ok(()) if flags == RenameFlags::NOREPLACE => return Ok(true),
            Ok(()) => {}
            // Something appeared, or the path was emptied: look again.
            Err(rustix::io::Errno::EXIST | rustix::io::Errno::NOENT) => continue,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                return plain_rename(temp, path).map(|()| true);
            }
            Err(e) => return Err(rename_err(e.into())),
        }
        // `temp` now holds what was at the path a moment ago; it may have
        // changed since the look.
        match occupant(temp)? {
            Occupant::NotASocket(kind) => {
                exchange()?; // put it back
                return Err(SocketError::NotASocket {
                    path: path.to_owned(),
                    kind,
                });
            }
            Occupant::Socket(meta) if !replaceable(temp, &meta, generation, mine) => {
                exchange()?; // a newer instance's: give it back
                return Ok(false);
            }
            Occupant::Socket(meta) if mine == Some((meta.dev(), meta.ino())) => {
                tracing::debug!(socketPath = %path.display(), "Replaced our own socket with a new one");
                let _ = std::fs::remove_file(temp);
                return Ok(true);
            }
            Occupant::Socket(_) | Occupant::Nothing => {
                tracing::info!(socketPath = %path.display(), "Replaced the socket of a previous instance or a stale socket");
                let _ = std::fs::remove_file(temp);
                return Ok(true);
            }
        }
    }
    Err(SocketError::Contended {
        path: path.to_owned(),
    })
}

/// `rename(2)` for filesystems without `renameat2` flags, after the caller's check.
fn plain_rename(temp: &Path, path: &Path) -> Result<(), SocketError> {
    if let Occupant::NotASocket(kind) = occupant(path)? {
        return Err(SocketError::NotASocket {
            path: path.to_owned(),
            kind,
        });
    }
    std::fs::rename(temp, path).map_err(|source| SocketError::Rename {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names k8s.io/dynamic-resource-allocation v0.37.2's
    /// `kubeletplugin.RollingUpdateRegistrarSocketFile` gives (printed by
    /// running it); tests/peers/dra_test.go compares against it live.
    #[test]
    fn rolling_update_names_are_the_go_helpers() {
        let uid = "0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f";
        let name = |dir: String| {
            rolling_update_socket_path(Path::new(&dir), "gpu.example.com", uid)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        };
        let full = "gpu.example.com-0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f-reg.sock";
        assert_eq!(name("/var/lib/kubelet/plugins_registry".into()), full);
        assert_eq!(name(format!("/r/{}", "d".repeat(40))), full);
        assert_eq!(
            name(format!("/r/{}", "d".repeat(60))),
            "gpu.example.com-ktyJeB4Ucp8-reg.sock"
        );
        assert_eq!(
            name(format!("/r/{}", "d".repeat(80))),
            "dra-5Ww-j3cteXE8uXPIbRKYng-reg.sock"
        );
        // Go's path.Join cleans the directory before measuring.
        assert_eq!(
            rolling_update_socket_path(Path::new("/r//x/./"), "d", uid),
            Path::new("/r/x").join(format!("d-{uid}-reg.sock"))
        );
    }

    fn bind(path: &Path, generation: Generation) -> (RegistrationSocket, tokio::net::UnixListener) {
        match RegistrationSocket::bind(path.to_owned(), generation, None).unwrap() {
            Bound::Ours(s, l) => (s, l),
            Bound::Taken => panic!("{} was taken", path.display()),
        }
    }

    /// Every name in `dir`: a takeover leaves no temporary name behind.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn lifecycle() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d.csi.io");
        // A stale socket is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let (sock, _l) = bind(&path, Generation::now());
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(sock.state(), SocketState::Ours);
        assert_eq!(names(dir.path()), ["d.csi.io-reg.sock"]);

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
    async fn a_takeover_replaces_an_older_socket_that_stays_served_until_then() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d.csi.io");
        let (old, _old_listener) = bind(&path, Generation::at(1));
        let (new, _new_listener) = bind(&path, Generation::at(2));
        assert_eq!(old.state(), SocketState::Replaced);
        assert_eq!(new.state(), SocketState::Ours);
        drop(old);
        assert_eq!(
            new.state(),
            SocketState::Ours,
            "the older instance's exit keeps ours"
        );
        assert_eq!(names(dir.path()), ["d.csi.io-reg.sock"]);
    }

    #[tokio::test]
    async fn a_newer_live_socket_is_never_replaced_but_a_dead_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d.csi.io");
        let (newer, newer_listener) = bind(&path, Generation::at(2));
        assert!(matches!(
            RegistrationSocket::bind(path.clone(), Generation::at(1), None).unwrap(),
            Bound::Taken
        ));
        assert_eq!(newer.state(), SocketState::Ours);
        assert_eq!(names(dir.path()), ["d.csi.io-reg.sock"], "nothing created");
        // The same instance may replace its own socket (a policy reload).
        let (again, _l) = match RegistrationSocket::bind(
            path.clone(),
            Generation::at(2),
            Some(&newer),
        )
        .unwrap()
        {
            Bound::Ours(s, l) => (s, l),
            Bound::Taken => panic!("our own socket was refused"),
        };
        assert_eq!(again.state(), SocketState::Ours);
        // A newer socket nobody serves any more (its instance was killed) is stale.
        let mut newer = newer;
        newer.disown();
        drop((again, _l, newer_listener));
        let (dead, listener) = bind(&path, Generation::at(3));
        drop(listener);
        let mut dead = dead;
        dead.disown();
        let (revived, _l) = bind(&path, Generation::at(1));
        assert_eq!(revived.state(), SocketState::Ours);
        assert_eq!(names(dir.path()), ["d.csi.io-reg.sock"]);
    }

    #[tokio::test]
    async fn refuses_non_sockets_and_long_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d");
        std::fs::write(&path, b"keep me").unwrap();
        for generation in [Generation::at(1), Generation::now()] {
            let err = RegistrationSocket::bind(path.clone(), generation, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("not a socket (it is a regular file)"), "{err}");
            assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
        }
        std::fs::create_dir(dir.path().join("x-reg.sock")).unwrap();
        let err = RegistrationSocket::bind(socket_path(dir.path(), "x"), Generation::now(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a socket (it is a directory)"), "{err}");
        assert_eq!(names(dir.path()), ["d-reg.sock", "x-reg.sock"]);

        let long = socket_path(dir.path(), &"n".repeat(100));
        let err = RegistrationSocket::bind(long, Generation::now(), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be shorter than 108 bytes"), "{err}");
    }

    /// Two binders take the path over from each other 200 times while a
    /// third thread looks at it without pause: it is never missing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_path_never_goes_missing_during_takeovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = socket_path(dir.path(), "d.csi.io");
        let first = bind(&path, Generation::at(1));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut looks = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let meta = std::fs::symlink_metadata(&path).expect("the path went missing");
                    assert!(meta.file_type().is_socket());
                    looks += 1;
                }
                looks
            })
        };
        let mut kept = vec![first];
        for generation in 2..202 {
            kept.push(bind(&path, Generation::at(generation)));
            // The older one exits, as the old pod of a rollout does.
            let (old, _) = kept.remove(0);
            assert_eq!(old.state(), SocketState::Replaced);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let looks = watcher.join().unwrap();
        assert!(looks > 0);
        assert_eq!(kept[0].0.state(), SocketState::Ours);
        assert_eq!(names(dir.path()), ["d.csi.io-reg.sock"]);
    }
}
