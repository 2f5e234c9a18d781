//! Write policy plugins for csi-node-driver-registrar in Rust.
//!
//! Implement [`Plugin`] and the trait of each hook you need, then export:
//!
//! ```ignore
//! use csi_registrar_policy::{Context, DriverName, NameDecision, Plugin};
//!
//! #[derive(serde::Deserialize)]
//! struct Settings { suffix: String }
//!
//! struct Suffix;
//! impl Plugin for Suffix {
//!     type Settings = Settings;
//!     const NAME: &'static str = "suffix";
//!     const VERSION: &'static str = "0.1.0";
//! }
//! impl DriverName for Suffix {
//!     fn rewrite_driver_name(ctx: &Context<Settings>, current: &str) -> Result<NameDecision, String> {
//!         Ok(NameDecision::Rename(format!("{current}{}", ctx.settings.suffix)))
//!     }
//! }
//! csi_registrar_policy::export_policy!(Suffix: driver_name);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component to pin in the policy file.
//! Settings arrive from the TOML `settings` table, typed by serde, and are
//! checked once at load: a settings error stops the registrar before it
//! registers anything.

use std::sync::OnceLock;

use serde::de::DeserializeOwned;

include!(concat!(env!("OUT_DIR"), "/export_macro.rs"));

#[doc(hidden)]
pub mod __rt {
    pub use wit_bindgen;
}

/// Every plugin: its name, version and settings type.
pub trait Plugin {
    /// The `settings` table of the plugin's TOML entry. Use `serde_json::Value`
    /// for free-form settings, or `()`-like empty structs with `#[serde(default)]`.
    type Settings: DeserializeOwned;
    const NAME: &'static str;
    const VERSION: &'static str;

    /// Checks settings beyond their type, once at load. `Err` stops the registrar.
    fn validate(settings: &Self::Settings) -> Result<(), String> {
        let _ = settings;
        Ok(())
    }
}

/// What the registrar knows when it calls a hook, with the typed settings.
#[derive(Debug, Clone)]
pub struct Context<S> {
    /// `KUBE_NODE_NAME` (empty when unset).
    pub node_name: String,
    /// The name the CSI driver reported.
    pub driver_name: String,
    /// The driver's vendor version.
    pub driver_version: String,
    /// `--csi-address`.
    pub csi_address: String,
    /// `--kubelet-registration-path`.
    pub kubelet_registration_path: String,
    /// `--plugin-registration-path`.
    pub plugin_registration_path: String,
    pub settings: S,
}

/// The kubelet plugin type being registered (the registrar's `--plugin-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginType {
    /// A CSI driver: supported versions are semantic versions with a 1.x.
    Csi,
    /// A DRA driver: supported versions are gRPC service names (`v1.DRAPlugin`).
    Dra,
}

/// The plugin type the registrar serves, asked of the host
/// (`registrar-info.plugin-type`, WIT 0.1.1). Call it in the crate that calls
/// `export_policy!`. A plugin that calls it needs a registrar implementing WIT
/// 0.1.1 or later; one that does not still loads in older registrars.
///
/// ```ignore
/// let versions = match csi_registrar_policy::plugin_type!() {
///     PluginType::Csi => vec!["1.0.0".into()],
///     PluginType::Dra => vec!["v1.DRAPlugin".into()],
/// };
/// ```
#[macro_export]
// `crate` is meant: the bindings live in the plugin's crate, the caller's.
#[allow(clippy::crate_in_macro_def)]
macro_rules! plugin_type {
    () => {{
        use crate::__csi_registrar_policy_bindings::csi_registrar::policy::registrar_info::{
            KubeletPluginType as T, plugin_type,
        };
        match plugin_type() {
            T::CsiPlugin => $crate::PluginType::Csi,
            T::DraPlugin => $crate::PluginType::Dra,
        }
    }};
}

/// Hook: the driver name advertised to the kubelet.
pub trait DriverName: Plugin {
    /// `current` is the name after earlier plugins in the chain.
    fn rewrite_driver_name(
        ctx: &Context<Self::Settings>,
        current: &str,
    ) -> Result<NameDecision, String>;
}

pub enum NameDecision {
    Keep,
    /// Must follow the CSI rules (at most 63 characters; alphanumerics, `-`, `.`).
    Rename(String),
}

/// Hook: `supported_versions`.
pub trait Versions: Plugin {
    /// `current` is the list after earlier plugins (default `["1.0.0"]`).
    fn supported_versions(
        ctx: &Context<Self::Settings>,
        current: Vec<String>,
    ) -> Result<Vec<String>, String>;
}

/// Hook: what to do when the kubelet refuses the registration.
pub trait Failure: Plugin {
    fn on_registration_failure(
        ctx: &Context<Self::Settings>,
        failure: &RegistrationFailure,
    ) -> Result<FailureAction, String>;
}

/// A refusal by the kubelet.
#[derive(Debug, Clone)]
pub struct RegistrationFailure {
    /// The kubelet's error text.
    pub error: String,
    /// 1 for the first refusal since the last success.
    pub attempt: u32,
    /// Milliseconds since the first refusal of this streak.
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Remove the registration socket and exit with this code (1-255).
    Exit(u8),
    /// Re-create the registration socket after this many milliseconds.
    Retry { delay_ms: u32 },
    /// Keep serving.
    Ignore,
    /// Let the next plugin (or the built-in default, exit 1) decide.
    Defer,
}

/// Hook: the endpoint (driver socket path on the host) advertised to the kubelet.
pub trait Endpoint: Plugin {
    /// `current` is the endpoint after earlier plugins (default `--kubelet-registration-path`).
    fn map_endpoint(
        ctx: &Context<Self::Settings>,
        current: &str,
    ) -> Result<EndpointDecision, String>;
}

pub enum EndpointDecision {
    Keep,
    /// An absolute path shorter than 108 bytes.
    Replace(String),
}

/// Log levels of the host's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

static LOGGER: OnceLock<fn(Level, &str)> = OnceLock::new();

/// Writes a line to the registrar's log, tagged with the plugin id and hook.
pub fn log(level: Level, message: &str) {
    if let Some(logger) = LOGGER.get() {
        logger(level, message);
    }
}

#[doc(hidden)]
pub fn __install_logger(f: fn(Level, &str)) {
    let _ = LOGGER.set(f);
}

#[doc(hidden)]
pub fn __settings<P: Plugin>(json: &str) -> Result<P::Settings, String> {
    let json = if json.trim().is_empty() { "{}" } else { json };
    serde_json::from_str(json).map_err(|e| format!("invalid settings for {}: {e}", P::NAME))
}

#[doc(hidden)]
pub fn __validate<P: Plugin>(json: &str) -> Result<(), String> {
    P::validate(&__settings::<P>(json)?)
}

#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn __context<P: Plugin>(
    node_name: String,
    driver_name: String,
    driver_version: String,
    csi_address: String,
    kubelet_registration_path: String,
    plugin_registration_path: String,
    settings_json: &str,
) -> Result<Context<P::Settings>, String> {
    Ok(Context {
        node_name,
        driver_name,
        driver_version,
        csi_address,
        kubelet_registration_path,
        plugin_registration_path,
        settings: __settings::<P>(settings_json)?,
    })
}

// The glue between the bindings `export_policy!` generates in the plugin's
// crate (module `__csi_registrar_policy_bindings`) and the traits above.

#[doc(hidden)]
#[macro_export]
macro_rules! __context {
    ($ty:ident, $ctx:ident) => {{
        let __csi_registrar_policy_bindings::csi_registrar::policy::types::RegistrationContext {
            node_name,
            driver_name,
            driver_version,
            csi_address,
            kubelet_registration_path,
            plugin_registration_path,
            settings_json,
        } = $ctx;
        $crate::__install_logger(__csi_registrar_policy_log);
        $crate::__context::<$ty>(
            node_name,
            driver_name,
            driver_version,
            csi_address,
            kubelet_registration_path,
            plugin_registration_path,
            &settings_json,
        )
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __glue_plugin {
    ($ty:ident) => {
        impl __csi_registrar_policy_bindings::exports::csi_registrar::policy::plugin::Guest for $ty {
            fn info() -> __csi_registrar_policy_bindings::exports::csi_registrar::policy::plugin::PluginInfo {
                __csi_registrar_policy_bindings::exports::csi_registrar::policy::plugin::PluginInfo {
                    name: <$ty as $crate::Plugin>::NAME.into(),
                    version: <$ty as $crate::Plugin>::VERSION.into(),
                }
            }
            fn validate_settings(settings_json: String) -> Result<(), String> {
                $crate::__install_logger(__csi_registrar_policy_log);
                $crate::__validate::<$ty>(&settings_json)
            }
        }

        fn __csi_registrar_policy_log(level: $crate::Level, message: &str) {
            use __csi_registrar_policy_bindings::csi_registrar::policy::host_log::{Level as L, log};
            let level = match level {
                $crate::Level::Trace => L::Trace,
                $crate::Level::Debug => L::Debug,
                $crate::Level::Info => L::Info,
                $crate::Level::Warn => L::Warn,
                $crate::Level::Error => L::Error,
            };
            log(level, message)
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __glue_driver_name {
    ($ty:ident) => {
        impl __csi_registrar_policy_bindings::exports::csi_registrar::policy::driver_name::Guest for $ty {
            fn rewrite_driver_name(
                ctx: __csi_registrar_policy_bindings::csi_registrar::policy::types::RegistrationContext,
                current: String,
            ) -> Result<
                __csi_registrar_policy_bindings::exports::csi_registrar::policy::driver_name::NameDecision,
                __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError,
            > {
                use __csi_registrar_policy_bindings::exports::csi_registrar::policy::driver_name::NameDecision as D;
                let err = |message| __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError { message };
                let ctx = $crate::__context!($ty, ctx).map_err(err)?;
                match <$ty as $crate::DriverName>::rewrite_driver_name(&ctx, &current).map_err(err)? {
                    $crate::NameDecision::Keep => Ok(D::Keep),
                    $crate::NameDecision::Rename(n) => Ok(D::Rename(n)),
                }
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __glue_versions {
    ($ty:ident) => {
        impl __csi_registrar_policy_bindings::exports::csi_registrar::policy::versions::Guest for $ty {
            fn supported_versions(
                ctx: __csi_registrar_policy_bindings::csi_registrar::policy::types::RegistrationContext,
                current: Vec<String>,
            ) -> Result<Vec<String>, __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError> {
                let err = |message| __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError { message };
                let ctx = $crate::__context!($ty, ctx).map_err(err)?;
                <$ty as $crate::Versions>::supported_versions(&ctx, current).map_err(err)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __glue_failure {
    ($ty:ident) => {
        impl __csi_registrar_policy_bindings::exports::csi_registrar::policy::failure::Guest for $ty {
            fn on_registration_failure(
                ctx: __csi_registrar_policy_bindings::csi_registrar::policy::types::RegistrationContext,
                failure: __csi_registrar_policy_bindings::exports::csi_registrar::policy::failure::RegistrationFailure,
            ) -> Result<
                __csi_registrar_policy_bindings::exports::csi_registrar::policy::failure::FailureAction,
                __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError,
            > {
                use __csi_registrar_policy_bindings::exports::csi_registrar::policy::failure::{Backoff, FailureAction as A};
                let err = |message| __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError { message };
                let ctx = $crate::__context!($ty, ctx).map_err(err)?;
                let failure = $crate::RegistrationFailure {
                    error: failure.error,
                    attempt: failure.attempt,
                    elapsed_ms: failure.elapsed_ms,
                };
                Ok(match <$ty as $crate::Failure>::on_registration_failure(&ctx, &failure).map_err(err)? {
                    $crate::FailureAction::Exit(code) => A::Exit(code),
                    $crate::FailureAction::Retry { delay_ms } => A::Retry(Backoff { delay_ms }),
                    $crate::FailureAction::Ignore => A::Ignore,
                    $crate::FailureAction::Defer => A::Defer,
                })
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __glue_endpoint {
    ($ty:ident) => {
        impl __csi_registrar_policy_bindings::exports::csi_registrar::policy::endpoint::Guest for $ty {
            fn map_endpoint(
                ctx: __csi_registrar_policy_bindings::csi_registrar::policy::types::RegistrationContext,
                current: String,
            ) -> Result<
                __csi_registrar_policy_bindings::exports::csi_registrar::policy::endpoint::EndpointDecision,
                __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError,
            > {
                use __csi_registrar_policy_bindings::exports::csi_registrar::policy::endpoint::EndpointDecision as D;
                let err = |message| __csi_registrar_policy_bindings::csi_registrar::policy::types::PolicyError { message };
                let ctx = $crate::__context!($ty, ctx).map_err(err)?;
                match <$ty as $crate::Endpoint>::map_endpoint(&ctx, &current).map_err(err)? {
                    $crate::EndpointDecision::Keep => Ok(D::Keep),
                    $crate::EndpointDecision::Replace(p) => Ok(D::Replace(p)),
                }
            }
        }
    };
}
