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
        println!("{} -> {}", w.display(), entry.display());
    }
    Ok(())
}
