//! A component into a registry as the CNCF wasm artefact: config
//! `application/vnd.wasm.config.v0+json` describing the component, one
//! `application/wasm` layer, in an OCI image manifest. The same component
//! always gives the same manifest, so its digest is a stable pin.

use sha2::{Digest, Sha256};

use super::artifact::{OCI_MANIFEST, WASM_CONFIG, WASM_LAYER};
use super::pull::on_own_runtime;
use super::registry::{Registry, causes};
use crate::policy::source::{OciReference, RegistryOptions};

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

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
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
pub(crate) fn push(
    wasm: Vec<u8>,
    info: &ComponentInfo,
    reference: &OciReference,
    options: &RegistryOptions,
) -> Result<String, String> {
    let (config, manifest) = artefact(&wasm, info);
    let manifest_digest = digest(&manifest);
    on_own_runtime(options.timeout, async {
        let registry = Registry::new(reference, options)?;
        let (client, _) = registry.for_push().await?;
        let target = match &reference.tag {
            Some(t) => oci_client::Reference::with_tag(
                reference.registry.clone(),
                reference.repository.clone(),
                t.clone(),
            ),
            None => oci_client::Reference::with_digest(
                reference.registry.clone(),
                reference.repository.clone(),
                manifest_digest.clone(),
            ),
        };
        let fail = |what: &str, e: oci_client::errors::OciDistributionError| {
            format!("cannot push the {what}: {}", causes(&e))
        };
        let layer_digest = digest(&wasm);
        client
            .push_blob(&target, wasm, &layer_digest)
            .await
            .map_err(|e| fail("component", e))?;
        let config_digest = digest(&config);
        client
            .push_blob(&target, config, &config_digest)
            .await
            .map_err(|e| fail("config", e))?;
        client
            .push_manifest_raw(
                &target,
                manifest,
                http::HeaderValue::from_static(OCI_MANIFEST),
            )
            .await
            .map_err(|e| fail("manifest", e))?;
        Ok(manifest_digest.clone())
    })
    .map_err(|cause| {
        format!(
            "cannot push to registry {}, repository {}: {cause}",
            reference.registry, reference.repository
        )
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
        assert_eq!(m["config"]["digest"], digest(&c1));
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
