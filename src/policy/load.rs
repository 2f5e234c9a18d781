//! A policy file into a policy: the built-in one without a file or without
//! plugins (no WebAssembly engine is created then), the plugin chain otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decision::{DefaultPolicy, Policy};
use super::file::{PolicyFile, PolicyFileError};
use crate::metrics::Metrics;
use crate::plugin_type::PluginType;

/// A policy that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The policy file itself.
    #[error(transparent)]
    File(#[from] PolicyFileError),
    /// One of its plugins.
    #[cfg(feature = "wasm")]
    #[error(transparent)]
    Plugin(#[from] super::wasm::PluginLoadError),
    /// A file that names plugins, for a build without the wasm host.
    #[error(
        "policy file {0} names plugins, but this build has no WebAssembly policy host (built without the `wasm` feature): use an image built with it, or remove the [[plugin]] entries"
    )]
    NoWasmHost(PathBuf),
    /// Compiling panicked.
    #[error("loading the policy plugins panicked")]
    Panicked,
}

/// Every plugin's component, in the file's order (the first step of loading).
#[cfg(feature = "wasm")]
pub(crate) async fn fetch_all(
    policy: &PolicyFile,
) -> Vec<Result<Vec<u8>, super::wasm::PluginLoadError>> {
    let mut components = Vec::with_capacity(policy.plugins.len());
    for p in &policy.plugins {
        components.push(
            super::fetch::component(p)
                .await
                .map_err(|e| p.source_error(e)),
        );
    }
    components
}

/// Loads the policy `file` names (`None`: the built-in policy), in two
/// steps: every plugin's component is fetched (async, on this runtime: files,
/// registries), then compiled and linked on the blocking pool, in child
/// processes of `compile_worker` if given. The plugins' WASI clocks run on
/// this runtime too, which the caller must not block while a plugin is called.
pub(crate) async fn load(
    file: Option<&Path>,
    plugin_type: PluginType,
    compile_worker: Option<PathBuf>,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn Policy>, LoadError> {
    let Some(path) = file else {
        return Ok(Arc::new(DefaultPolicy));
    };
    let mut policy = PolicyFile::from_file(path)?;
    for p in &mut policy.plugins {
        p.plugin_type = plugin_type;
    }
    if policy.plugins.is_empty() {
        tracing::info!(file = %path.display(), "Policy file names no plugins; using the built-in policy");
        return Ok(Arc::new(DefaultPolicy));
    }
    #[cfg(feature = "wasm")]
    {
        let components = fetch_all(&policy).await;
        let metrics = metrics.clone();
        let compiler = super::wasm::compiler_for(&policy, compile_worker);
        let runtime = tokio::runtime::Handle::current();
        let chain = tokio::task::spawn_blocking(move || {
            super::wasm::load_chain(&policy, compiler, Some(runtime), components, metrics)
        })
        .await
        .map_err(|_| LoadError::Panicked)??;
        tracing::info!(plugins = ?chain.plugin_ids(), "Policy plugins loaded");
        Ok(Arc::new(chain))
    }
    #[cfg(not(feature = "wasm"))]
    {
        let _ = (metrics, compile_worker);
        Err(LoadError::NoWasmHost(path.to_owned()))
    }
}
