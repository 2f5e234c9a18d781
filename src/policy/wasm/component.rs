//! Checks on a component before it runs: a component (not a core module), a
//! policy plugin of a WIT version this host implements, importing only what
//! the host gives. Its bytes come from `policy::fetch`, already pinned.

use std::collections::BTreeSet;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::bindings::{WIT_PACKAGE, WIT_VERSION};
use crate::policy::hook::Hook;

/// Why a component is not a policy plugin this host runs, with the fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ComponentError {
    /// A core module.
    #[error(
        "this is a core WebAssembly module, not a component: build for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// Not WebAssembly at all.
    #[error("not a WebAssembly binary (no \\0asm header)")]
    NotWasm,
    /// A policy interface of another WIT version.
    #[error(
        "it exports {0}, but this registrar implements {WIT_PACKAGE}@{WIT_VERSION} (it accepts 0.1.x): rebuild the plugin against the wit/ of this registrar release"
    )]
    OtherVersion(String),
    /// No `plugin` interface.
    #[error(
        "it does not export {WIT_PACKAGE}/plugin@{WIT_VERSION}, so it is not a registrar policy plugin (build it against wit/policy.wit, one of its worlds)"
    )]
    NotAPlugin,
    /// The policy file's `hooks` names one it does not export.
    #[error(
        "hooks lists \"{missing}\" but the component does not export {WIT_PACKAGE}/{missing}@{WIT_VERSION}; it exports {exported}"
    )]
    MissingHook {
        /// The hook.
        missing: Hook,
        /// What it exports, described.
        exported: String,
    },
    /// It imports what the host does not give.
    #[error("{}", link_message(.0))]
    Link(#[source] wasmtime::Error),
    /// Its exports' types are not the WIT's.
    #[error("{0:#}")]
    Exports(#[source] wasmtime::Error),
}

/// Tells a core module or a non-wasm file from a component, with the fix.
pub(crate) fn check_is_component(wasm: &[u8]) -> Result<(), ComponentError> {
    match wasm.get(..8) {
        Some([0, b'a', b's', b'm', 0x0d, 0, 0x01, 0]) => Ok(()),
        Some([0, b'a', b's', b'm', 0x01, 0, 0, 0]) => Err(ComponentError::CoreModule),
        _ => Err(ComponentError::NotWasm),
    }
}

/// The hook interfaces a component exports, after checking it is a policy
/// plugin of a version this host implements.
pub(crate) fn exported_hooks(
    engine: &Engine,
    component: &Component,
) -> Result<BTreeSet<Hook>, ComponentError> {
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
    if let Some(name) = foreign.into_iter().next() {
        return Err(ComponentError::OtherVersion(name));
    }
    if !has_plugin {
        return Err(ComponentError::NotAPlugin);
    }
    Ok(hooks)
}

/// wasmtime matches semver-compatible names: for 0.x only the patch may differ.
fn compatible(version: &str) -> bool {
    let mut parts = version.split('.');
    matches!((parts.next(), parts.next()), (Some("0"), Some("1")))
}

pub(crate) fn describe_hooks(hooks: &BTreeSet<Hook>) -> String {
    if hooks.is_empty() {
        return "no hooks".into();
    }
    hooks
        .iter()
        .map(|h| h.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn link_message(e: &wasmtime::Error) -> String {
    let text = format!("{e:#}");
    if text.contains("matching implementation was not found") {
        format!(
            "{text}: a policy plugin may import only {WIT_PACKAGE}/host-log, {WIT_PACKAGE}/registrar-info (since {WIT_PACKAGE}@0.1.1: a plugin that imports it needs this registrar or a newer one) and WASI 0.2 (which the host gives with nothing in it). \
             For componentize-py use --stub-wasi; for componentize-js disable every feature"
        )
    } else {
        text
    }
}
