//! A loaded plugin as the chain sees it: one generic hook call, and per hook
//! only the conversion between the WIT types and the registrar's.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::bindings::csi_registrar::policy::types::{PolicyError, RegistrationContext};
use super::bindings::exports::csi_registrar::policy::{
    driver_name, endpoint, failure, plugin, versions,
};
use super::sandbox::{self, CallSpec, HostState, MAX_LOG_MESSAGE, PhaseLog, Timers};
use crate::plugin_type::PluginType;
use crate::policy::chain::{CallError, PluginHooks};
use crate::policy::decision::{Context, Failure, FailureAction};
use crate::policy::file::{Mode, OnError};
use crate::policy::hook::{Hook, for_each_hook};
use crate::validate::bounded;

/// A plugin's own name and version, as `info()` reports them, in logs.
const MAX_INFO: usize = 128;

macro_rules! define_guest_hooks {
    ($(($variant:ident, $name:literal, $module:ident),)*) => {
        /// Where each export lives in the component: `plugin`, and every hook
        /// it exports (`None`: not exported).
        pub(super) struct GuestHooks {
            plugin: plugin::GuestIndices,
            $($module: Option<$module::GuestIndices>,)*
        }

        impl GuestHooks {
            /// Looks up `plugin` and the `exported` hooks in `pre`.
            pub(super) fn new(
                pre: &InstancePre<HostState>,
                exported: &BTreeSet<Hook>,
            ) -> wasmtime::Result<Self> {
                Ok(GuestHooks {
                    plugin: plugin::GuestIndices::new(pre)?,
                    $($module: exported
                        .contains(&Hook::$variant)
                        .then(|| $module::GuestIndices::new(pre))
                        .transpose()?,)*
                })
            }
        }
    };
}

for_each_hook!(define_guest_hooks);

/// A loaded plugin; cheap to call, nothing shared between calls.
pub struct WasmPlugin {
    pub(super) engine: wasmtime::Engine,
    pub(super) timers: Arc<Timers>,
    pub(super) phases: Option<Arc<PhaseLog>>,
    pub(super) id: Arc<str>,
    pub(super) mode: Mode,
    pub(super) on_error: OnError,
    pub(super) timeout: Duration,
    pub(super) memory_limit: u64,
    pub(super) settings_json: String,
    pub(super) pre: InstancePre<HostState>,
    pub(super) guest: GuestHooks,
    /// The hooks that run: exported, and allowed by the TOML filter.
    pub(super) hooks: BTreeSet<Hook>,
    /// Every hook the component exports.
    pub(super) exported: BTreeSet<Hook>,
    /// The plugin type `info` and `validate-settings` see (hooks see their context's).
    pub(super) plugin_type: PluginType,
}

impl WasmPlugin {
    /// The compiled component.
    pub(crate) fn component(&self) -> &wasmtime::component::Component {
        self.pre.component()
    }

    /// Every hook the component exports.
    pub(crate) fn exported_hooks(&self) -> &BTreeSet<Hook> {
        &self.exported
    }

    /// Runs `f` in a fresh instance, under this plugin's deadline and memory cap.
    fn call<R>(
        &self,
        hook: &'static str,
        plugin_type: PluginType,
        f: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        sandbox::call(
            CallSpec {
                engine: &self.engine,
                timers: &self.timers,
                pre: &self.pre,
                plugin: &self.id,
                hook,
                timeout: self.timeout,
                memory_limit: self.memory_limit,
                plugin_type,
                phases: self.phases.as_deref(),
            },
            f,
        )
    }

    /// One hook call for `ctx`, which `f` gets as the WIT context (and the
    /// host's `registrar-info` answers from): the plugin's `policy-error`
    /// becomes [`CallError::Plugin`].
    fn hook<R>(
        &self,
        hook: Hook,
        ctx: &Context,
        f: impl AsyncFnOnce(
            &mut Store<HostState>,
            &Instance,
            &RegistrationContext,
        ) -> wasmtime::Result<Result<R, PolicyError>>,
    ) -> Result<R, CallError> {
        let wit_ctx = self.context(ctx);
        self.call(hook.as_str(), ctx.plugin_type, async |store, instance| {
            f(store, instance, &wit_ctx).await
        })?
        .map_err(|e| CallError::Plugin(bounded(e.message, MAX_LOG_MESSAGE)))
    }

    fn context(&self, ctx: &Context) -> RegistrationContext {
        RegistrationContext {
            node_name: ctx.node_name.clone(),
            driver_name: ctx.driver_name.clone(),
            driver_version: ctx.driver_version.clone(),
            csi_address: ctx.csi_address.clone(),
            kubelet_registration_path: ctx.kubelet_registration_path.clone(),
            plugin_registration_path: ctx.plugin_registration_path.clone(),
            settings_json: self.settings_json.clone(),
        }
    }

    /// The plugin's own name and version.
    pub(crate) fn info(&self) -> Result<(String, String), CallError> {
        self.call("info", self.plugin_type, async |store, instance| {
            let guest = self.guest.plugin.load(&mut *store, instance)?;
            let info = guest.call_info(&mut *store).await?;
            Ok((
                bounded(info.name, MAX_INFO),
                bounded(info.version, MAX_INFO),
            ))
        })
    }

    /// Asks the plugin to check its settings.
    pub(crate) fn validate_settings(&self) -> Result<(), super::host::LoadFailure> {
        self.call(
            "validate-settings",
            self.plugin_type,
            async |store, instance| {
                let guest = self.guest.plugin.load(&mut *store, instance)?;
                guest
                    .call_validate_settings(&mut *store, &self.settings_json)
                    .await
            },
        )
        .map_err(super::host::LoadFailure::Validate)?
        .map_err(|msg| super::host::LoadFailure::Settings(bounded(msg, MAX_LOG_MESSAGE)))
    }
}

fn missing(hook: Hook) -> CallError {
    CallError::Trap(format!("hook {hook} is not exported"))
}

impl PluginHooks for WasmPlugin {
    fn id(&self) -> &str {
        &self.id
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn on_error(&self) -> OnError {
        self.on_error
    }

    fn runs(&self, hook: Hook) -> bool {
        self.hooks.contains(&hook)
    }

    fn rewrite_driver_name(
        &self,
        ctx: &Context,
        current: &str,
    ) -> Result<Option<String>, CallError> {
        let idx = self
            .guest
            .driver_name
            .as_ref()
            .ok_or_else(|| missing(Hook::DriverName))?;
        let answer = self.hook(Hook::DriverName, ctx, async |store, instance, ctx| {
            let guest = idx.load(&mut *store, instance)?;
            guest
                .call_rewrite_driver_name(&mut *store, ctx, current)
                .await
        })?;
        Ok(match answer {
            driver_name::NameDecision::Keep => None,
            driver_name::NameDecision::Rename(name) => Some(name),
        })
    }

    fn supported_versions(
        &self,
        ctx: &Context,
        current: &[String],
    ) -> Result<Vec<String>, CallError> {
        let idx = self
            .guest
            .versions
            .as_ref()
            .ok_or_else(|| missing(Hook::Versions))?;
        self.hook(Hook::Versions, ctx, async |store, instance, ctx| {
            let guest = idx.load(&mut *store, instance)?;
            guest
                .call_supported_versions(&mut *store, ctx, current)
                .await
        })
    }

    fn map_endpoint(&self, ctx: &Context, current: &str) -> Result<Option<String>, CallError> {
        let idx = self
            .guest
            .endpoint
            .as_ref()
            .ok_or_else(|| missing(Hook::Endpoint))?;
        let answer = self.hook(Hook::Endpoint, ctx, async |store, instance, ctx| {
            let guest = idx.load(&mut *store, instance)?;
            guest.call_map_endpoint(&mut *store, ctx, current).await
        })?;
        Ok(match answer {
            endpoint::EndpointDecision::Keep => None,
            endpoint::EndpointDecision::Replace(p) => Some(p),
        })
    }

    fn on_failure(&self, ctx: &Context, f: &Failure) -> Result<Option<FailureAction>, CallError> {
        let idx = self
            .guest
            .failure
            .as_ref()
            .ok_or_else(|| missing(Hook::Failure))?;
        let input = failure::RegistrationFailure {
            source: failure::FailureSource::KubeletRejected,
            error: f.error.clone(),
            attempt: f.attempt,
            elapsed_ms: u64::try_from(f.elapsed.as_millis()).unwrap_or(u64::MAX),
        };
        let answer = self.hook(Hook::Failure, ctx, async |store, instance, ctx| {
            let guest = idx.load(&mut *store, instance)?;
            guest
                .call_on_registration_failure(&mut *store, ctx, &input)
                .await
        })?;
        Ok(match answer {
            failure::FailureAction::Exit(code) => Some(FailureAction::Exit(code)),
            failure::FailureAction::Retry(b) => Some(FailureAction::Retry(Duration::from_millis(
                b.delay_ms.into(),
            ))),
            failure::FailureAction::Ignore => Some(FailureAction::Ignore),
            failure::FailureAction::Defer => None,
        })
    }
}
