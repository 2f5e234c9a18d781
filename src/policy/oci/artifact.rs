//! A plugin's component out of its artefact: the wasm layer, or the file
//! `oci_path` names in a container image's layers, applied as the OCI image
//! spec applies them. What to fetch is `policy::manifest`'s.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};

use super::store::HashingReader;
use crate::policy::Digest;
pub(super) use crate::policy::manifest::{OCI_MANIFEST, Plan, WASM_CONFIG, WASM_LAYER, plan};

fn normalize(p: &str) -> &str {
    let mut p = p;
    loop {
        let next = p.trim_start_matches('/');
        let next = next.strip_prefix("./").unwrap_or(next);
        let next = next.trim_end_matches('/');
        if next == p {
            return p;
        }
        p = next;
    }
}

/// Whether `ancestor` is `path` or a directory above it.
fn covers(ancestor: &str, path: &str) -> bool {
    ancestor.is_empty()
        || path == ancestor
        || path
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// One layer blob, opened from the store, to look for the file in.
pub(super) struct Layer {
    /// Its digest: what it read must hash to.
    pub(super) digest: Digest,
    /// The blob.
    pub(super) file: std::fs::File,
}

/// Counts what is decompressed against the pull's bound, and stops when the
/// pull's deadline has passed.
struct Budget<'a, R> {
    inner: R,
    left: &'a mut u64,
    max: u64,
    cancelled: &'a AtomicBool,
}

impl<R: Read> Read for Budget<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the pull's deadline passed (pull_timeout_ms); stopped reading",
            ));
        }
        let n = self.inner.read(buf)?;
        if n as u64 > *self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::QuotaExceeded,
                format!(
                    "the layers decompress to more than the {} bytes allowed (pull_max_mib); stopped reading",
                    self.max
                ),
            ));
        }
        *self.left -= n as u64;
        Ok(n)
    }
}

/// What one layer says of the file.
#[derive(Default)]
struct Seen {
    /// The file, if this layer has it (the last entry of that path wins).
    file: Option<Result<Vec<u8>, String>>,
    /// Why lower layers' copies are hidden: a whiteout of it or of a
    /// directory above it, an opaque directory above it, or a non-directory
    /// in place of a directory above it.
    hides: Option<String>,
}

/// The file `path_in_image` from a container image's layers (bottom first),
/// as the OCI image spec's changeset rules apply them: the topmost layer that
/// has the file gives it; a whiteout (`.wh.NAME`), an opaque directory
/// (`.wh..wh..opq`) or a non-directory above it, in some layer, hides the
/// copies of the layers below that one (never its own layer's). Layers are
/// read top down, only as far as needed. Each is hashed again as it is read
/// (it must still have its digest), everything decompressed counts against
/// `max`, and reading stops once `cancelled` is set.
pub(super) fn extract(
    layers: Vec<Layer>,
    path_in_image: &str,
    max: u64,
    cancelled: &AtomicBool,
) -> Result<Vec<u8>, String> {
    let want = normalize(path_in_image);
    let count = layers.len();
    let mut left = max;
    for (i, layer) in layers.into_iter().enumerate().rev() {
        let n = i + 1;
        let mut raw = std::io::BufReader::new(layer.file);
        let gz = std::io::BufRead::fill_buf(&mut raw)
            .map_err(|e| format!("cannot read layer {n}: {e}"))?
            .starts_with(&[0x1f, 0x8b]);
        let mut hashing = HashingReader::new(raw);
        let inner: Box<dyn Read + '_> = if gz {
            Box::new(flate2::read::GzDecoder::new(&mut hashing))
        } else {
            Box::new(&mut hashing)
        };
        let budget = Budget {
            inner,
            left: &mut left,
            max,
            cancelled,
        };
        let seen = scan(budget, want, path_in_image, n, max)?;
        std::io::copy(&mut hashing, &mut std::io::sink())
            .map_err(|e| format!("cannot read layer {n}: {e}"))?;
        if hashing.digest() != layer.digest {
            return Err(format!(
                "layer {} changed in the cache while being read",
                layer.digest
            ));
        }
        if let Some(file) = seen.file {
            return file;
        }
        if let Some(why) = seen.hides {
            return Err(format!(
                "the image has no file {path_in_image}: layer {n} of {count} deletes it ({why}), so the copies below are hidden: give oci_path as the file's path in the image"
            ));
        }
    }
    Err(format!(
        "the image has no file {path_in_image} in its {count} layer(s): give oci_path as the file's path in the image"
    ))
}

/// Reads one layer's tar stream for what it says of `want`.
fn scan(
    reader: Budget<'_, Box<dyn Read + '_>>,
    want: &str,
    path_in_image: &str,
    n: usize,
    max: u64,
) -> Result<Seen, String> {
    let mut seen = Seen::default();
    let mut archive = tar::Archive::new(reader);
    let not_tar = |e: std::io::Error| {
        // A bound the reader enforces is not the archive's fault.
        let bound = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::QuotaExceeded | std::io::ErrorKind::TimedOut
            )
        };
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<std::io::Error>());
        if bound(&e) || inner.is_some_and(bound) {
            format!(
                "layer {n}: {}",
                inner.map_or(e.to_string(), |i| i.to_string())
            )
        } else {
            format!("layer {n} is not a tar archive: {e}")
        }
    };
    for entry in archive.entries().map_err(not_tar)? {
        let mut entry = entry.map_err(not_tar)?;
        let raw = entry.path().map_err(|e| format!("layer {n}: {e}"))?;
        let path = raw.to_string_lossy().into_owned();
        let path = normalize(&path);
        let (dir, name) = match path.rsplit_once('/') {
            Some((d, f)) => (d, f),
            None => ("", path),
        };
        let kind = entry.header().entry_type();
        if name == ".wh..wh..opq" {
            if covers(dir, want) && dir != want {
                seen.hides = Some(format!("{path}, an opaque whiteout"));
            }
            continue;
        }
        if let Some(target) = name.strip_prefix(".wh.") {
            let target = if dir.is_empty() {
                target.to_owned()
            } else {
                format!("{dir}/{target}")
            };
            if covers(&target, want) {
                seen.hides = Some(format!("{path}, a whiteout"));
            }
            continue;
        }
        if path != want {
            if covers(path, want) && !kind.is_dir() {
                seen.hides = Some(format!("{path}, which is not a directory"));
            }
            continue;
        }
        if !kind.is_file() {
            seen.file = Some(Err(format!(
                "{path_in_image} in layer {n} is not a regular file ({kind:?}): COPY the component itself into the image"
            )));
            continue;
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
            .map_err(|e| format!("layer {n}: {e}"))?;
        seen.file = Some(Ok(bytes));
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::manifest::{MAX_LAYERS, OLD_WASM_LAYER};

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

    /// Image layers as `extract` gets them: (digest, opened blob), from
    /// tar entries (`None` data: a directory).
    struct Layers(tempfile::TempDir, Vec<(Digest, std::path::PathBuf)>);

    impl Layers {
        fn new() -> Self {
            Layers(tempfile::tempdir().unwrap(), Vec::new())
        }

        fn add(mut self, files: &[(&str, Option<&[u8]>)], gzip: bool) -> Self {
            let mut builder = tar::Builder::new(Vec::new());
            for (p, data) in files {
                let mut h = tar::Header::new_gnu();
                match data {
                    Some(d) => {
                        h.set_size(d.len() as u64);
                        h.set_mode(0o644);
                        h.set_cksum();
                        builder.append_data(&mut h, p, *d).unwrap();
                    }
                    None => {
                        h.set_entry_type(tar::EntryType::Directory);
                        h.set_size(0);
                        h.set_mode(0o755);
                        h.set_cksum();
                        builder.append_data(&mut h, p, &[][..]).unwrap();
                    }
                }
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
            let path = self.0.path().join(self.1.len().to_string());
            std::fs::write(&path, &bytes).unwrap();
            self.1.push((Digest::of(&bytes), path));
            self
        }

        fn get(&self, path: &str, max: u64) -> Result<Vec<u8>, String> {
            let layers = self
                .1
                .iter()
                .map(|(digest, p)| Layer {
                    digest: *digest,
                    file: std::fs::File::open(p).unwrap(),
                })
                .collect();
            extract(layers, path, max, &AtomicBool::new(false))
        }
    }

    const W: &str = "/plugin.wasm";

    #[test]
    fn the_topmost_copy_wins_in_gzip_or_plain_layers() {
        let l = Layers::new()
            .add(
                &[("plugin.wasm", Some(b"old")), ("etc/x", Some(b"x"))],
                true,
            )
            .add(&[("./plugin.wasm", Some(b"new"))], false);
        assert_eq!(l.get(W, 1 << 20).unwrap(), b"new");
        assert_eq!(l.get("etc/x", 1 << 20).unwrap(), b"x");
        let err = Layers::new()
            .add(&[("p", Some(b"x"))], true)
            .get(W, 1 << 20)
            .unwrap_err();
        assert_eq!(
            err,
            "the image has no file /plugin.wasm in its 1 layer(s): give oci_path as the file's path in the image"
        );
    }

    #[test]
    fn a_whiteout_hides_the_file_in_lower_layers() {
        let err = Layers::new()
            .add(&[("plugin.wasm", Some(b"old"))], true)
            .add(&[(".wh.plugin.wasm", Some(b""))], true)
            .get(W, 1 << 20)
            .unwrap_err();
        assert_eq!(
            err,
            "the image has no file /plugin.wasm: layer 2 of 2 deletes it (.wh.plugin.wasm, a whiteout), so the copies below are hidden: give oci_path as the file's path in the image"
        );
    }

    #[test]
    fn a_whiteout_of_a_parent_directory_hides_what_is_under_it() {
        let err = Layers::new()
            .add(&[("opt/p/plugin.wasm", Some(b"old"))], true)
            .add(&[("opt/.wh.p", Some(b""))], true)
            .get("/opt/p/plugin.wasm", 1 << 20)
            .unwrap_err();
        assert!(
            err.contains("layer 2 of 2 deletes it (opt/.wh.p, a whiteout)"),
            "{err}"
        );
    }

    #[test]
    fn an_opaque_whiteout_hides_everything_below_in_its_directory() {
        let l = Layers::new()
            .add(
                &[("opt/p/plugin.wasm", Some(b"old")), ("opt/q", Some(b"q"))],
                true,
            )
            .add(&[("opt/p", None), ("opt/p/.wh..wh..opq", Some(b""))], true);
        let err = l.get("/opt/p/plugin.wasm", 1 << 20).unwrap_err();
        assert!(
            err.contains("layer 2 of 2 deletes it (opt/p/.wh..wh..opq, an opaque whiteout)"),
            "{err}"
        );
        assert_eq!(
            l.get("/opt/q", 1 << 20).unwrap(),
            b"q",
            "only that directory is opaque"
        );
    }

    #[test]
    fn a_whiteout_hides_lower_layers_only_not_its_own() {
        // The spec applies a layer's whiteouts to the layers below it, so a
        // file the same layer adds stays, whatever the order of the entries.
        for entries in [
            [
                (".wh.plugin.wasm", Some(&b""[..])),
                ("plugin.wasm", Some(&b"new"[..])),
            ],
            [
                ("plugin.wasm", Some(&b"new"[..])),
                (".wh.plugin.wasm", Some(&b""[..])),
            ],
        ] {
            let l = Layers::new()
                .add(&[("plugin.wasm", Some(b"old"))], true)
                .add(&entries, true);
            assert_eq!(l.get(W, 1 << 20).unwrap(), b"new", "{entries:?}");
        }
        let l = Layers::new()
            .add(&[("opt/plugin.wasm", Some(b"old"))], true)
            .add(
                &[
                    ("opt/.wh..wh..opq", Some(b"")),
                    ("opt/plugin.wasm", Some(b"new")),
                ],
                true,
            );
        assert_eq!(l.get("/opt/plugin.wasm", 1 << 20).unwrap(), b"new");
    }

    #[test]
    fn a_file_in_place_of_a_parent_directory_hides_what_was_under_it() {
        let err = Layers::new()
            .add(&[("opt/plugin.wasm", Some(b"old"))], true)
            .add(&[("opt", Some(b"now a file"))], true)
            .get("/opt/plugin.wasm", 1 << 20)
            .unwrap_err();
        assert!(err.contains("(opt, which is not a directory)"), "{err}");
    }

    #[test]
    fn decompressed_bytes_count_against_the_bound_and_so_does_the_deadline() {
        // 4 MiB of zeros compress to a few KiB: the bound is on what comes out.
        let zeros = vec![0u8; 4 << 20];
        let l = Layers::new().add(&[("big", Some(&zeros)), ("plugin.wasm", Some(b"p"))], true);
        let compressed = std::fs::metadata(&l.1[0].1).unwrap().len();
        assert!(compressed < 64 << 10, "{compressed}");
        let err = l.get(W, 1 << 20).unwrap_err();
        assert!(
            err.contains("the layers decompress to more than the 1048576 bytes allowed (pull_max_mib); stopped reading"),
            "{err}"
        );
        let layers = vec![Layer {
            digest: l.1[0].0,
            file: std::fs::File::open(&l.1[0].1).unwrap(),
        }];
        let err = extract(layers, W, 64 << 20, &AtomicBool::new(true)).unwrap_err();
        assert!(
            err.contains("the pull's deadline passed (pull_timeout_ms)"),
            "{err}"
        );
        assert_eq!(l.get(W, 8 << 20).unwrap(), b"p");
    }

    #[test]
    fn a_layer_changed_after_it_was_checked_is_refused() {
        let mut l = Layers::new().add(&[("plugin.wasm", Some(b"p"))], false);
        l.1[0].0 = Digest::of(b"something else");
        let err = l.get(W, 1 << 20).unwrap_err();
        assert!(
            err.ends_with("changed in the cache while being read"),
            "{err}"
        );
    }

    #[test]
    fn more_layers_than_a_plugin_image_has_are_refused() {
        let tar = "application/vnd.oci.image.layer.v1.tar+gzip";
        let many = vec![(tar, 1); MAX_LAYERS + 1];
        let err = plan(&manifest(&many), Some(W), 1 << 20).unwrap_err();
        assert_eq!(
            err,
            "it has 129 layers, more than the 128 a plugin's image may have"
        );
        let err = plan(&manifest(&[(tar, 60), (tar, 60)]), Some(W), 100).unwrap_err();
        assert_eq!(
            err,
            "its 2 layers are 120 bytes together, more than the 100 allowed (pull_max_mib)"
        );
    }

    #[test]
    fn media_types_are_checked() {
        let mut m: serde_json::Value =
            serde_json::from_slice(&manifest(&[(WASM_LAYER, 10)])).unwrap();
        m["mediaType"] = "application/vnd.oci.image.config.v1+json".into();
        let err = plan(&serde_json::to_vec(&m).unwrap(), None, 100).unwrap_err();
        assert!(
            err.starts_with("the manifest is a \"application/vnd.oci.image.config.v1+json\", not an image manifest"),
            "{err}"
        );
        let index = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                "digest": format!("sha256:{}", "2".repeat(64)), "size": 10,
                "platform": {"os": "linux", "architecture": "wasm"}}],
        });
        let err = plan(&serde_json::to_vec(&index).unwrap(), None, 100).unwrap_err();
        assert!(
            err.contains("is a \"application/vnd.oci.image.index.v1+json\", not an image manifest"),
            "{err}"
        );
    }

    #[test]
    fn a_digest_that_is_a_path_is_not_a_digest() {
        for bad in ["sha256:/etc/kubernetes/admin.conf", "sha256:../../x"] {
            let m = serde_json::json!({
                "schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "layers": [{"mediaType": WASM_LAYER, "digest": bad, "size": 10}],
            });
            let err = plan(&serde_json::to_vec(&m).unwrap(), None, 100).unwrap_err();
            assert!(
                err.contains("is not sha256:<64 lowercase hex digits>"),
                "{err}"
            );
        }
        let m = serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "layers": [{"mediaType": WASM_LAYER, "digest": format!("sha512:{}", "a".repeat(128)), "size": 10}],
        });
        let err = plan(&serde_json::to_vec(&m).unwrap(), None, 100).unwrap_err();
        assert!(
            err.contains("uses sha512, which this registrar does not support"),
            "{err}"
        );
    }
}
