//! Cosign signatures, checked with a public key (`cosign_key`): the
//! signature `cosign sign --key` pushes beside an artefact, in the same
//! repository under the tag `sha256-<manifest hex>.sig`. Its layers are
//! "simple signing" payloads (`application/vnd.dev.cosign.simplesigning.v1+json`)
//! whose `critical.image.docker-manifest-digest` names what was signed, with
//! the ECDSA P-256 signature (DER, base64) in the annotation
//! `dev.cosignproject.cosign/signature`.
//!
//! A signature that verifies is kept in the store (the payload as a blob, the
//! signature in `signatures/<manifest hex>`), and checked again with the key
//! on every load, so a node restarts with its registry down.

use std::path::Path;

use base64::Engine as _;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use serde::Deserialize;

use super::registry::{ACCEPTED_MANIFESTS, MANIFEST_LIMIT, Registry, RegistryError};
use super::store::{Store, StoreError};
use crate::policy::Digest;

/// A `cosign_key` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    /// The file cannot be read.
    #[error("cannot read cosign_key {path}: {source}")]
    Read {
        /// The key file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not an ECDSA P-256 public key in PEM.
    #[error(
        "cosign_key {path} is not a PEM ECDSA P-256 public key ({source}); `cosign generate-key-pair` writes one (cosign.pub)"
    )]
    NotAKey {
        /// The key file.
        path: String,
        /// Why.
        #[source]
        source: p256::pkcs8::spki::Error,
    },
}

/// Why one signature does not verify.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Mismatch {
    /// The annotation is not base64.
    #[error("its signature is not base64")]
    NotBase64,
    /// Nor DER.
    #[error("its signature is not DER")]
    NotDer,
    /// Another key signed it.
    #[error("it is not signed by the key in {0}")]
    OtherKey(String),
    /// The signed payload is not cosign's.
    #[error("its payload is not a cosign payload ({0})")]
    NotAPayload(#[source] serde_json::Error),
    /// It signs another manifest.
    #[error("it signs {signed}, not {manifest}")]
    OtherManifest {
        /// What it signs.
        signed: String,
        /// What was to be signed.
        manifest: Digest,
    },
}

/// Why an artefact's signature is not accepted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SignatureError {
    /// The registry has no signature manifest for it.
    #[error(
        "{manifest} is not signed: the repository has no {tag}; sign it with `cosign sign --key cosign.key REF@{manifest}`"
    )]
    Unsigned {
        /// The artefact's manifest.
        manifest: Digest,
        /// `sha256-<hex>.sig`.
        tag: String,
    },
    /// Its signature manifest cannot be fetched.
    #[error("cannot fetch its signature {tag}: {source}")]
    Fetch {
        /// `sha256-<hex>.sig`.
        tag: String,
        /// Why.
        #[source]
        source: RegistryError,
    },
    /// What is at the tag is not a cosign signature manifest.
    #[error("{tag} is not a cosign signature manifest ({source})")]
    NotSignatures {
        /// `sha256-<hex>.sig`.
        tag: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A payload blob cannot be fetched.
    #[error(transparent)]
    Payload(#[from] RegistryError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A payload blob changed in the store while being read.
    #[error("blob {0} changed while being read")]
    Changed(Digest),
    /// None of the signatures verifies with the key.
    #[error(
        "no signature of {manifest} by the key in {key}: {} signature(s) at {tag} checked{}",
        checked.len(),
        described(checked)
    )]
    NoneVerifies {
        /// The artefact's manifest.
        manifest: Digest,
        /// The key file.
        key: String,
        /// `sha256-<hex>.sig`.
        tag: String,
        /// Each payload checked, and why it did not verify.
        checked: Vec<(Digest, Mismatch)>,
    },
}

fn described(checked: &[(Digest, Mismatch)]) -> String {
    if checked.is_empty() {
        return String::new();
    }
    let each: Vec<String> = checked
        .iter()
        .map(|(d, why)| format!("{d}: {why}"))
        .collect();
    format!(" ({})", each.join("; "))
}

const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The largest signature payload read.
const MAX_PAYLOAD: u64 = 64 << 10;

/// A cosign public key (ECDSA P-256, as `cosign generate-key-pair` writes).
pub(super) struct CosignKey {
    key: VerifyingKey,
    path: String,
}

impl CosignKey {
    /// Reads a PEM public key file.
    pub(super) fn read(path: &Path) -> Result<Self, KeyError> {
        let shown = || path.display().to_string();
        let pem = crate::policy::read::read_regular_file(path, 64 << 10).map_err(|source| {
            KeyError::Read {
                path: shown(),
                source,
            }
        })?;
        let text = String::from_utf8_lossy(&pem);
        let key =
            VerifyingKey::from_public_key_pem(text.trim()).map_err(|source| KeyError::NotAKey {
                path: shown(),
                source,
            })?;
        Ok(CosignKey {
            key,
            path: path.display().to_string(),
        })
    }

    /// Whether `signature` (DER, base64) signs `payload`, and the payload
    /// names `manifest`.
    fn check(&self, payload: &[u8], signature: &str, manifest: &Digest) -> Result<(), Mismatch> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .map_err(|_| Mismatch::NotBase64)?;
        let sig = Signature::from_der(&der).map_err(|_| Mismatch::NotDer)?;
        self.key
            .verify(payload, &sig)
            .map_err(|_| Mismatch::OtherKey(self.path.clone()))?;
        let p: Payload = serde_json::from_slice(payload).map_err(Mismatch::NotAPayload)?;
        if p.critical.image.docker_manifest_digest != manifest.to_string() {
            return Err(Mismatch::OtherManifest {
                signed: p.critical.image.docker_manifest_digest,
                manifest: *manifest,
            });
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SigManifest {
    #[serde(default)]
    layers: Vec<SigLayer>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SigLayer {
    media_type: String,
    digest: Digest,
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// A verified signature as kept in the store: the payload's digest and the
/// signature. Read back as hostile as the registry: the digest is parsed.
#[derive(serde::Serialize, Deserialize)]
struct Kept {
    payload: Digest,
    signature: String,
}

/// The largest kept signature record read.
const MAX_RECORD: u64 = 16 << 10;

/// Whether the store keeps a signature of `manifest` that `key` verifies.
pub(super) fn kept(key: &CosignKey, manifest: &Digest, store: &Store) -> bool {
    let Some(bytes) = store.signature_record(manifest, MAX_RECORD) else {
        return false;
    };
    let Ok(k) = serde_json::from_slice::<Kept>(&bytes) else {
        return false;
    };
    store
        .read(&k.payload, MAX_PAYLOAD)
        .is_some_and(|payload| key.check(&payload, &k.signature, manifest).is_ok())
}

/// Checks that `manifest` is signed by `key` with the signatures in the
/// registry, and keeps the one that verifies.
pub(super) async fn fetch_and_verify(
    key: &CosignKey,
    manifest: &Digest,
    store: &Store,
    registry: &mut Registry,
) -> Result<(), SignatureError> {
    let tag = format!("sha256-{}.sig", manifest.hex());
    let mut body = Vec::new();
    registry
        .get(
            &format!("manifests/{tag}"),
            ACCEPTED_MANIFESTS,
            MANIFEST_LIMIT,
            |c| {
                body.extend_from_slice(c);
                Ok(())
            },
        )
        .await
        .map_err(|source| match source {
            RegistryError::NotFound { .. } => SignatureError::Unsigned {
                manifest: *manifest,
                tag: tag.clone(),
            },
            source => SignatureError::Fetch {
                tag: tag.clone(),
                source,
            },
        })?;
    let sigs: SigManifest =
        serde_json::from_slice(&body).map_err(|source| SignatureError::NotSignatures {
            tag: tag.clone(),
            source,
        })?;
    let mut why = Vec::new();
    for layer in sigs
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING)
    {
        let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
            continue;
        };
        let mut writer = store.writer()?;
        registry
            .get(
                &format!("blobs/{}", layer.digest),
                "*/*",
                (layer.size.min(MAX_PAYLOAD), "a signature payload's 64 KiB"),
                |c| writer.write(c),
            )
            .await?;
        store.commit(writer, &layer.digest)?;
        let payload = store
            .read(&layer.digest, MAX_PAYLOAD)
            .ok_or(SignatureError::Changed(layer.digest))?;
        match key.check(&payload, signature, manifest) {
            Ok(()) => {
                let record = serde_json::to_vec(&Kept {
                    payload: layer.digest,
                    signature: signature.clone(),
                })
                .expect("JSON of strings");
                if let Err(e) = store.keep_signature_record(manifest, &record) {
                    tracing::warn!(error = %e, "Cannot keep the verified signature; it is fetched again on the next load");
                }
                return Ok(());
            }
            Err(e) => why.push((layer.digest, e)),
        }
    }
    Err(SignatureError::NoneVerifies {
        manifest: *manifest,
        key: key.path.clone(),
        tag,
        checked: why,
    })
}
