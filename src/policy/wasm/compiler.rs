//! The engine's settings, sized to the policy's caps, and where plugins are
//! compiled: in a child process when the registrar runs.
//!
//! Cranelift's working memory, and the pages of its own code, would otherwise
//! stay in the registrar's RSS for its whole life (about 13 MB for a small Rust
//! plugin, hundreds for Python or JavaScript ones). The registrar runs its own
//! binary as `plugin compile-worker --memory-mib N`, which reads the component
//! on stdin and writes wasmtime's precompiled form on stdout, then exits and
//! gives it all back. Library users, tests and the author tools compile
//! in-process unless they say otherwise ([`Compiler::worker`]).

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::policy::file::{DEFAULT_MEMORY_LIMIT_MIB, MAX_MEMORY_LIMIT_MIB};

/// How much address space each linear memory's slot reserves: the largest
/// `memory_limit_mib` of the policy, rounded up to a power of two, and at
/// least the default cap (32 MiB). So a small change of a cap does not change
/// the compiled code, and every policy whose caps are at most the default
/// shares the default's.
///
/// Compiled code depends on it: below 4 GiB, Cranelift emits a bounds check
/// against the reservation, where a 4 GiB reservation lets the guard pages
/// catch every access. wasmtime's compatibility hash covers it, so a cache
/// entry or a precompiled file of another reservation is never loaded; it is
/// compiled again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    mib: u64,
}

impl Reservation {
    /// The reservation that holds a cap of `cap_bytes`.
    pub fn for_cap(cap_bytes: u64) -> Self {
        let mib = cap_bytes
            .div_ceil(1 << 20)
            .clamp(DEFAULT_MEMORY_LIMIT_MIB, MAX_MEMORY_LIMIT_MIB)
            .next_power_of_two();
        Reservation { mib }
    }

    /// The reservation that holds every cap of `caps` (the default cap
    /// when there are none).
    pub fn for_caps(caps: impl IntoIterator<Item = u64>) -> Self {
        let largest = caps
            .into_iter()
            .max()
            .unwrap_or(DEFAULT_MEMORY_LIMIT_MIB << 20);
        Self::for_cap(largest)
    }

    /// In MiB.
    pub fn mib(self) -> u64 {
        self.mib
    }

    fn bytes(self) -> u64 {
        self.mib << 20
    }
}

impl Default for Reservation {
    fn default() -> Self {
        Self::for_cap(DEFAULT_MEMORY_LIMIT_MIB << 20)
    }
}

/// How the engine is made, and where it compiles.
#[derive(Debug, Clone, Default)]
pub struct Compiler {
    /// What each memory slot reserves.
    pub reservation: Reservation,
    /// Compile in child processes of this executable, whose
    /// `plugin compile-worker` subcommand must exist (the registrar binary);
    /// `None`: compile in this process.
    pub worker: Option<PathBuf>,
}

/// An engine that cannot be made, or a component it does not take.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The engine cannot be created: its pool's reservations, most often.
    #[error("cannot start the WebAssembly engine: {0:#}{hint}", hint = engine_hint(.1))]
    Engine(#[source] wasmtime::Error, Reservation),
    /// Cranelift refused the component.
    #[error("not a valid WebAssembly component: {0:#}")]
    Invalid(#[source] wasmtime::Error),
    /// It compiled, but the engine's instance slots cannot hold it.
    #[error(
        "the component needs more than an instance of the registrar may have: {0:#} (an instance may have {PER_COMPONENT} core instances, {PER_COMPONENT} memories and {PER_COMPONENT} tables, a table {MAX_TABLE_ELEMENTS} elements, and a memory {slot} MiB, the policy's largest memory_limit_mib rounded up)", slot = .1.mib()
    )]
    TooLarge(#[source] wasmtime::Error, Reservation),
    /// The compiler child was killed.
    #[error(transparent)]
    Killed(#[from] CompilerKilled),
}

fn engine_hint(reservation: &Reservation) -> String {
    format!(
        ": its instance slots reserve address space up front ({CONCURRENT_INSTANCES} instances, {} memory slots of {} MiB each, for memory_limit_mib up to {} MiB); raise or remove the process's address-space limit (ulimit -v, RLIMIT_AS), or lower memory_limit_mib",
        CONCURRENT_INSTANCES * MEMORIES_PER_INSTANCE,
        reservation.mib() + GUARD_MIB,
        reservation.mib(),
    )
}

/// The one engine configuration for `reservation`: the compiler child builds
/// the same, so what it compiles loads here.
pub(super) fn new_engine(reservation: Reservation) -> Result<Engine, CompileError> {
    let mut cfg = wasmtime::Config::new();
    // Guest code is stopped by epoch interruption (cheaper than fuel), host
    // calls by dropping their future: see `sandbox`.
    cfg.epoch_interruption(true);
    cfg.memory_reservation(reservation.bytes())
        .memory_guard_size(GUARD_MIB << 20)
        .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool(
            reservation,
        )));
    Engine::new(&cfg).map_err(|e| CompileError::Engine(e, reservation))
}

/// How many plugin instances of one engine may be alive at once. The
/// registrar calls its chain one hook at a time, and each call's instance
/// ends with the call (a call past its deadline too); a policy loads each
/// plugin once. The spare slots are for library users that call a chain
/// from several threads.
pub(super) const CONCURRENT_INSTANCES: u32 = 4;

/// Memory slots per instance in the pool: componentize-py's components have
/// three memories, Rust and Go ones one.
const MEMORIES_PER_INSTANCE: u32 = 4;

/// The guard region after each memory slot (wasmtime's default on 64-bit
/// hosts): accesses at a constant offset up to it need no bounds check of
/// their own.
const GUARD_MIB: u64 = 32;

/// Limits of one component instance, for the pool's slots and the
/// sandbox's limiter alike: componentize-py needs 17 core instances.
pub(super) const PER_COMPONENT: u32 = 64;

/// The most elements a table may have.
pub(super) const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Every call runs in a fresh instance; the pooling allocator makes that
/// cheap. Its slots (linear memories, tables, the fiber stacks of async
/// calls) are reserved once per engine and reset between instances instead of
/// being mapped and unmapped for each call, and a memory's copy-on-write image
/// stays mapped in its slot. What an instance may use is still capped per
/// call by the store's limiter (`memory_limit_mib`); a memory slot holds the
/// largest cap of the policy, rounded up ([`Reservation`]).
fn pool(reservation: Reservation) -> wasmtime::PoolingAllocationConfig {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(CONCURRENT_INSTANCES)
        .max_memories_per_module(PER_COMPONENT)
        .max_tables_per_module(PER_COMPONENT)
        .max_core_instances_per_component(PER_COMPONENT)
        .max_memories_per_component(PER_COMPONENT)
        .max_tables_per_component(PER_COMPONENT)
        .total_core_instances(CONCURRENT_INSTANCES * 24)
        .total_memories(CONCURRENT_INSTANCES * MEMORIES_PER_INSTANCE)
        .total_tables(CONCURRENT_INSTANCES * 24)
        .total_stacks(CONCURRENT_INSTANCES)
        // CPython's and SpiderMonkey's tables hold tens of thousands of
        // functions. A slot reserves 8 bytes of address space an element.
        .table_elements(MAX_TABLE_ELEMENTS)
        .max_memory_size(usize::try_from(reservation.bytes()).unwrap_or(usize::MAX))
        // Between instances, the first 256 KiB of a memory are cleared with
        // memset and the rest handed back with madvise (a TLB flush, then a
        // page fault per page the next instance touches). A Rust plugin
        // linked with a 64 KiB stack fits whole (docs/figures.md).
        .linear_memory_keep_resident(256 << 10)
        .table_keep_resident(16 << 10);
    pool
}

impl Compiler {
    /// The precompiled form of a component for `engine` (made by
    /// [`new_engine`] with this reservation).
    pub(super) fn precompile(&self, engine: &Engine, wasm: &[u8]) -> Result<Vec<u8>, CompileError> {
        let Some(exe) = &self.worker else {
            return engine
                .precompile_component(wasm)
                .map_err(CompileError::Invalid);
        };
        match in_child(exe, self.reservation, wasm) {
            Ok(compiled) => Ok(compiled),
            Err(ChildError::Compile(message)) => {
                Err(CompileError::Invalid(wasmtime::Error::msg(message)))
            }
            Err(ChildError::Killed(killed)) => Err(killed.into()),
            Err(ChildError::Spawn(e)) => {
                tracing::debug!(error = %e, "Cannot compile in a child process; compiling here");
                engine
                    .precompile_component(wasm)
                    .map_err(CompileError::Invalid)
            }
        }
    }

    /// A component ready to instantiate: compiled, then loaded into the
    /// engine, whose pool then checks that its slots can hold it.
    pub(super) fn compile(&self, engine: &Engine, wasm: &[u8]) -> Result<Component, CompileError> {
        let compiled = self.precompile(engine, wasm)?;
        // SAFETY: the bytes are what `precompile_component` of this engine's
        // configuration produced, here or in our own child over our own pipe.
        unsafe { self.load(engine, &compiled) }
    }

    /// Loads precompiled bytes into `engine`. They were compiled by
    /// Cranelift already, so a refusal here is the pool's: the component
    /// needs more than an instance slot holds.
    ///
    /// # Safety
    /// `compiled` must be what `precompile_component` of an engine of this
    /// configuration produced (wasmtime checks the header, not the code).
    pub(super) unsafe fn load(
        &self,
        engine: &Engine,
        compiled: &[u8],
    ) -> Result<Component, CompileError> {
        // SAFETY: the caller's.
        unsafe { Component::deserialize(engine, compiled) }
            .map_err(|e| CompileError::TooLarge(e, self.reservation))
    }
}

enum ChildError {
    /// The child could not run: compile here instead.
    Spawn(std::io::Error),
    /// The child ran and the component does not compile.
    Compile(String),
    /// The child was killed: the component may be fine, the node was not.
    Killed(CompilerKilled),
}

/// A compiler child killed by a signal, the container's memory limit most
/// often. Not the component's fault, so not said to be invalid.
#[derive(Debug)]
pub struct CompilerKilled {
    signal: i32,
}

impl std::fmt::Display for CompilerKilled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let signal = self.signal;
        let why = if signal == libc::SIGKILL {
            " (SIGKILL: the memory limit?)"
        } else {
            ""
        };
        write!(
            f,
            "the compiler process was killed by signal {signal}{why}: compiling takes far more memory than running (390 MiB for the 18 MB Python example); raise the container's memory limit, or compile beforehand with `plugin precompile` (in an initContainer)"
        )
    }
}

impl std::error::Error for CompilerKilled {}

fn in_child(exe: &PathBuf, reservation: Reservation, wasm: &[u8]) -> Result<Vec<u8>, ChildError> {
    let mut command = Command::new(exe);
    command
        .args(["plugin", "compile-worker", "--memory-mib"])
        .arg(reservation.mib().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear();
    // SAFETY: `in_the_child` makes only async-signal-safe calls.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, in_the_child);
    }
    let mut child = command.spawn().map_err(ChildError::Spawn)?;
    // Write from another thread: the child may write before it has read all.
    let mut stdin = child.stdin.take().expect("piped");
    let input = wasm.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut compiled = Vec::new();
    let mut errors = String::new();
    let read = child
        .stdout
        .take()
        .expect("piped")
        .read_to_end(&mut compiled);
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut errors)
        .map_err(ChildError::Spawn)?;
    let status = child.wait().map_err(ChildError::Spawn)?;
    let _ = writer.join();
    read.map_err(ChildError::Spawn)?;
    outcome(status, compiled, errors.trim())
}

/// Run in the forked child before exec; async-signal-safe calls only.
///
/// The child dies with the registrar (the spawning thread waits for it, so it
/// outlives the compile). And it is the first the kernel kills when the
/// container runs out of memory: the registrar is not killed for the compiler's
/// sake; the compile fails, and the last good policy stays. Raising one's own
/// `oom_score_adj` needs no privilege.
fn in_the_child() -> std::io::Result<()> {
    // SAFETY: prctl, open, write and close are async-signal-safe; the path is a
    // NUL-terminated constant.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"1000".as_ptr().cast(), 4);
            libc::close(fd);
        }
    }
    Ok(())
}

/// What a compile-worker's exit means.
fn outcome(status: ExitStatus, compiled: Vec<u8>, errors: &str) -> Result<Vec<u8>, ChildError> {
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(compiled),
        (Some(2), _) => Err(ChildError::Compile(errors.to_owned())),
        // Killed: most often by the container's memory limit. Compiling here
        // instead would take the registrar down with it.
        (_, Some(signal)) => Err(ChildError::Killed(CompilerKilled { signal })),
        _ => Err(ChildError::Spawn(std::io::Error::other(format!(
            "compile-worker ended with {status}: {errors}"
        )))),
    }
}

/// `plugin compile-worker --memory-mib N`: a component on stdin, its
/// precompiled form for the engine of that reservation on stdout; exit 2
/// with the reason on stderr if it does not compile.
pub(crate) fn compile_worker(memory_mib: u64) -> std::process::ExitCode {
    let mut wasm = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut wasm) {
        eprintln!("cannot read the component: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let engine = match new_engine(Reservation::for_cap(memory_mib << 20)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match engine.precompile_component(&wasm) {
        Ok(compiled) => match std::io::stdout().write_all(&compiled) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(_) => std::process::ExitCode::FAILURE,
        },
        Err(e) => {
            eprintln!("{e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(raw: i32) -> ExitStatus {
        ExitStatus::from_raw(raw)
    }

    #[test]
    fn a_compiler_killed_by_the_memory_limit_is_an_error_not_a_reason_to_compile_here() {
        // A wait status of 9: killed by SIGKILL, as the OOM killer does.
        match outcome(status(libc::SIGKILL), Vec::new(), "") {
            Err(ChildError::Killed(killed)) => assert!(
                killed.to_string().starts_with("the compiler process was killed by signal 9 (SIGKILL: the memory limit?): compiling takes far more memory than running")
                    && killed.to_string().contains("raise the container's memory limit, or compile beforehand with `plugin precompile`"),
                "{killed}"
            ),
            Err(ChildError::Compile(m)) => panic!("said to be the component's fault: {m}"),
            Err(ChildError::Spawn(e)) => panic!("would compile in the registrar: {e}"),
            Ok(_) => panic!("a killed compiler succeeded"),
        }
        // What the operator reads: not that the component is invalid.
        let error = CompileError::from(CompilerKilled { signal: 9 });
        assert!(
            error
                .to_string()
                .starts_with("the compiler process was killed by signal 9"),
            "{error}"
        );
    }

    #[test]
    fn the_compiler_is_the_first_process_the_kernel_kills_when_memory_runs_out() {
        let mut command = Command::new("cat");
        command.arg("/proc/self/oom_score_adj");
        // SAFETY: as in `in_child`.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, in_the_child);
        }
        let out = command.output().expect("cat runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1000");
    }

    #[test]
    fn a_compiler_that_could_not_run_lets_the_registrar_compile_and_a_refusal_is_kept() {
        // Exit status 1 (`<< 8` in a wait status): the worker could not start its engine.
        assert!(matches!(
            outcome(
                status(1 << 8),
                Vec::new(),
                "cannot start the WebAssembly engine"
            ),
            Err(ChildError::Spawn(_))
        ));
        match outcome(status(2 << 8), Vec::new(), "invalid component") {
            Err(ChildError::Compile(m)) => assert_eq!(m, "invalid component"),
            _ => panic!("exit 2 is the component's fault"),
        }
        assert_eq!(outcome(status(0), vec![1, 2], "").ok(), Some(vec![1, 2]));
    }
}
