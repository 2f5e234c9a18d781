//! `plugin inspect`: a component's WIT version, hooks, imports, size and sha256.

use std::path::Path;

use super::author;

pub(super) fn run(wasm: &Path, json: bool) -> anyhow::Result<()> {
    let i = author::inspect(&author::host()?, wasm)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&i)?);
        return Ok(());
    }
    let listed = |items: &[String]| match items {
        [] => "none".to_owned(),
        items => items.join(", "),
    };
    println!("{} ({} {})", i.path, i.name, i.version);
    println!("  size     {} bytes", i.size_bytes);
    println!("  sha256   {}", i.sha256);
    println!("  hooks    {}", listed(&i.hooks));
    println!("  exports  {}", i.exports.join(", "));
    println!("  imports  {}", listed(&i.imports));
    Ok(())
}
