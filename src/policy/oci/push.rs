//! A component into a registry as the CNCF wasm artefact: config
//! `application/vnd.wasm.config.v0+json` describing the component, one
//! `application/wasm` layer, in an OCI image manifest. The same component
//! always gives the same manifest, so its digest is a stable pin.

use super::artifact::{OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};
use super::registry::{Registry, RegistryError};
use crate::policy::Digest;
use crate::policy::source::{OciReference, RegistryOptions};

/// A push that failed: where to, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot push to registry {registry}, repository {repository}: {what}{source}", what = what.map(|w| format!("cannot push the {w}: ")).unwrap_or_default())]
pub(crate) struct PushError {
    registry: String,
    repository: String,
    /// The part that failed.
    what: Option<&'static str>,
    #[source]
    source: PushCause,
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PushCause {
    /// The registry.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The whole push took longer than its bound.
    #[error("no complete answer within {} ms (pull_timeout_ms); gave up", .0.as_millis())]
    Timeout(std::time::Duration),
}

/// What the config says about the component.
#[derive(Debug, Clone, Default)]
pub(crate) struct ComponentInfo {
    /// Its exports (`csi-registrar:policy/driver-name@…`, …).
    pub(crate) exports: Vec<String>,
    /// Its imports (`wasi:…`, `csi-registrar:policy/host-log@…`).
    pub(crate) imports: Vec<String>,
    /// The layer's file name (`org.opencontainers.image.title`), which
    /// `oras pull` writes the component to.
    pub(crate) file_name: String,
}

fn digest(bytes: &[u8]) -> Digest {
    Digest::of(bytes)
}

/// The config and manifest for `wasm`, as bytes.
pub(crate) fn artefact(wasm: &[u8], info: &ComponentInfo) -> (Vec<u8>, Vec<u8>) {
    let layer = digest(wasm);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer],
        "component": {
            "exports": info.exports,
            "imports": info.imports,
        },
    }))
    .expect("JSON of strings");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": WASM_CONFIG, "digest": digest(&config), "size": config.len()},
        "layers": [{
            "mediaType": WASM_LAYER, "digest": layer, "size": wasm.len(),
            "annotations": {"org.opencontainers.image.title": info.file_name},
        }],
    }))
    .expect("JSON of strings");
    (config, manifest)
}

/// Pushes `wasm` to `reference` (its tag, or by digest alone); returns the
/// manifest digest.
pub(crate) async fn push(
    wasm: Vec<u8>,
    info: &ComponentInfo,
    reference: &OciReference,
    options: &RegistryOptions,
) -> Result<Digest, PushError> {
    let (config, manifest) = artefact(&wasm, info);
    let manifest_digest = digest(&manifest);
    let mut what = None;
    let work = async {
        let mut registry = Registry::new(reference, options)?;
        what = Some("component");
        let layer_digest = digest(&wasm);
        registry.push_blob(wasm, &layer_digest).await?;
        what = Some("config");
        let config_digest = digest(&config);
        registry.push_blob(config, &config_digest).await?;
        what = Some("manifest");
        let target = match &reference.tag {
            Some(t) => t.clone(),
            None => manifest_digest.to_string(),
        };
        registry
            .push_manifest(&target, OCI_MANIFEST, manifest)
            .await?;
        Ok::<_, RegistryError>(())
    };
    let outcome = match tokio::time::timeout(options.timeout, work).await {
        Ok(Ok(())) => return Ok(manifest_digest),
        Ok(Err(e)) => PushCause::Registry(e),
        Err(_) => PushCause::Timeout(options.timeout),
    };
    Err(PushError {
        registry: reference.registry.clone(),
        repository: reference.repository.clone(),
        what,
        source: outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_component_gives_the_same_pin() {
        let info = ComponentInfo {
            exports: vec!["csi-registrar:policy/driver-name@0.2.0".into()],
            imports: vec![],
            file_name: "p.wasm".into(),
        };
        let (c1, m1) = artefact(b"\0asm", &info);
        let (_, m2) = artefact(b"\0asm", &info);
        assert_eq!(m1, m2);
        let m: serde_json::Value = serde_json::from_slice(&m1).unwrap();
        assert_eq!(m["config"]["mediaType"], WASM_CONFIG);
        assert_eq!(m["config"]["digest"], digest(&c1).to_string());
        assert_eq!(m["layers"][0]["mediaType"], WASM_LAYER);
        assert_eq!(m["layers"][0]["size"], 4);
        let c: serde_json::Value = serde_json::from_slice(&c1).unwrap();
        assert_eq!(c["layerDigests"][0], m["layers"][0]["digest"]);
        assert_eq!(
            c["component"]["exports"][0],
            "csi-registrar:policy/driver-name@0.2.0"
        );
    }
}
