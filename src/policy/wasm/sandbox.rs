//! The sandbox one plugin call runs in: a fresh `Store` with a memory cap for
//! the whole instance, a deadline nothing can outlive, and the host-log import.
//!
//! **Deadlines.** Calls run as futures (wasmtime's async support), raced
//! against their deadline, which the [`Watchdog`] fires:
//! - a call waiting in a host function (a WASI clock wait, say) is dropped at
//!   the deadline, which unwinds the guest;
//! - a call running guest code is stopped by epoch interruption: at the
//!   deadline the watchdog bumps the engine's epoch, and the store's epoch
//!   callback traps once its own deadline has passed. Other calls that see
//!   the bump go on.
//!
//! The watchdog's thread sleeps without a timeout while no call is in flight,
//! so an idle registrar has no wake-ups at all.
//!
//! **Memory.** The limiter sums every memory and table of the instance (all the
//! core instances of the component), from their creation on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{self, Either};

use wasmtime::component::{Instance, InstancePre, ResourceTable};
use wasmtime::{Engine, Store, Trap, UpdateDeadline, WasmBacktrace};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::csi_registrar::policy::{host_log, registrar_info};
use super::compiler::PER_COMPONENT;
use super::watchdog::Watchdog;
use crate::plugin_type::PluginType;
use crate::policy::chain::CallError;

/// What a plugin's calls run beside: the watchdog that fires their
/// deadlines, and a tokio runtime for the WASI clocks.
///
/// The registrar gives its own runtime ([`Timers::on`]): its loop waits on
/// the blocking pool while a call runs there, and so drives the clocks. Other
/// users get a runtime of their own ([`Timers::new`]), since a caller may
/// call a plugin from its runtime's only thread. That runtime may be dropped
/// anywhere: the last plugin of a policy can be dropped on another runtime
/// (a reload, the exit), where a blocking drop is not allowed. Nothing it
/// runs needs waiting for.
pub(crate) struct Timers {
    runtime: Clocks,
    watchdog: Watchdog,
}

enum Clocks {
    Own(Option<tokio::runtime::Runtime>),
    Shared(tokio::runtime::Handle),
}

impl Drop for Timers {
    fn drop(&mut self) {
        if let Clocks::Own(rt) = &mut self.runtime
            && let Some(rt) = rt.take()
        {
            rt.shutdown_background();
        }
    }
}

impl Timers {
    /// A runtime of their own and the watchdog: two threads, which sleep
    /// without a timeout while no call is in flight.
    pub(crate) fn new() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .thread_name("wasm-timers")
            .enable_time()
            .build()?;
        Ok(Timers {
            runtime: Clocks::Own(Some(runtime)),
            watchdog: Watchdog::new()?,
        })
    }

    /// The clocks on `runtime`, which must not be blocked while a call runs
    /// (calls run on its blocking pool), and the watchdog's thread.
    pub(crate) fn on(runtime: tokio::runtime::Handle) -> std::io::Result<Self> {
        Ok(Timers {
            runtime: Clocks::Shared(runtime),
            watchdog: Watchdog::new()?,
        })
    }

    fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        match &self.runtime {
            Clocks::Own(rt) => rt.as_ref().expect("present until dropped").enter(),
            Clocks::Shared(handle) => handle.enter(),
        }
    }
}

/// Per-call caps on what a plugin may log.
pub(super) const MAX_LOG_MESSAGE: usize = 4096;
const MAX_LOG_LINES_PER_CALL: u32 = 64;
const CAPTURED_OUTPUT_BYTES: usize = 16 * 1024;
/// What a table element is counted as against the memory cap.
const TABLE_ELEMENT_BYTES: usize = 16;

/// What every Store holds.
pub(super) struct HostState {
    limiter: Limiter,
    wasi: WasiCtx,
    table: ResourceTable,
    plugin: Arc<str>,
    hook: &'static str,
    log_lines: u32,
    /// What `registrar-info.plugin-type` answers.
    plugin_type: PluginType,
}

impl registrar_info::Host for HostState {
    fn plugin_type(&mut self) -> registrar_info::KubeletPluginType {
        match self.plugin_type {
            PluginType::Csi => registrar_info::KubeletPluginType::CsiPlugin,
            PluginType::Dra => registrar_info::KubeletPluginType::DraPlugin,
        }
    }
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
                tracing::warn!(target: "plugin", plugin = %self.plugin, hook = self.hook, "Log line limit reached; dropping the rest of this call's lines");
            }
            return;
        }
        let message = crate::validate::bounded(message, MAX_LOG_MESSAGE);
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

/// A cap on the sum of an instance's memories and tables, which remembers
/// what was asked for, so the error can say how much would have been needed.
struct Limiter {
    max_bytes: usize,
    used: usize,
    /// The largest total an instance asked for and was refused.
    refused: Option<usize>,
}

/// What the limiter says to one growth.
#[derive(Debug, PartialEq, Eq)]
enum Growth {
    Allowed,
    /// Past the memory's or table's own maximum: wasmtime fails it anyway.
    PastMaximum,
    OverCap,
}

impl Limiter {
    fn grow(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> Growth {
        if maximum.is_some_and(|m| desired > m) {
            // The growth fails anyway; it must not count.
            return Growth::PastMaximum;
        }
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.max_bytes {
            self.refused = Some(self.refused.unwrap_or(0).max(total));
            return Growth::OverCap;
        }
        self.used = total;
        Growth::Allowed
    }
}

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        match self.grow(current, desired, maximum) {
            Growth::Allowed => Ok(true),
            Growth::PastMaximum => Ok(false),
            // A trap, not `memory.grow` returning -1: a plugin out of memory
            // is a failed call, whatever its allocator would do next.
            Growth::OverCap => Err(wasmtime::Error::msg("memory limit exceeded")),
        }
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let bytes = |n: usize| n.saturating_mul(TABLE_ELEMENT_BYTES);
        match self.grow(bytes(current), bytes(desired), maximum.map(bytes)) {
            Growth::Allowed => Ok(true),
            Growth::PastMaximum => Ok(false),
            Growth::OverCap => Err(wasmtime::Error::msg("memory limit exceeded (tables)")),
        }
    }

    // The pool's slots hold the same counts (`compiler::PER_COMPONENT`):
    // componentize-py needs 17 core instances; the byte cap bounds the sum of
    // the memories and tables, this their bookkeeping.
    fn instances(&self) -> usize {
        PER_COMPONENT as usize
    }

    fn memories(&self) -> usize {
        PER_COMPONENT as usize
    }

    fn tables(&self) -> usize {
        PER_COMPONENT as usize
    }
}

/// Where one call's time went: setting up its store and deadline,
/// instantiating, the call itself, and in all (with reading the output);
/// and the memory its instance held at the end (memories and tables, as the
/// cap counts them). For `plugin bench`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CallPhases {
    pub(crate) setup: Duration,
    pub(crate) instantiate: Duration,
    pub(crate) call: Duration,
    pub(crate) total: Duration,
    pub(crate) memory: usize,
}

/// Where the phases of a host's last call are kept, for `plugin bench`.
#[derive(Debug, Default)]
pub(crate) struct PhaseLog(std::sync::Mutex<Option<CallPhases>>);

impl PhaseLog {
    fn put(&self, phases: CallPhases) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(phases);
    }

    /// The last call's phases, once.
    pub(crate) fn take(&self) -> Option<CallPhases> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What a call needs from its plugin.
pub(super) struct CallSpec<'a> {
    pub engine: &'a Engine,
    pub timers: &'a Timers,
    pub pre: &'a InstancePre<HostState>,
    pub plugin: &'a Arc<str>,
    pub hook: &'static str,
    pub timeout: Duration,
    pub memory_limit: u64,
    pub plugin_type: PluginType,
    /// Where this call's phases go, if anywhere.
    pub phases: Option<&'a PhaseLog>,
}

/// Instantiates the plugin in a fresh Store and runs `f` under the deadline
/// and the memory cap. Blocks the calling thread for at most the deadline.
pub(super) fn call<R>(
    spec: CallSpec<'_>,
    f: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<R>,
) -> Result<R, CallError> {
    let started = Instant::now();
    let out = MemoryOutputPipe::new(CAPTURED_OUTPUT_BYTES);
    let wasi = WasiCtxBuilder::new()
        .stdout(out.clone())
        .stderr(out.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let max_bytes = usize::try_from(spec.memory_limit).unwrap_or(usize::MAX);
    let mut store = Store::new(
        spec.engine,
        HostState {
            limiter: Limiter {
                max_bytes,
                used: 0,
                refused: None,
            },
            wasi,
            table: ResourceTable::new(),
            plugin: spec.plugin.clone(),
            hook: spec.hook,
            log_lines: 0,
            plugin_type: spec.plugin_type,
        },
    );
    store.limiter(|s| &mut s.limiter);

    // The deadline covers instantiation too: it runs guest code.
    let deadline = Instant::now() + spec.timeout;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if Instant::now() >= deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Continue(1)
        })
    });
    // WASI clocks sleep on the timers' runtime.
    let _runtime = spec.timers.enter();
    let armed = spec.timers.watchdog.arm(deadline, spec.engine.weak());
    let set_up = Instant::now();
    let mut instantiated = set_up;
    let work = async {
        let instance = spec.pre.instantiate_async(&mut store).await?;
        instantiated = Instant::now();
        f(&mut store, &instance).await
    };
    let result = futures_executor::block_on(async {
        match future::select(std::pin::pin!(work), armed).await {
            Either::Left((answer, _disarmed)) => Some(answer),
            Either::Right(((), _dropped)) => None,
        }
    });
    let called = Instant::now();
    let memory = store.data().limiter.used;
    let phases = |ended: Instant| CallPhases {
        setup: set_up - started,
        instantiate: instantiated.saturating_duration_since(set_up),
        call: called.saturating_duration_since(instantiated.max(set_up)),
        total: ended - started,
        memory,
    };

    let output = out.contents();
    if !output.is_empty() {
        tracing::debug!(target: "plugin", plugin = %spec.plugin, hook = spec.hook, output = %String::from_utf8_lossy(&output), "Plugin wrote to stdout/stderr");
    }
    if let Some(log) = spec.phases {
        log.put(phases(Instant::now()));
    }
    let error = match result {
        Some(Ok(answer)) => return Ok(answer),
        None => return Err(CallError::Timeout(spec.timeout)),
        Some(Err(e)) => e,
    };
    if let Some(backtrace) = error.downcast_ref::<WasmBacktrace>() {
        tracing::debug!(target: "plugin", plugin = %spec.plugin, hook = spec.hook, backtrace = %backtrace, "Plugin call failed here");
    }
    let limiter = &store.data().limiter;
    if let Some(wanted) = limiter.refused {
        return Err(CallError::Memory {
            limit_mib: spec.memory_limit >> 20,
            wanted_mib: (wanted as u64).div_ceil(1 << 20),
        });
    }
    if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        return Err(CallError::Timeout(spec.timeout));
    }
    Err(CallError::Trap(cause(&error, &output)))
}

/// A failure's cause on one line, without the backtrace (logged at debug):
/// the trap, then the plugin's last two lines of output, which for a Rust
/// panic are where and why.
fn cause(error: &wasmtime::Error, output: &[u8]) -> String {
    let backtrace = error.downcast_ref::<WasmBacktrace>().map(|b| b.to_string());
    let mut text = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error
            .chain()
            .map(|c| c.to_string())
            .filter(|c| Some(c) != backtrace.as_ref())
            .collect::<Vec<_>>()
            .join(": "),
    };
    let output = String::from_utf8_lossy(output);
    let mut last: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .rev()
        .take(2)
        .collect();
    if !last.is_empty() {
        last.reverse();
        text.push_str(&format!(
            " (its last output: {})",
            crate::validate::shown(&last.join(" / "))
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(max_mib: usize) -> Limiter {
        Limiter {
            max_bytes: max_mib << 20,
            used: 0,
            refused: None,
        }
    }

    #[test]
    fn the_cap_is_the_sum_of_every_memory_and_table() {
        let mut l = limiter(4);
        // Two memories of 2 MiB fit; a third does not.
        assert_eq!(l.grow(0, 2 << 20, None), Growth::Allowed);
        assert_eq!(l.grow(0, 2 << 20, None), Growth::Allowed);
        assert_eq!(l.grow(0, 64 << 10, None), Growth::OverCap);
        assert_eq!(l.refused, Some((4 << 20) + (64 << 10)));
        // Growing one of them counts only the difference.
        let mut l = limiter(4);
        assert_eq!(l.grow(0, 1 << 20, None), Growth::Allowed);
        assert_eq!(l.grow(1 << 20, 3 << 20, None), Growth::Allowed);
        assert_eq!(l.grow(3 << 20, 5 << 20, None), Growth::OverCap);
        assert_eq!(l.used, 3 << 20);
    }

    #[test]
    fn a_growth_past_the_memorys_own_maximum_does_not_count() {
        let mut l = limiter(4);
        assert_eq!(l.grow(0, 2 << 20, Some(1 << 20)), Growth::PastMaximum);
        assert_eq!((l.used, l.refused), (0, None));
    }
}
