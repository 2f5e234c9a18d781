//! The decisions of the upstream Go registrar, which the registrar also has
//! built in: the driver's own name, `--kubelet-registration-path` as the
//! endpoint, `["1.0.0"]`, and exit 1 when the kubelet refuses. Every hook
//! answers explicitly (no `keep`, no `defer`), so this is a template for a
//! policy that decides everything, and a test checks it agrees with the
//! built-in one.

use csi_registrar_policy::{
    Context, DriverName, Endpoint, EndpointDecision, Failure, FailureAction, NameDecision, Plugin,
    RegistrationFailure, Versions,
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
    fn supported_versions(
        _: &Context<NoSettings>,
        _current: Vec<String>,
    ) -> Result<Vec<String>, String> {
        Ok(vec!["1.0.0".into()])
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
