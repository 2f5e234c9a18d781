//! `plugin inspect`: a component's WIT version, hooks, imports, size and sha256.

use std::path::Path;

use super::author;

pub(super) fn run(sources: &author::Sources, wasm: &Path, json: bool) -> anyhow::Result<()> {
    let i = author::inspect(&author::host()?, sources, wasm)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&i)?);
        return Ok(());
    }
    let listed = |items: &[String]| match items {
        [] => "none".to_owned(),
        items => items.join(", "),
    };
    outln!("{} ({} {})", i.path, i.name, i.version);
    outln!("  size     {} bytes", i.size_bytes);
    outln!("  sha256   {}", i.sha256);
    outln!("  hooks    {}", listed(&i.hooks));
    outln!("  exports  {}", i.exports.join(", "));
    outln!("  imports  {}", listed(&i.imports));
    Ok(())
}
