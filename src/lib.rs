//! A drop-in replacement for the Kubernetes `csi-node-driver-registrar` sidecar,
//! whose policy decisions can be delegated to sandboxed WebAssembly components.
//!
//! It asks the CSI driver its name, creates `<name>-reg.sock` in the kubelet's
//! plugin registry, and answers the kubelet's `GetInfo` and
//! `NotifyRegistrationStatus`. With no policy file it behaves as the Go registrar does.
//!
//! # The API
//!
//! The binary is [`main`]. Embedding the registrar takes [`Flags`] (upstream's
//! command line), checked into a [`Config`] ([`Config::from_flags`]), then
//! [`run`] with the [`signal`]s. Every failure is an [`AppError`].
//!
//! # Layout
//!
//! The core, bottom up (each file imports only files above it in this list,
//! and a folder's `mod.rs` only names its parts):
//!
//! - `messages`, `validate`, `uds`, `dir_watch`, `proto`, `logging`, `metrics`:
//!   upstream's log lines, the kubelet's rules, gRPC over unix sockets, inotify,
//!   the generated protos, Kubernetes log formats, Prometheus metrics;
//!   `toml_file`: TOML whose errors name the line and the key.
//! - `flags` (upstream's command line) and `config` (those flags checked).
//! - `csi/`: the driver's client, discovery, and the watch that notices it change.
//! - `policy/`: the `Policy` seam, the built-in default, the hook
//!   table, the policy file, the plugin chain, and (feature `wasm`) the wasmtime host.
//! - `state`: the one owner of the registration's state (what is advertised,
//!   the kubelet's verdict, the driver's health), behind a watch channel.
//! - `registration/`: the registration socket's whole life and the kubelet's
//!   `pluginregistration` service.
//! - `health`: `/healthz`, `/readyz` and `/metrics`, read from the state.
//! - `registrar`: the loop's handlers, one per event, and the back-off rule.
//! - `app`: the wiring, and the loop. `error`: [`AppError`].
//! - `process`: what the binary does (flags, logging, the panic hook, exit codes).
//!
//! Beside the core: `tools/` (the `demo` and `plugin …` subcommands, and the
//! stand-ins they and the tests use), and `testing`, the one door through
//! which tests and benches reach inside.

mod app;
mod config;
mod csi;
mod dir_watch;
mod error;
mod flags;
mod health;
mod logging;
mod messages;
mod metrics;
mod plugin_type;
mod policy;
mod process;
mod proto;
mod registrar;
mod registration;
pub mod signal;
mod state;
#[doc(hidden)]
pub mod testing;
mod toml_file;
mod tools;
mod uds;
mod validate;

pub use app::run;
pub use config::{Config, FlagsError, Start};
pub use csi::CsiError;
pub use error::AppError;
pub use flags::{Flags, VERSION};
pub use health::HttpError;
pub use plugin_type::PluginType;
#[cfg(feature = "wasm")]
pub use policy::PluginLoadError;
pub use policy::{LoadError, PolicyError, PolicyFileError};
pub use process::main;
pub use registration::SocketError;
pub use validate::NameError;
