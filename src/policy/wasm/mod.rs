//! The wasmtime host for policy plugins.
//!
//! Each plugin is compiled once (or loaded from the on-disk cache), checked
//! against the WIT package, and pre-linked into an `InstancePre`. Every hook
//! call then gets a fresh `Store` with a memory cap and a deadline, so a plugin
//! keeps no state between calls and a trap cannot poison later calls.
//!
//! The sandbox: the only imports are `host-log` and a WASI context with nothing
//! in it (no preopened directories, no environment, no arguments, no network,
//! stdin closed; stdout and stderr captured into the log).

pub mod cache;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::chain::{CallError, Chain, PluginHooks};
use super::config::{Hook, Mode, OnError, PluginConfig, PolicyConfig};
use super::{Context, Failure, FailureAction};
use crate::metrics::Metrics;

mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "registrar-policy",
    });
}

use bindings::csi_registrar::policy::host_log;
use bindings::csi_registrar::policy::types::RegistrationContext;
use bindings::exports::csi_registrar::policy::{driver_name, endpoint, failure, plugin, versions};

/// The WIT package this host implements.
pub const WIT_PACKAGE: &str = "csi-registrar:policy";
pub const WIT_VERSION: &str = "0.1.0";
/// Per-call caps on what a plugin may log.
const MAX_LOG_MESSAGE: usize = 4096;
/// A plugin's own name and version, as `info()` reports them, in logs.
const MAX_INFO: usize = 128;
const MAX_LOG_LINES_PER_CALL: u32 = 64;
const CAPTURED_OUTPUT_BYTES: usize = 16 * 1024;

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

/// What every Store holds.
struct HostState {
    limiter: Limiter,
    wasi: WasiCtx,
    table: ResourceTable,
    plugin: Arc<str>,
    hook: &'static str,
    log_lines: u32,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl host_log::Host for HostState {
    fn log(&mut self, level: host_log::Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            if self.log_lines == MAX_LOG_LINES_PER_CALL + 1 {
                tracing::warn!(target: "plugin", plugin = %self.plugin, hook = self.hook, "log line limit reached; dropping the rest of this call's lines");
            }
            return;
        }
        let message = truncate(&message, MAX_LOG_MESSAGE);
        let (plugin, hook) = (&*self.plugin, self.hook);
        match level {
            host_log::Level::Trace => tracing::trace!(target: "plugin", plugin, hook, "{message}"),
            host_log::Level::Debug => tracing::debug!(target: "plugin", plugin, hook, "{message}"),
            host_log::Level::Info => tracing::info!(target: "plugin", plugin, hook, "{message}"),
            host_log::Level::Warn => tracing::warn!(target: "plugin", plugin, hook, "{message}"),
            host_log::Level::Error => tracing::error!(target: "plugin", plugin, hook, "{message}"),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A memory cap that remembers it was hit, so the error can say "memory".
struct Limiter {
    max_bytes: usize,
    exceeded: bool,
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.exceeded = true;
            return Err(wasmtime::Error::msg(format!(
                "memory limit exceeded: growing to {desired} bytes, limit {} bytes",
                self.max_bytes
            )));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        // componentize-py needs 17 core instances; leave room.
        64
    }
}

/// The engine, its deadline clock and the linker shared by every plugin.
pub struct Host {
    engine: Engine,
    linker: Linker<HostState>,
    tick: Duration,
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Host {
    pub fn new(tick: Duration) -> wasmtime::Result<Arc<Self>> {
        let mut cfg = wasmtime::Config::new();
        // Deadlines by epoch interruption: cheaper than fuel, and wall-clock based.
        cfg.epoch_interruption(true);
        let engine = Engine::new(&cfg)?;
        let mut linker = Linker::<HostState>::new(&engine);
        host_log::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;

        // A plain thread, not a tokio interval: the clock must tick even when
        // the runtime is busy, and must not burst after a stall.
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (weak, stop) = (engine.weak(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })?;
        Ok(Arc::new(Host {
            engine,
            linker,
            tick,
            ticker_stop,
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
        cache_dir: Option<&Path>,
    ) -> Result<WasmPlugin, LoadError> {
        let plugin = self.prepare(cfg, cache_dir)?;
        let info = plugin
            .info()
            .map_err(|e| cfg.error(format!("info() failed: {e}")))?;
        plugin.validate_settings().map_err(|m| cfg.error(m))?;
        tracing::info!(
            plugin = %cfg.id, name = %info.0, version = %info.1,
            hooks = %describe_hooks(&plugin.hooks),
            "policy plugin loaded"
        );
        Ok(plugin)
    }

    /// Everything [`Host::load`] does except asking the plugin about its settings.
    fn prepare(
        self: &Arc<Self>,
        cfg: &PluginConfig,
        cache_dir: Option<&Path>,
    ) -> Result<WasmPlugin, LoadError> {
        let fail = |message: String| cfg.error(message);
        let wasm = read_component(&cfg.path).map_err(&fail)?;
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
        let component = self.compile(&wasm, &digest, cache_dir).map_err(fail)?;
        let hooks = exported_hooks(&self.engine, &component).map_err(fail)?;
        let selected: BTreeSet<Hook> = match &cfg.hooks {
            None => hooks.clone(),
            Some(wanted) => {
                if let Some(missing) = wanted.iter().find(|h| !hooks.contains(h)) {
                    return Err(fail(format!(
                        "hooks lists \"{missing}\" but the component does not export {WIT_PACKAGE}/{missing}@{WIT_VERSION}; it exports {}",
                        describe_hooks(&hooks)
                    )));
                }
                wanted.clone()
            }
        };
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(link_error(&e)))?;
        let index = |e: wasmtime::Error| fail(format!("{e:#}"));
        let plugin = WasmPlugin {
            host: self.clone(),
            id: Arc::from(cfg.id.as_str()),
            mode: cfg.mode,
            on_error: cfg.on_error,
            timeout: cfg.timeout,
            memory_limit: cfg.memory_limit_bytes,
            settings_json: cfg.settings_json.clone(),
            plugin: plugin::GuestIndices::new(&pre).map_err(index)?,
            driver_name: hooks
                .contains(&Hook::DriverName)
                .then(|| driver_name::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            versions: hooks
                .contains(&Hook::Versions)
                .then(|| versions::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            failure: hooks
                .contains(&Hook::Failure)
                .then(|| failure::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            endpoint: hooks
                .contains(&Hook::Endpoint)
                .then(|| endpoint::GuestIndices::new(&pre).map_err(index))
                .transpose()?,
            pre,
            hooks: selected,
            exported: hooks,
        };
        Ok(plugin)
    }

    fn compile(
        &self,
        wasm: &[u8],
        digest: &[u8; 32],
        cache_dir: Option<&Path>,
    ) -> Result<Component, String> {
        check_is_component(wasm)?;
        let started = std::time::Instant::now();
        let (component, outcome) = match cache_dir {
            Some(dir) => cache::load_or_compile(&self.engine, dir, wasm, digest),
            None => Component::new(&self.engine, wasm).map(|c| (c, cache::CacheOutcome::Bypassed)),
        }
        .map_err(|e| format!("not a valid WebAssembly component: {e:#}"))?;
        tracing::debug!(took = ?started.elapsed(), cache = ?outcome, "plugin compiled");
        Ok(component)
    }
}

/// What `plugin inspect` shows about a component.
#[derive(Debug, serde::Serialize)]
pub struct Inspection {
    pub path: String,
    pub size_bytes: usize,
    pub sha256: String,
    /// The policy interfaces it exports, with versions.
    pub exports: Vec<String>,
    /// Everything it imports (the host provides host-log and WASI 0.2).
    pub imports: Vec<String>,
    pub hooks: Vec<String>,
    /// From the plugin's own `info()`.
    pub name: String,
    pub version: String,
}

impl Host {
    /// Compiles a component and describes it; fails as loading would.
    pub fn inspect(self: &Arc<Self>, path: &Path) -> Result<Inspection, LoadError> {
        let cfg = PluginConfig::unpinned(path);
        let wasm = read_component(path).map_err(|m| cfg.error(m))?;
        let digest: [u8; 32] = Sha256::digest(&wasm).into();
        let component = self
            .compile(&wasm, &digest, None)
            .map_err(|m| cfg.error(m))?;
        let ty = component.component_type();
        let exports = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .filter(|n| n.starts_with(WIT_PACKAGE))
            .collect();
        let imports = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_owned())
            .collect();
        let plugin = self.prepare(&cfg, None)?;
        let (name, version) = plugin
            .info()
            .map_err(|e| cfg.error(format!("info() failed: {e}")))?;
        Ok(Inspection {
            path: path.display().to_string(),
            size_bytes: wasm.len(),
            sha256: hex::encode(digest),
            exports,
            imports,
            hooks: plugin
                .exported
                .iter()
                .map(|h| h.as_str().to_owned())
                .collect(),
            name,
            version,
        })
    }

    /// Compiles a component into `cache_dir` as the registrar would at start-up;
    /// returns the cache entry.
    pub fn precompile(
        &self,
        path: &Path,
        cache_dir: &Path,
    ) -> Result<std::path::PathBuf, LoadError> {
        let cfg = PluginConfig::unpinned(path);
        let wasm = read_component(path).map_err(|m| cfg.error(m))?;
        check_is_component(&wasm).map_err(|m| cfg.error(m))?;
        let digest: [u8; 32] = Sha256::digest(&wasm).into();
        cache::load_or_compile(&self.engine, cache_dir, &wasm, &digest)
            .map_err(|e| cfg.error(format!("not a valid WebAssembly component: {e:#}")))?;
        let entry = cache::entry(&self.engine, cache_dir, &digest);
        if !entry.exists() {
            return Err(cfg.error(format!(
                "the cache directory {} was not usable (see the log)",
                cache_dir.display()
            )));
        }
        Ok(entry)
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
            timeout: Duration::from_millis(super::config::DEFAULT_TIMEOUT_MS),
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

/// A component file: a regular file, of bounded size.
fn read_component(path: &Path) -> Result<Vec<u8>, String> {
    crate::policy::read_regular_file(path, crate::policy::MAX_PLUGIN_FILE)
        .map_err(|e| format!("cannot read the file: {e}"))
}

/// Tells a core module or a non-wasm file from a component, with the fix.
fn check_is_component(wasm: &[u8]) -> Result<(), String> {
    match wasm.get(..8) {
        Some([0, b'a', b's', b'm', 0x0d, 0, 0x01, 0]) => Ok(()),
        Some([0, b'a', b's', b'm', 0x01, 0, 0, 0]) => Err(
            "this is a core WebAssembly module, not a component: build for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)".into(),
        ),
        _ => Err("not a WebAssembly binary (no \\0asm header)".into()),
    }
}

/// The hook interfaces a component exports, after checking it is a policy
/// plugin of a version this host implements.
pub fn exported_hooks(engine: &Engine, component: &Component) -> Result<BTreeSet<Hook>, String> {
    let mut hooks = BTreeSet::new();
    let mut has_plugin = false;
    let mut foreign = Vec::new();
    for (name, _) in component.component_type().exports(engine) {
        let Some(rest) = name.strip_prefix(&format!("{WIT_PACKAGE}/")) else {
            continue;
        };
        let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if !compatible(version) {
            foreign.push(name.to_owned());
            continue;
        }
        match interface {
            "plugin" => has_plugin = true,
            other => {
                if let Ok(h) = other.parse::<Hook>() {
                    hooks.insert(h);
                }
            }
        }
    }
    if let Some(name) = foreign.first() {
        return Err(format!(
            "it exports {name}, but this registrar implements {WIT_PACKAGE}@{WIT_VERSION} (it accepts 0.1.x): rebuild the plugin against the wit/ of this registrar release"
        ));
    }
    if !has_plugin {
        return Err(format!(
            "it does not export {WIT_PACKAGE}/plugin@{WIT_VERSION}, so it is not a registrar policy plugin (build it against wit/policy.wit, one of its worlds)"
        ));
    }
    Ok(hooks)
}

/// wasmtime matches semver-compatible names: for 0.x only the patch may differ.
fn compatible(version: &str) -> bool {
    let mut parts = version.split('.');
    matches!((parts.next(), parts.next()), (Some("0"), Some("1")))
}

fn describe_hooks(hooks: &BTreeSet<Hook>) -> String {
    if hooks.is_empty() {
        return "no hooks".into();
    }
    hooks
        .iter()
        .map(|h| h.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn link_error(e: &wasmtime::Error) -> String {
    let text = format!("{e:#}");
    if text.contains("matching implementation was not found") {
        format!(
            "{text}: a policy plugin may import only {WIT_PACKAGE}/host-log and WASI 0.2 (which the host gives with nothing in it). \
             For componentize-py use --stub-wasi; for componentize-js disable every feature"
        )
    } else {
        text
    }
}

/// A loaded plugin; cheap to call, nothing shared between calls.
pub struct WasmPlugin {
    host: Arc<Host>,
    id: Arc<str>,
    mode: Mode,
    on_error: OnError,
    timeout: Duration,
    memory_limit: u64,
    settings_json: String,
    pre: InstancePre<HostState>,
    plugin: plugin::GuestIndices,
    driver_name: Option<driver_name::GuestIndices>,
    versions: Option<versions::GuestIndices>,
    failure: Option<failure::GuestIndices>,
    endpoint: Option<endpoint::GuestIndices>,
    /// The hooks that run: exported, and allowed by the TOML filter.
    hooks: BTreeSet<Hook>,
    /// Every hook the component exports.
    exported: BTreeSet<Hook>,
}

impl WasmPlugin {
    pub fn exported_hooks(&self) -> &BTreeSet<Hook> {
        &self.exported
    }

    /// Instantiates the plugin in a fresh Store and runs `f` under the deadline.
    fn call<R>(
        &self,
        hook: &'static str,
        f: impl FnOnce(&mut Store<HostState>, &wasmtime::component::Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let out = MemoryOutputPipe::new(CAPTURED_OUTPUT_BYTES);
        let wasi = WasiCtxBuilder::new()
            .stdout(out.clone())
            .stderr(out.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut store = Store::new(
            &self.host.engine,
            HostState {
                limiter: Limiter {
                    max_bytes: usize::try_from(self.memory_limit).unwrap_or(usize::MAX),
                    exceeded: false,
                },
                wasi,
                table: ResourceTable::new(),
                plugin: self.id.clone(),
                hook,
                log_lines: 0,
            },
        );
        store.limiter(|s| &mut s.limiter);
        // The deadline covers instantiation too: it runs guest code.
        let ticks = self
            .timeout
            .as_nanos()
            .div_ceil(self.host.tick.as_nanos().max(1)) as u64
            + 1;
        store.set_epoch_deadline(ticks);
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|instance| f(&mut store, &instance));
        let output = out.contents();
        if !output.is_empty() {
            tracing::debug!(target: "plugin", plugin = %self.id, hook, output = %String::from_utf8_lossy(&output), "plugin wrote to stdout/stderr");
        }
        result.map_err(|e| {
            if store.data().limiter.exceeded {
                CallError::Memory(self.memory_limit >> 20)
            } else if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
                CallError::Timeout(self.timeout)
            } else {
                CallError::Trap(format!("{e:#}"))
            }
        })
    }

    fn context(&self, ctx: &Context) -> RegistrationContext {
        RegistrationContext {
            node_name: ctx.node_name.clone(),
            driver_name: ctx.driver_name.clone(),
            driver_version: ctx.driver_version.clone(),
            csi_address: ctx.csi_address.clone(),
            kubelet_registration_path: ctx.kubelet_registration_path.clone(),
            plugin_registration_path: ctx.plugin_registration_path.clone(),
            settings_json: self.settings_json.clone(),
        }
    }

    /// The plugin's own name and version.
    pub fn info(&self) -> Result<(String, String), CallError> {
        self.call("info", |store, instance| {
            let guest = self.plugin.load(&mut *store, instance)?;
            let info = guest.call_info(&mut *store)?;
            Ok((
                crate::validate::bounded(info.name, MAX_INFO),
                crate::validate::bounded(info.version, MAX_INFO),
            ))
        })
    }

    /// Asks the plugin to check its settings.
    pub fn validate_settings(&self) -> Result<(), String> {
        self.call("validate-settings", |store, instance| {
            let guest = self.plugin.load(&mut *store, instance)?;
            guest.call_validate_settings(&mut *store, &self.settings_json)
        })
        .map_err(|e| format!("validate-settings failed: {e}"))?
        .map_err(|msg| {
            format!(
                "the plugin refused its settings: {}",
                crate::validate::bounded(msg, MAX_LOG_MESSAGE)
            )
        })
    }
}

fn missing(hook: Hook) -> CallError {
    CallError::Trap(format!("hook {hook} is not exported"))
}

impl PluginHooks for WasmPlugin {
    fn id(&self) -> &str {
        &self.id
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn runs(&self, hook: Hook) -> bool {
        self.hooks.contains(&hook)
    }

    fn rewrite_driver_name(
        &self,
        ctx: &Context,
        current: &str,
    ) -> Result<Option<String>, CallError> {
        let idx = self
            .driver_name
            .as_ref()
            .ok_or_else(|| missing(Hook::DriverName))?;
        let answer = self.call("driver-name", |store, instance| {
            idx.load(&mut *store, instance)?.call_rewrite_driver_name(
                &mut *store,
                &self.context(ctx),
                current,
            )
        })?;
        match answer
            .map_err(|e| CallError::Plugin(crate::validate::bounded(e.message, MAX_LOG_MESSAGE)))?
        {
            driver_name::NameDecision::Keep => Ok(None),
            driver_name::NameDecision::Rename(name) => Ok(Some(name)),
        }
    }

    fn supported_versions(
        &self,
        ctx: &Context,
        current: &[String],
    ) -> Result<Vec<String>, CallError> {
        let idx = self
            .versions
            .as_ref()
            .ok_or_else(|| missing(Hook::Versions))?;
        self.call("versions", |store, instance| {
            idx.load(&mut *store, instance)?.call_supported_versions(
                &mut *store,
                &self.context(ctx),
                current,
            )
        })?
        .map_err(|e| CallError::Plugin(crate::validate::bounded(e.message, MAX_LOG_MESSAGE)))
    }

    fn map_endpoint(&self, ctx: &Context, current: &str) -> Result<Option<String>, CallError> {
        let idx = self
            .endpoint
            .as_ref()
            .ok_or_else(|| missing(Hook::Endpoint))?;
        let answer = self.call("endpoint", |store, instance| {
            idx.load(&mut *store, instance)?.call_map_endpoint(
                &mut *store,
                &self.context(ctx),
                current,
            )
        })?;
        match answer
            .map_err(|e| CallError::Plugin(crate::validate::bounded(e.message, MAX_LOG_MESSAGE)))?
        {
            endpoint::EndpointDecision::Keep => Ok(None),
            endpoint::EndpointDecision::Replace(p) => Ok(Some(p)),
        }
    }

    fn on_failure(&self, ctx: &Context, f: &Failure) -> Result<Option<FailureAction>, CallError> {
        let idx = self
            .failure
            .as_ref()
            .ok_or_else(|| missing(Hook::Failure))?;
        let input = failure::RegistrationFailure {
            source: failure::FailureSource::KubeletRejected,
            error: f.error.clone(),
            attempt: f.attempt,
            elapsed_ms: u64::try_from(f.elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        let answer = self.call("failure", |store, instance| {
            idx.load(&mut *store, instance)?
                .call_on_registration_failure(&mut *store, &self.context(ctx), &input)
        })?;
        Ok(
            match answer.map_err(|e| {
                CallError::Plugin(crate::validate::bounded(e.message, MAX_LOG_MESSAGE))
            })? {
                failure::FailureAction::Exit(code) => Some(FailureAction::Exit(code)),
                failure::FailureAction::Retry(b) => Some(FailureAction::Retry(
                    Duration::from_millis(b.delay_ms.into()),
                )),
                failure::FailureAction::Ignore => Some(FailureAction::Ignore),
                failure::FailureAction::Defer => None,
            },
        )
    }
}

/// Loads every plugin of a policy file into a chain. No engine exists unless
/// this is called, so users of the built-in policy pay nothing for wasm.
pub fn load_chain(cfg: &PolicyConfig, metrics: Arc<Metrics>) -> Result<Chain, LoadError> {
    let host = Host::new(cfg.epoch_tick).map_err(|e| LoadError {
        id: String::new(),
        path: cfg.source.display().to_string(),
        message: format!("cannot start the WebAssembly engine: {e:#}"),
        at: String::new(),
    })?;
    let mut plugins: Vec<Box<dyn PluginHooks>> = Vec::new();
    for p in &cfg.plugins {
        match host.load(p, cfg.cache_dir.as_deref()) {
            Ok(loaded) => plugins.push(Box::new(loaded)),
            // A plugin in monitor mode never changes the outcome: not even
            // whether the registrar starts.
            Err(e) if p.mode == crate::policy::config::Mode::Monitor => {
                metrics.plugin_call(&p.id, "load", "error", std::time::Duration::ZERO);
                tracing::warn!(plugin = %p.id, error = %e, "Plugin in monitor mode cannot be loaded; going on without it");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Chain::new(plugins, cfg.min_retry, cfg.max_retry, metrics))
}
