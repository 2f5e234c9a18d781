//! `plugin precompile`: compile components into a cache directory with this
//! binary, so the registrar starts without compiling.

use std::path::{Path, PathBuf};

use super::author;
use crate::policy::wasm::cache::CacheKey;

pub(super) fn run(wasm: &[PathBuf], cache_dir: &Path, key_file: &Path) -> anyhow::Result<()> {
    let key = CacheKey::read(key_file, cache_dir).map_err(anyhow::Error::msg)?;
    let host = author::host()?;
    for w in wasm {
        let entry = author::precompile(&host, w, cache_dir, &key)?;
        outln!("{} -> {}", w.display(), entry.display());
    }
    Ok(())
}

/// Every plugin of a policy file into its cache, as the registrar will look
/// for them (OCI ones pulled into the cache first).
pub(super) fn run_policy(policy: &Path) -> anyhow::Result<()> {
    let cfg = crate::policy::file::PolicyFile::from_file(policy)?;
    let (Some(dir), Some(key_file)) = (&cfg.cache_dir, &cfg.cache_key_file) else {
        anyhow::bail!(
            "policy file {} sets no cache_dir and cache_key_file: without them the registrar compiles at every start, and there is nothing to precompile into",
            policy.display()
        );
    };
    let key = CacheKey::read(key_file, dir).map_err(anyhow::Error::msg)?;
    let host = author::host()?;
    for p in &cfg.plugins {
        let entry = author::precompile_config(&host, p, dir, &key)?;
        outln!("{} ({}) -> {}", p.id, p.source, entry.display());
    }
    Ok(())
}
