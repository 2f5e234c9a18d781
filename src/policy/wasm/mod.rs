//! The wasmtime host for policy plugins.
//!
//! - `host`: the engine, the linker and the timers shared by every plugin;
//!   loading (read, pin check, compile or cache, link, checks, settings).
//! - `bindings`: generated from the WIT world `registrar-policy`.
//! - `sandbox`: one call in a fresh Store, under a deadline and a memory cap;
//!   `watchdog`: the thread that fires the deadlines.
//! - `component`: what a component must be before it runs.
//! - `plugin`: `WasmPlugin`, the chain's view of a loaded plugin.
//! - `cache`: compiled components on disk, bound to their pins.
//! - `compiler`: the engine's settings, sized to the policy's caps, and
//!   compiling in a child process.
//!
//! What a plugin can reach: `host-log`, and WASI 0.2 with nothing in it (no
//! preopened directories, no environment, no arguments, no network, stdin
//! empty; stdout and stderr go to the debug log), except a wall clock, a
//! monotonic clock and random bytes. A wait on a clock is a host call the
//! deadline ends like any other.

//!
//! This file only names the parts; they import each other, never it.

mod bindings;
pub(crate) mod cache;
mod compiler;
mod component;
mod host;
mod plugin;
mod sandbox;
mod watchdog;

pub(crate) use bindings::WIT_PACKAGE;
pub(crate) use compiler::compile_worker;
pub use compiler::{CompileError, Compiler, CompilerKilled, Reservation};
pub(crate) use component::check_is_component;
pub(crate) use host::LoadFailure;
pub use host::{Host, PluginLoadError};
pub(crate) use host::{compiler_for, load_chain};
pub use plugin::WasmPlugin;
pub(crate) use sandbox::CallPhases;
