//! A drop-in replacement for the Kubernetes `csi-node-driver-registrar` sidecar,
//! whose policy decisions can be delegated to sandboxed WebAssembly components.
//!
//! It asks the CSI driver its name, creates `<name>-reg.sock` in the kubelet's
//! plugin registry, and answers the kubelet's `GetInfo` and
//! `NotifyRegistrationStatus`. With no policy file it behaves as the Go registrar does.
//!
//! # Layout
//!
//! - [`cli`]: upstream-compatible flags (`-flag` and `--flag`, Go durations);
//!   [`config`]: those flags checked into a [`config::Config`].
//! - [`app`]: the composition root: `run` wires the driver, the policy, the
//!   registration socket and HTTP, and a `Registrar` handles each event; the
//!   only place that decides to stop.
//! - `csi`: the CSI driver client (connect with backoff, GetPluginInfo);
//!   [`uds`]: gRPC over a unix socket.
//! - [`registration`]: the socket's whole life (atomic takeover, re-creation,
//!   the directory watch), the kubelet's `pluginregistration` service, the
//!   layer that lets every gRPC client's `:authority` through to h2, and
//!   [`registration::Advertised`], the one record of what is advertised.
//! - [`policy`]: the [`policy::Policy`] trait, the built-in default, the TOML
//!   config, the plugin chain and (feature `wasm`) the wasmtime host.
//! - [`validate`]: the kubelet's and CSI spec's rules for names, versions and endpoints.
//! - [`health`]: `/healthz`, `/readyz` and `/metrics` (the phase is derived
//!   there); [`metrics`]: the counters.
//! - [`standins`]: a CSI driver and a kubelet built from the same protos, for the
//!   demo and the tests.

#![warn(unreachable_pub)]

pub mod app;
pub mod cli;
pub mod config;
mod csi;
mod demo;
mod dir_watch;
pub mod health;
pub mod logging;
pub mod messages;
pub mod metrics;
pub mod policy;
pub mod proto;
pub mod registration;
pub mod signal;
pub mod standins;
pub mod tools;
pub mod uds;
pub mod validate;

/// The version printed by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
