//! Policy decisions: what the registrar advertises to the kubelet and what it
//! does when the kubelet refuses it.
//!
//! - `decision`: the [`Policy`] seam, what it decides ([`Registration`],
//!   [`FailureAction`]) from what ([`Context`], [`Failure`]), and
//!   [`DefaultPolicy`], which reproduces the Go registrar exactly.
//! - `hook`: the one table of hooks a plugin can implement.
//! - `file`: the policy file (TOML).
//! - `source`: where a plugin comes from (a pinned file or OCI artefact);
//!   `fetch`: its bytes from there (async), the first step of loading;
//!   `oci` (feature `oci`): pulling and pushing those artefacts.
//! - `chain`: plugins in TOML order in front of the built-in policy.
//! - `load`: a policy file into a policy.
//! - `wasm` (feature `wasm`): the wasmtime host.
//! - `read`: bounded reads of regular files.
//! - `digest`: content digests, parsed where they enter.
//!
//! The name, endpoint and versions are decided once at start-up
//! ([`Policy::registration`]) so that `GetInfo` never waits on a plugin; the
//! failure decision is made per kubelet refusal.
//!
//! This file only names the parts; they import each other, never it.

mod chain;
mod decision;
pub(crate) mod digest;
#[cfg(feature = "wasm")]
pub(crate) mod fetch;
pub(crate) mod file;
mod hook;
pub(crate) mod load;
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) mod manifest;
#[cfg(feature = "oci")]
pub(crate) mod oci;
pub(crate) mod read;
pub(crate) mod source;
#[cfg(feature = "wasm")]
pub(crate) mod wasm;

pub use chain::{CallError, Chain, PluginHooks};
pub(crate) use decision::EXIT_FAILURE;
pub use decision::{
    Context, DefaultPolicy, Failure, FailureAction, Policy, PolicyError, Registration,
};
pub(crate) use digest::Digest;
#[cfg(feature = "wasm")]
pub(crate) use fetch::SourceError;
pub use file::PolicyFileError;
pub use hook::Hook;
pub use load::LoadError;
pub(crate) use load::load;
pub use source::{OciReference, OciSource, PluginSource, RegistryOptions};
#[cfg(feature = "wasm")]
pub use wasm::PluginLoadError;
