//! The engine, the linker and the timers shared by every plugin, and loading
//! a plugin: read, pin check, compile or cache, link, checks, settings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{self, WIT_PACKAGE, WIT_VERSION};
use super::compiler::CONCURRENT_INSTANCES;
use super::component::{self, exported_hooks};
use super::plugin::{GuestHooks, WasmPlugin};
use super::sandbox::{HostState, Timers};
use super::{cache, compiler};
use crate::metrics::Metrics;
use crate::policy::chain::{CallError, Chain, PluginHooks};
use crate::policy::file::{MAX_MEMORY_LIMIT_MIB, Mode, OnError, PluginConfig, PolicyFile};
use crate::policy::hook::Hook;

/// A plugin that cannot be loaded, in the plugin author's terms: which
/// plugin, its file, where the policy file declares it, and why.
#[derive(Debug, thiserror::Error)]
#[error("policy plugin {id:?} ({}{}): {message}", path.display(), declared(declared_at))]
pub struct PluginLoadError {
    /// The plugin's `id`.
    pub id: String,
    /// The component file, its `oci://` reference, or the policy file when
    /// the engine cannot start.
    pub path: PathBuf,
    /// The policy file and the line that declare the plugin.
    pub declared_at: Option<(PathBuf, usize)>,
    /// What is wrong, and how to fix it.
    pub message: String,
    /// What kind of failure, for metrics and retries: a source's class
    /// (`file`, `pin`, `auth`, `network`, `too-large`, `digest`, `manifest`,
    /// `signature`, `cache`, `timeout`), or `engine`, `component`.
    pub class: &'static str,
}

fn declared(at: &Option<(PathBuf, usize)>) -> String {
    at.as_ref()
        .map(|(file, line)| format!(", policy file {} line {line}", file.display()))
        .unwrap_or_default()
}

/// The engine, the linker and the deadline timers shared by every plugin.
pub struct Host {
    engine: Engine,
    linker: Linker<HostState>,
    /// Drives the per-call deadline timers and the WASI clocks.
    timers: Arc<Timers>,
}

impl Host {
    /// The engine and the linker, with the timers' thread.
    pub fn new() -> wasmtime::Result<Arc<Self>> {
        let engine = compiler::new_engine()?;
        let mut linker = Linker::<HostState>::new(&engine);
        bindings::csi_registrar::policy::host_log::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )?;
        bindings::csi_registrar::policy::registrar_info::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )?;
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Ok(Arc::new(Host {
            engine,
            linker,
            timers: Arc::new(Timers::new()?),
        }))
    }

    /// The engine plugins are compiled for.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles (or loads from the cache), links and checks one plugin's
    /// component (`wasm`, fetched and pinned by `policy::fetch`), then has it
    /// validate its settings.
    pub fn load(
        self: &Arc<Self>,
        cfg: &PluginConfig,
        wasm: &[u8],
        cache: Option<(&Path, &cache::CacheKey)>,
    ) -> Result<WasmPlugin, PluginLoadError> {
        let plugin = self.prepare(cfg, wasm, cache)?;
        let info = plugin.info().map_err(|e| match e {
            CallError::Memory { limit_mib, wanted_mib } => cfg.error(format!(
                "memory_limit_mib = {limit_mib} is too small for this plugin: starting an instance asked for at least {wanted_mib} MiB (its memories and tables together); raise memory_limit_mib"
            )),
            e => cfg.error(format!("info() failed: {e}")),
        })?;
        plugin.validate_settings().map_err(|m| cfg.error(m))?;
        tracing::info!(
            plugin = %cfg.id, name = %info.0, version = %info.1,
            hooks = %component::describe_hooks(&plugin.hooks),
            "Policy plugin loaded"
        );
        Ok(plugin)
    }

    /// Everything [`Host::load`] does except calling the plugin.
    pub(crate) fn prepare(
        self: &Arc<Self>,
        cfg: &PluginConfig,
        wasm: &[u8],
        cache: Option<(&Path, &cache::CacheKey)>,
    ) -> Result<WasmPlugin, PluginLoadError> {
        let fail = |message: String| cfg.error(message);
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        let component = self.compile(wasm, &digest, cache).map_err(fail)?;
        let hooks = exported_hooks(&self.engine, &component).map_err(fail)?;
        let selected: BTreeSet<Hook> = match &cfg.hooks {
            None => hooks.clone(),
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|h| !hooks.contains(h)) {
                    return Err(fail(format!(
                        "hooks lists \"{missing}\" but the component does not export {WIT_PACKAGE}/{missing}@{WIT_VERSION}; it exports {}",
                        component::describe_hooks(&hooks)
                    )));
                }
                wanted.clone()
            }
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(component::link_error(&e)))?;
        let index = |e: wasmtime::Error| fail(format!("{e:#}"));
        let plugin = WasmPlugin {
            engine: self.engine.clone(),
            timers: self.timers.clone(),
            id: Arc::from(cfg.id.as_str()),
            mode: cfg.mode,
            on_error: cfg.on_error,
            timeout: cfg.timeout,
            memory_limit: cfg.memory_limit_bytes,
            settings_json: cfg.settings_json.clone(),
            guest: GuestHooks::new(&pre, &hooks).map_err(index)?,
            pre,
            hooks: selected,
            exported: hooks,
            plugin_type: cfg.plugin_type,
        };
        Ok(plugin)
    }

    fn compile(
        &self,
        wasm: &[u8],
        digest: &[u8; 32],
        cache: Option<(&Path, &cache::CacheKey)>,
    ) -> Result<Component, String> {
        component::check_is_component(wasm)?;
        let started = std::time::Instant::now();
        let (component, outcome) = match cache {
            Some((dir, key)) => cache::load_or_compile(&self.engine, dir, key, wasm, digest),
            None => {
                compiler::compile(&self.engine, wasm).map(|c| (c, cache::CacheOutcome::Bypassed))
            }
        }
        .map_err(|e| compiler::explain_compile_error(&e))?;
        let compiled = started.elapsed();
        // Otherwise the first instantiation makes the copy-on-write image of
        // the component's memories (a memfd the initial data is written to),
        // inside the first call's deadline: for a Python plugin, a snapshot of
        // tens of MB that a busy node takes more than 100 ms to write.
        component
            .initialize_copy_on_write_image()
            .map_err(|e| format!("cannot prepare the component's memory image: {e:#}"))?;
        tracing::debug!(took = ?compiled, image = ?started.elapsed() - compiled, cache = ?outcome, "Plugin compiled");
        Ok(component)
    }
}

impl PluginConfig {
    pub(crate) fn error(&self, message: String) -> PluginLoadError {
        PluginLoadError {
            id: self.id.clone(),
            path: PathBuf::from(self.source.to_string()),
            declared_at: self.declared_at.clone(),
            message,
            class: "component",
        }
    }

    /// Its component cannot be had from its source.
    pub(crate) fn source_error(&self, e: crate::policy::SourceError) -> PluginLoadError {
        PluginLoadError {
            class: e.class(),
            ..self.error(e.to_string())
        }
    }
}

/// The cache a policy file asks for, if its key can be read.
fn cache_of(cfg: &PolicyFile) -> Option<(&Path, cache::CacheKey)> {
    let dir = cfg.cache_dir.as_deref()?;
    let Some(key_file) = &cfg.cache_key_file else {
        tracing::warn!(cache_dir = %dir.display(), "Plugin cache not used: policy.cache_key_file is not set, and without a key a swapped entry could run code other than the pinned component; create one with `csi-node-driver-registrar plugin cache-key > FILE` outside the cache directory and name it in policy.cache_key_file");
        return None;
    };
    match cache::CacheKey::read(key_file, dir) {
        Ok(key) => Some((dir, key)),
        Err(why) => {
            tracing::warn!(cache_dir = %dir.display(), "Plugin cache not used: {why}");
            None
        }
    }
}

/// Loads every plugin of a policy file into a chain, from their components
/// as `policy::fetch` got them (in the file's order). No engine exists unless
/// this is called, so users of the built-in policy pay nothing for wasm.
pub(crate) fn load_chain(
    cfg: &PolicyFile,
    components: Vec<Result<Vec<u8>, PluginLoadError>>,
    metrics: Arc<Metrics>,
) -> Result<Chain, PluginLoadError> {
    let host = match Host::new() {
        Ok(host) => host,
        Err(e) => {
            let text = format!("{e:#}");
            let hint = if text.contains("pool") || text.contains("mmap") || text.contains("mapping")
            {
                format!(
                    ": its instance slots reserve address space up front ({CONCURRENT_INSTANCES} instances, each memory's slot sized for memory_limit_mib up to {MAX_MEMORY_LIMIT_MIB} MiB); raise or remove the process's address-space limit (ulimit -v, RLIMIT_AS)"
                )
            } else {
                String::new()
            };
            let err = PluginLoadError {
                id: String::new(),
                path: cfg.source.clone(),
                declared_at: None,
                message: format!("cannot start the WebAssembly engine: {text}{hint}"),
                class: "engine",
            };
            // Plugins that may be left out are, as when one of them fails.
            if cfg
                .plugins
                .iter()
                .all(|p| p.mode == Mode::Monitor || p.on_error == OnError::Skip)
            {
                for p in &cfg.plugins {
                    metrics.plugin_call(&p.id, "load", "error", std::time::Duration::ZERO);
                }
                tracing::warn!(error = %err, "Every plugin may be skipped (on_error = \"skip\" or mode = \"monitor\"); going on without them, with the built-in policy");
                return Ok(Chain::new(
                    Vec::new(),
                    cfg.min_retry,
                    cfg.max_retry,
                    metrics,
                ));
            }
            return Err(err);
        }
    };
    let cache = cache_of(cfg);
    let mut plugins: Vec<Box<dyn PluginHooks>> = Vec::new();
    for (p, wasm) in cfg.plugins.iter().zip(components) {
        let loaded =
            wasm.and_then(|wasm| host.load(p, &wasm, cache.as_ref().map(|(d, k)| (*d, k))));
        match loaded {
            Ok(loaded) => plugins.push(Box::new(loaded)),
            // A plugin in monitor mode never changes the outcome: not even
            // whether the registrar starts.
            Err(e) if p.mode == Mode::Monitor => {
                metrics.plugin_call(&p.id, "load", "error", std::time::Duration::ZERO);
                tracing::warn!(plugin = %p.id, error = %e, class = e.class, "Plugin in monitor mode cannot be loaded; going on without it");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Chain::new(plugins, cfg.min_retry, cfg.max_retry, metrics))
}
