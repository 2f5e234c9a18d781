//! Compiled components cached on disk.
//!
//! The key covers the component's sha256, the engine's compatibility hash and
//! the registrar's version, so a cache written by another engine configuration
//! or release is never loaded. Only this process writes the directory (0700),
//! and a directory others can write to is not used: a `.cwasm` is native code.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The cache file of a component for this engine and this registrar version.
pub fn entry(engine: &Engine, dir: &Path, wasm_sha256: &[u8; 32]) -> PathBuf {
    let mut compat = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let mut key = Sha256::new();
    key.update(wasm_sha256);
    key.update(compat.finish().to_le_bytes());
    key.update(crate::VERSION.as_bytes());
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

/// Loads the component from the cache, or compiles it and stores it there.
/// Any cache problem falls back to compiling in memory: never a failure.
pub fn load_or_compile(
    engine: &Engine,
    dir: &Path,
    wasm: &[u8],
    wasm_sha256: &[u8; 32],
) -> wasmtime::Result<(Component, CacheOutcome)> {
    if let Err(why) = usable_dir(dir) {
        tracing::warn!(cache_dir = %dir.display(), "plugin cache not used: {why}");
        return Ok((Component::new(engine, wasm)?, CacheOutcome::Bypassed));
    }
    let path = entry(engine, dir, wasm_sha256);
    if path.exists() {
        // SAFETY: the file was written by this process's `precompile_component`
        // into a directory only this user can write, under a key that includes
        // the engine's compatibility hash.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(c) => return Ok((c, CacheOutcome::Hit)),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "discarding unusable cache entry")
            }
        }
    }
    let compiled = engine.precompile_component(wasm)?;
    let stored = (|| -> std::io::Result<()> {
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(&compiled)?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    })();
    if let Err(e) = stored {
        tracing::warn!(file = %path.display(), error = %e, "cannot write plugin cache entry");
    }
    // SAFETY: `compiled` was produced by `precompile_component` of this engine just now.
    let component = unsafe { Component::deserialize(engine, &compiled)? };
    Ok((component, CacheOutcome::Stored))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Stored,
    Bypassed,
}
