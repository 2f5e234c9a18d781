//! The engine, the linker and the timers shared by every plugin, and loading
//! a plugin: read, pin check, compile or cache, link, checks, settings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings;
use super::cache;
use super::compiler::{CompileError, Compiler, Reservation};
use super::component::{self, ComponentError, exported_hooks};
use super::plugin::{GuestHooks, WasmPlugin};
use super::sandbox::{CallPhases, HostState, PhaseLog, Timers};
use crate::metrics::Metrics;
use crate::policy::chain::{CallError, Chain, PluginHooks};
use crate::policy::file::{Mode, OnError, PluginConfig, PolicyFile};
use crate::policy::hook::Hook;

/// A plugin that cannot be loaded, in the plugin author's terms: which
/// plugin, its file, where the policy file declares it, and why.
#[derive(Debug, thiserror::Error)]
#[error("policy plugin {id:?} ({}{}): {failure}", path.display(), declared(declared_at))]
pub struct PluginLoadError {
    /// The plugin's `id`.
    pub id: String,
    /// The component file, its `oci://` reference, or the policy file when
    /// the engine cannot start.
    pub path: PathBuf,
    /// The policy file and the line that declare the plugin.
    pub declared_at: Option<(PathBuf, usize)>,
    /// What is wrong, and how to fix it.
    #[source]
    pub(crate) failure: Box<LoadFailure>,
}

impl PluginLoadError {
    /// What kind of failure, for metrics and retries: a source's class
    /// (`file`, `pin`, `auth`, `network`, `too-large`, `digest`, `manifest`,
    /// `signature`, `cache`, `timeout`), or `engine`, `compiler`,
    /// `component`, `limits`, `settings`.
    pub fn class(&self) -> &'static str {
        self.failure.class()
    }
}

/// Why a plugin does not load, step by step.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadFailure {
    /// Its component cannot be had from its source.
    #[error(transparent)]
    Source(#[from] crate::policy::SourceError),
    /// The engine cannot start, or the component does not compile.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// It is not a policy plugin this host runs.
    #[error(transparent)]
    Component(#[from] component::ComponentError),
    /// The copy-on-write image of its memories cannot be made.
    #[error("cannot prepare the component's memory image: {0:#}")]
    Image(#[source] wasmtime::Error),
    /// Its first instance needs more than `memory_limit_mib`.
    #[error(
        "memory_limit_mib = {limit_mib} is too small for this plugin: starting an instance asked for at least {wanted_mib} MiB (its memories and tables together); raise memory_limit_mib"
    )]
    MemoryLimit {
        /// `memory_limit_mib`.
        limit_mib: u64,
        /// What its first instance asked for.
        wanted_mib: u64,
    },
    /// Its `info` call failed.
    #[error("info() failed: {0}")]
    Info(#[source] CallError),
    /// Its `validate-settings` call failed.
    #[error("validate-settings failed: {0}")]
    Validate(#[source] CallError),
    /// It refused its settings, in its own words.
    #[error("the plugin refused its settings: {0}")]
    Settings(String),
}

impl LoadFailure {
    fn class(&self) -> &'static str {
        match self {
            LoadFailure::Source(e) => e.class(),
            LoadFailure::Compile(CompileError::Engine(..)) | LoadFailure::Image(_) => "engine",
            LoadFailure::Compile(CompileError::Killed(_)) => "compiler",
            LoadFailure::Compile(_)
            | LoadFailure::Component(_)
            | LoadFailure::Info(_)
            | LoadFailure::Validate(_) => "component",
            LoadFailure::MemoryLimit { .. } => "limits",
            LoadFailure::Settings(_) => "settings",
        }
    }
}

fn declared(at: &Option<(PathBuf, usize)>) -> String {
    at.as_ref()
        .map(|(file, line)| format!(", policy file {} line {line}", file.display()))
        .unwrap_or_default()
}

/// The engine, the linker and the deadline timers shared by every plugin.
pub struct Host {
    engine: Engine,
    compiler: Compiler,
    linker: Linker<HostState>,
    /// Drives the per-call deadline timers and the WASI clocks.
    timers: Arc<Timers>,
    /// Where each call's phases go, for `plugin bench` (`None`: nowhere).
    phases: Option<Arc<PhaseLog>>,
}

impl Host {
    /// The engine `compiler` describes and the linker, with the timers'
    /// thread. The WASI clocks run on the tokio runtime this is called
    /// from, if any (the registrar's), or else on a thread of their own.
    pub fn new(compiler: Compiler) -> Result<Arc<Self>, CompileError> {
        Self::build(compiler, None, None)
    }

    /// As [`Host::new`], with the WASI clocks on `runtime`, which calls
    /// must never block (the registrar's: it calls plugins on its blocking
    /// pool).
    pub(crate) fn on_runtime(
        compiler: Compiler,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Self>, CompileError> {
        Self::build(compiler, Some(runtime), None)
    }

    /// As [`Host::new`], keeping the phases of each call for
    /// [`Host::last_call_phases`].
    pub(crate) fn recording_phases(compiler: Compiler) -> Result<Arc<Self>, CompileError> {
        Self::build(compiler, None, Some(Arc::default()))
    }

    fn build(
        compiler: Compiler,
        runtime: Option<tokio::runtime::Handle>,
        phases: Option<Arc<PhaseLog>>,
    ) -> Result<Arc<Self>, CompileError> {
        let engine = super::compiler::new_engine(compiler.reservation)?;
        let fail = |e: wasmtime::Error| CompileError::Engine(e, compiler.reservation);
        let mut linker = Linker::<HostState>::new(&engine);
        bindings::csi_registrar::policy::host_log::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(fail)?;
        bindings::csi_registrar::policy::registrar_info::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(fail)?;
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(fail)?;
        let timers = match runtime {
            Some(handle) => Timers::on(handle),
            None => Timers::new(),
        }
        .map_err(|e| fail(e.into()))?;
        Ok(Arc::new(Host {
            engine,
            compiler,
            linker,
            timers: Arc::new(timers),
            phases,
        }))
    }

    /// The phases of the last call made by a plugin of this host, once
    /// (always `None` unless made by [`Host::recording_phases`]).
    pub(crate) fn last_call_phases(&self) -> Option<CallPhases> {
        self.phases.as_ref().and_then(|log| log.take())
    }

    /// How this host compiles.
    pub(crate) fn compiler(&self) -> &Compiler {
        &self.compiler
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
        let info = plugin.info().map_err(|e| {
            cfg.error(match e {
                CallError::Memory {
                    limit_mib,
                    wanted_mib,
                } => LoadFailure::MemoryLimit {
                    limit_mib,
                    wanted_mib,
                },
                e => LoadFailure::Info(e),
            })
        })?;
        plugin.validate_settings().map_err(|e| cfg.error(e))?;
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
        let fail = |e: ComponentError| cfg.error(e.into());
        let digest: [u8; 32] = Sha256::digest(wasm).into();
        let component = self
            .compile(wasm, &digest, cache)
            .map_err(|e| cfg.error(e))?;
        let hooks = exported_hooks(&self.engine, &component).map_err(fail)?;
        let selected: BTreeSet<Hook> = match &cfg.hooks {
            None => hooks.clone(),
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|h| !hooks.contains(h)) {
                    return Err(fail(ComponentError::MissingHook {
                        missing: *missing,
                        exported: component::describe_hooks(&hooks),
                    }));
                }
                wanted.clone()
            }
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(ComponentError::Link(e)))?;
        let index = |e: wasmtime::Error| fail(ComponentError::Exports(e));
        let plugin = WasmPlugin {
            engine: self.engine.clone(),
            timers: self.timers.clone(),
            phases: self.phases.clone(),
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
    ) -> Result<Component, LoadFailure> {
        component::check_is_component(wasm)?;
        let started = std::time::Instant::now();
        let (component, outcome) = match cache {
            Some((dir, key)) => {
                cache::load_or_compile(&self.engine, &self.compiler, dir, key, wasm, digest)
            }
            None => self
                .compiler
                .compile(&self.engine, wasm)
                .map(|c| (c, cache::CacheOutcome::Bypassed)),
        }?;
        let compiled = started.elapsed();
        // Otherwise the first instantiation makes the copy-on-write image of
        // the component's memories (a memfd the initial data is written to),
        // inside the first call's deadline: for a Python plugin, a snapshot of
        // tens of MB that a busy node takes more than 100 ms to write.
        component
            .initialize_copy_on_write_image()
            .map_err(LoadFailure::Image)?;
        tracing::debug!(took = ?compiled, image = ?started.elapsed() - compiled, cache = ?outcome, "Plugin compiled");
        Ok(component)
    }
}

impl PluginConfig {
    /// This plugin does not load, because of `failure`.
    pub(crate) fn error(&self, failure: LoadFailure) -> PluginLoadError {
        PluginLoadError {
            id: self.id.clone(),
            path: PathBuf::from(self.source.to_string()),
            declared_at: self.declared_at.clone(),
            failure: Box::new(failure),
        }
    }

    /// Its component cannot be had from its source.
    pub(crate) fn source_error(&self, e: crate::policy::SourceError) -> PluginLoadError {
        self.error(e.into())
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

/// The engine a policy file's plugins need: its memory slots hold the
/// largest `memory_limit_mib`, and no more.
pub(crate) fn compiler_for(cfg: &PolicyFile, worker: Option<PathBuf>) -> Compiler {
    Compiler {
        reservation: Reservation::for_caps(cfg.plugins.iter().map(|p| p.memory_limit_bytes)),
        worker,
    }
}

/// Loads every plugin of a policy file into a chain, from their components
/// as `policy::fetch` got them (in the file's order), compiling as `compiler`
/// says, with the WASI clocks on `runtime` if given (see [`Host::on_runtime`]).
/// No engine exists unless this is called, so users of the built-in policy
/// pay nothing for wasm.
pub(crate) fn load_chain(
    cfg: &PolicyFile,
    compiler: Compiler,
    runtime: Option<tokio::runtime::Handle>,
    components: Vec<Result<Vec<u8>, PluginLoadError>>,
    metrics: Arc<Metrics>,
) -> Result<Chain, PluginLoadError> {
    let host = match runtime {
        Some(handle) => Host::on_runtime(compiler, handle),
        None => Host::new(compiler),
    };
    let host = match host {
        Ok(host) => host,
        Err(e) => {
            let err = PluginLoadError {
                id: String::new(),
                path: cfg.source.clone(),
                declared_at: None,
                failure: Box::new(e.into()),
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
                tracing::warn!(plugin = %p.id, error = %e, class = e.class(), "Plugin in monitor mode cannot be loaded; going on without it");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Chain::new(plugins, cfg.min_retry, cfg.max_retry, metrics))
}
