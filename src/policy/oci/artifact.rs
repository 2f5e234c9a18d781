//! Which manifests are plugins, and where their component is:
//! - the CNCF wasm artefact: config `application/vnd.wasm.config.v0+json`,
//!   one `application/wasm` layer (what `plugin push` writes);
//! - the older `application/vnd.wasm.content.layer.v1+wasm` layer (Kubewarden,
//!   wasm-to-oci);
//! - a container image whose tar (or tar+gzip) layers hold the file named by
//!   `oci_path` (`FROM scratch`, `COPY plugin.wasm /`).
//!
//! An index (a multi-platform image) points to one manifest per platform.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;

/// The CNCF wasm artefact's config.
pub(super) const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artefact's layer.
pub(super) const WASM_LAYER: &str = "application/wasm";
/// The layer type older tools push.
pub(super) const OLD_WASM_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// An OCI image manifest.
pub(super) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
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
pub(super) struct Descriptor {
    pub(super) media_type: String,
    pub(super) digest: String,
    pub(super) size: u64,
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
pub(super) enum Plan {
    /// An index: the manifest for this platform.
    Index(Descriptor),
    /// A wasm artefact: its one wasm layer.
    Wasm(Descriptor),
    /// A container image: its layers, in order, to look for `oci_path` in.
    Image(Vec<Descriptor>),
}

/// Reads a manifest (`media_type`: from the registry's Content-Type, when it
/// sent one) and says what to fetch.
pub(super) fn plan(bytes: &[u8], path_in_image: Option<&str>, max: u64) -> Result<Plan, String> {
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
        return choose_platform(&entries).map(Plan::Index);
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
    Ok(Plan::Image(tars))
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

fn normalize(p: &str) -> &str {
    let mut p = p;
    loop {
        let next = p.trim_start_matches('/');
        let next = next.strip_prefix("./").unwrap_or(next);
        if next == p {
            return p;
        }
        p = next;
    }
}

/// The file `path_in_image` from a container image's layers (blobs on disk,
/// bottom first), as the image's file system holds it: a later layer's copy
/// wins, and a whiteout removes it.
pub(super) fn extract(layers: &[&Path], path_in_image: &str, max: u64) -> Result<Vec<u8>, String> {
    let want = normalize(path_in_image);
    let (dir, name) = match want.rsplit_once('/') {
        Some((d, n)) => (format!("{d}/"), n),
        None => (String::new(), want),
    };
    let whiteout = format!("{dir}.wh.{name}");
    let mut found: Option<Vec<u8>> = None;
    for (i, layer) in layers.iter().enumerate() {
        let file = std::fs::File::open(layer).map_err(|e| format!("cannot read layer {i}: {e}"))?;
        let mut head = [0u8; 2];
        let gz = {
            let mut f = &file;
            let n = f.read(&mut head).unwrap_or(0);
            n == 2 && head == [0x1f, 0x8b]
        };
        let file = std::fs::File::open(layer).map_err(|e| format!("cannot read layer {i}: {e}"))?;
        let reader: Box<dyn Read> = if gz {
            Box::new(flate2::read::GzDecoder::new(file))
        } else {
            Box::new(file)
        };
        let mut archive = tar::Archive::new(reader);
        let entries = archive
            .entries()
            .map_err(|e| format!("layer {} is not a tar archive: {e}", i + 1))?;
        for entry in entries {
            let mut entry =
                entry.map_err(|e| format!("layer {} is not a tar archive: {e}", i + 1))?;
            let path = entry
                .path()
                .map_err(|e| format!("layer {}: {e}", i + 1))?
                .to_string_lossy()
                .into_owned();
            let path = normalize(&path);
            if path == whiteout {
                found = None;
                continue;
            }
            if path != want {
                continue;
            }
            let kind = entry.header().entry_type();
            if !kind.is_file() {
                return Err(format!(
                    "{path_in_image} in layer {} is not a regular file ({kind:?}): COPY the component itself into the image",
                    i + 1
                ));
            }
            if entry.size() > max {
                return Err(format!(
                    "{path_in_image} is {} bytes, more than the {max} allowed (pull_max_mib)",
                    entry.size()
                ));
            }
            let mut bytes = Vec::with_capacity(entry.size() as usize);
            (&mut entry)
                .take(max + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("layer {}: {e}", i + 1))?;
            found = Some(bytes);
        }
    }
    found.ok_or_else(|| {
        format!(
            "the image has no file {path_in_image} in its {} layer(s): give oci_path as the file's path in the image",
            layers.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(layers: &[(&str, u64)]) -> Vec<u8> {
        let layers: Vec<serde_json::Value> = layers
            .iter()
            .map(|(t, size)| serde_json::json!({"mediaType": t, "digest": format!("sha256:{}", "0".repeat(64)), "size": size}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{}", "1".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn the_three_formats() {
        assert!(matches!(
            plan(&manifest(&[(WASM_LAYER, 10)]), None, 100),
            Ok(Plan::Wasm(_))
        ));
        assert!(matches!(
            plan(&manifest(&[(OLD_WASM_LAYER, 10)]), None, 100),
            Ok(Plan::Wasm(_))
        ));
        let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
        assert!(
            matches!(plan(&manifest(&[(tar, 10)]), Some("/p.wasm"), 100), Ok(Plan::Image(l)) if l.len() == 1)
        );
    }

    #[test]
    fn what_is_not_a_plugin_says_what_it_is() {
        let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
        let err = plan(&manifest(&[(tar, 10)]), None, 100).unwrap_err();
        assert!(
            err.starts_with("it is a container image") && err.contains("oci_path"),
            "{err}"
        );
        let err = plan(&manifest(&[("text/plain", 10)]), None, 100).unwrap_err();
        assert!(err.starts_with("it is not a wasm artefact: config application/vnd.oci.image.config.v1+json, layers [text/plain]"), "{err}");
        let err = plan(&manifest(&[(WASM_LAYER, 1000)]), None, 100).unwrap_err();
        assert_eq!(
            err,
            "its wasm layer is 1000 bytes, more than the 100 allowed (pull_max_mib)"
        );
        let zstd = "application/vnd.oci.image.layer.v1.tar+zstd";
        let err = plan(&manifest(&[(zstd, 10)]), Some("/plugin.wasm"), 100).unwrap_err();
        assert!(
            err.starts_with("layer sha256:")
                && err.contains(" is zstd-compressed (application/vnd.oci.image.layer.v1.tar+zstd), which the registrar does not read: rebuild the image with gzip layers"),
            "{err}"
        );
        let err = plan(b"{}", None, 100).unwrap_err();
        assert!(
            err.starts_with("the manifest is not an OCI manifest"),
            "{err}"
        );
    }

    #[test]
    fn a_file_from_image_layers_with_overrides_and_whiteouts() {
        let dir = tempfile::tempdir().unwrap();
        let layer = |name: &str, files: &[(&str, &[u8])], gzip: bool| {
            let path = dir.path().join(name);
            let mut builder = tar::Builder::new(Vec::new());
            for (p, data) in files {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(0o644);
                h.set_cksum();
                builder.append_data(&mut h, p, *data).unwrap();
            }
            let raw = builder.into_inner().unwrap();
            let bytes = if gzip {
                use std::io::Write;
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(&raw).unwrap();
                gz.finish().unwrap()
            } else {
                raw
            };
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let a = layer("a", &[("plugin.wasm", b"old"), ("etc/x", b"x")], true);
        let b = layer("b", &[("./plugin.wasm", b"new")], false);
        let c = layer("c", &[(".wh.plugin.wasm", b"")], true);
        assert_eq!(extract(&[&a, &b], "/plugin.wasm", 100).unwrap(), b"new");
        let err = extract(&[&a, &b, &c], "/plugin.wasm", 100).unwrap_err();
        assert_eq!(
            err,
            "the image has no file /plugin.wasm in its 3 layer(s): give oci_path as the file's path in the image"
        );
        let err = extract(&[&a], "/plugin.wasm", 2).unwrap_err();
        assert!(err.contains("more than the 2 allowed"), "{err}");
    }
}
