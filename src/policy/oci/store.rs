//! Pulled blobs on disk, by digest: `<cache_dir>/oci/blobs/sha256/<hex>`,
//! and the kept signature records, `<cache_dir>/oci/signatures/<hex>`.
//!
//! The cache is read as hostile as a registry: anyone who can write it may
//! have put a link, a FIFO or a directory where a blob should be. So:
//! - a file's name is always a [`Digest`]'s 64 hex digits (or a partial's
//!   random name), opened relative to a directory descriptor, never a path
//!   built from input;
//! - the store's own directories are opened without following links, and so
//!   is every file in them; only regular files are read (a FIFO is opened
//!   without blocking, and refused);
//! - nothing outside these two directories is ever written, renamed or removed.
//!
//! A blob is written under a temporary name (`.partial-<random>`) in the same
//! directory, hashed as it is written, and renamed into place only once its
//! digest is the one asked for: a failed or cut-off pull leaves nothing
//! behind. A pull that was killed leaves its partial file; the next store
//! opened removes it. A writer holds a lock on its partial file (`flock`,
//! which dies with the process), and only unlocked ones are removed, so a live
//! pull's partial file is never taken away. Every read hashes the blob
//! again, so an entry edited on disk is found, removed and pulled again, never
//! used.
//!
//! Everything here blocks: the pull runs it off the async threads, under its
//! deadline.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use sha2::{Digest as _, Sha256};

use crate::policy::Digest;

/// Blobs and signature records by digest.
pub(super) struct Store {
    root: PathBuf,
    blobs: Arc<OwnedFd>,
    signatures: Arc<OwnedFd>,
}

/// What the store cannot do, or what it found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A directory of the cache cannot be made or opened.
    #[error("cannot create the plugin cache {path}: {source}: make cache_dir writable")]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Something other than a directory stands where the store's own is.
    #[error(
        "the plugin cache {path} is not a directory of the registrar's own (it is a link or another kind of file): remove it; the registrar creates it again"
    )]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A blob cannot be written.
    #[error("cannot write to the plugin cache {path}: {source}: make cache_dir writable")]
    Write {
        /// The directory written to.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// What was written is not what was asked for.
    #[error(
        "the registry sent {len} bytes with {actual}, not {expected}: the registry or something between it and us changed the content"
    )]
    Mismatch {
        /// Bytes received.
        len: u64,
        /// Their digest.
        actual: Digest,
        /// The digest asked for.
        expected: Digest,
    },
}

/// A blob being written: hashed and counted as it goes. Dropped without
/// [`Store::commit`], its partial file is removed.
pub(super) struct BlobWriter {
    dir: Arc<OwnedFd>,
    dir_path: PathBuf,
    name: String,
    file: Option<File>,
    hash: Sha256,
    len: u64,
}

impl BlobWriter {
    /// Appends `bytes`.
    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.hash.update(bytes);
        self.len += bytes.len() as u64;
        self.file
            .as_mut()
            .expect("open until committed")
            .write_all(bytes)
            .map_err(|source| StoreError::Write {
                path: self.dir_path.clone(),
                source,
            })
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = rustix::fs::unlinkat(&*self.dir, self.name.as_str(), AtFlags::empty());
        }
    }
}

const PARTIAL: &str = ".partial-";

/// The flags every file of the store is opened with.
fn nofollow() -> OFlags {
    OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK
}

/// `name` in `dir`, created (0700) if missing, opened without following a link.
fn subdir(dir: impl AsFd, name: &str, path: &Path) -> Result<OwnedFd, StoreError> {
    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            return Err(StoreError::Create {
                path: path.to_owned(),
                source: e.into(),
            });
        }
    }
    rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | nofollow(),
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => StoreError::NotADirectory {
            path: path.to_owned(),
        },
        e => StoreError::Create {
            path: path.to_owned(),
            source: e.into(),
        },
    })
}

/// Why a store file cannot be read, if it is not a regular file.
fn not_regular(file: &impl AsFd) -> std::io::Result<Option<&'static str>> {
    let st = rustix::fs::fstat(file)?;
    Ok(match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => None,
        FileType::Fifo => Some("it is a FIFO"),
        FileType::Directory => Some("it is a directory"),
        FileType::CharacterDevice | FileType::BlockDevice => Some("it is a device"),
        FileType::Socket => Some("it is a socket"),
        _ => Some("it is not a regular file"),
    })
}

/// What opening a store file found.
enum Opened {
    Missing,
    /// Something that must not be read; the reason.
    Bad(String),
    File(File),
}

fn open_regular(dir: &OwnedFd, name: &str) -> Opened {
    let fd = match rustix::fs::openat(dir, name, OFlags::RDONLY | nofollow(), Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Opened::Missing,
        Err(rustix::io::Errno::LOOP) => return Opened::Bad("it is a symbolic link".into()),
        Err(e) => return Opened::Bad(format!("it cannot be opened: {e}")),
    };
    match not_regular(&fd) {
        Ok(None) => Opened::File(File::from(fd)),
        Ok(Some(why)) => Opened::Bad(why.into()),
        Err(e) => Opened::Bad(format!("it cannot be read: {e}")),
    }
}

impl Store {
    /// The store `dir` (`<cache_dir>/oci`), created (0700) if missing. Its
    /// parent is the operator's `cache_dir`; below it, no link is followed.
    /// Partial files of pulls that were killed are removed when no other
    /// pull holds the store.
    pub(super) fn open(dir: &Path) -> Result<Self, StoreError> {
        let (parent, name) = match (dir.parent(), dir.file_name().and_then(|n| n.to_str())) {
            (Some(p), Some(n)) => (
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                },
                n,
            ),
            _ => {
                return Err(StoreError::NotADirectory {
                    path: dir.to_owned(),
                });
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|source| StoreError::Create {
                path: parent.to_owned(),
                source,
            })?;
        let parent_fd = rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| StoreError::Create {
            path: parent.to_owned(),
            source: e.into(),
        })?;
        let root = subdir(&parent_fd, name, dir)?;
        let blobs_dir = subdir(&root, "blobs", &dir.join("blobs"))?;
        let blobs = subdir(&blobs_dir, "sha256", &dir.join("blobs/sha256"))?;
        let signatures = subdir(&root, "signatures", &dir.join("signatures"))?;
        let store = Store {
            root: dir.to_owned(),
            blobs: Arc::new(blobs),
            signatures: Arc::new(signatures),
        };
        store.remove_partials();
        Ok(store)
    }

    /// Removes what killed pulls left: partial files whose lock no one holds.
    fn remove_partials(&self) {
        for (dir, path) in [
            (&self.blobs, self.root.join("blobs/sha256")),
            (&self.signatures, self.root.join("signatures")),
        ] {
            let Ok(entries) = rustix::fs::Dir::read_from(&**dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with(PARTIAL) {
                    continue;
                }
                let Ok(fd) = rustix::fs::openat(
                    &**dir,
                    name.as_str(),
                    OFlags::RDONLY | nofollow(),
                    Mode::empty(),
                ) else {
                    continue;
                };
                // Held by a live writer (this process or another): leave it.
                if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
                    continue;
                }
                if rustix::fs::unlinkat(&**dir, name.as_str(), AtFlags::empty()).is_ok() {
                    tracing::info!(file = %path.join(&name).display(), "Removed the partial file of a pull that did not finish");
                }
            }
        }
    }

    /// Where the blob with `digest` lives (for messages).
    pub(super) fn path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(digest.hex())
    }

    /// The blob's bytes if it is stored, is a regular file of at most `max`
    /// bytes and still has its digest. A stored blob that does not is removed
    /// (and logged), as if it were missing.
    pub(super) fn read(&self, digest: &Digest, max: u64) -> Option<Vec<u8>> {
        let bytes = read_bounded(&self.blobs, &digest.hex(), max)
            .map_err(|why| self.discard(&self.blobs, digest, &why))
            .ok()??;
        let actual = Digest::of(&bytes);
        if actual != *digest {
            self.discard(&self.blobs, digest, &format!("its content has {actual}"));
            return None;
        }
        Some(bytes)
    }

    /// The stored blob, opened and checked (hashed whole as a stream) for
    /// layers that are not read into memory; `None` (and removed) if it is
    /// not there as a regular file with its digest. The caller hashes what it
    /// reads again: see [`HashingReader`].
    pub(super) fn open_verified(&self, digest: &Digest) -> Option<File> {
        use std::io::Seek;
        let mut file = match open_regular(&self.blobs, &digest.hex()) {
            Opened::Missing => return None,
            Opened::Bad(why) => {
                self.discard(&self.blobs, digest, &why);
                return None;
            }
            Opened::File(f) => f,
        };
        let mut reader = HashingReader::new(&mut file);
        if let Err(e) = std::io::copy(&mut reader, &mut std::io::sink()) {
            self.discard(&self.blobs, digest, &format!("it cannot be read: {e}"));
            return None;
        }
        let actual = reader.digest();
        if actual != *digest {
            self.discard(&self.blobs, digest, &format!("its content has {actual}"));
            return None;
        }
        file.rewind().ok()?;
        Some(file)
    }

    fn discard(&self, dir: &OwnedFd, digest: &Digest, why: &str) {
        tracing::warn!(
            blob = %self.path(digest).display(),
            "Cached plugin blob does not match its digest ({why}); removing it and pulling it again"
        );
        let _ = rustix::fs::unlinkat(dir, digest.hex().as_str(), AtFlags::empty());
    }

    /// A writer for a new blob, under a temporary name beside the others.
    pub(super) fn writer(&self) -> Result<BlobWriter, StoreError> {
        writer_in(&self.blobs, self.root.join("blobs/sha256"))
    }

    /// Puts the written blob in place if its digest is `digest`; otherwise
    /// the temporary file is removed and the difference is the error.
    pub(super) fn commit(&self, mut w: BlobWriter, digest: &Digest) -> Result<(), StoreError> {
        let actual = Digest::from_sha256(w.hash.clone().finalize().into());
        if actual != *digest {
            return Err(StoreError::Mismatch {
                len: w.len,
                actual,
                expected: *digest,
            });
        }
        finish(&mut w, &digest.hex())
    }

    /// Stores `bytes` as the blob `digest` (checked).
    pub(super) fn put(&self, bytes: &[u8], digest: &Digest) -> Result<(), StoreError> {
        let mut w = self.writer()?;
        w.write(bytes)?;
        self.commit(w, digest)
    }

    /// The kept signature record of `manifest`, if there is one that is a
    /// regular file of at most `max` bytes.
    pub(super) fn signature_record(&self, manifest: &Digest, max: u64) -> Option<Vec<u8>> {
        read_bounded(&self.signatures, &manifest.hex(), max)
            .ok()
            .flatten()
    }

    /// Keeps `record` as the signature record of `manifest` (atomically).
    pub(super) fn keep_signature_record(
        &self,
        manifest: &Digest,
        record: &[u8],
    ) -> Result<(), StoreError> {
        let mut w = writer_in(&self.signatures, self.root.join("signatures"))?;
        w.write(record)?;
        finish(&mut w, &manifest.hex())
    }
}

/// A regular file's bytes, at most `max`; `Ok(None)`: missing; `Err`: why
/// it must not be read.
fn read_bounded(dir: &OwnedFd, name: &str, max: u64) -> Result<Option<Vec<u8>>, String> {
    let file = match open_regular(dir, name) {
        Opened::Missing => return Ok(None),
        Opened::Bad(why) => return Err(why),
        Opened::File(f) => f,
    };
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("it cannot be read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(format!("it is more than the {max} bytes allowed"));
    }
    Ok(Some(bytes))
}

fn writer_in(dir: &Arc<OwnedFd>, dir_path: PathBuf) -> Result<BlobWriter, StoreError> {
    let fail = |e: rustix::io::Errno| StoreError::Write {
        path: dir_path.clone(),
        source: e.into(),
    };
    loop {
        let mut random = [0u8; 8];
        rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())
            .map_err(fail)?;
        let name = format!("{PARTIAL}{}", hex::encode(random));
        let fd = rustix::fs::openat(
            &**dir,
            name.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(fail)?;
        // The lock says "live" to a store being opened. One that saw the file
        // before it was locked may have removed it: then start again.
        let locked = rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok();
        let ours = rustix::fs::fstat(&fd).map_err(fail)?;
        let named = rustix::fs::statat(&**dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
        if locked && named.is_ok_and(|n| (n.st_dev, n.st_ino) == (ours.st_dev, ours.st_ino)) {
            return Ok(BlobWriter {
                dir: dir.clone(),
                dir_path,
                name,
                file: Some(File::from(fd)),
                hash: Sha256::new(),
                len: 0,
            });
        }
    }
}

/// Syncs the partial file and renames it to `name` in the same directory.
fn finish(w: &mut BlobWriter, name: &str) -> Result<(), StoreError> {
    let fail = |source: std::io::Error| StoreError::Write {
        path: w.dir_path.clone(),
        source,
    };
    let file = w.file.as_ref().expect("open until committed");
    file.sync_all().map_err(fail)?;
    rustix::fs::renameat(&*w.dir, w.name.as_str(), &*w.dir, name).map_err(|e| fail(e.into()))?;
    // In place: nothing for the drop to remove.
    w.file = None;
    Ok(())
}

/// Reads through, hashing what passes; [`HashingReader::digest`] at the end.
pub(super) struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> HashingReader<R> {
    pub(super) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hash: Sha256::new(),
        }
    }

    /// The digest of everything read so far.
    pub(super) fn digest(&self) -> Digest {
        Digest::from_sha256(self.hash.clone().finalize().into())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

use std::os::unix::fs::DirBuilderExt;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join("oci/blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn blobs_are_checked_going_in_and_coming_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("oci")).unwrap();
        let digest = Digest::of(b"component");
        let err = store.put(b"something else", &digest).unwrap_err();
        assert!(err.to_string().contains(&format!("not {digest}")), "{err}");
        assert!(names(dir.path()).is_empty(), "nothing half-written is left");

        store.put(b"component", &digest).unwrap();
        assert_eq!(store.read(&digest, 100).unwrap(), b"component");
        assert!(store.open_verified(&digest).is_some());

        std::fs::write(store.path(&digest), b"edited").unwrap();
        assert!(store.read(&digest, 100).is_none());
        assert!(names(dir.path()).is_empty(), "the edited entry is removed");
    }

    #[test]
    fn a_link_or_a_fifo_in_the_store_is_removed_never_followed_or_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"host file").unwrap();
        let store = Store::open(&dir.path().join("oci")).unwrap();
        let digest = Digest::of(b"host file");
        std::os::unix::fs::symlink(&victim, store.path(&digest)).unwrap();
        assert!(store.read(&digest, 100).is_none(), "a link is not read");
        assert!(store.open_verified(&digest).is_none());
        assert_eq!(std::fs::read(&victim).unwrap(), b"host file");
        assert!(names(dir.path()).is_empty(), "the link itself is removed");

        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            store.path(&digest),
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert!(
            store.read(&digest, 100).is_none(),
            "a FIFO is not waited on"
        );
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_linked_store_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("oci/blobs")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("oci/blobs/sha256")).unwrap();
        let err = Store::open(&dir.path().join("oci")).err().unwrap();
        assert!(
            err.to_string().ends_with("is not a directory of the registrar's own (it is a link or another kind of file): remove it; the registrar creates it again"),
            "{err}"
        );
    }

    /// The race: a pull writing while another store is opened (and cleans).
    /// Repeated, since a lost partial shows up only when the two interleave.
    #[test]
    fn opening_a_store_removes_dead_partials_and_never_a_live_pulls() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("oci");
        let partials = || {
            names(dir.path())
                .into_iter()
                .filter(|n| n.starts_with(PARTIAL))
                .count()
        };
        for round in 0..200 {
            let live = Store::open(&root).unwrap();
            let opener = std::thread::spawn({
                let root = root.clone();
                move || Store::open(&root).map(|_| ())
            });
            let mut w = live.writer().unwrap();
            w.write(b"half").unwrap();
            w.write(b" and the rest").unwrap();
            opener.join().unwrap().unwrap();
            live.commit(w, &Digest::of(b"half and the rest"))
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            // What a killed pull leaves: a partial file no one holds.
            std::fs::write(
                root.join(format!("blobs/sha256/{PARTIAL}{round:016x}")),
                b"cut",
            )
            .unwrap();
            assert_eq!(partials(), 1, "round {round}");
            drop(Store::open(&root).unwrap());
            assert_eq!(partials(), 0, "round {round}: cleaned");
        }
    }
}
