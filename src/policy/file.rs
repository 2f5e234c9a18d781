//! The policy file: an ordered list of WebAssembly plugins and their limits.
//!
//! ```toml
//! [policy]
//! cache_dir = "/var/lib/csi-registrar/wasm-cache"
//!
//! [policy.defaults]
//! timeout_ms = 100
//!
//! [[plugin]]
//! id = "pool-suffix"
//! path = "/etc/csi-registrar/pool-suffix.wasm"
//! sha256 = "9c1f…"
//! hooks = ["driver-name"]
//! [plugin.settings]
//! suffix = "-pool-a"
//! ```
//!
//! Unknown keys are errors, and every error names the file, the line and the key.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::hook::Hook;
use super::read::{MAX_POLICY_FILE, read_regular_file};
use super::source::{
    DEFAULT_PULL_MAX_MIB, DEFAULT_PULL_TIMEOUT_MS, OciReference, OciSource, PluginSource,
    RegistryOptions,
};
use crate::plugin_type::PluginType;
use crate::toml_file::{self, line_of};

/// Deadline of one plugin call unless the file says otherwise.
pub(crate) const DEFAULT_TIMEOUT_MS: u64 = 100;
/// The kubelet waits about 1 s for GetInfo; no plugin call may take that long.
pub const MAX_TIMEOUT_MS: u64 = 999;
/// Memory cap of one plugin instance unless the file says otherwise.
pub(crate) const DEFAULT_MEMORY_LIMIT_MIB: u64 = 32;
/// The most `memory_limit_mib` may be.
pub const MAX_MEMORY_LIMIT_MIB: u64 = 4096;
/// Bounds a plugin's retry delay is clamped to.
pub const DEFAULT_MIN_RETRY_MS: u64 = 500;
/// The longest retry delay unless the file says otherwise.
pub const DEFAULT_MAX_RETRY_MS: u64 = 300_000;

/// What a plugin error (trap, timeout, invalid output, `policy-error`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Fail closed: at start-up the registrar refuses to start; on a refusal it
    /// applies the built-in decision (exit 1).
    #[default]
    Fail,
    /// Fail open: log it and go on as if the plugin had kept the current value
    /// (or deferred, for the failure hook).
    Skip,
}

/// Whether a plugin's decisions are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Apply the plugin's decisions.
    #[default]
    Enforce,
    /// Run the plugin and log its decision, but do not apply it.
    Monitor,
}

/// The file as written, before any check: every key it may have.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// `[policy]`: what applies to every plugin.
    #[serde(default)]
    policy: RawPolicy,
    /// `[[plugin]]`: the plugins, in the order they run.
    #[serde(default)]
    plugin: Vec<RawPlugin>,
}

/// `[policy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    /// Where compiled plugins are cached (created 0700), relative to the
    /// policy file's directory. Absent: compile at every start.
    cache_dir: Option<PathBuf>,
    /// A file holding the secret that binds cache entries to their pins; it
    /// must live outside the cache directory. Absent: the cache is not used.
    cache_key_file: Option<PathBuf>,
    /// Retired: deadlines are armed per call. An old file that sets it is
    /// warned about, not refused.
    epoch_tick_ms: Option<Spanned<toml::Value>>,
    /// The shortest retry delay a failure hook may ask for (1 ms to 1 h,
    /// default 500 ms).
    min_retry_ms: Option<Spanned<u64>>,
    /// The longest retry delay a failure hook may ask for (1 ms to 1 h,
    /// default 5 min); at least `min_retry_ms`.
    max_retry_ms: Option<Spanned<u64>>,
    /// Credentials for `oci` plugins: a `.dockerconfigjson` file.
    registry_auth_file: Option<PathBuf>,
    /// PEM certificates trusted for registries, besides the system's.
    registry_ca_file: Option<PathBuf>,
    /// `HOST:PORT`s pulled from over plain HTTP.
    #[serde(default)]
    insecure_registries: Vec<Spanned<String>>,
    /// The bound of a whole pull: resolving, fetching, checking and
    /// extracting (1 ms to 1 h, default 60 s).
    pull_timeout_ms: Option<Spanned<u64>>,
    /// The bound of what a pull downloads, and of what it decompresses
    /// (1 to 4096 MiB, default 256).
    pull_max_mib: Option<Spanned<u64>>,
    /// `[policy.defaults]`: limits for plugins that do not set their own.
    #[serde(default)]
    defaults: RawLimits,
}

/// `[policy.defaults]`, and the same keys in a `[[plugin]]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    /// The deadline of one call, instantiation included (1 to 999 ms,
    /// default 100).
    timeout_ms: Option<Spanned<u64>>,
    /// The memory cap of one instance, memories and tables together (1 to
    /// 4096 MiB, default 32).
    memory_limit_mib: Option<Spanned<u64>>,
    /// What a plugin's error does: `fail` (default) or `skip`.
    on_error: Option<OnError>,
    /// Whether decisions are applied: `enforce` (default) or `monitor`.
    mode: Option<Mode>,
}

/// `[[plugin]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    /// Its name in logs, metrics and errors: letters, digits, `-`, `_`, `.`;
    /// unique in the file.
    id: Spanned<String>,
    /// The component file, relative to the policy file's directory; with
    /// `sha256`. Either this or `oci`.
    path: Option<Spanned<PathBuf>>,
    /// The pin of `path`: 64 hex digits, `sha256:` allowed before them.
    sha256: Option<Spanned<String>>,
    /// `REGISTRY/REPOSITORY@sha256:<manifest digest>`, instead of `path`.
    oci: Option<Spanned<String>>,
    /// The component's path inside a container image's layers.
    oci_path: Option<Spanned<String>>,
    /// A cosign public key the artefact must be signed with.
    cosign_key: Option<Spanned<PathBuf>>,
    /// Load `path` without a `sha256` pin (for development).
    #[serde(default)]
    allow_unpinned: bool,
    /// The hooks that run (default: every hook the component exports).
    hooks: Option<Vec<Hook>>,
    // The same keys as `[policy.defaults]`, spelled out: `serde(flatten)` would
    // lose the spans and defeat `deny_unknown_fields`.
    /// As in `[policy.defaults]`.
    timeout_ms: Option<Spanned<u64>>,
    /// As in `[policy.defaults]`.
    memory_limit_mib: Option<Spanned<u64>>,
    /// As in `[policy.defaults]`.
    on_error: Option<OnError>,
    /// As in `[policy.defaults]`.
    mode: Option<Mode>,
    /// `[plugin.settings]`: handed to the plugin as JSON, which checks it.
    #[serde(default)]
    settings: toml::Table,
}

/// A parsed and checked policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyFile {
    /// The file it was read from, for messages.
    pub source: PathBuf,
    /// Where compiled plugins are cached (`None`: compile at every start).
    pub cache_dir: Option<PathBuf>,
    /// The key that binds cache entries to their pins.
    pub cache_key_file: Option<PathBuf>,
    /// The shortest retry delay a plugin may ask for.
    pub min_retry: Duration,
    /// The longest retry delay a plugin may ask for.
    pub max_retry: Duration,
    /// How `oci` plugins' registries are reached.
    pub registry: RegistryOptions,
    /// The plugins, in the order they run.
    pub plugins: Vec<PluginConfig>,
}

/// One `[[plugin]]` entry with the defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The plugin's name in logs, metrics and errors.
    pub id: String,
    /// Not from the file: the registrar's `--plugin-type`, which
    /// `registrar-info` answers during `info` and `validate-settings` (a hook
    /// gets its context's).
    pub plugin_type: PluginType,
    /// The component: a pinned file or a pinned OCI artefact.
    pub source: PluginSource,
    /// `None`: every hook the component exports.
    pub hooks: Option<BTreeSet<Hook>>,
    /// The deadline of one call (`timeout_ms`).
    pub timeout: Duration,
    /// The memory cap of one instance (`memory_limit_mib`).
    pub memory_limit_bytes: u64,
    /// What its errors do.
    pub on_error: OnError,
    /// Whether its decisions are applied.
    pub mode: Mode,
    /// The `settings` table as JSON, handed to the plugin.
    pub settings_json: String,
    /// Where the policy file declares this plugin (file and line), for errors.
    pub declared_at: Option<(PathBuf, usize)>,
}

/// A policy file that cannot be used: the file, the line and the key, as data
/// and in the text.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// The file cannot be read, or is not a regular UTF-8 file of at most 1 MiB.
    #[error("cannot read policy file {path}: {source}")]
    Read {
        /// The policy file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A key or value is wrong.
    #[error("policy file {path}, line {line}{}: {message}", key.as_ref().map(|k| format!(", key {k}")).unwrap_or_default())]
    Invalid {
        /// The policy file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// The key, dotted from the top (`policy.defaults.timeout_ms`,
        /// `plugin.sha256`), where one is to blame.
        key: Option<String>,
        /// What is wrong, and how to fix it.
        message: String,
    },
}

impl PolicyFile {
    /// Reads and checks the policy file at `path`.
    pub fn from_file(path: &Path) -> Result<Self, PolicyFileError> {
        let bytes =
            read_regular_file(path, MAX_POLICY_FILE).map_err(|source| PolicyFileError::Read {
                path: path.to_owned(),
                source,
            })?;
        let text = String::from_utf8(bytes).map_err(|e| PolicyFileError::Read {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
        Self::from_toml_str(&text, path)
    }

    /// Parses `text`; `path` names the file in messages and anchors relative plugin paths.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Self, PolicyFileError> {
        let raw: RawFile = toml_file::from_str(text).map_err(|e| PolicyFileError::Invalid {
            path: path.to_owned(),
            line: e.line,
            key: e.key,
            message: e.message,
        })?;
        let check = Checker { text, path };
        let base = path.parent().unwrap_or(Path::new("."));
        let policy = &raw.policy;
        let defaults = check.limits(&policy.defaults, "policy.defaults", Limits::DEFAULT)?;
        if let Some(retired) = &policy.epoch_tick_ms {
            tracing::warn!(
                file = %path.display(),
                line = line_of(text, retired.span().start),
                "policy.epoch_tick_ms is no longer used (each plugin call arms its own deadline); remove it"
            );
        }
        let (min_retry, max_retry) = check.retries(policy)?;
        let cache_dir = policy.cache_dir.as_ref().map(|c| base.join(c));
        let registry = check.registry(policy, base)?;
        let mut plugins: Vec<PluginConfig> = Vec::new();
        for p in &raw.plugin {
            let id = check.plugin_id(p, &plugins)?;
            let source = match cache_dir.as_deref() {
                dir if p.oci.is_some() || p.path.is_none() => {
                    check.oci_source(p, &id, base, dir, &registry)?
                }
                _ => check.file_source(p, &id, base)?,
            };
            plugins.push(check.plugin(p, id, source, &defaults)?);
        }
        Ok(PolicyFile {
            source: path.to_owned(),
            cache_dir,
            cache_key_file: raw.policy.cache_key_file.map(|c| base.join(c)),
            min_retry: Duration::from_millis(min_retry),
            max_retry: Duration::from_millis(max_retry),
            registry,
            plugins,
        })
    }
}

/// The limits a plugin runs under: `[policy.defaults]`, or its own keys.
#[derive(Debug, Clone, Copy)]
struct Limits {
    timeout_ms: u64,
    memory_limit_mib: u64,
    on_error: Option<OnError>,
    mode: Option<Mode>,
}

impl Limits {
    const DEFAULT: Limits = Limits {
        timeout_ms: DEFAULT_TIMEOUT_MS,
        memory_limit_mib: DEFAULT_MEMORY_LIMIT_MIB,
        on_error: None,
        mode: None,
    };
}

/// The per-table checks of one file: each error names the file, the line
/// of the value and the key, dotted from the top.
struct Checker<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Checker<'_> {
    fn invalid(&self, span: std::ops::Range<usize>, key: &str, message: String) -> PolicyFileError {
        PolicyFileError::Invalid {
            path: self.path.to_owned(),
            line: line_of(self.text, span.start),
            key: Some(key.to_owned()),
            message,
        }
    }

    /// `v`, or `default` when absent; `key` is dotted from the top, and the
    /// message names its last part.
    fn ranged(
        &self,
        v: &Option<Spanned<u64>>,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, PolicyFileError> {
        match v {
            None => Ok(default),
            Some(s) if range.contains(s.get_ref()) => Ok(*s.get_ref()),
            Some(s) => Err(self.invalid(
                s.span(),
                key,
                format!(
                    "{} = {} is out of range: use {} to {}",
                    key.rsplit('.').next().unwrap_or(key),
                    s.get_ref(),
                    range.start(),
                    range.end()
                ),
            )),
        }
    }

    /// `[policy.defaults]` (`table = "policy.defaults"`), or a plugin's own
    /// limits over `inherited` (`table = "plugin"`).
    fn limits(
        &self,
        raw: &RawLimits,
        table: &str,
        inherited: Limits,
    ) -> Result<Limits, PolicyFileError> {
        Ok(Limits {
            timeout_ms: self.ranged(
                &raw.timeout_ms,
                &format!("{table}.timeout_ms"),
                inherited.timeout_ms,
                1..=MAX_TIMEOUT_MS,
            )?,
            memory_limit_mib: self.ranged(
                &raw.memory_limit_mib,
                &format!("{table}.memory_limit_mib"),
                inherited.memory_limit_mib,
                1..=MAX_MEMORY_LIMIT_MIB,
            )?,
            on_error: raw.on_error.or(inherited.on_error),
            mode: raw.mode.or(inherited.mode),
        })
    }

    /// `min_retry_ms` and `max_retry_ms`, the first no greater than the second.
    fn retries(&self, policy: &RawPolicy) -> Result<(u64, u64), PolicyFileError> {
        let hour = 1..=3_600_000;
        let min = self.ranged(
            &policy.min_retry_ms,
            "policy.min_retry_ms",
            DEFAULT_MIN_RETRY_MS,
            hour.clone(),
        )?;
        let max = self.ranged(
            &policy.max_retry_ms,
            "policy.max_retry_ms",
            DEFAULT_MAX_RETRY_MS,
            hour,
        )?;
        if min > max {
            let span = policy
                .min_retry_ms
                .as_ref()
                .map(Spanned::span)
                .unwrap_or(0..0);
            return Err(self.invalid(
                span,
                "policy.min_retry_ms",
                format!("min_retry_ms ({min}) is greater than max_retry_ms ({max})"),
            ));
        }
        Ok((min, max))
    }

    /// How registries are reached: credentials, CAs, insecure hosts, bounds.
    fn registry(
        &self,
        policy: &RawPolicy,
        base: &Path,
    ) -> Result<RegistryOptions, PolicyFileError> {
        let mut insecure = Vec::new();
        for h in &policy.insecure_registries {
            let host = h.get_ref();
            if host.is_empty() || host.contains('/') || host.contains("://") {
                return Err(self.invalid(
                    h.span(),
                    "policy.insecure_registries",
                    format!(
                        "{host:?} is not HOST:PORT: list registries as they appear in oci references, e.g. \"127.0.0.1:5000\""
                    ),
                ));
            }
            insecure.push(host.clone());
        }
        Ok(RegistryOptions {
            auth_file: policy.registry_auth_file.as_ref().map(|f| base.join(f)),
            ca_file: policy.registry_ca_file.as_ref().map(|f| base.join(f)),
            insecure,
            timeout: Duration::from_millis(self.ranged(
                &policy.pull_timeout_ms,
                "policy.pull_timeout_ms",
                DEFAULT_PULL_TIMEOUT_MS,
                1..=3_600_000,
            )?),
            max_bytes: self.ranged(
                &policy.pull_max_mib,
                "policy.pull_max_mib",
                DEFAULT_PULL_MAX_MIB,
                1..=4096,
            )? << 20,
        })
    }

    /// A well-formed id, not used by an earlier plugin.
    fn plugin_id(
        &self,
        p: &RawPlugin,
        earlier: &[PluginConfig],
    ) -> Result<String, PolicyFileError> {
        let id = p.id.get_ref();
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(self.invalid(
                p.id.span(),
                "plugin.id",
                format!(
                    "plugin id {id:?} must be non-empty and use only letters, digits, '-', '_' and '.'"
                ),
            ));
        }
        if earlier.iter().any(|q| &q.id == id) {
            return Err(self.invalid(
                p.id.span(),
                "plugin.id",
                format!("plugin id {id:?} is used twice: give each [[plugin]] its own id"),
            ));
        }
        Ok(id.clone())
    }

    /// `oci = …` (with `oci_path`, `cosign_key`), pulled into `cache_dir`;
    /// or neither `path` nor `oci`, which is refused here.
    fn oci_source(
        &self,
        p: &RawPlugin,
        id: &str,
        base: &Path,
        cache_dir: Option<&Path>,
        registry: &RegistryOptions,
    ) -> Result<PluginSource, PolicyFileError> {
        let o = match (&p.path, &p.oci) {
            (Some(_), Some(o)) => {
                return Err(self.invalid(
                    o.span(),
                    "plugin.oci",
                    format!("plugin {id:?} has both path and oci: give one"),
                ));
            }
            (_, Some(o)) => o,
            (_, None) => {
                return Err(self.invalid(
                    p.id.span(),
                    "plugin.path",
                    format!(
                        "plugin {id:?} has no component: give path = \"FILE.wasm\" (with sha256) or oci = \"REGISTRY/REPOSITORY@sha256:<digest>\""
                    ),
                ));
            }
        };
        if let Some(s) = &p.sha256 {
            return Err(self.invalid(
                s.span(),
                "plugin.sha256",
                format!(
                    "plugin {id:?}: an oci plugin is pinned by the manifest digest in its reference; remove sha256"
                ),
            ));
        }
        let reference = OciReference::parse_pinned(o.get_ref()).map_err(|m| {
            self.invalid(o.span(), "plugin.oci", format!("plugin {id:?}: oci = {m}"))
        })?;
        let Some(dir) = cache_dir else {
            return Err(self.invalid(
                o.span(),
                "plugin.oci",
                format!(
                    "plugin {id:?} is pulled from a registry, which needs somewhere to keep it: set cache_dir in [policy]"
                ),
            ));
        };
        let path_in_image = match &p.oci_path {
            Some(op) if op.get_ref().trim_start_matches(['/', '.']).is_empty() => {
                return Err(self.invalid(
                    op.span(),
                    "plugin.oci_path",
                    format!(
                        "plugin {id:?}: oci_path {:?} names no file: give the component's path in the image, e.g. \"/plugin.wasm\"",
                        op.get_ref()
                    ),
                ));
            }
            Some(op) => Some(op.get_ref().clone()),
            None => None,
        };
        Ok(PluginSource::Oci(Box::new(OciSource {
            reference,
            path_in_image,
            store: dir.join("oci"),
            cosign_key: p.cosign_key.as_ref().map(|k| base.join(k.get_ref())),
            registry: registry.clone(),
        })))
    }

    /// `path = …`, pinned by `sha256` unless `allow_unpinned`; the keys of
    /// OCI plugins are refused.
    fn file_source(
        &self,
        p: &RawPlugin,
        id: &str,
        base: &Path,
    ) -> Result<PluginSource, PolicyFileError> {
        let file = p
            .path
            .as_ref()
            .expect("oci_source takes entries without a path");
        if let Some(k) = &p.cosign_key {
            return Err(self.invalid(
                k.span(),
                "plugin.cosign_key",
                format!(
                    "plugin {id:?}: cosign_key checks signatures of oci plugins; a file is pinned by its sha256"
                ),
            ));
        }
        if let Some(op) = &p.oci_path {
            return Err(self.invalid(
                op.span(),
                "plugin.oci_path",
                format!(
                    "plugin {id:?}: oci_path is for oci plugins; for a file, path names the component"
                ),
            ));
        }
        let sha256 = match (&p.sha256, p.allow_unpinned) {
            (Some(s), _) => Some(parse_sha256(s.get_ref()).map_err(|m| {
                self.invalid(
                    s.span(),
                    "plugin.sha256",
                    format!("plugin {id:?}: sha256 {m}"),
                )
            })?),
            (None, true) => None,
            (None, false) => {
                return Err(self.invalid(
                    p.id.span(),
                    "plugin.sha256",
                    format!(
                        "plugin {id:?} has no sha256 pin: add sha256 = \"<hex digest>\" (sha256sum {}) or set allow_unpinned = true",
                        file.get_ref().display()
                    ),
                ));
            }
        };
        Ok(PluginSource::file(base.join(file.get_ref()), sha256))
    }

    /// The rest of a `[[plugin]]`: its limits over the defaults, hooks and
    /// settings, and where it is declared.
    fn plugin(
        &self,
        p: &RawPlugin,
        id: String,
        source: PluginSource,
        defaults: &Limits,
    ) -> Result<PluginConfig, PolicyFileError> {
        let own = RawLimits {
            timeout_ms: p.timeout_ms.clone(),
            memory_limit_mib: p.memory_limit_mib.clone(),
            on_error: p.on_error,
            mode: p.mode,
        };
        let limits = self.limits(&own, "plugin", *defaults)?;
        let settings_json = serde_json::to_string(&p.settings).map_err(|e| {
            self.invalid(
                p.id.span(),
                "plugin.settings",
                format!("plugin {id:?}: settings cannot be encoded as JSON: {e}"),
            )
        })?;
        let declared = p
            .path
            .as_ref()
            .map(Spanned::span)
            .or(p.oci.as_ref().map(Spanned::span))
            .unwrap_or(p.id.span());
        Ok(PluginConfig {
            plugin_type: PluginType::Csi,
            declared_at: Some((self.path.to_owned(), line_of(self.text, declared.start))),
            id,
            source,
            hooks: p.hooks.as_ref().map(|h| h.iter().copied().collect()),
            timeout: Duration::from_millis(limits.timeout_ms),
            memory_limit_bytes: limits.memory_limit_mib << 20,
            on_error: limits.on_error.unwrap_or_default(),
            mode: limits.mode.unwrap_or_default(),
            settings_json,
        })
    }
}

fn parse_sha256(s: &str) -> Result<[u8; 32], String> {
    let s = s.strip_prefix("sha256:").unwrap_or(s);
    let bytes = hex::decode(s).map_err(|_| format!("{s:?} is not hexadecimal"))?;
    bytes.try_into().map_err(|b: Vec<u8>| {
        format!(
            "{s:?} has {} bytes; a sha256 digest has 32 (64 hex digits)",
            b.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "9c1f0000000000000000000000000000000000000000000000000000000000ff";

    fn parse(text: &str) -> Result<PolicyFile, PolicyFileError> {
        PolicyFile::from_toml_str(text, Path::new("/etc/registrar/policy.toml"))
    }

    #[test]
    fn full_file() {
        let cfg = parse(&format!(
            r#"
[policy]
cache_dir = "cache"
min_retry_ms = 100

[policy.defaults]
timeout_ms = 50
on_error = "skip"

[[plugin]]
id = "rename"
path = "rename.wasm"
sha256 = "{PIN}"
hooks = ["driver-name", "endpoint"]
memory_limit_mib = 8
mode = "monitor"
[plugin.settings]
suffix = "-a"
nested = {{ x = 1 }}

[[plugin]]
id = "retry"
path = "/abs/retry.wasm"
allow_unpinned = true
on_error = "fail"
"#
        ))
        .unwrap();
        assert_eq!(cfg.cache_dir, Some(PathBuf::from("/etc/registrar/cache")));
        assert_eq!(cfg.min_retry, Duration::from_millis(100));
        assert_eq!(cfg.plugins.len(), 2);
        let a = &cfg.plugins[0];
        let PluginSource::File { path, sha256 } = &a.source else {
            panic!("a file plugin")
        };
        assert_eq!(path, &PathBuf::from("/etc/registrar/rename.wasm"));
        assert_eq!(sha256.unwrap()[0], 0x9c);
        assert_eq!(a.timeout, Duration::from_millis(50));
        assert_eq!(a.memory_limit_bytes, 8 << 20);
        assert_eq!(a.on_error, OnError::Skip);
        assert_eq!(a.mode, Mode::Monitor);
        assert_eq!(
            a.hooks,
            Some([Hook::DriverName, Hook::Endpoint].into_iter().collect())
        );
        let settings: serde_json::Value = serde_json::from_str(&a.settings_json).unwrap();
        assert_eq!(settings["suffix"], "-a");
        assert_eq!(settings["nested"]["x"], 1);
        let b = &cfg.plugins[1];
        assert_eq!(b.source, PluginSource::file("/abs/retry.wasm", None));
        assert_eq!(b.on_error, OnError::Fail);
        assert_eq!(b.settings_json, "{}");
        assert_eq!(b.memory_limit_bytes, DEFAULT_MEMORY_LIMIT_MIB << 20);
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let err = parse("[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\ntimeout = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "policy file /etc/registrar/policy.toml, line 4, key plugin.timeout: unknown field `timeout`, expected one of"
            ),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_name_the_line() {
        let err = parse(&format!(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nsha256 = \"{PIN}\"\n\ntimeout_ms = 0\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "policy file /etc/registrar/policy.toml, line 6, key plugin.timeout_ms: timeout_ms = 0 is out of range: use 1 to 999"
        );
        let err = parse("[policy.defaults]\ntimeout_ms = 1000\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("1 to 999"), "{err}");
    }

    #[test]
    fn pins_are_required_and_checked() {
        let err = parse("[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2")
                && err.contains("no sha256 pin")
                && err.contains("allow_unpinned"),
            "{err}"
        );
        let err = parse("[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nsha256 = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 4") && err.contains("not hexadecimal"),
            "{err}"
        );
    }

    #[test]
    fn ids_unique_and_hooks_known() {
        let two = format!(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nsha256 = \"{PIN}\"\n[[plugin]]\nid = \"a\"\npath = \"b.wasm\"\nsha256 = \"{PIN}\"\n"
        );
        let err = parse(&two).unwrap_err().to_string();
        assert!(
            err.contains("line 6") && err.contains("used twice"),
            "{err}"
        );
        let err = parse(&format!(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nsha256 = \"{PIN}\"\nhooks = [\"rename\"]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 5") && err.contains("rename"), "{err}");
    }

    /// What serde refuses names the key it was reading, dotted from the top.
    #[test]
    fn a_wrong_type_or_value_names_the_key() {
        let err = parse("[policy.defaults]\ntimeout_ms = \"100\"\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "policy file /etc/registrar/policy.toml, line 2, key policy.defaults.timeout_ms: invalid type: string \"100\", expected u64"
        );
        let err = parse(&format!(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nsha256 = \"{PIN}\"\non_error = \"never\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "policy file /etc/registrar/policy.toml, line 5, key plugin.on_error: unknown variant `never`, expected `fail` or `skip`"
        );
        let err = parse("[policy]\ncache_dir = [1]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("policy file /etc/registrar/policy.toml, line 2, key policy.cache_dir: invalid type: sequence"),
            "{err}"
        );
        let Err(PolicyFileError::Invalid { line, key, .. }) =
            parse("[policy]\nmin_retry_ms = -1\n")
        else {
            panic!("a negative number is refused");
        };
        assert_eq!((line, key.as_deref()), (2, Some("policy.min_retry_ms")));
    }

    /// A key given twice is the parser's error, before serde sees a key: the
    /// key comes from the line.
    #[test]
    fn a_duplicate_key_names_the_key() {
        let err = parse("[policy]\nmin_retry_ms = 5\nmin_retry_ms = 6\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "policy file /etc/registrar/policy.toml, line 3, key min_retry_ms: duplicate key"
            ),
            "{err}"
        );
    }

    /// `epoch_tick_ms` is retired: an old file that sets it still loads.
    #[test]
    fn the_retired_epoch_tick_is_accepted() {
        assert!(parse("[policy]\nepoch_tick_ms = 10\n").is_ok());
        let err = parse("[policy]\nepoch_tick = 10\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("key policy.epoch_tick: unknown field"),
            "{err}"
        );
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn oci_plugins_and_registry_keys() {
        let cfg = parse(&format!(
            r#"
[policy]
cache_dir = "/var/cache/reg"
registry_auth_file = "pull-secret/.dockerconfigjson"
registry_ca_file = "/etc/ca.pem"
insecure_registries = ["127.0.0.1:5000"]
pull_timeout_ms = 5000
pull_max_mib = 64

[[plugin]]
id = "py"
oci = "127.0.0.1:5000/policies/pool@{DIGEST}"

[[plugin]]
id = "img"
oci = "ghcr.io/org/image@{DIGEST}"
oci_path = "/plugin.wasm"
"#
        ))
        .unwrap();
        let r = &cfg.registry;
        assert_eq!(
            r.auth_file.as_deref(),
            Some(Path::new("/etc/registrar/pull-secret/.dockerconfigjson"))
        );
        assert_eq!(r.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert!(r.is_insecure("127.0.0.1:5000") && !r.is_insecure("ghcr.io"));
        assert_eq!(r.timeout, Duration::from_secs(5));
        assert_eq!(r.max_bytes, 64 << 20);
        let PluginSource::Oci(o) = &cfg.plugins[0].source else {
            panic!("an oci plugin")
        };
        assert_eq!(o.reference.repository, "policies/pool");
        assert_eq!(o.store, PathBuf::from("/var/cache/reg/oci"));
        assert_eq!(o.path_in_image, None);
        assert_eq!(cfg.plugins[0].declared_at.as_ref().unwrap().1, 12);
        let PluginSource::Oci(o) = &cfg.plugins[1].source else {
            panic!("an oci plugin")
        };
        assert_eq!(o.path_in_image.as_deref(), Some("/plugin.wasm"));
    }

    #[test]
    fn oci_mistakes_name_the_key() {
        let err = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(
            err(
                "[policy]\ncache_dir = \"c\"\n[[plugin]]\nid = \"a\"\noci = \"ghcr.io/org/p:v1\"\n"
            ),
            "policy file /etc/registrar/policy.toml, line 5, key plugin.oci: plugin \"a\": oci = \"ghcr.io/org/p:v1\" is not pinned: a tag can move, so the policy pins the manifest digest (REGISTRY/REPOSITORY@sha256:<digest>); `csi-node-driver-registrar plugin pull ghcr.io/org/p:v1` prints the pinned line"
        );
        assert_eq!(
            err(&format!(
                "[[plugin]]\nid = \"a\"\noci = \"ghcr.io/org/p@{DIGEST}\"\n"
            )),
            "policy file /etc/registrar/policy.toml, line 3, key plugin.oci: plugin \"a\" is pulled from a registry, which needs somewhere to keep it: set cache_dir in [policy]"
        );
        let both = err(&format!(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\noci = \"ghcr.io/org/p@{DIGEST}\"\n"
        ));
        assert!(
            both.contains("line 4, key plugin.oci") && both.contains("both path and oci"),
            "{both}"
        );
        let neither = err("[[plugin]]\nid = \"a\"\n");
        assert!(
            neither.contains("line 2, key plugin.path") && neither.contains("has no component"),
            "{neither}"
        );
        let pinned_twice = err(&format!(
            "[policy]\ncache_dir = \"c\"\n[[plugin]]\nid = \"a\"\noci = \"ghcr.io/org/p@{DIGEST}\"\nsha256 = \"{PIN}\"\n"
        ));
        assert!(
            pinned_twice.contains("line 6, key plugin.sha256")
                && pinned_twice.contains("remove sha256"),
            "{pinned_twice}"
        );
        let key = err(
            "[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\nallow_unpinned = true\ncosign_key = \"k.pub\"\n",
        );
        assert!(
            key.contains("line 5, key plugin.cosign_key")
                && key.contains("a file is pinned by its sha256"),
            "{key}"
        );
        let url = err("[policy]\ninsecure_registries = [\"http://r:5000\"]\n");
        assert!(
            url.contains("line 2, key policy.insecure_registries")
                && url.contains("is not HOST:PORT"),
            "{url}"
        );
    }

    #[test]
    fn empty_file_is_no_plugins() {
        let cfg = parse("").unwrap();
        assert!(cfg.plugins.is_empty());
    }
}
