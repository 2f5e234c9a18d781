//! `plugin push` and `plugin pull`: components to and from OCI registries,
//! ending with the pinned line a policy file takes.

use std::path::Path;

use super::author;
use crate::policy::fetch::{read_component, run_blocking};
use crate::policy::oci::{self, ComponentInfo};
use crate::policy::{Digest, OciReference, PluginSource};

/// The line to paste into a `[[plugin]]` entry.
fn pinned_line(reference: &OciReference, digest: &Digest) -> String {
    let repo = match &reference.tag {
        Some(t) => format!("{}/{}:{t}", reference.registry, reference.repository),
        None => format!("{}/{}", reference.registry, reference.repository),
    };
    format!("oci = \"{repo}@{digest}\"")
}

pub(super) fn push(sources: &author::Sources, wasm: &Path, reference: &str) -> anyhow::Result<()> {
    let reference = OciReference::parse(reference).map_err(anyhow::Error::msg)?;
    if reference.digest.is_some() {
        anyhow::bail!(
            "{reference}: push to a tag or a bare repository; the digest is the manifest's, and is printed once pushed"
        );
    }
    // Only what the registrar would load is pushed.
    let inspection = author::inspect(&author::host()?, sources, wasm)?;
    let bytes = read_component(wasm).map_err(|m| anyhow::anyhow!("{}: {m}", wasm.display()))?;
    let info = ComponentInfo {
        exports: inspection.exports.clone(),
        imports: inspection.imports.clone(),
        file_name: wasm
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin.wasm".into()),
    };
    let options = match sources
        .source_of(Path::new(&format!("oci://{reference}")))
        .map_err(anyhow::Error::msg)?
    {
        PluginSource::Oci(o) => o.registry,
        PluginSource::File { .. } => unreachable!("an oci:// argument"),
    };
    let digest = run_blocking(oci::push(bytes, &info, &reference, &options))?;
    eprintln!(
        "pushed {} ({} {}, {} bytes, sha256 {}) to {reference}",
        wasm.display(),
        inspection.name,
        inspection.version,
        inspection.size_bytes,
        inspection.sha256
    );
    outln!("{}", pinned_line(&reference, &digest));
    Ok(())
}

pub(super) fn pull(
    sources: &author::Sources,
    reference: &str,
    output: Option<&Path>,
) -> anyhow::Result<()> {
    let arg = if reference.starts_with("oci://") {
        reference.to_owned()
    } else {
        format!("oci://{reference}")
    };
    let PluginSource::Oci(mut source) = sources
        .source_of(Path::new(&arg))
        .map_err(anyhow::Error::msg)?
    else {
        unreachable!("an oci:// argument")
    };
    let digest = run_blocking(oci::resolve(
        &source.reference,
        &source.registry,
        &source.store,
    ))?;
    source.reference.digest = Some(digest);
    let pulled = run_blocking(oci::fetch(&source))?;
    // Loaded as the registrar would, from the pinned reference.
    let pinned = format!("oci://{}", source.reference);
    let inspection = author::inspect(&author::host()?, sources, Path::new(&pinned))?;
    if let Some(out) = output {
        std::fs::write(out, &pulled.wasm)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
    }
    eprintln!(
        "pulled {} ({} {}, {} bytes, sha256 {}; hooks {}){}",
        source.reference,
        inspection.name,
        inspection.version,
        inspection.size_bytes,
        inspection.sha256,
        inspection.hooks.join(", "),
        output
            .map(|o| format!(" into {}", o.display()))
            .unwrap_or_default()
    );
    outln!("{}", pinned_line(&source.reference, &digest));
    if let Some(p) = &source.path_in_image {
        outln!("oci_path = \"{p}\"");
    }
    Ok(())
}
