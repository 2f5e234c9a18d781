//! The plugin author tools' view of a component: `inspect` and `precompile`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::{Host, LoadError, WIT_PACKAGE, cache, component};
use crate::policy::config::PluginConfig;

/// What `plugin inspect` shows about a component.
#[derive(Debug, serde::Serialize)]
pub struct Inspection {
    pub path: String,
    pub size_bytes: usize,
    pub sha256: String,
    /// The policy interfaces it exports, with versions.
    pub exports: Vec<String>,
    /// Everything it imports (the host provides host-log and WASI 0.2).
    pub imports: Vec<String>,
    pub hooks: Vec<String>,
    /// From the plugin's own `info()`.
    pub name: String,
    pub version: String,
}

impl Host {
    /// Compiles a component (once) and describes it; fails as loading would.
    pub fn inspect(self: &Arc<Self>, path: &Path) -> Result<Inspection, LoadError> {
        let cfg = PluginConfig::unpinned(path);
        let (plugin, wasm) = self.prepare(&cfg, None)?;
        let ty = plugin.pre.component().component_type();
        let exports = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .filter(|n| n.starts_with(WIT_PACKAGE))
            .collect();
        let imports = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let (name, version) = plugin
            .info()
            .map_err(|e| cfg.error(format!("info() failed: {e}")))?;
        Ok(Inspection {
            path: path.display().to_string(),
            size_bytes: wasm.len(),
            sha256: hex::encode(Sha256::digest(&wasm)),
            exports,
            imports,
            hooks: plugin
                .exported_hooks()
                .iter()
                .map(|h| h.as_str().to_owned())
                .collect(),
            name,
            version,
        })
    }

    /// Compiles a component into `cache_dir` as the registrar would at start-up,
    /// tagged with `key`; returns the cache entry.
    pub fn precompile(
        &self,
        path: &Path,
        cache_dir: &Path,
        key: &cache::CacheKey,
    ) -> Result<PathBuf, LoadError> {
        let cfg = PluginConfig::unpinned(path);
        let wasm = component::read_component(path).map_err(|m| cfg.error(m))?;
        component::check_is_component(&wasm).map_err(|m| cfg.error(m))?;
        let digest: [u8; 32] = Sha256::digest(&wasm).into();
        cache::load_or_compile(&self.engine, cache_dir, key, &wasm, &digest)
            .map_err(|e| cfg.error(format!("not a valid WebAssembly component: {e:#}")))?;
        let entry = cache::entry(&self.engine, cache_dir, &digest);
        if !entry.exists() {
            return Err(cfg.error(format!(
                "the cache directory {} was not usable (see the log)",
                cache_dir.display()
            )));
        }
        Ok(entry)
    }
}
