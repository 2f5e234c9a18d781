//! A drop-in replacement for the Kubernetes `csi-node-driver-registrar` sidecar,
//! whose policy decisions can be delegated to sandboxed WebAssembly components.
//!
//! It asks the CSI driver its name, creates `<name>-reg.sock` in the kubelet's
//! plugin registry, and answers the kubelet's `GetInfo` and
//! `NotifyRegistrationStatus`. With no policy file it behaves as the Go registrar does.
//!
//! # Layout
//!
//! - [`cli`]: upstream-compatible flags (`-flag` and `--flag`, Go durations).
//! - [`app`]: the composition root: driver, policy, registration socket, HTTP; the
//!   only place that decides to stop.
//! - [`csi`]: the CSI driver client (connect with backoff, GetPluginInfo, Probe).
//! - [`registration`]: the socket's life (atomic takeover), the kubelet's
//!   `pluginregistration` service, and the layer that lets every gRPC client's
//!   `:authority` through to h2.
//! - [`policy`]: the [`policy::Policy`] trait, the built-in default, the TOML
//!   config, the plugin chain and (feature `wasm`) the wasmtime host.
//! - [`validate`]: the kubelet's and CSI spec's rules for names, versions and endpoints.
//! - [`health`]: `/healthz`, `/readyz` and `/metrics`; [`metrics`]: the counters.
//! - [`standins`]: a CSI driver and a kubelet built from the same protos, for the
//!   demo and the tests.

pub mod app;
pub mod cli;
pub mod csi;
pub mod demo;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod proto;
pub mod registration;
pub mod signal;
pub mod standins;
pub mod tools;
pub mod validate;

/// The version printed by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
