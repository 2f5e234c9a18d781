//! Pulled blobs on disk, by digest: `<cache_dir>/oci/blobs/sha256/<hex>`.
//!
//! A blob is written under a temporary name in the same directory, hashed as
//! it is written, and renamed into place only once its digest is the one
//! asked for: a failed or cut-off pull leaves nothing behind. Every read
//! hashes the blob again, so an entry edited on disk is found, removed and
//! pulled again, never used.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Blobs by digest.
pub(super) struct Store {
    root: PathBuf,
    dir: PathBuf,
}

/// A blob being written: hashed and counted as it goes.
pub(super) struct BlobWriter {
    file: tempfile::NamedTempFile,
    hash: Sha256,
    len: u64,
}

impl BlobWriter {
    /// Appends `bytes`.
    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.hash.update(bytes);
        self.len += bytes.len() as u64;
        self.file
            .write_all(bytes)
            .map_err(|e| format!("cannot write to the cache: {e}"))
    }
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

impl Store {
    /// The store under `dir`, created (0700) if missing.
    pub(super) fn open(dir: &Path) -> Result<Self, String> {
        let blobs = dir.join("blobs").join("sha256");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&blobs)
            .map_err(|e| {
                format!(
                    "cannot create the plugin cache {}: {e}: make cache_dir writable",
                    blobs.display()
                )
            })?;
        Ok(Store {
            root: dir.to_owned(),
            dir: blobs,
        })
    }

    /// The store's directory (`<cache_dir>/oci`).
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob with `digest` lives.
    pub(super) fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(hex_of(digest))
    }

    /// The blob's bytes if it is stored and still has its digest. A stored
    /// blob that does not is removed (and logged), as if it were missing.
    pub(super) fn read(&self, digest: &str, max: u64) -> Option<Vec<u8>> {
        let path = self.path(digest);
        let bytes = match crate::policy::read::read_regular_file(&path, max) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                self.discard(&path, &format!("it cannot be read: {e}"));
                return None;
            }
        };
        let actual = hex::encode(Sha256::digest(&bytes));
        if actual != hex_of(digest) {
            self.discard(&path, &format!("its content has sha256 {actual}"));
            return None;
        }
        Some(bytes)
    }

    /// Whether the blob is stored with its digest, hashing it as a stream
    /// (for layers that are not read whole).
    pub(super) fn verify(&self, digest: &str) -> bool {
        let path = self.path(digest);
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
            Err(e) => {
                self.discard(&path, &format!("it cannot be read: {e}"));
                return false;
            }
        };
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => hash.update(&buf[..n]),
                Err(e) => {
                    self.discard(&path, &format!("it cannot be read: {e}"));
                    return false;
                }
            }
        }
        let actual = hex::encode(hash.finalize());
        if actual != hex_of(digest) {
            self.discard(&path, &format!("its content has sha256 {actual}"));
            return false;
        }
        true
    }

    fn discard(&self, path: &Path, why: &str) {
        tracing::warn!(
            blob = %path.display(),
            "Cached plugin blob does not match its digest ({why}); removing it and pulling it again"
        );
        let _ = std::fs::remove_file(path);
    }

    /// A writer for a new blob, under a temporary name beside the others.
    pub(super) fn writer(&self) -> Result<BlobWriter, String> {
        let file = tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(&self.dir)
            .map_err(|e| {
                format!(
                    "cannot write to the plugin cache {}: {e}: make cache_dir writable",
                    self.dir.display()
                )
            })?;
        Ok(BlobWriter {
            file,
            hash: Sha256::new(),
            len: 0,
        })
    }

    /// Puts the written blob in place if its digest is `digest`; otherwise
    /// the temporary file is removed and the difference is the error.
    pub(super) fn commit(&self, w: BlobWriter, digest: &str) -> Result<PathBuf, String> {
        let actual = hex::encode(w.hash.finalize());
        if actual != hex_of(digest) {
            return Err(format!(
                "the registry sent {} bytes with sha256:{actual}, not {digest}: the registry or something between it and us changed the content",
                w.len
            ));
        }
        w.file
            .as_file()
            .sync_all()
            .map_err(|e| format!("cannot write to the plugin cache: {e}"))?;
        let path = self.path(digest);
        w.file
            .persist(&path)
            .map_err(|e| format!("cannot write to the plugin cache: {}", e.error))?;
        Ok(path)
    }

    /// Stores `bytes` as the blob `digest` (checked).
    pub(super) fn put(&self, bytes: &[u8], digest: &str) -> Result<PathBuf, String> {
        let mut w = self.writer()?;
        w.write(bytes)?;
        self.commit(w, digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join("blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn blobs_are_checked_going_in_and_coming_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(b"component")));
        let err = store.put(b"something else", &digest).unwrap_err();
        assert!(err.contains("not sha256:"), "{err}");
        assert!(names(dir.path()).is_empty(), "nothing half-written is left");

        store.put(b"component", &digest).unwrap();
        assert_eq!(store.read(&digest, 100).unwrap(), b"component");
        assert!(store.verify(&digest));

        std::fs::write(store.path(&digest), b"edited").unwrap();
        assert!(store.read(&digest, 100).is_none());
        assert!(names(dir.path()).is_empty(), "the edited entry is removed");
    }
}
