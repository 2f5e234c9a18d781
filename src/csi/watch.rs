//! When to look at the CSI driver again, without waking up while nothing
//! happens.
//!
//! A driver that exits or restarts closes its connection ([`super::Driver::closed`]),
//! and a new driver process creates its socket anew; both are events, so a
//! change is noticed at once and an idle registrar sleeps. Timers run only
//! while they are needed: retries while the driver does not answer (from
//! 100 ms, doubling up to the probe interval), and the probe interval itself
//! where the socket's directory cannot be watched.

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dir_watch::{self, DirEvent, DirWatch};
use tokio::time::Instant;

/// The first retry after the driver stopped answering, and the least time
/// between two looks that a connection's end asks for (a driver that closes
/// every connection at once must not make the registrar spin).
const RETRY_START: Duration = Duration::from_millis(100);

/// Says when the driver should be looked at: see the module's text.
pub(crate) struct DriverWatch {
    dir: PathBuf,
    name: OsString,
    interval: Duration,
    /// inotify on the socket's directory (`None`: polling every interval).
    events: Option<DirWatch>,
    /// The next look that no event asked for.
    due: Option<Instant>,
    retry: Duration,
    /// Whether the driver answered the last look, and when that was.
    answered: (bool, Instant),
}

impl DriverWatch {
    /// Watches the directory of the driver's `socket`; `interval` bounds how
    /// late a change is noticed when that is not possible.
    pub(crate) fn new(socket: &Path, interval: Duration) -> Self {
        let dir = match socket.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let mut watch = DriverWatch {
            events: watch(&dir),
            dir,
            name: socket
                .file_name()
                .map(ToOwned::to_owned)
                .unwrap_or_default(),
            interval,
            due: None,
            retry: RETRY_START,
            answered: (true, Instant::now()),
        };
        watch.answered(true);
        watch
    }

    /// Records whether the driver answered (`false` also when an answer
    /// leaves something to look at again soon), and plans the next look that
    /// no event will ask for.
    pub(crate) fn answered(&mut self, ok: bool) {
        self.answered = (ok, Instant::now());
        if ok {
            self.retry = RETRY_START;
            self.due = self
                .events
                .is_none()
                .then(|| Instant::now() + self.interval);
        } else {
            self.due = Some(Instant::now() + self.retry);
            self.retry = (self.retry * 2).min(self.interval);
        }
    }

    /// Resolves when the driver should be looked at: `connection_ended`
    /// (heeded only while the driver answers, and not sooner than 100 ms
    /// after the last look), its socket file created, removed or replaced,
    /// or a planned look due. Cancel-safe.
    pub(crate) async fn changed(&mut self, connection_ended: impl Future<Output = ()>) {
        let (answering, last) = self.answered;
        let connection_ended = async {
            if !answering {
                // Retries and events take over while the driver is away.
                return std::future::pending().await;
            }
            connection_ended.await;
            tokio::time::sleep_until(last + RETRY_START).await;
        };
        tokio::pin!(connection_ended);
        loop {
            let due = self.due;
            tokio::select! {
                () = &mut connection_ended => return,
                () = sleep_until(due) => {
                    self.due = None;
                    if self.events.is_none() {
                        self.events = watch(&self.dir);
                    }
                    return;
                }
                event = dir_watch::next(&mut self.events) => match event {
                    Ok(DirEvent::Entry(name)) if name == self.name => return,
                    Ok(DirEvent::Entry(_)) => {} // another file in the directory
                    Ok(DirEvent::Gone) => {
                        // The directory itself was removed or replaced: watch
                        // the new one, and look (the socket went with it).
                        self.events = watch(&self.dir);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(dir = %self.dir.display(), error = %e, "Watching the CSI driver's socket directory failed; probing every interval instead");
                        self.events = None;
                        return;
                    }
                },
            }
        }
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn watch(dir: &Path) -> Option<DirWatch> {
    DirWatch::new(dir)
        .inspect_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch the CSI driver's socket directory; probing the driver every interval instead"))
        .ok()
}
