//! What the author tools share (and the tests reach through `testing`): a
//! plugin configuration without a pin, and a component's description.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::metrics::Metrics;
use crate::plugin_type::PluginType;
use crate::policy::fetch::component_blocking;
use crate::policy::file::{
    DEFAULT_MAX_RETRY_MS, DEFAULT_MEMORY_LIMIT_MIB, DEFAULT_MIN_RETRY_MS, DEFAULT_TIMEOUT_MS, Mode,
    OnError, PluginConfig,
};
use crate::policy::wasm::{Compiler, Host, LoadFailure, WIT_PACKAGE, cache, check_is_component};
use crate::policy::{
    Chain, Context, Failure, Hook, OciReference, OciSource, PluginLoadError, PluginSource,
    PolicyError, Registration, RegistryOptions,
};

/// The engine the tools load plugins with: slots for the default
/// `memory_limit_mib`, compiling in this process.
pub(crate) fn host() -> anyhow::Result<Arc<Host>> {
    Ok(Host::new(Compiler::default())?)
}

/// How the tools reach `oci://` components, from the `plugin` command's
/// flags (or their defaults).
#[derive(Debug, Clone)]
pub struct Sources {
    registry: RegistryOptions,
    store: PathBuf,
    path_in_image: Option<String>,
    cosign_key: Option<PathBuf>,
}

impl Default for Sources {
    /// No credentials, no extra CA, no insecure registry, and a store in the
    /// user's cache directory.
    fn default() -> Self {
        Sources {
            registry: RegistryOptions::default(),
            store: default_store(),
            path_in_image: None,
            cosign_key: None,
        }
    }
}

/// `$XDG_CACHE_HOME/csi-node-driver-registrar/oci` (or under `~/.cache`).
fn default_store() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("csi-node-driver-registrar")
        .join("oci")
}

impl Sources {
    /// What the `plugin` command's registry flags say.
    pub(super) fn from_args(args: &super::cli::RegistryArgs) -> Self {
        Sources {
            registry: RegistryOptions {
                auth_file: args.registry_auth_file.clone(),
                ca_file: args.registry_ca_file.clone(),
                insecure: args.insecure_registries.clone(),
                ..RegistryOptions::default()
            },
            store: args.oci_cache_dir.clone().unwrap_or_else(default_store),
            path_in_image: args.oci_path.clone(),
            cosign_key: args.cosign_key.clone(),
        }
    }

    /// Where a component named on the command line comes from: `oci://…`
    /// (a tag is allowed: it is resolved at load), or a file.
    pub(crate) fn source_of(&self, arg: &Path) -> Result<PluginSource, String> {
        let Some(text) = arg.to_str().filter(|s| s.starts_with("oci://")) else {
            return Ok(PluginSource::file(arg, None));
        };
        let reference = OciReference::parse(text)?;
        Ok(PluginSource::Oci(Box::new(OciSource {
            reference,
            path_in_image: self.path_in_image.clone(),
            store: self.store.clone(),
            cosign_key: self.cosign_key.clone(),
            registry: self.registry.clone(),
        })))
    }

    /// A plugin configuration for the author tools: no pin, default limits.
    /// `path` may be an `oci://` reference; one that cannot be parsed fails
    /// at load, with the parser's words.
    pub fn unpinned(&self, path: &Path) -> PluginConfig {
        let (source, bad) = match self.source_of(path) {
            Ok(s) => (s, None),
            Err(e) => (PluginSource::file(path, None), Some(e)),
        };
        let id = match &source {
            PluginSource::Oci(o) => o
                .reference
                .repository
                .rsplit('/')
                .next()
                .unwrap_or("plugin")
                .to_owned(),
            PluginSource::File { .. } => path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into()),
        };
        if let Some(e) = bad {
            tracing::debug!("{e}");
        }
        PluginConfig {
            id,
            plugin_type: PluginType::Csi,
            source,
            hooks: None,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_MIB << 20,
            on_error: OnError::Fail,
            mode: Mode::Enforce,
            settings_json: "{}".into(),
            declared_at: None,
        }
    }
}

/// [`Sources::unpinned`] with the default sources.
pub fn unpinned(path: &Path) -> PluginConfig {
    Sources::default().unpinned(path)
}

/// The context the tools decide in unless told otherwise: the hostpath
/// driver on `node-1`.
pub(crate) fn example_context() -> Context {
    Context {
        driver_name: "hostpath.csi.k8s.io".into(),
        driver_version: "1.0.0".into(),
        csi_address: "/csi/csi.sock".into(),
        kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock".into(),
        plugin_registration_path: "/registration".into(),
        node_name: "node-1".into(),
        ..Context::default()
    }
}

/// The registrar's own decision path for one plugin: a chain of it alone,
/// limited to `hook`, with the registrar's checks, clamping and errors.
/// Loading fails, naming what the component exports, if it lacks the hook.
/// `cache`: a compiled-plugin cache to load from and fill, as the registrar's.
pub(crate) fn chain_of(
    host: &Arc<Host>,
    cfg: PluginConfig,
    hook: Hook,
    cache: Option<(&Path, &cache::CacheKey)>,
) -> Result<Chain, PluginLoadError> {
    let cfg = PluginConfig {
        hooks: Some([hook].into()),
        ..cfg
    };
    let wasm = component_blocking(&cfg).map_err(|e| cfg.source_error(e))?;
    let plugin = host.load(&cfg, &wasm, cache)?;
    Ok(Chain::new(
        vec![Box::new(plugin)],
        Duration::from_millis(DEFAULT_MIN_RETRY_MS),
        Duration::from_millis(DEFAULT_MAX_RETRY_MS),
        Arc::new(Metrics::new()),
    ))
}

/// What a hook is asked besides the context.
#[derive(Debug, Clone, Default)]
pub(crate) struct HookInput {
    /// `current` for driver-name and endpoint (default: from the context, as at start-up).
    pub(crate) current: Option<String>,
    /// `current` for versions (default: the context's, as at start-up: `["1.0.0"]` for CSI).
    pub(crate) versions: Vec<String>,
    /// The refusal, for the failure hook.
    pub(crate) failure: Option<Failure>,
}

/// The hook's decision as the registrar would apply it, as `plugin run`
/// prints it: `{"decision": …}`, with `clamped_from` where the registrar
/// clamped the answer and `registrar` where the plugin deferred to it.
pub(crate) fn decide(
    chain: &Chain,
    hook: Hook,
    ctx: &Context,
    input: HookInput,
) -> Result<serde_json::Value, PolicyError> {
    use serde_json::json;
    if hook == Hook::Failure {
        let failure = input.failure.unwrap_or(Failure {
            error: super::cli::EXAMPLE_REFUSAL.into(),
            attempt: 1,
            elapsed: Duration::ZERO,
        });
        let d = chain.decide_failure(ctx, &failure)?;
        let mut out = match d.by {
            Some(_) => json!({ "decision": d.action }),
            None => json!({ "decision": "defer", "registrar": { "built_in": d.action } }),
        };
        if let Some(asked) = d.asked {
            out["clamped_from"] = json!(asked);
        }
        return Ok(out);
    }
    let start = Registration {
        name: input
            .current
            .clone()
            .unwrap_or_else(|| ctx.driver_name.clone()),
        endpoint: input
            .current
            .unwrap_or_else(|| ctx.kubelet_registration_path.clone()),
        supported_versions: if input.versions.is_empty() {
            Registration::upstream(ctx).supported_versions
        } else {
            input.versions
        },
    };
    let decided = chain.registration_from(ctx, start.clone())?;
    let decision = match hook {
        Hook::DriverName if decided.name == start.name => json!("keep"),
        Hook::DriverName => json!({ "rename": decided.name }),
        Hook::Endpoint if decided.endpoint == start.endpoint => json!("keep"),
        Hook::Endpoint => json!({ "replace": decided.endpoint }),
        _ => json!({ "supported_versions": decided.supported_versions }),
    };
    Ok(json!({ "decision": decision }))
}

/// What `plugin inspect` shows about a component.
#[derive(Debug, serde::Serialize)]
pub struct Inspection {
    /// The file.
    pub path: String,
    /// Its size.
    pub size_bytes: usize,
    /// Its sha256, the pin a policy file gives.
    pub sha256: String,
    /// The policy interfaces it exports, with versions.
    pub exports: Vec<String>,
    /// Everything it imports (the host provides host-log and WASI 0.2).
    pub imports: Vec<String>,
    /// The hooks it implements.
    pub hooks: Vec<String>,
    /// From the plugin's own `info()`.
    pub name: String,
    /// From the plugin's own `info()`.
    pub version: String,
}

/// Compiles a component (once) and describes it; fails as loading would.
pub fn inspect(
    host: &Arc<Host>,
    sources: &Sources,
    path: &Path,
) -> Result<Inspection, PluginLoadError> {
    let cfg = sources.unpinned(path);
    let wasm = component_blocking(&cfg).map_err(|e| cfg.source_error(e))?;
    let plugin = host.prepare(&cfg, &wasm, None)?;
    let ty = plugin.component().component_type();
    let exports = ty
        .exports(host.engine())
        .map(|(n, _)| n.to_owned())
        .filter(|n| n.starts_with(WIT_PACKAGE))
        .collect();
    let imports = ty
        .imports(host.engine())
        .map(|(n, _)| n.to_owned())
        .collect();
    let (name, version) = plugin.info().map_err(|e| cfg.error(LoadFailure::Info(e)))?;
    Ok(Inspection {
        path: path.display().to_string(),
        size_bytes: wasm.len(),
        sha256: hex::encode(Sha256::digest(&wasm)),
        exports,
        imports,
        hooks: plugin
            .exported_hooks()
            .iter()
            .map(|h| h.as_str().to_owned())
            .collect(),
        name,
        version,
    })
}

/// Compiles a component into `cache_dir` as the registrar would at start-up,
/// tagged with `key`; returns the cache entry.
/// Compiles the plugin `cfg` names (checked against its pin, if it has one)
/// into `cache_dir`, as the registrar would at start-up, tagged with `key`;
/// returns the cache entry.
pub(crate) fn precompile(
    host: &Host,
    cfg: &PluginConfig,
    cache_dir: &Path,
    key: &cache::CacheKey,
) -> anyhow::Result<PathBuf> {
    let wasm = component_blocking(cfg).map_err(|e| cfg.source_error(e))?;
    check_is_component(&wasm).map_err(|e| cfg.error(e.into()))?;
    let digest: [u8; 32] = Sha256::digest(&wasm).into();
    cache::load_or_compile(
        host.engine(),
        host.compiler(),
        cache_dir,
        key,
        &wasm,
        &digest,
    )
    .map_err(|e| cfg.error(e.into()))?;
    let entry = cache::entry(host.engine(), cache_dir, &digest);
    if !entry.exists() {
        anyhow::bail!(
            "policy plugin {:?}: the cache directory {} was not usable (see the log)",
            cfg.id,
            cache_dir.display()
        );
    }
    Ok(entry)
}
