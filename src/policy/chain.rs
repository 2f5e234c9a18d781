//! Runs plugins in TOML order in front of the built-in policy.
//!
//! | hook | rule |
//! |---|---|
//! | driver-name, versions, endpoint | pipeline: each plugin gets the previous output; the host validates every step |
//! | failure | the first answer that is not `defer` wins; all defer: the built-in default |
//!
//! A plugin error (trap, timeout, invalid output, `policy-error`) is handled by the
//! plugin's `on_error`; a plugin in monitor mode is run and logged but not applied.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::decision::{
    Context, DefaultPolicy, Failure, FailureAction, Policy, PolicyError, Registration,
};
use super::file::{Mode, OnError};
use super::hook::Hook;
use crate::metrics::Metrics;
use crate::validate;

/// A loaded plugin, as the chain sees it. Each call reports the plugin's own
/// answer: `Ok(None)` is `keep` (or `defer` for the failure hook).
pub trait PluginHooks: Send + Sync {
    /// The plugin's `id` in the policy file.
    fn id(&self) -> &str;
    /// Whether its decisions are applied.
    fn mode(&self) -> Mode;
    /// What its errors do.
    fn on_error(&self) -> OnError;
    /// Whether the component exports the hook and the TOML filter lets it run.
    fn runs(&self, hook: Hook) -> bool;
    /// The `driver-name` hook: `Some(name)` renames.
    fn rewrite_driver_name(
        &self,
        ctx: &Context,
        current: &str,
    ) -> Result<Option<String>, CallError>;
    /// The `versions` hook: the versions to advertise.
    fn supported_versions(
        &self,
        ctx: &Context,
        current: &[String],
    ) -> Result<Vec<String>, CallError>;
    /// The `endpoint` hook: `Some(path)` replaces the endpoint.
    fn map_endpoint(&self, ctx: &Context, current: &str) -> Result<Option<String>, CallError>;
    /// The `failure` hook: `None` defers.
    fn on_failure(
        &self,
        ctx: &Context,
        failure: &Failure,
    ) -> Result<Option<FailureAction>, CallError>;
}

/// Why a plugin call gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The plugin answered with its `policy-error`.
    #[error("the plugin reported an error: {0}")]
    Plugin(String),
    /// The call passed its deadline.
    #[error("deadline of {0:?} exceeded")]
    Timeout(Duration),
    /// The instance's memories and tables together would have passed the cap.
    #[error(
        "memory limit of {limit_mib} MiB exceeded (the instance asked for {wanted_mib} MiB in all)"
    )]
    Memory {
        /// `memory_limit_mib`.
        limit_mib: u64,
        /// What the instance asked for in all.
        wanted_mib: u64,
    },
    /// The plugin trapped (a panic, an unreachable, a bad import).
    #[error("trapped: {0}")]
    Trap(String),
    /// The answer broke a rule the kubelet or the CSI spec sets.
    #[error("invalid decision: {0}")]
    Invalid(String),
}

impl CallError {
    /// The `outcome` label of the plugin-call metrics.
    pub fn outcome(&self) -> &'static str {
        match self {
            CallError::Plugin(_) => "error",
            CallError::Timeout(_) => "timeout",
            CallError::Memory { .. } | CallError::Trap(_) => "trap",
            CallError::Invalid(_) => "invalid",
        }
    }
}

/// Plugins in front of the built-in policy.
pub struct Chain {
    plugins: Vec<Box<dyn PluginHooks>>,
    min_retry: Duration,
    max_retry: Duration,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("plugins", &self.plugin_ids())
            .field("min_retry", &self.min_retry)
            .field("max_retry", &self.max_retry)
            .finish()
    }
}

impl Chain {
    /// A chain of `plugins`, in order; retry delays are clamped to `min_retry..=max_retry`.
    pub fn new(
        plugins: Vec<Box<dyn PluginHooks>>,
        min_retry: Duration,
        max_retry: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Chain {
            plugins,
            min_retry,
            max_retry,
            metrics,
        }
    }

    /// The plugins' ids, in order.
    pub fn plugin_ids(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.id()).collect()
    }

    /// Calls one plugin hook, validates its answer, records the call, and applies
    /// `on_error`. `Ok(None)`: nothing to apply (keep, skip or monitor).
    fn step<T: std::fmt::Debug>(
        &self,
        plugin: &dyn PluginHooks,
        hook: Hook,
        call: impl FnOnce() -> Result<Option<T>, CallError>,
        check: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<Option<T>, PolicyError> {
        let start = Instant::now();
        let answer = call().and_then(|a| match &a {
            Some(v) => check(v).map(|()| a).map_err(CallError::Invalid),
            None => Ok(a),
        });
        let outcome = answer
            .as_ref()
            .map(|_| "ok")
            .unwrap_or_else(|e| e.outcome());
        self.metrics
            .plugin_call(plugin.id(), hook.as_str(), outcome, start.elapsed());
        match answer {
            Ok(Some(v)) if plugin.mode() == Mode::Monitor => {
                tracing::info!(plugin = plugin.id(), %hook, decision = ?v, "monitor mode: decision logged, not applied");
                Ok(None)
            }
            Ok(a) => Ok(a),
            // A plugin in monitor mode never changes the outcome, whatever it does.
            Err(e) if plugin.mode() == Mode::Monitor => {
                tracing::warn!(plugin = plugin.id(), %hook, error = %e, "Plugin in monitor mode failed; its failure is logged and counted, not applied");
                Ok(None)
            }
            Err(e) => match plugin.on_error() {
                OnError::Skip => {
                    tracing::warn!(plugin = plugin.id(), %hook, error = %e, "plugin failed; on_error = \"skip\": going on without it");
                    Ok(None)
                }
                OnError::Fail => Err(PolicyError {
                    plugin: plugin.id().to_owned(),
                    hook: hook.as_str(),
                    message: e.to_string(),
                }),
            },
        }
    }

    fn clamp(&self, action: FailureAction) -> FailureAction {
        match action {
            FailureAction::Retry(d) => {
                FailureAction::Retry(d.clamp(self.min_retry, self.max_retry))
            }
            other => other,
        }
    }
}

/// How the chain decided a refusal, for the author tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureDecision {
    /// What the registrar does.
    pub action: FailureAction,
    /// The plugin whose answer it is; `None`: every plugin deferred, so the
    /// built-in policy decided.
    pub by: Option<String>,
    /// The plugin's own answer, where the host changed it (a clamped delay).
    pub asked: Option<FailureAction>,
}

impl Chain {
    /// The start-up decisions from `start` on: each plugin in TOML order, each
    /// of its hooks in turn, every answer checked before it is used.
    pub fn registration_from(
        &self,
        ctx: &Context,
        mut reg: Registration,
    ) -> Result<Registration, PolicyError> {
        for p in &self.plugins {
            let p = p.as_ref();
            if p.runs(Hook::DriverName) {
                let current = reg.name.clone();
                if let Some(name) = self.step(
                    p,
                    Hook::DriverName,
                    || p.rewrite_driver_name(ctx, &current),
                    |n| validate::driver_name(n).map_err(|e| e.to_string()),
                )? {
                    tracing::info!(plugin = p.id(), from = %reg.name, to = %name, "driver name rewritten");
                    reg.name = name;
                }
            }
            if p.runs(Hook::Versions) {
                let current = reg.supported_versions.clone();
                if let Some(versions) = self.step(
                    p,
                    Hook::Versions,
                    || p.supported_versions(ctx, &current).map(Some),
                    |v| ctx.plugin_type.check_versions(v).map_err(|e| e.to_string()),
                )? {
                    tracing::info!(plugin = p.id(), ?versions, "supported versions chosen");
                    reg.supported_versions = versions;
                }
            }
            if p.runs(Hook::Endpoint) {
                let current = reg.endpoint.clone();
                if let Some(endpoint) = self.step(
                    p,
                    Hook::Endpoint,
                    || p.map_endpoint(ctx, &current),
                    |e| validate::endpoint(e).map_err(|e| e.to_string()),
                )? {
                    tracing::info!(plugin = p.id(), from = %reg.endpoint, to = %endpoint, "endpoint mapped");
                    reg.endpoint = endpoint;
                }
            }
        }
        Ok(reg)
    }

    /// The decision on one refusal, and how it was reached.
    pub fn decide_failure(
        &self,
        ctx: &Context,
        failure: &Failure,
    ) -> Result<FailureDecision, PolicyError> {
        for p in &self.plugins {
            let p = p.as_ref();
            if !p.runs(Hook::Failure) {
                continue;
            }
            let decided = self.step(
                p,
                Hook::Failure,
                || p.on_failure(ctx, failure),
                |a| match a {
                    FailureAction::Exit(0) => Err(
                        "exit(0) after a refusal would hide the failure: use ignore, or exit with 1-255"
                            .to_owned(),
                    ),
                    _ => Ok(()),
                },
            )?;
            if let Some(asked) = decided {
                let action = self.clamp(asked);
                tracing::info!(
                    plugin = p.id(),
                    ?action,
                    attempt = failure.attempt,
                    "failure policy decided"
                );
                return Ok(FailureDecision {
                    by: Some(p.id().to_owned()),
                    asked: (asked != action).then_some(asked),
                    action,
                });
            }
        }
        Ok(FailureDecision {
            action: DefaultPolicy.on_failure(ctx, failure)?,
            by: None,
            asked: None,
        })
    }
}

impl Policy for Chain {
    fn registration(&self, ctx: &Context) -> Result<Registration, PolicyError> {
        self.registration_from(ctx, DefaultPolicy.registration(ctx)?)
    }

    fn on_failure(&self, ctx: &Context, failure: &Failure) -> Result<FailureAction, PolicyError> {
        self.decide_failure(ctx, failure).map(|d| d.action)
    }
}
