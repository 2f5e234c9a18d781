//! Builds the endpoint the kubelet dials from a template, per node: clusters
//! whose nodes have different kubelet root directories (k0s, microk8s, a
//! custom `--root-dir`) can run one DaemonSet.
//!
//! Placeholders: `{node}` (the node name), `{driver}` (the driver's name),
//! `{file}` (the file name of the current endpoint). `overrides` maps node-name
//! prefixes to other templates; the longest matching prefix wins.

use std::collections::BTreeMap;

use csi_registrar_policy::{Context, Endpoint, EndpointDecision, Plugin};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    template: String,
    #[serde(default)]
    overrides: BTreeMap<String, String>,
}

struct EndpointTemplate;

impl Plugin for EndpointTemplate {
    type Settings = Settings;
    const NAME: &'static str = "endpoint-template";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn validate(s: &Settings) -> Result<(), String> {
        for t in std::iter::once(&s.template).chain(s.overrides.values()) {
            if !t.starts_with('/') {
                return Err(format!("template {t:?} must be an absolute path"));
            }
        }
        Ok(())
    }
}

impl Endpoint for EndpointTemplate {
    fn map_endpoint(ctx: &Context<Settings>, current: &str) -> Result<EndpointDecision, String> {
        let template = ctx
            .settings
            .overrides
            .iter()
            .filter(|(prefix, _)| ctx.node_name.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map_or(&ctx.settings.template, |(_, t)| t);
        if template.contains("{node}") && ctx.node_name.is_empty() {
            return Err("the template uses {node} but KUBE_NODE_NAME is not set".into());
        }
        let file = current.rsplit('/').next().unwrap_or(current);
        Ok(EndpointDecision::Replace(
            template
                .replace("{node}", &ctx.node_name)
                .replace("{driver}", &ctx.driver_name)
                .replace("{file}", file),
        ))
    }
}

csi_registrar_policy::export_policy!(EndpointTemplate: endpoint);
