//! A policy file into a policy: the built-in one without a file or without
//! plugins (no WebAssembly engine is created then), the plugin chain otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::decision::{DefaultPolicy, Policy};
use super::file::{PolicyFile, PolicyFileError};
use crate::metrics::Metrics;

/// A policy that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The policy file itself.
    #[error(transparent)]
    File(#[from] PolicyFileError),
    /// One of its plugins.
    #[error(transparent)]
    Plugin(#[from] PluginLoadError),
    /// A file that names plugins, for a build without the wasm host.
    #[error(
        "policy file {0} names plugins, but this build has no WebAssembly policy host (built without the `wasm` feature): use an image built with it, or remove the [[plugin]] entries"
    )]
    NoWasmHost(PathBuf),
}

/// A plugin that cannot be loaded, in the plugin author's terms: which
/// plugin, its file, where the policy file declares it, and why.
#[derive(Debug, thiserror::Error)]
#[error("policy plugin {id:?} ({}{}): {message}", path.display(), declared(declared_at))]
pub struct PluginLoadError {
    /// The plugin's `id`.
    pub id: String,
    /// The component file (or the policy file, when the engine cannot start).
    pub path: PathBuf,
    /// The policy file and the line that declare the plugin.
    pub declared_at: Option<(PathBuf, usize)>,
    /// What is wrong, and how to fix it.
    pub message: String,
}

fn declared(at: &Option<(PathBuf, usize)>) -> String {
    at.as_ref()
        .map(|(file, line)| format!(", policy file {} line {line}", file.display()))
        .unwrap_or_default()
}

/// Loads the policy `file` names (`None`: the built-in policy).
pub(crate) fn load(
    file: Option<&Path>,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn Policy>, LoadError> {
    let Some(path) = file else {
        return Ok(Arc::new(DefaultPolicy));
    };
    let policy = PolicyFile::from_file(path)?;
    if policy.plugins.is_empty() {
        tracing::info!(file = %path.display(), "Policy file names no plugins; using the built-in policy");
        return Ok(Arc::new(DefaultPolicy));
    }
    #[cfg(feature = "wasm")]
    {
        let chain = super::wasm::load_chain(&policy, metrics.clone())?;
        tracing::info!(plugins = ?chain.plugin_ids(), "Policy plugins loaded");
        Ok(Arc::new(chain))
    }
    #[cfg(not(feature = "wasm"))]
    {
        let _ = metrics;
        Err(LoadError::NoWasmHost(path.to_owned()))
    }
}
