//! Compiled components cached on disk, each entry bound to its pin.
//!
//! A `.cwasm` is native code that wasmtime runs without checking it, so what
//! the cache hands back must be exactly what the pinned `.wasm` compiles to.
//! Every entry carries an HMAC-SHA256, keyed by a secret that lives outside
//! the cache directory (`policy.cache_key_file`, read-only in a DaemonSet),
//! over the component's sha256 and the compiled bytes. An entry that was
//! swapped, edited or written without the key is discarded and compiled
//! again; without a key the cache is not used at all.
//!
//! The trust boundary: whoever can write the cache directory can make the
//! registrar compile again, but cannot make it run other code. Whoever can
//! read the key file can. The file name also covers the engine's
//! compatibility hash and the registrar's version, so an entry written by
//! another engine configuration or release is never even opened.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::compiler::{CompileError, Compiler};

/// The header of an entry: this magic, then the 32-byte tag, then the compiled bytes.
const MAGIC: &[u8; 16] = b"csi-registrar-1\n";
const TAG: usize = 32;
/// The shortest key accepted, in bytes (`plugin cache-key` writes 64 hex digits).
pub(crate) const MIN_KEY_BYTES: usize = 32;
const MAX_KEY_FILE: u64 = 4096;
/// A compiled entry larger than this is not read.
const MAX_ENTRY: u64 = 1 << 30;

/// The secret that binds cache entries to pins.
#[derive(Clone)]
pub struct CacheKey(Vec<u8>);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKey(..)")
    }
}

impl CacheKey {
    /// Reads a key file: a regular file outside `cache_dir` holding at least
    /// [`MIN_KEY_BYTES`] bytes (surrounding whitespace is not counted).
    pub fn read(path: &Path, cache_dir: &Path) -> Result<Self, String> {
        let fix = "create one with `csi-node-driver-registrar plugin cache-key > FILE`, outside the cache directory";
        if let (Ok(key), Ok(dir)) = (path.canonicalize(), cache_dir.canonicalize())
            && key.starts_with(&dir)
        {
            return Err(format!(
                "cache key file {} is inside the cache directory {}, where whoever can write the cache could replace it: {fix}",
                path.display(),
                cache_dir.display()
            ));
        }
        let bytes = crate::policy::read::read_regular_file(path, MAX_KEY_FILE)
            .map_err(|e| format!("cannot read cache key file {}: {e}: {fix}", path.display()))?;
        let key = bytes.trim_ascii();
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "cache key file {} holds {} bytes; at least {MIN_KEY_BYTES} are needed: {fix}",
                path.display(),
                key.len()
            ));
        }
        Ok(CacheKey(key.to_vec()))
    }

    /// A new random key, as 64 hex digits.
    pub fn generate() -> std::io::Result<String> {
        let mut bytes = [0u8; 32];
        let mut filled = 0;
        while filled < bytes.len() {
            filled += rustix::rand::getrandom(
                &mut bytes[filled..],
                rustix::rand::GetRandomFlags::empty(),
            )?;
        }
        Ok(hex::encode(bytes))
    }

    fn tag(&self, wasm_sha256: &[u8; 32], compiled: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(MAGIC);
        mac.update(wasm_sha256);
        mac.update(compiled);
        mac
    }
}

/// The cache file of a component for this engine and this registrar version.
pub(crate) fn entry(engine: &Engine, dir: &Path, wasm_sha256: &[u8; 32]) -> PathBuf {
    let mut compat = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let mut key = Sha256::new();
    key.update(wasm_sha256);
    key.update(compat.finish().to_le_bytes());
    key.update(crate::flags::VERSION.as_bytes());
    dir.join(format!("{}.cwasm", hex::encode(&key.finalize()[..16])))
}

/// Whether `dir` is safe to load native code from; creates it (0700) if missing.
fn usable_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not owned by this user or is writable by others; compiled plugins are native code, so it is not used",
            dir.display()
        ));
    }
    Ok(())
}

/// The compiled bytes of an entry whose tag is right, or why not.
fn verified(path: &Path, key: &CacheKey, wasm_sha256: &[u8; 32]) -> Result<Vec<u8>, String> {
    let mut bytes =
        crate::policy::read::read_regular_file(path, MAX_ENTRY).map_err(|e| e.to_string())?;
    if bytes.len() < MAGIC.len() + TAG || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not an entry of this registrar (no header)".into());
    }
    let compiled = bytes.split_off(MAGIC.len() + TAG);
    key.tag(wasm_sha256, &compiled)
        .verify_slice(&bytes[MAGIC.len()..])
        .map_err(|_| "its tag does not match the pinned component: it was changed or swapped, or written with another key".to_owned())?;
    Ok(compiled)
}

/// Loads the component from the cache, or compiles it and stores it there.
/// Any cache problem falls back to compiling in memory: never a failure.
pub(crate) fn load_or_compile(
    engine: &Engine,
    compiler: &Compiler,
    dir: &Path,
    key: &CacheKey,
    wasm: &[u8],
    wasm_sha256: &[u8; 32],
) -> Result<(Component, CacheOutcome), CompileError> {
    if let Err(why) = usable_dir(dir) {
        tracing::warn!(cache_dir = %dir.display(), "Plugin cache not used: {why}");
        return Ok((compiler.compile(engine, wasm)?, CacheOutcome::Bypassed));
    }
    let path = entry(engine, dir, wasm_sha256);
    if path.exists() {
        match verified(&path, key, wasm_sha256) {
            // SAFETY: the tag proves these bytes were written by a registrar
            // holding the key, as what this pinned component compiles to, and
            // the file name covers this engine's compatibility hash.
            Ok(compiled) => match unsafe { compiler.load(engine, &compiled) } {
                Ok(c) => return Ok((c, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "Discarding unusable cache entry")
                }
            },
            Err(why) => {
                tracing::warn!(file = %path.display(), "Discarding cache entry: {why}")
            }
        }
    }
    let compiled = compiler.precompile(engine, wasm)?;
    let stored = (|| -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(MAGIC)?;
        tmp.write_all(&key.tag(wasm_sha256, &compiled).finalize().into_bytes())?;
        tmp.write_all(&compiled)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    })();
    if let Err(e) = stored {
        tracing::warn!(file = %path.display(), error = %e, "Cannot write plugin cache entry");
    }
    // SAFETY: `compiled` was produced just now by `precompile_component` of
    // this engine's configuration (here or in the compiler child).
    let component = unsafe { compiler.load(engine, &compiled)? };
    Ok((component, CacheOutcome::Stored))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheOutcome {
    Hit,
    Stored,
    Bypassed,
}
