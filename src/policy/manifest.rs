//! Manifests and indexes, parsed into types: which are plugins, and what to
//! fetch next. Nothing here touches the network or the disk; without the
//! `oci` feature it is built for the fuzz target alone.
//! - the CNCF wasm artefact: config `application/vnd.wasm.config.v0+json`,
//!   one `application/wasm` layer (what `plugin push` writes);
//! - the older `application/vnd.wasm.content.layer.v1+wasm` layer (Kubewarden,
//!   wasm-to-oci);
//! - a container image whose tar (or tar+gzip) layers hold the file named by
//!   `oci_path` (`FROM scratch`, `COPY plugin.wasm /`);
//! - an index (a multi-platform image), which points to one manifest per
//!   platform.

use serde::Deserialize;

use crate::policy::Digest;

/// The CNCF wasm artefact's config.
pub(crate) const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artefact's layer.
pub(crate) const WASM_LAYER: &str = "application/wasm";
/// The layer type older tools push.
pub(crate) const OLD_WASM_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// An OCI image manifest.
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The manifest types a platform's manifest may be (an index entry's too).
const MANIFESTS: [&str; 2] = [
    OCI_MANIFEST,
    "application/vnd.docker.distribution.manifest.v2+json",
];
/// The most layers an image may have: a plugin image is `FROM scratch` and a
/// `COPY`, and a base image's dozens are far below this.
pub(crate) const MAX_LAYERS: usize = 128;
const INDEXES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
const TAR_LAYERS: [&str; 5] = [
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
];

/// A content descriptor.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Descriptor {
    pub(crate) media_type: String,
    pub(crate) digest: Digest,
    pub(crate) size: u64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Debug, Clone, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    media_type: Option<String>,
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    manifests: Option<Vec<Descriptor>>,
}

/// What a manifest says to fetch next.
#[derive(Debug)]
pub(crate) enum Plan {
    /// An index: the manifest for this platform.
    Index(Descriptor),
    /// A wasm artefact: its one wasm layer.
    Wasm(Descriptor),
    /// A container image: its layers, in order, to look for `oci_path` in.
    Image(Vec<Descriptor>),
}

/// Reads a manifest (`media_type`: from the registry's Content-Type, when it
/// sent one) and says what to fetch.
pub(crate) fn plan(bytes: &[u8], path_in_image: Option<&str>, max: u64) -> Result<Plan, String> {
    let m: Manifest = serde_json::from_slice(bytes)
        .map_err(|e| format!("the manifest is not an OCI manifest ({e})"))?;
    if m.schema_version != 2 {
        return Err(format!(
            "the manifest has schemaVersion {}; only 2 is read",
            m.schema_version
        ));
    }
    if let Some(entries) = m.manifests {
        if m.media_type
            .as_deref()
            .is_some_and(|t| !INDEXES.contains(&t))
        {
            return Err(format!(
                "the manifest lists manifests but is a {:?}",
                m.media_type
            ));
        }
        let chosen = choose_platform(&entries)?;
        if !MANIFESTS.contains(&chosen.media_type.as_str()) {
            return Err(format!(
                "its entry {} is a {:?}, not an image manifest ({})",
                chosen.digest,
                chosen.media_type,
                MANIFESTS.join(" or ")
            ));
        }
        return Ok(Plan::Index(chosen));
    }
    if let Some(t) = m.media_type.as_deref()
        && !MANIFESTS.contains(&t)
    {
        return Err(format!(
            "the manifest is a {t:?}, not an image manifest ({}) or an index",
            MANIFESTS.join(" or ")
        ));
    }
    if m.layers.len() > MAX_LAYERS {
        return Err(format!(
            "it has {} layers, more than the {MAX_LAYERS} a plugin's image may have",
            m.layers.len()
        ));
    }
    let too_big = |d: &Descriptor| d.size > max;
    let wasm: Vec<&Descriptor> = m
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER || l.media_type == OLD_WASM_LAYER)
        .collect();
    let config = m
        .config
        .as_ref()
        .map(|c| c.media_type.as_str())
        .unwrap_or("none");
    let kinds = || {
        m.layers
            .iter()
            .map(|l| l.media_type.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if path_in_image.is_none() {
        return match wasm.as_slice() {
            [one] if too_big(one) => Err(format!(
                "its wasm layer is {} bytes, more than the {max} allowed (pull_max_mib)",
                one.size
            )),
            [one] => Ok(Plan::Wasm((*one).clone())),
            [] if m
                .layers
                .iter()
                .any(|l| TAR_LAYERS.contains(&l.media_type.as_str())) =>
            {
                Err(format!(
                    "it is a container image (config {config}; layers {}), not a wasm artefact: name the component's file in it with oci_path = \"/plugin.wasm\" (--oci-path), or push the .wasm with `csi-node-driver-registrar plugin push`",
                    kinds()
                ))
            }
            [] => Err(format!(
                "it is not a wasm artefact: config {config}, layers [{}]; a plugin has one {WASM_LAYER} (or {OLD_WASM_LAYER}) layer: push it with `csi-node-driver-registrar plugin push`",
                kinds()
            )),
            _ => Err(format!(
                "it has {} wasm layers; a plugin artefact has one",
                wasm.len()
            )),
        };
    }
    let tars: Vec<Descriptor> = m
        .layers
        .iter()
        .filter(|l| TAR_LAYERS.contains(&l.media_type.as_str()))
        .cloned()
        .collect();
    if let Some(zstd) = m.layers.iter().find(|l| l.media_type.ends_with("+zstd")) {
        return Err(format!(
            "layer {} is zstd-compressed ({}), which the registrar does not read: rebuild the image with gzip layers (docker's default), or push the .wasm with `csi-node-driver-registrar plugin push`",
            zstd.digest, zstd.media_type
        ));
    }
    if tars.is_empty() || tars.len() != m.layers.len() {
        return Err(format!(
            "oci_path is set, but the artefact is not a container image of tar layers (layers [{}]){}",
            kinds(),
            if wasm.is_empty() {
                ""
            } else {
                ": it has a wasm layer, so remove oci_path"
            }
        ));
    }
    if let Some(big) = tars.iter().find(|d| too_big(d)) {
        return Err(format!(
            "layer {} is {} bytes, more than the {max} allowed (pull_max_mib)",
            big.digest, big.size
        ));
    }
    let total = tars.iter().fold(0u64, |t, d| t.saturating_add(d.size));
    if total > max {
        return Err(format!(
            "its {} layers are {total} bytes together, more than the {max} allowed (pull_max_mib)",
            tars.len()
        ));
    }
    Ok(Plan::Image(tars))
}

/// The descriptors a manifest's plan would fetch next (for the fuzz target).
pub(crate) fn planned(
    bytes: &[u8],
    path_in_image: Option<&str>,
    max: u64,
) -> Result<Vec<Descriptor>, String> {
    Ok(match plan(bytes, path_in_image, max)? {
        Plan::Index(d) | Plan::Wasm(d) => vec![d],
        Plan::Image(layers) => layers,
    })
}

/// The manifest of an index to use: a wasm platform's, else this machine's
/// Linux one, else the only one that is not an attestation.
fn choose_platform(entries: &[Descriptor]) -> Result<Descriptor, String> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let is = |d: &&Descriptor, f: &dyn Fn(&Platform) -> bool| d.platform.as_ref().is_some_and(f);
    let pick = entries
        .iter()
        .find(|d| is(d, &|p| p.architecture == "wasm"))
        .or_else(|| {
            entries
                .iter()
                .find(|d| is(d, &|p| p.os == "linux" && p.architecture == arch))
        })
        .or_else(|| {
            let real: Vec<&Descriptor> = entries
                .iter()
                .filter(|d| !is(d, &|p| p.os == "unknown"))
                .collect();
            (real.len() == 1).then(|| real[0])
        });
    pick.cloned().ok_or_else(|| {
        let platforms: Vec<String> = entries
            .iter()
            .map(|d| match &d.platform {
                Some(p) => format!("{}/{}", p.os, p.architecture),
                None => "unspecified".into(),
            })
            .collect();
        format!(
            "it is an index of [{}], none of them wasm or linux/{arch}: pin the digest of the platform's manifest instead",
            platforms.join(", ")
        )
    })
}
