//! `plugin validate`: load a component with settings, as the registrar does at start-up.

use std::path::Path;

use super::author;
use super::cli::SettingsArgs;
use crate::policy::file::PluginConfig;

pub(super) fn run(
    sources: &author::Sources,
    wasm: &Path,
    settings: &SettingsArgs,
) -> anyhow::Result<()> {
    let cfg = PluginConfig {
        settings_json: settings.json()?,
        ..sources.unpinned(wasm)
    };
    let component =
        crate::policy::fetch::component_blocking(&cfg).map_err(|e| cfg.source_error(e))?;
    let plugin = author::host()?.load(&cfg, &component, None)?;
    let hooks: Vec<_> = plugin.exported_hooks().iter().map(|h| h.as_str()).collect();
    outln!(
        "ok: {} loads with these settings; hooks: {}",
        wasm.display(),
        hooks.join(", ")
    );
    Ok(())
}
