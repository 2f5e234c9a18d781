//! An OCI source into the component's bytes: from the store when every blob
//! it needs is there (the registry is not contacted), from the registry
//! otherwise, all under one deadline (`pull_timeout_ms`).
//!
//! This runs on the caller's runtime. What blocks (the store's files, hashing,
//! decompressing an image layer) runs on its blocking pool, inside the
//! deadline: when the deadline passes, the pull returns, and an extraction
//! still running stops at its next read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::artifact::{self, Layer, Plan};
use super::registry::{ACCEPTED_MANIFESTS, MANIFEST_LIMIT, MAX_MANIFEST, Registry, RegistryError};
use super::signature;
use super::store::{Store, StoreError};
use crate::policy::Digest;
use crate::policy::digest::DigestError;
use crate::policy::source::{OciReference, OciSource, RegistryOptions};

/// A component fetched from an OCI source.
#[derive(Debug)]
pub(crate) struct Pulled {
    /// The component.
    pub(crate) wasm: Vec<u8>,
    /// The manifest digest it was pinned by (for an index, the index's).
    pub(crate) manifest: Digest,
    /// The blob (or blobs) that held it.
    pub(crate) layers: Vec<Digest>,
    /// Whether the registry was contacted; `false`: all from the store.
    pub(crate) pulled: bool,
    /// How long it took.
    pub(crate) took: Duration,
}

/// Why a pull failed, by class: what metrics and retries tell apart.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OciError {
    /// Reaching the registry, or what it answered.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The store on disk.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A digest that cannot be used.
    #[error(transparent)]
    Digest(#[from] DigestError),
    /// A manifest that is not a plugin's, or names what cannot be read.
    #[error("manifest {digest}{from}: {why}", from = from.map(|i| format!(" (from index {i})")).unwrap_or_default())]
    Manifest {
        /// The manifest.
        digest: Digest,
        /// The index it was chosen from.
        from: Option<Digest>,
        /// Why.
        why: String,
    },
    /// The registry's manifest is not the one pinned.
    #[error("the registry sent a manifest with digest {actual}, not {expected}")]
    ManifestMismatch {
        /// What it sent.
        actual: Digest,
        /// What was pinned.
        expected: Digest,
    },
    /// The component's file in an image's layers.
    #[error("{0}")]
    Image(String),
    /// A blob, with what went wrong fetching it.
    #[error("blob {digest}: {source}")]
    Blob {
        /// The blob.
        digest: Digest,
        /// Why.
        #[source]
        source: Box<OciError>,
    },
    /// The cosign signature.
    #[error("cosign signature: {0}")]
    Signature(#[from] signature::SignatureError),
    /// The cosign key named.
    #[error(transparent)]
    Key(#[from] signature::KeyError),
    /// The whole pull took longer than its bound.
    #[error("no complete answer within {} ms (pull_timeout_ms); gave up", .0.as_millis())]
    Timeout(Duration),
    /// A blocking step panicked.
    #[error("the registry client panicked")]
    Panicked,
}

impl OciError {
    /// The class, for metrics and logs: `auth`, `network`, `too-large`,
    /// `digest`, `manifest`, `signature`, `cache`, `timeout`, `internal`.
    pub(crate) fn class(&self) -> &'static str {
        match self {
            OciError::Registry(r) => match r {
                RegistryError::Unauthorized { .. }
                | RegistryError::PlainHttpRealm { .. }
                | RegistryError::Token { .. } => "auth",
                RegistryError::Announced { .. } | RegistryError::TooLarge { .. } => "too-large",
                RegistryError::Store(_) => "cache",
                RegistryError::Setup(_) => "config",
                _ => "network",
            },
            OciError::Store(StoreError::Mismatch { .. })
            | OciError::ManifestMismatch { .. }
            | OciError::Digest(_) => "digest",
            OciError::Store(_) => "cache",
            OciError::Manifest { .. } | OciError::Image(_) => "manifest",
            OciError::Blob { source, .. } => source.class(),
            OciError::Signature(_) | OciError::Key(_) => "signature",
            OciError::Timeout(_) => "timeout",
            OciError::Panicked => "internal",
        }
    }
}

/// A pull that failed: the registry and repository, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot pull from registry {registry}, repository {repository}: {source}")]
pub(crate) struct PullError {
    /// `HOST:PORT`.
    pub(crate) registry: String,
    /// The repository.
    pub(crate) repository: String,
    /// Why.
    #[source]
    pub(crate) source: OciError,
}

impl PullError {
    fn new(reference: &OciReference, source: OciError) -> Self {
        PullError {
            registry: reference.registry.clone(),
            repository: reference.repository.clone(),
            source,
        }
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, OciError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| OciError::Panicked)
}

/// Sets its flag when dropped: a pull given up at its deadline tells its
/// blocking extraction to stop.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Fetches a source (the author tools' may name a tag: it is resolved
/// first), giving up at the deadline.
pub(crate) async fn fetch(src: &OciSource) -> Result<Pulled, PullError> {
    let timeout = src.registry.timeout;
    let work = async {
        let digest = match &src.reference.digest {
            Some(d) => *d,
            None => resolve_in(&src.reference, &src.registry, &src.store).await?,
        };
        let key = match src.cosign_key.clone() {
            Some(path) => Some(
                blocking(move || signature::CosignKey::read(&path))
                    .await?
                    .map_err(OciError::Key)?,
            ),
            None => None,
        };
        let store = open_store(&src.store).await?;
        let mut session = Session::new(&src.reference, &src.registry, store.clone());
        if let Some(key) = key {
            let key = Arc::new(key);
            let (k, s) = (key.clone(), store.clone());
            if !blocking(move || signature::kept(&k, &digest, &s)).await? {
                let registry = session.registry()?;
                signature::fetch_and_verify(&key, &digest, &store, registry)
                    .await
                    .map_err(OciError::Signature)?;
            }
        }
        session
            .component(digest, src.path_in_image.as_deref())
            .await
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(OciError::Timeout(timeout)))
        .map_err(|e| PullError::new(&src.reference, e))
}

/// Resolves a tag (or checks a digest) against the registry: the manifest
/// digest to pin. The manifest is kept in the store.
pub(crate) async fn resolve(
    reference: &OciReference,
    options: &RegistryOptions,
    store: &std::path::Path,
) -> Result<Digest, PullError> {
    tokio::time::timeout(options.timeout, resolve_in(reference, options, store))
        .await
        .unwrap_or(Err(OciError::Timeout(options.timeout)))
        .map_err(|e| PullError::new(reference, e))
}

async fn open_store(dir: &std::path::Path) -> Result<Arc<Store>, OciError> {
    let dir = dir.to_owned();
    Ok(Arc::new(blocking(move || Store::open(&dir)).await??))
}

async fn resolve_in(
    reference: &OciReference,
    options: &RegistryOptions,
    store: &std::path::Path,
) -> Result<Digest, OciError> {
    let store = open_store(store).await?;
    let mut session = Session::new(reference, options, store.clone());
    let what = match (&reference.digest, &reference.tag) {
        (Some(d), _) => d.to_string(),
        (None, Some(t)) => t.clone(),
        (None, None) => "latest".into(),
    };
    let bytes = session.fetch_manifest(&what).await?;
    let digest = Digest::of(&bytes);
    if let Some(d) = &reference.digest
        && *d != digest
    {
        return Err(OciError::ManifestMismatch {
            actual: digest,
            expected: *d,
        });
    }
    blocking(move || store.put(&bytes, &digest)).await??;
    Ok(digest)
}

/// One fetch: the store first, the registry (connected once, on first need) after.
struct Session<'a> {
    reference: &'a OciReference,
    options: &'a RegistryOptions,
    store: Arc<Store>,
    registry: Option<Registry>,
}

impl<'a> Session<'a> {
    fn new(reference: &'a OciReference, options: &'a RegistryOptions, store: Arc<Store>) -> Self {
        Session {
            reference,
            options,
            store,
            registry: None,
        }
    }

    fn registry(&mut self) -> Result<&mut Registry, OciError> {
        if self.registry.is_none() {
            self.registry = Some(Registry::new(self.reference, self.options)?);
        }
        Ok(self.registry.as_mut().expect("just set"))
    }

    /// A manifest by tag or digest from the registry, whole (capped at
    /// `MANIFEST_LIMIT`); the caller checks its digest.
    async fn fetch_manifest(&mut self, what: &str) -> Result<Vec<u8>, OciError> {
        let mut bytes = Vec::new();
        self.registry()?
            .get(
                &format!("manifests/{what}"),
                ACCEPTED_MANIFESTS,
                MANIFEST_LIMIT,
                |c| {
                    bytes.extend_from_slice(c);
                    Ok(())
                },
            )
            .await?;
        Ok(bytes)
    }

    /// A manifest by digest, from the store or the registry (then stored).
    async fn manifest(&mut self, digest: Digest) -> Result<Vec<u8>, OciError> {
        let store = self.store.clone();
        if let Some(bytes) = blocking(move || store.read(&digest, MAX_MANIFEST)).await? {
            return Ok(bytes);
        }
        let bytes = self.fetch_manifest(&digest.to_string()).await?;
        let (store, kept) = (self.store.clone(), bytes.clone());
        blocking(move || store.put(&kept, &digest))
            .await?
            .map_err(|e| OciError::Manifest {
                digest,
                from: None,
                why: e.to_string(),
            })?;
        Ok(bytes)
    }

    /// A blob by digest into the store (unless it is there), streamed to
    /// disk, at most `max` bytes.
    async fn blob(&mut self, digest: Digest, max: u64) -> Result<(), OciError> {
        let in_blob = |e: OciError| OciError::Blob {
            digest,
            source: Box::new(e),
        };
        let store = self.store.clone();
        if blocking(move || store.open_verified(&digest).is_some()).await? {
            return Ok(());
        }
        let mut writer = self.store.writer().map_err(|e| in_blob(e.into()))?;
        self.registry()?
            .get(
                &format!("blobs/{digest}"),
                "*/*",
                (max, "the size the manifest declares, at most pull_max_mib"),
                |c| writer.write(c),
            )
            .await
            .map_err(|e| in_blob(e.into()))?;
        let store = self.store.clone();
        blocking(move || store.commit(writer, &digest))
            .await?
            .map_err(|e| in_blob(e.into()))
    }

    async fn component(
        &mut self,
        pin: Digest,
        path_in_image: Option<&str>,
    ) -> Result<Pulled, OciError> {
        let started = Instant::now();
        let max = self.options.max_bytes;
        let mut digest = pin;
        let mut plan =
            artifact::plan(&self.manifest(digest).await?, path_in_image, max).map_err(|why| {
                OciError::Manifest {
                    digest,
                    from: None,
                    why,
                }
            })?;
        if let Plan::Index(child) = plan {
            let from = Some(pin);
            digest = child.digest;
            plan = artifact::plan(&self.manifest(digest).await?, path_in_image, max)
                .map_err(|why| OciError::Manifest { digest, from, why })?;
            if matches!(plan, Plan::Index(_)) {
                return Err(OciError::Manifest {
                    digest,
                    from,
                    why: "an index points to another index".into(),
                });
            }
        }
        let (wasm, layers) = match plan {
            Plan::Wasm(layer) => {
                // Never more than the manifest declares: a registry that
                // sends more is cut off there.
                self.blob(layer.digest, layer.size.min(max)).await?;
                let store = self.store.clone();
                let d = layer.digest;
                let bytes = blocking(move || store.read(&d, max))
                    .await?
                    .ok_or_else(|| OciError::Blob {
                        digest: d,
                        source: Box::new(OciError::Image(
                            "it changed in the cache while being read".into(),
                        )),
                    })?;
                (bytes, vec![layer.digest])
            }
            Plan::Image(descriptors) => {
                for l in &descriptors {
                    self.blob(l.digest, l.size.min(max)).await?;
                }
                let digests: Vec<Digest> = descriptors.iter().map(|l| l.digest).collect();
                let path = path_in_image.expect("an image plan has a path").to_owned();
                let store = self.store.clone();
                let cancelled = Arc::new(AtomicBool::new(false));
                let _cancel = CancelOnDrop(cancelled.clone());
                let wanted = digests.clone();
                let bytes = blocking(move || {
                    let mut layers = Vec::new();
                    for digest in wanted {
                        let file = store.open_verified(&digest).ok_or_else(|| {
                            format!("layer {digest} changed in the cache while being read")
                        })?;
                        layers.push(Layer { digest, file });
                    }
                    artifact::extract(layers, &path, max, &cancelled)
                })
                .await?
                .map_err(OciError::Image)?;
                (bytes, digests)
            }
            Plan::Index(_) => unreachable!("handled above"),
        };
        Ok(Pulled {
            wasm,
            manifest: pin,
            layers,
            pulled: self.registry.is_some(),
            took: started.elapsed(),
        })
    }
}
