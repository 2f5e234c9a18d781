//! `plugin precompile`: compile components into a cache directory with this
//! binary, so the registrar starts without compiling.

use std::path::{Path, PathBuf};

use super::author;
use crate::policy::wasm::cache::CacheKey;
use crate::policy::wasm::{Compiler, Host, Reservation};

pub(super) fn run(
    sources: &author::Sources,
    wasm: &[PathBuf],
    cache_dir: &Path,
    key_file: &Path,
    memory_limit_mib: u64,
) -> anyhow::Result<()> {
    let key = CacheKey::read(key_file, cache_dir).map_err(anyhow::Error::msg)?;
    let host = Host::new(Compiler {
        reservation: Reservation::for_cap(memory_limit_mib << 20),
        worker: None,
    })?;
    for w in wasm {
        let entry = author::precompile(&host, &sources.unpinned(w), cache_dir, &key)?;
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
    // The engine the registrar makes for this policy: its memory slots, and
    // so its compiled code, follow the largest memory_limit_mib.
    let host = Host::new(crate::policy::wasm::compiler_for(&cfg, None))?;
    for p in &cfg.plugins {
        let entry = author::precompile(&host, p, dir, &key)?;
        outln!("{} ({}) -> {}", p.id, p.source, entry.display());
    }
    Ok(())
}
