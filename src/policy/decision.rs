//! What a policy decides, and the seam it decides through: [`Policy`], with
//! [`DefaultPolicy`], the Go registrar's decisions.

use std::time::Duration;

use crate::plugin_type::PluginType;

/// The exit code upstream uses for every runtime failure.
pub(crate) const EXIT_FAILURE: u8 = 1;

/// What the registrar knows when it asks for a decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Context {
    /// `KUBE_NODE_NAME` (empty when unset).
    pub node_name: String,
    /// The name the driver returned from `GetPluginInfo`.
    pub driver_name: String,
    /// The driver's `vendor_version`.
    pub driver_version: String,
    /// `--csi-address`.
    pub csi_address: String,
    /// `--kubelet-registration-path`.
    pub kubelet_registration_path: String,
    /// `--plugin-registration-path`.
    pub plugin_registration_path: String,
    /// `--plugin-type`: what the kubelet is told the plugin is.
    pub plugin_type: PluginType,
    /// `--supported-versions`; `None`: the plugin type's default.
    pub supported_versions: Option<Vec<String>>,
}

/// What `GetInfo` answers (besides the fixed type `CSIPlugin`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Registration {
    /// The plugin name the kubelet registers the driver under.
    pub name: String,
    /// The driver's socket as the kubelet reaches it.
    pub endpoint: String,
    /// The CSI versions advertised.
    pub supported_versions: Vec<String>,
}

impl Registration {
    /// Upstream's answer: the driver's own name, `--kubelet-registration-path`
    /// verbatim and `["1.0.0"]` (or `--supported-versions`, or a DRA driver's
    /// default services).
    pub fn upstream(ctx: &Context) -> Self {
        Registration {
            name: ctx.driver_name.clone(),
            endpoint: ctx.kubelet_registration_path.clone(),
            supported_versions: ctx
                .supported_versions
                .clone()
                .unwrap_or_else(|| ctx.plugin_type.default_versions()),
        }
    }
}

/// A refusal by the kubelet, as the failure hook sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kubelet's error text.
    pub error: String,
    /// 1 for the first refusal since the last successful registration.
    pub attempt: u32,
    /// Time since the first refusal of this streak.
    pub elapsed: Duration,
}

/// What to do about a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureAction {
    /// Remove the registration socket and exit with this code (upstream: 1).
    Exit(u8),
    /// Remove the registration socket, wait, and create it again so the kubelet
    /// registers anew. Serialized as milliseconds.
    Retry(#[serde(serialize_with = "millis")] Duration),
    /// Log and keep serving.
    Ignore,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A policy that could not decide, named after what failed.
#[derive(Debug, thiserror::Error)]
#[error("policy plugin {plugin:?}, hook {hook}: {message}")]
pub struct PolicyError {
    /// The plugin's `id`.
    pub plugin: String,
    /// The hook that failed.
    pub hook: &'static str,
    /// Why.
    pub message: String,
}

/// The seam between the registrar and its policy.
pub trait Policy: Send + Sync {
    /// The registration advertised to the kubelet. Called at start-up, before the
    /// registration socket exists.
    fn registration(&self, ctx: &Context) -> Result<Registration, PolicyError>;

    /// What to do about a refusal by the kubelet. Called after the kubelet got its reply.
    fn on_failure(&self, ctx: &Context, failure: &Failure) -> Result<FailureAction, PolicyError>;
}

/// Upstream's policy, hard-coded in the Go registrar.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultPolicy;

impl Policy for DefaultPolicy {
    fn registration(&self, ctx: &Context) -> Result<Registration, PolicyError> {
        Ok(Registration::upstream(ctx))
    }

    fn on_failure(&self, _: &Context, _: &Failure) -> Result<FailureAction, PolicyError> {
        Ok(FailureAction::Exit(EXIT_FAILURE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_upstream() {
        let ctx = Context {
            driver_name: "hostpath.csi.k8s.io".into(),
            kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath/csi.sock".into(),
            ..Context::default()
        };
        let reg = DefaultPolicy.registration(&ctx).unwrap();
        assert_eq!(reg.name, "hostpath.csi.k8s.io");
        assert_eq!(reg.endpoint, "/var/lib/kubelet/plugins/hostpath/csi.sock");
        assert_eq!(reg.supported_versions, vec!["1.0.0"]);
        let failure = Failure {
            error: "x".into(),
            attempt: 3,
            elapsed: Duration::from_secs(1),
        };
        assert_eq!(
            DefaultPolicy.on_failure(&ctx, &failure).unwrap(),
            FailureAction::Exit(1)
        );
    }
}
