//! inotify on a directory, for the watches that must not poll: the
//! registration directory and the CSI driver's socket directory.

use std::ffi::OsString;
use std::path::Path;

use tokio_stream::StreamExt;

/// Entries created, removed or moved in one directory, and the directory
/// itself going away.
pub(crate) struct DirWatch(inotify::EventStream<[u8; 1024]>);

/// What changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DirEvent {
    /// This entry was created, removed, or moved in or out.
    Entry(OsString),
    /// The directory itself was removed or replaced, or its watch ended: watch
    /// the path anew.
    Gone,
}

impl DirWatch {
    pub(crate) fn new(dir: &Path) -> std::io::Result<Self> {
        use inotify::{Inotify, WatchMask};
        let inotify = Inotify::init()?;
        inotify.watches().add(
            dir,
            WatchMask::CREATE
                | WatchMask::DELETE
                | WatchMask::MOVED_FROM
                | WatchMask::MOVED_TO
                | WatchMask::DELETE_SELF
                | WatchMask::MOVE_SELF,
        )?;
        inotify.into_event_stream([0u8; 1024]).map(DirWatch)
    }
}

/// The next change; never resolves without a watch. Cancel-safe.
pub(crate) async fn next(watch: &mut Option<DirWatch>) -> std::io::Result<DirEvent> {
    use inotify::EventMask;
    let Some(DirWatch(stream)) = watch else {
        return std::future::pending().await;
    };
    match stream.next().await {
        Some(Ok(event)) => Ok(
            if event
                .mask
                .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)
            {
                DirEvent::Gone
            } else {
                DirEvent::Entry(event.name.unwrap_or_default())
            },
        ),
        Some(Err(e)) => Err(e),
        None => Err(std::io::Error::other("inotify stream ended")),
    }
}
