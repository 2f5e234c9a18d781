//! What the author tools share (and the tests reach through `testing`): a
//! plugin configuration without a pin, and a component's description.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::policy::PluginLoadError;
use crate::policy::file::{
    DEFAULT_MEMORY_LIMIT_MIB, DEFAULT_TIMEOUT_MS, Mode, OnError, PluginConfig,
};
use crate::policy::wasm::{Host, WIT_PACKAGE, cache, check_is_component, read_component};

/// The engine the tools load plugins with.
pub(crate) fn host() -> anyhow::Result<Arc<Host>> {
    Host::new().map_err(|e| anyhow::anyhow!("cannot start the WebAssembly engine: {e:#}"))
}

/// A plugin configuration for the author tools: no pin, default limits.
pub fn unpinned(path: &Path) -> PluginConfig {
    PluginConfig {
        id: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into()),
        path: path.to_owned(),
        sha256: None,
        hooks: None,
        timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
        memory_limit_bytes: DEFAULT_MEMORY_LIMIT_MIB << 20,
        on_error: OnError::Fail,
        mode: Mode::Enforce,
        settings_json: "{}".into(),
        declared_at: None,
    }
}

/// What `plugin inspect` shows about a component.
#[derive(Debug, serde::Serialize)]
pub struct Inspection {
    /// The file.
    pub path: String,
    /// Its size.
    pub size_bytes: usize,
    /// Its sha256, the pin a policy file gives.
    pub sha256: String,
    /// The policy interfaces it exports, with versions.
    pub exports: Vec<String>,
    /// Everything it imports (the host provides host-log and WASI 0.2).
    pub imports: Vec<String>,
    /// The hooks it implements.
    pub hooks: Vec<String>,
    /// From the plugin's own `info()`.
    pub name: String,
    /// From the plugin's own `info()`.
    pub version: String,
}

/// Compiles a component (once) and describes it; fails as loading would.
pub fn inspect(host: &Arc<Host>, path: &Path) -> Result<Inspection, PluginLoadError> {
    let cfg = unpinned(path);
    let (plugin, wasm) = host.prepare(&cfg, None)?;
    let ty = plugin.component().component_type();
    let exports = ty
        .exports(host.engine())
        .map(|(n, _)| n.to_owned())
        .filter(|n| n.starts_with(WIT_PACKAGE))
        .collect();
    let imports = ty
        .imports(host.engine())
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
pub(crate) fn precompile(
    host: &Host,
    path: &Path,
    cache_dir: &Path,
    key: &cache::CacheKey,
) -> Result<PathBuf, PluginLoadError> {
    let cfg = unpinned(path);
    let wasm = read_component(path).map_err(|m| cfg.error(m))?;
    check_is_component(&wasm).map_err(|m| cfg.error(m))?;
    let digest: [u8; 32] = Sha256::digest(&wasm).into();
    cache::load_or_compile(host.engine(), cache_dir, key, &wasm, &digest)
        .map_err(|e| cfg.error(format!("not a valid WebAssembly component: {e:#}")))?;
    let entry = cache::entry(host.engine(), cache_dir, &digest);
    if !entry.exists() {
        return Err(cfg.error(format!(
            "the cache directory {} was not usable (see the log)",
            cache_dir.display()
        )));
    }
    Ok(entry)
}
