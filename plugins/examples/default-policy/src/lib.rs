//! The decisions of the upstream Go registrar, which the registrar also has
//! built in: the driver's own name, `--kubelet-registration-path` as the
//! endpoint, `["1.0.0"]` (a DRA driver's default services when the registrar
//! registers one: `plugin_type!()`), and exit 1 when the kubelet refuses. Every hook
//! answers explicitly (no `keep`, no `defer`), so this is a template for a
//! policy that decides everything, and a test checks it agrees with the
//! built-in one.

use csi_registrar_policy::{
    Context, DriverName, Endpoint, EndpointDecision, Failure, FailureAction, NameDecision, Plugin,
    PluginType, RegistrationFailure, Versions,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoSettings {}

struct Upstream;

impl Plugin for Upstream {
    type Settings = NoSettings;
    const NAME: &'static str = "default-policy";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
}

impl DriverName for Upstream {
    fn rewrite_driver_name(
        ctx: &Context<NoSettings>,
        _current: &str,
    ) -> Result<NameDecision, String> {
        Ok(NameDecision::Rename(ctx.driver_name.clone()))
    }
}

impl Versions for Upstream {
    /// Upstream's `["1.0.0"]` for a CSI driver; for a DRA driver, the services
    /// the kubelet can use, as the built-in policy advertises them.
    fn supported_versions(
        _: &Context<NoSettings>,
        _current: Vec<String>,
    ) -> Result<Vec<String>, String> {
        Ok(match csi_registrar_policy::plugin_type!() {
            PluginType::Csi => vec!["1.0.0".into()],
            PluginType::Dra => vec!["v1.DRAPlugin".into(), "v1beta1.DRAPlugin".into()],
        })
    }
}

impl Failure for Upstream {
    fn on_registration_failure(
        _: &Context<NoSettings>,
        _: &RegistrationFailure,
    ) -> Result<FailureAction, String> {
        Ok(FailureAction::Exit(1))
    }
}

impl Endpoint for Upstream {
    fn map_endpoint(ctx: &Context<NoSettings>, _current: &str) -> Result<EndpointDecision, String> {
        Ok(EndpointDecision::Replace(
            ctx.kubelet_registration_path.clone(),
        ))
    }
}

csi_registrar_policy::export_policy!(Upstream: driver_name, versions, failure, endpoint);
