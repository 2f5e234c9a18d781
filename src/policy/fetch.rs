//! The first step of loading a plugin: its component's bytes from where the
//! policy says, checked against the pin (a file's sha256, or an OCI
//! artefact's manifest and layer digests). Async, on the caller's runtime;
//! the network is here (`oci`), never in the wasm host, which gets bytes.

use std::path::Path;

use super::Digest;
use super::file::PluginConfig;
use super::source::PluginSource;

/// The most a plugin component file may hold (the Python and JavaScript
/// examples are under 20 MB).
pub(crate) const MAX_PLUGIN_FILE: u64 = 256 << 20;

/// Why a plugin's component cannot be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SourceError {
    /// The file cannot be read.
    #[error("cannot read the file: {0}")]
    Read(#[source] std::io::Error),
    /// The file is not the one pinned.
    #[error(
        "sha256 is {actual}, but the policy file pins {pinned}: ship the pinned file or update the pin"
    )]
    Pin {
        /// What the file hashes to.
        actual: String,
        /// What the policy file pins.
        pinned: String,
    },
    /// The pull from a registry.
    #[cfg(feature = "oci")]
    #[error(transparent)]
    Pull(#[from] Box<super::oci::PullError>),
    /// An `oci` source in a build without the registry client.
    #[cfg(not(feature = "oci"))]
    #[error(
        "this build has no OCI registry client (built without the `oci` feature): use an image built with it, or ship the component as a file"
    )]
    NoOci,
}

impl SourceError {
    /// The class, for metrics and logs: `file`, `pin`, or the pull's
    /// (`auth`, `network`, `too-large`, `digest`, `manifest`, `signature`,
    /// `cache`, `timeout`, …).
    pub(crate) fn class(&self) -> &'static str {
        match self {
            SourceError::Read(_) => "file",
            SourceError::Pin { .. } => "pin",
            #[cfg(feature = "oci")]
            SourceError::Pull(p) => p.source.class(),
            #[cfg(not(feature = "oci"))]
            SourceError::NoOci => "config",
        }
    }
}

/// A component file: a regular file, of bounded size.
pub(crate) fn read_component(path: &Path) -> Result<Vec<u8>, SourceError> {
    super::read::read_regular_file(path, MAX_PLUGIN_FILE).map_err(SourceError::Read)
}

/// The component `cfg` names, checked against its pin.
pub(crate) async fn component(cfg: &PluginConfig) -> Result<Vec<u8>, SourceError> {
    match &cfg.source {
        PluginSource::File { path, sha256 } => {
            let path = path.clone();
            let wasm = tokio::task::spawn_blocking(move || read_component(&path))
                .await
                .map_err(|_| SourceError::Read(std::io::Error::other("the read panicked")))??;
            let digest = Digest::of(&wasm);
            if let Some(pin) = sha256
                && pin != digest.bytes()
            {
                return Err(SourceError::Pin {
                    actual: digest.hex(),
                    pinned: hex::encode(pin),
                });
            }
            Ok(wasm)
        }
        #[cfg(feature = "oci")]
        PluginSource::Oci(o) => {
            let pulled = super::oci::fetch(o).await.map_err(Box::new)?;
            if pulled.pulled {
                tracing::info!(plugin = %cfg.id, reference = %o.reference, bytes = pulled.wasm.len(), manifest = %pulled.manifest, layers = ?pulled.layers, took = ?pulled.took, "Policy plugin pulled");
            } else {
                tracing::info!(plugin = %cfg.id, reference = %o.reference, cache = %o.store.display(), "Policy plugin found in the cache; the registry was not contacted");
            }
            Ok(pulled.wasm)
        }
        #[cfg(not(feature = "oci"))]
        PluginSource::Oci(_) => Err(SourceError::NoOci),
    }
}

/// [`component`] for callers without a runtime (the author tools, which
/// run one command, and tests): on a runtime of its own, on a thread of its
/// own when called from inside another runtime.
pub(crate) fn component_blocking(cfg: &PluginConfig) -> Result<Vec<u8>, SourceError> {
    run_blocking(component(cfg))
}

/// Runs `f` to completion from synchronous code.
pub(crate) fn run_blocking<T: Send>(f: impl std::future::Future<Output = T> + Send) -> T {
    let run = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime starts")
            .block_on(f)
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return run();
    }
    std::thread::scope(|s| s.spawn(run).join().expect("the fetch does not panic"))
}
