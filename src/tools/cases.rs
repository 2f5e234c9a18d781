//! A cases file: what a plugin must decide, stated as data, for
//! `plugin test` (which checks it) and `plugin bench` (which times it).
//!
//! ```toml
//! plugin = "../../target/wasm32-wasip2/release/pool_suffix.wasm"  # relative to this file
//!
//! [settings]                 # the plugin's settings for every case
//! suffix = "-pool-a"
//!
//! [context]                  # the registration context for every case
//! driver_name = "hostpath.csi.k8s.io"
//!
//! [[case]]
//! name = "appends the suffix"
//! hook = "driver-name"
//! expect = { rename = "hostpath.csi.k8s.io-pool-a" }
//!
//! [[case]]
//! name = "a name past 63 characters is refused"
//! hook = "driver-name"
//! current = "a-very-long-driver-name-that-is-already-close-to-the-limit.io"
//! expect = { error = "the CSI spec allows at most 63" }
//! ```
//!
//! A case may set its own `settings` (replacing the file's) and `context`
//! (over the file's); `current` (driver-name, endpoint) or `versions`
//! (versions); `error`, `attempt` and `elapsed_ms` (failure). `expect` is the
//! decision as `plugin run` shows it (`"keep"`, `{ rename = … }`,
//! `{ replace = … }`, `{ supported_versions = […] }`, `{ exit = N }`,
//! `{ retry = MS }`, `"ignore"`, `"defer"`), or `{ error = "…" }`: a refusal
//! (at load or from the call) whose reason contains that text.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::author::{self, HookInput, Sources};
use crate::policy::file::PluginConfig;
use crate::policy::read::{MAX_POLICY_FILE, read_regular_file};
use crate::policy::wasm::Host;
use crate::policy::wasm::cache::CacheKey;
use crate::policy::{Chain, Context, Failure, Hook};
use crate::toml_file;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CasesFile {
    plugin: Option<PathBuf>,
    #[serde(default)]
    settings: toml::Table,
    #[serde(default)]
    context: toml::Table,
    #[serde(default, rename = "case")]
    pub(super) cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Case {
    pub(super) name: String,
    pub(super) hook: Hook,
    settings: Option<toml::Table>,
    #[serde(default)]
    context: toml::Table,
    current: Option<String>,
    #[serde(default)]
    versions: Vec<String>,
    error: Option<String>,
    attempt: Option<u32>,
    elapsed_ms: Option<u64>,
    pub(super) expect: toml::Value,
}

/// Reads and checks the cases file; errors name the file, the line and the key.
pub(super) fn read(path: &Path) -> anyhow::Result<CasesFile> {
    let bytes = read_regular_file(path, MAX_POLICY_FILE)
        .map_err(|e| anyhow::anyhow!("cannot read cases file {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("cases file {} is not UTF-8", path.display()))?;
    let file: CasesFile = toml_file::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "cases file {}, line {}{}: {}",
            path.display(),
            e.line,
            e.key.map(|k| format!(", key {k}")).unwrap_or_default(),
            e.message
        )
    })?;
    if file.cases.is_empty() {
        anyhow::bail!(
            "cases file {} has no cases: add one or more [[case]] tables (name, hook, expect)",
            path.display()
        );
    }
    Ok(file)
}

impl CasesFile {
    /// The component to run: `--plugin`, or the file's `plugin`, relative to it.
    pub(super) fn plugin(&self, cases: &Path, plugin: Option<&Path>) -> anyhow::Result<PathBuf> {
        plugin
            .map(Path::to_owned)
            .or_else(|| {
                self.plugin
                    .as_ref()
                    .map(|p| cases.parent().unwrap_or(Path::new(".")).join(p))
            })
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: no plugin: set plugin = \"FILE.wasm\" at the top of the file, or pass --plugin FILE",
                    cases.display()
                )
            })
    }
}

/// Loads a plugin once per case, each with its own settings; a cache of
/// the run compiles the component only once (a Python one takes seconds).
pub(super) struct Loader {
    host: Arc<Host>,
    plugin: PluginConfig,
    _dir: tempfile::TempDir,
    entries: PathBuf,
    key: CacheKey,
}

impl Loader {
    pub(super) fn new(host: Arc<Host>, sources: &Sources, wasm: PathBuf) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("plugin-cases-").tempdir()?;
        let key_file = dir.path().join("key");
        std::fs::write(&key_file, CacheKey::generate()?)?;
        let entries = dir.path().join("entries");
        let key = CacheKey::read(&key_file, &entries).map_err(anyhow::Error::msg)?;
        Ok(Loader {
            host,
            plugin: sources.unpinned(&wasm),
            _dir: dir,
            entries,
            key,
        })
    }

    /// The registrar's decision path for `case`, what it asks, and in which
    /// context; `Err`: the plugin refused to load (its settings, say).
    pub(super) fn prepare(
        &self,
        file: &CasesFile,
        case: &Case,
    ) -> Result<(Chain, Context, HookInput), String> {
        let settings = case.settings.as_ref().unwrap_or(&file.settings);
        let ctx = context(&file.context, &case.context)?;
        let cfg = PluginConfig {
            settings_json: serde_json::to_string(settings).map_err(|e| e.to_string())?,
            plugin_type: ctx.plugin_type,
            ..self.plugin.clone()
        };
        let input = HookInput {
            current: case.current.clone(),
            versions: case.versions.clone(),
            failure: (case.hook == Hook::Failure).then(|| Failure {
                error: case
                    .error
                    .clone()
                    .unwrap_or_else(|| super::cli::EXAMPLE_REFUSAL.into()),
                attempt: case.attempt.unwrap_or(1),
                elapsed: Duration::from_millis(case.elapsed_ms.unwrap_or(0)),
            }),
        };
        let chain = author::chain_of(&self.host, cfg, case.hook, Some((&self.entries, &self.key)))
            .map_err(|e| e.to_string())?;
        Ok((chain, ctx, input))
    }
}

/// The example context, with the file's `[context]` and then the case's over it.
pub(super) fn context(file: &toml::Table, case: &toml::Table) -> Result<Context, String> {
    let mut merged = toml::Table::try_from(author::example_context()).map_err(|e| e.to_string())?;
    merged.extend(file.clone());
    merged.extend(case.clone());
    merged
        .try_into()
        .map_err(|e: toml::de::Error| format!("context: {}", e.message()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_case_context_goes_over_the_files() {
        let file: toml::Table =
            toml::from_str("driver_name = \"a.csi.io\"\nnode_name = \"n1\"").unwrap();
        let case: toml::Table = toml::from_str("node_name = \"n2\"").unwrap();
        let ctx = context(&file, &case).unwrap();
        assert_eq!(
            (ctx.driver_name.as_str(), ctx.node_name.as_str()),
            ("a.csi.io", "n2")
        );
        let bad: toml::Table = toml::from_str("node = \"n2\"").unwrap();
        assert!(
            context(&file, &bad)
                .unwrap_err()
                .contains("unknown field `node`")
        );
    }
}
