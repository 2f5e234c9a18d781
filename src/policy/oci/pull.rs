//! An OCI source into the component's bytes: from the store when every blob
//! it needs is there (the registry is not contacted), from the registry
//! otherwise, under one deadline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::artifact::{self, Plan};
use super::registry::{ACCEPTED_MANIFESTS, MANIFEST_LIMIT, MAX_MANIFEST, Registry};
use super::signature;
use super::store::Store;
use crate::policy::source::{OciReference, OciSource, RegistryOptions};

/// A component fetched from an OCI source.
#[derive(Debug)]
pub(crate) struct Pulled {
    /// The component.
    pub(crate) wasm: Vec<u8>,
    /// The manifest digest it was pinned by (for an index, the index's).
    pub(crate) manifest: String,
    /// The blob (or blobs) that held it.
    pub(crate) layers: Vec<String>,
    /// Whether the registry was contacted; `false`: all from the store.
    pub(crate) pulled: bool,
    /// How long it took.
    pub(crate) took: Duration,
}

/// Fetches a source (the author tools' may name a tag: it is resolved
/// first). Runs on a thread of its own with its own runtime, so it can be
/// called from anywhere, and gives up at the deadline.
pub(crate) fn fetch(src: &OciSource) -> Result<Pulled, String> {
    let digest = match &src.reference.digest {
        Some(d) => d.clone(),
        None => resolve(&src.reference, &src.registry, &src.store)?,
    };
    let key = src
        .cosign_key
        .as_deref()
        .map(signature::CosignKey::read)
        .transpose()?;
    on_own_runtime(src.registry.timeout, async {
        let store = Store::open(&src.store)?;
        let mut session = Session::new(&src.reference, &src.registry, &store);
        if let Some(key) = &key
            && !signature::kept(key, &digest, &store)
        {
            signature::fetch_and_verify(key, &digest, &store, session.registry()?)
                .await
                .map_err(|e| format!("cosign signature: {e}"))?;
        }
        session
            .component(&digest, src.path_in_image.as_deref())
            .await
    })
    .map_err(|cause| explain(&src.reference, cause))
}

/// Resolves a tag (or checks a digest) against the registry: the manifest
/// digest to pin. The manifest is kept in the store.
pub(crate) fn resolve(
    reference: &OciReference,
    options: &RegistryOptions,
    store: &std::path::Path,
) -> Result<String, String> {
    on_own_runtime(options.timeout, async {
        let store = Store::open(store)?;
        let mut session = Session::new(reference, options, &store);
        let what = match (&reference.digest, &reference.tag) {
            (Some(d), _) => d.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        };
        let bytes = session.fetch_manifest(&what).await?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        if let Some(d) = &reference.digest
            && d != &digest
        {
            return Err(format!(
                "the registry sent a manifest with digest {digest}, not {d}"
            ));
        }
        store.put(&bytes, &digest)?;
        Ok(digest)
    })
    .map_err(|cause| explain(reference, cause))
}

fn explain(reference: &OciReference, cause: String) -> String {
    format!(
        "cannot pull from registry {}, repository {}: {cause}",
        reference.registry, reference.repository
    )
}

/// Runs `f` on a new thread with a current-thread runtime, for at most `timeout`.
pub(super) fn on_own_runtime<T: Send>(
    timeout: Duration,
    f: impl std::future::Future<Output = Result<T, String>> + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the registry client's runtime: {e}"))?;
            rt.block_on(async {
                tokio::time::timeout(timeout, f).await.unwrap_or_else(|_| {
                    Err(format!(
                        "no complete answer within {} ms (pull_timeout_ms); gave up",
                        timeout.as_millis()
                    ))
                })
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the registry client panicked".into()))
    })
}

/// One fetch: the store first, the registry (connected once, on first need) after.
struct Session<'a> {
    reference: &'a OciReference,
    options: &'a RegistryOptions,
    store: &'a Store,
    registry: Option<Registry>,
}

impl<'a> Session<'a> {
    fn new(reference: &'a OciReference, options: &'a RegistryOptions, store: &'a Store) -> Self {
        Session {
            reference,
            options,
            store,
            registry: None,
        }
    }

    fn registry(&mut self) -> Result<&mut Registry, String> {
        if self.registry.is_none() {
            self.registry = Some(Registry::new(self.reference, self.options)?);
        }
        Ok(self.registry.as_mut().expect("just set"))
    }

    /// A manifest by tag or digest from the registry, whole (capped at
    /// `MANIFEST_LIMIT`); the caller checks its digest.
    async fn fetch_manifest(&mut self, what: &str) -> Result<Vec<u8>, String> {
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
    async fn manifest(&mut self, digest: &str) -> Result<Vec<u8>, String> {
        if let Some(bytes) = self.store.read(digest, MAX_MANIFEST) {
            return Ok(bytes);
        }
        let bytes = self.fetch_manifest(digest).await?;
        self.store
            .put(&bytes, digest)
            .map_err(|e| format!("manifest {digest}: {e}"))?;
        Ok(bytes)
    }

    /// A blob by digest into the store (unless it is there), streamed to disk.
    async fn blob(&mut self, digest: &str, max: u64) -> Result<PathBuf, String> {
        if self.store.verify(digest) {
            return Ok(self.store.path(digest));
        }
        let mut writer = self.store.writer()?;
        self.registry()?
            .get(
                &format!("blobs/{digest}"),
                "*/*",
                (max, "the size the manifest declares, at most pull_max_mib"),
                |c| writer.write(c),
            )
            .await
            .map_err(|e| format!("blob {digest}: {e}"))?;
        self.store
            .commit(writer, digest)
            .map_err(|e| format!("blob {digest}: {e}"))
    }

    async fn component(
        &mut self,
        pin: &str,
        path_in_image: Option<&str>,
    ) -> Result<Pulled, String> {
        let started = Instant::now();
        let max = self.options.max_bytes;
        let mut digest = pin.to_owned();
        let mut plan = artifact::plan(&self.manifest(&digest).await?, path_in_image, max)
            .map_err(|m| format!("manifest {digest}: {m}"))?;
        if let Plan::Index(child) = plan {
            digest = child.digest;
            plan = artifact::plan(&self.manifest(&digest).await?, path_in_image, max)
                .map_err(|m| format!("manifest {digest} (from index {pin}): {m}"))?;
            if matches!(plan, Plan::Index(_)) {
                return Err(format!("index {pin} points to another index"));
            }
        }
        let (wasm, layers) = match plan {
            Plan::Wasm(layer) => {
                // Never more than the manifest declares: a registry that
                // sends more is cut off there.
                self.blob(&layer.digest, layer.size.min(max)).await?;
                let bytes = self.store.read(&layer.digest, max).ok_or_else(|| {
                    format!(
                        "blob {} changed in the cache while being read",
                        layer.digest
                    )
                })?;
                (bytes, vec![layer.digest])
            }
            Plan::Image(layers) => {
                let mut paths = Vec::new();
                for l in &layers {
                    paths.push(self.blob(&l.digest, l.size.min(max)).await?);
                }
                let path = path_in_image.expect("an image plan has a path");
                let refs: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
                let bytes = artifact::extract(&refs, path, max)?;
                (bytes, layers.into_iter().map(|l| l.digest).collect())
            }
            Plan::Index(_) => unreachable!("handled above"),
        };
        Ok(Pulled {
            wasm,
            manifest: pin.to_owned(),
            layers,
            pulled: self.registry.is_some(),
            took: started.elapsed(),
        })
    }
}
