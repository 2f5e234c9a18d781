//! Plugins from OCI registries: pulled by a pinned manifest digest into the
//! cache, verified on every load; pushed as the CNCF wasm artefact.
//!
//! - `registry`: reaching a registry: credentials from a `.dockerconfigjson`,
//!   trust, plain HTTP, the token dance, and bounded reads of every body.
//! - `store`: blobs on disk by digest, written atomically, checked on every
//!   read; nothing outside it is ever opened, and no link is followed.
//! - `artifact`: which manifests are plugins, and where the component is in
//!   them (a wasm layer, or a file in an image's tar layers).
//! - `pull`: a source into the component's bytes, from the store or the registry.
//! - `push`: a component into the CNCF wasm artefact layout.
//! - `signature`: cosign signatures, checked with a public key.
//!
//! This file only names the parts; they import each other, never it.

mod artifact;
mod pull;
mod push;
mod registry;
mod signature;
mod store;

pub(crate) use pull::{PullError, fetch, resolve};
pub(crate) use push::{ComponentInfo, push};
