//! The wasmtime host for policy plugins.
//!
//! - [`Host`]: the engine, the linker and the timers shared by every plugin;
//!   loading (read, pin check, compile or cache, link, checks, settings).
//! - `sandbox`: one call in a fresh Store, under a deadline and a memory cap.
//! - `component`: what a component must be before it runs.
//! - `plugin`: [`WasmPlugin`], the chain's view of a loaded plugin.
//! - `author`: `plugin inspect` and `plugin precompile`.
//! - [`cache`]: compiled components on disk, bound to their pins.
//!
//! What a plugin can reach: `host-log`, and WASI 0.2 with nothing in it (no
//! preopened directories, no environment, no arguments, no network, stdin
//! empty; stdout and stderr go to the debug log), except a wall clock, a
//! monotonic clock and random bytes. A wait on a clock is a host call the
//! deadline ends like any other.

mod author;
pub mod cache;
mod compiler;
mod component;
mod plugin;
mod sandbox;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::chain::{CallError, Chain, PluginHooks};
use super::config::{Hook, Mode, OnError, PluginConfig, PolicyConfig};
use crate::metrics::Metrics;
pub use author::Inspection;
pub use compiler::{compile_in_child_processes, compile_worker};
pub use component::exported_hooks;
pub use plugin::WasmPlugin;
use sandbox::HostState;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "registrar-policy",
        exports: { default: async },
    });
}

/// The WIT package this host implements.
pub const WIT_PACKAGE: &str = "csi-registrar:policy";
pub const WIT_VERSION: &str = "0.1.0";

/// A plugin that cannot be loaded, in the plugin author's terms.
#[derive(Debug, thiserror::Error)]
#[error("policy plugin {id:?} ({path}{at}): {message}")]
pub struct LoadError {
    pub id: String,
    pub path: String,
    pub message: String,
    /// `, policy file F line N` where the policy file declares the plugin.
    pub at: String,
}

/// The engine, the linker and the deadline timers shared by every plugin.
pub struct Host {
    engine: Engine,
    linker: Linker<HostState>,
    /// Drives the per-call deadline timers and the WASI clocks. Its one thread
    /// sleeps without a timeout while no call is in flight.
    timers: Timers,
}

/// A runtime that may be dropped anywhere: the last plugin of a policy can be
/// dropped on the registrar's own runtime (a reload, the exit), where a
/// blocking drop is not allowed. Nothing it runs needs waiting for.
pub(crate) struct Timers(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Timers {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Host {
    pub fn new() -> wasmtime::Result<Arc<Self>> {
        let engine = compiler::new_engine()?;
        let mut linker = Linker::<HostState>::new(&engine);
        bindings::csi_registrar::policy::host_log::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )?;
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        let timers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name("wasm-timers")
            .enable_time()
            .build()
            .map(|rt| Timers(Some(rt)))?;
        Ok(Arc::new(Host {
            engine,
            linker,
            timers,
        }))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Reads, verifies, compiles (or loads from the cache), links and checks one
    /// plugin, then has it validate its settings.
    pub fn load(
        self: &Arc<Self>,
        cfg: &PluginConfig,
        cache: Option<(&Path, &cache::CacheKey)>,
    ) -> Result<WasmPlugin, LoadError> {
        let (plugin, _) = self.prepare(cfg, cache)?;
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

    /// Everything [`Host::load`] does except calling the plugin; also returns
    /// the component's bytes.
    fn prepare(
        self: &Arc<Self>,
        cfg: &PluginConfig,
        cache: Option<(&Path, &cache::CacheKey)>,
    ) -> Result<(WasmPlugin, Vec<u8>), LoadError> {
        let fail = |message: String| cfg.error(message);
        let wasm = component::read_component(&cfg.path).map_err(&fail)?;
        let digest: [u8; 32] = Sha256::digest(&wasm).into();
        if let Some(pin) = cfg.sha256
            && pin != digest
        {
            return Err(fail(format!(
                "sha256 is {}, but the policy file pins {}: ship the pinned file or update the pin",
                hex::encode(digest),
                hex::encode(pin)
            )));
        }
        let component = self.compile(&wasm, &digest, cache).map_err(fail)?;
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
        use bindings::exports::csi_registrar::policy as guest;
        let index = |e: wasmtime::Error| fail(format!("{e:#}"));
        let plugin = WasmPlugin {
            host: self.clone(),
            id: Arc::from(cfg.id.as_str()),
            mode: cfg.mode,
            on_error: cfg.on_error,
            timeout: cfg.timeout,
            memory_limit: cfg.memory_limit_bytes,
            settings_json: cfg.settings_json.clone(),
            plugin: guest::plugin::GuestIndices::new(&pre).map_err(index)?,
            driver_name: hooks
                .contains(&Hook::DriverName)
                .then(|| guest::driver_name::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            versions: hooks
                .contains(&Hook::Versions)
                .then(|| guest::versions::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            failure: hooks
                .contains(&Hook::Failure)
                .then(|| guest::failure::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            endpoint: hooks
                .contains(&Hook::Endpoint)
                .then(|| guest::endpoint::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            pre,
            hooks: selected,
            exported: hooks,
        };
        Ok((plugin, wasm))
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
        .map_err(|e| format!("not a valid WebAssembly component: {e:#}"))?;
        tracing::debug!(took = ?started.elapsed(), cache = ?outcome, "Plugin compiled");
        Ok(component)
    }
}

impl PluginConfig {
    /// A plugin configuration for the author tools: no pin, default limits.
    pub fn unpinned(path: &Path) -> Self {
        PluginConfig {
            id: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into()),
            path: path.to_owned(),
            sha256: None,
            hooks: None,
            timeout: std::time::Duration::from_millis(super::config::DEFAULT_TIMEOUT_MS),
            memory_limit_bytes: super::config::DEFAULT_MEMORY_LIMIT_MIB << 20,
            on_error: OnError::Fail,
            mode: Mode::Enforce,
            settings_json: "{}".into(),
            declared_at: None,
        }
    }

    fn error(&self, message: String) -> LoadError {
        LoadError {
            id: self.id.clone(),
            path: self.path.display().to_string(),
            message,
            at: self
                .declared_at
                .as_ref()
                .map(|(file, line)| format!(", policy file {} line {line}", file.display()))
                .unwrap_or_default(),
        }
    }
}

/// The cache a policy file asks for, if its key can be read.
fn cache_of(cfg: &PolicyConfig) -> Option<(&Path, cache::CacheKey)> {
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

/// Loads every plugin of a policy file into a chain. No engine exists unless
/// this is called, so users of the built-in policy pay nothing for wasm.
pub fn load_chain(cfg: &PolicyConfig, metrics: Arc<Metrics>) -> Result<Chain, LoadError> {
    let host = Host::new().map_err(|e| LoadError {
        id: String::new(),
        path: cfg.source.display().to_string(),
        message: format!("cannot start the WebAssembly engine: {e:#}"),
        at: String::new(),
    })?;
    let cache = cache_of(cfg);
    let mut plugins: Vec<Box<dyn PluginHooks>> = Vec::new();
    for p in &cfg.plugins {
        match host.load(p, cache.as_ref().map(|(d, k)| (*d, k))) {
            Ok(loaded) => plugins.push(Box::new(loaded)),
            // A plugin in monitor mode never changes the outcome: not even
            // whether the registrar starts.
            Err(e) if p.mode == Mode::Monitor => {
                metrics.plugin_call(&p.id, "load", "error", std::time::Duration::ZERO);
                tracing::warn!(plugin = %p.id, error = %e, "Plugin in monitor mode cannot be loaded; going on without it");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Chain::new(plugins, cfg.min_retry, cfg.max_retry, metrics))
}
