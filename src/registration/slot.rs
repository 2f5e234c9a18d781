//! The registration socket the registrar serves: created for a decided
//! registration, re-created after a deletion, left to a newer instance, and
//! the watch on the registration directory that notices all of that.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::authority::AuthorityFix;
use super::socket::{
    Bound, Generation, RegistrationSocket, SocketError, SocketState, rolling_update_socket_path,
    socket_path,
};
use crate::dir_watch::{self, DirEvent, DirWatch};
use crate::messages;

/// How often the registration socket is checked for deletion when inotify is
/// not available.
pub(crate) const RECONCILE_EVERY: Duration = Duration::from_millis(500);

/// A kubelet connection: any client's `:authority` gets through to h2.
pub(crate) type KubeletConn = AuthorityFix<UnixStream>;

/// What a (re)creation ended in, and the socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Listened {
    /// Our socket is at the path, waiting for the kubelet.
    Serving(PathBuf),
    /// A newer instance's socket is at the path; we stand by.
    StandingBy(PathBuf),
}

/// The only code that creates, re-creates or removes the registration socket.
pub(crate) struct Slot {
    dir: PathBuf,
    conns: mpsc::Sender<std::io::Result<KubeletConn>>,
    current: Option<Listening>,
    /// When this instance started: of two live instances, the newer keeps the path.
    generation: Generation,
    /// Set while a newer instance's socket holds our path.
    standby: Option<PathBuf>,
    events: Option<DirWatch>,
    /// Polling, where the directory cannot be watched.
    reconcile: Option<tokio::time::Interval>,
    /// Mounts and unmounts: a directory mounted over is the one change its
    /// inotify watch does not report.
    mounts: Option<MountChanges>,
    /// `--pod-uid`: the socket is named per pod (DRA rolling updates).
    pod_uid: Option<String>,
}

impl Slot {
    /// Watches `dir`; accepted connections go to `conns`. With `pod_uid`, the
    /// socket is named per pod (see [`rolling_update_socket_path`]).
    pub(crate) fn new(
        dir: PathBuf,
        pod_uid: Option<String>,
        conns: mpsc::Sender<std::io::Result<KubeletConn>>,
    ) -> Self {
        // Deletions are noticed by inotify at once and without waking up
        // while idle; polling is the mechanism only without inotify.
        let events = watch_registry(&dir);
        let reconcile = polling(events.is_some());
        Slot {
            dir,
            conns,
            current: None,
            generation: Generation::now(),
            standby: None,
            events,
            reconcile,
            mounts: MountChanges::open(),
            pod_uid,
        }
    }

    /// Where the socket of the driver `name` goes.
    fn path(&self, name: &str) -> PathBuf {
        match &self.pod_uid {
            Some(uid) => rolling_update_socket_path(&self.dir, name, uid),
            None => socket_path(&self.dir, name),
        }
    }

    /// (Re)creates `<dir>/<name>-reg.sock` for the driver `name` (see
    /// [`RegistrationSocket::bind`] for how the path is taken over). The
    /// previous socket is dropped only once the new one is in place: at the
    /// same path it was swapped out atomically, under another name it is
    /// removed then.
    pub(crate) fn listen(&mut self, name: &str, reason: &str) -> Result<Listened, SocketError> {
        let path = self.path(name);
        tracing::info!(socketPath = %path.display(), reason, "{}", messages::STARTING_REGISTRATION_SERVER);
        let previous = self.current.as_ref().map(|l| &l.socket);
        let Some(listening) =
            Listening::start(path.clone(), self.generation, previous, &self.conns)?
        else {
            self.close();
            self.standby = Some(path.clone());
            tracing::warn!(socketPath = %path.display(), reason, "A newer instance's registration socket is at the path; leaving it to that instance");
            return Ok(Listened::StandingBy(path));
        };
        self.standby = None;
        if let Some(mut previous) = self.current.replace(listening)
            && previous.socket.path() == path
        {
            previous.socket.disown(); // swapped out and removed by the takeover
        }
        tracing::info!(socketPath = %path.display(), reason, "{}", messages::REGISTRATION_SERVER_STARTED);
        Ok(Listened::Serving(path))
    }

    /// Removes the socket (if it is still ours): the kubelet deregisters.
    pub(crate) fn close(&mut self) {
        self.current = None;
    }

    /// Waits for the next reason to look at the directory: an inotify event,
    /// a mount change, or the polling interval. Cancel-safe, for `select!`.
    pub(crate) async fn changed(&mut self) {
        tokio::select! {
            () = tick(&mut self.reconcile) => {}
            changed = next_mount_change(&self.mounts) => {
                if let Err(e) = changed {
                    tracing::debug!(error = %e, "Watching the mount table failed");
                    self.mounts = None;
                }
                // The path may now lead to another directory: watch that one.
                self.rewatch();
            }
            event = dir_watch::next(&mut self.events) => match event {
                Ok(DirEvent::Entry(_)) => {}
                // The directory itself was removed or replaced: watch it anew.
                Ok(DirEvent::Gone) => self.rewatch(),
                Err(e) => {
                    tracing::warn!(error = %e, "Watching the registration directory failed; polling instead");
                    self.events = None;
                    self.reconcile = polling(false);
                }
            },
        }
    }

    fn rewatch(&mut self) {
        self.events = watch_registry(&self.dir);
        self.reconcile = polling(self.events.is_some());
    }

    /// Re-creates the socket of the driver `name` if someone deleted it;
    /// leaves a newer instance's alone, and takes the path back from an older
    /// or dead one. `Some` when the socket was (re)created or given up.
    pub(crate) fn reconcile(&mut self, name: &str) -> Result<Option<Listened>, SocketError> {
        let Some(current) = &self.current else {
            // Standing by for a newer instance: should its socket vanish (it
            // exited, or the clocks disagree on which of us is newer), take the
            // path back rather than leave the driver unregistered.
            if let Some(path) = &self.standby
                && !path.exists()
            {
                tracing::warn!(socketPath = %path.display(), "The newer instance's registration socket is gone; creating ours");
                return self.listen(name, "deleted").map(Some);
            }
            return Ok(None);
        };
        match current.socket.state() {
            SocketState::Ours => Ok(None),
            SocketState::Missing => {
                tracing::warn!(socketPath = %current.socket.path().display(), "Registration socket was deleted; re-creating it so the kubelet registers again");
                self.listen(name, "deleted").map(Some)
            }
            SocketState::Replaced => {
                // Another instance's socket: a newer one keeps it (and we stand
                // by); an older or dead one's is taken back.
                tracing::info!(socketPath = %current.socket.path().display(), "Registration socket was replaced by another instance's");
                self.listen(name, "replaced").map(Some)
            }
        }
    }
}

/// A bound registration socket and the task feeding its connections to the server.
struct Listening {
    socket: RegistrationSocket,
    _accept: AbortOnDrop,
}

impl Listening {
    /// `None`: a newer instance's live socket is at the path.
    fn start(
        path: PathBuf,
        generation: Generation,
        previous: Option<&RegistrationSocket>,
        conns: &mpsc::Sender<std::io::Result<KubeletConn>>,
    ) -> Result<Option<Self>, SocketError> {
        let (socket, listener) = match RegistrationSocket::bind(path, generation, previous)? {
            Bound::Ours(socket, listener) => (socket, listener),
            Bound::Taken => return Ok(None),
        };
        let conns = conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let conn = listener
                    .accept()
                    .await
                    .map(|(stream, _)| AuthorityFix::new(stream));
                if let Err(e) = &conn {
                    tracing::warn!(error = %e, "Accepting a kubelet connection failed");
                    continue;
                }
                if conns.send(conn).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(Listening {
            socket,
            _accept: AbortOnDrop(accept),
        }))
    }
}

/// A task that ends with its owner.
pub(crate) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches the registration directory for entries removed or replaced.
fn watch_registry(dir: &Path) -> Option<DirWatch> {
    DirWatch::new(dir)
        .inspect_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch the registration directory; polling it instead"))
        .ok()
}

/// The polling interval, needed only when the directory is not `watched`.
fn polling(watched: bool) -> Option<tokio::time::Interval> {
    if watched {
        return None;
    }
    let mut interval = tokio::time::interval_at(Instant::now() + RECONCILE_EVERY, RECONCILE_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Some(interval)
}

async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// `/proc/self/mountinfo`, which signals a priority event when the mount
/// table changes (proc(5)).
struct MountChanges(tokio::io::unix::AsyncFd<std::fs::File>);

impl MountChanges {
    fn open() -> Option<Self> {
        let file = std::fs::File::open("/proc/self/mountinfo").ok()?;
        // SAFETY: the `File` is owned by the `AsyncFd` and keeps its
        // descriptor open, unchanged, for the `AsyncFd`'s whole life.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(file, tokio::io::Interest::PRIORITY)
        };
        fd.inspect_err(|e| tracing::debug!(error = %e, "Cannot watch the mount table"))
            .ok()
            .map(MountChanges)
    }
}

/// The next change of the mount table. Never resolves without a watch.
async fn next_mount_change(mounts: &Option<MountChanges>) -> std::io::Result<()> {
    let Some(MountChanges(fd)) = mounts else {
        return std::future::pending().await;
    };
    fd.ready(tokio::io::Interest::PRIORITY).await?.clear_ready();
    Ok(())
}
