//! `plugin run`: one hook against a context, decided through the registrar's
//! own chain, printed as JSON.

use std::sync::Arc;
use std::time::Duration;

use super::author;
use super::cli::RunArgs;
use crate::metrics::Metrics;
use crate::policy::file::{DEFAULT_MAX_RETRY_MS, DEFAULT_MIN_RETRY_MS, PluginConfig};
use crate::policy::{Chain, Context, Failure, Hook, Registration};

pub(super) fn run(args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        wasm,
        hook,
        context,
        node_name,
        driver_name,
        driver_version,
        kubelet_registration_path,
        current,
        versions,
        error,
        attempt,
        settings,
        timeout_ms,
    } = args;
    let mut ctx: Context = match &context {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => Context {
            driver_name: "hostpath.csi.k8s.io".into(),
            driver_version: "1.0.0".into(),
            csi_address: "/csi/csi.sock".into(),
            kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock"
                .into(),
            plugin_registration_path: "/registration".into(),
            node_name: "node-1".into(),
        },
    };
    for (field, value) in [
        (&mut ctx.node_name, node_name),
        (&mut ctx.driver_name, driver_name),
        (&mut ctx.driver_version, driver_version),
        (
            &mut ctx.kubelet_registration_path,
            kubelet_registration_path,
        ),
    ] {
        if let Some(v) = value {
            *field = v;
        }
    }
    // The registrar's own path: a chain of this one plugin, limited
    // to the hook, with the registrar's checks, clamping and errors.
    let cfg = PluginConfig {
        settings_json: settings.json()?,
        timeout: Duration::from_millis(timeout_ms),
        hooks: Some([hook].into()),
        ..author::unpinned(&wasm)
    };
    // (Loading fails, naming what it exports, if the hook is not one.)
    let plugin = author::host()?.load(&cfg, None)?;
    let chain = Chain::new(
        vec![Box::new(plugin)],
        Duration::from_millis(DEFAULT_MIN_RETRY_MS),
        Duration::from_millis(DEFAULT_MAX_RETRY_MS),
        Arc::new(Metrics::new()),
    );
    let start = Registration {
        name: current.clone().unwrap_or_else(|| ctx.driver_name.clone()),
        endpoint: current.unwrap_or_else(|| ctx.kubelet_registration_path.clone()),
        supported_versions: if versions.is_empty() {
            vec!["1.0.0".to_owned()]
        } else {
            versions
        },
    };
    let started = std::time::Instant::now();
    let decided = match hook {
        Hook::Failure => chain
            .decide_failure(
                &ctx,
                &Failure {
                    error,
                    attempt,
                    elapsed: Duration::ZERO,
                },
            )
            .map(|d| {
                let mut out = match d.by {
                    Some(_) => serde_json::json!({ "decision": d.action }),
                    None => serde_json::json!({
                        "decision": "defer",
                        "registrar": { "built_in": d.action },
                    }),
                };
                if let Some(asked) = d.asked {
                    out["clamped_from"] = serde_json::json!(asked);
                }
                out
            }),
        _ => chain
            .registration_from(&ctx, start.clone())
            .map(|r| serde_json::json!({ "decision": registration_decision(hook, &start, &r) })),
    };
    let took = started.elapsed().as_micros() as u64;
    match decided {
        Ok(mut out) => {
            out["hook"] = serde_json::json!(hook.as_str());
            out["took_us"] = serde_json::json!(took);
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Err(e) => {
            let out = serde_json::json!({
                "hook": hook.as_str(),
                "error": e.message,
                "took_us": took,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Err(e.into())
        }
    }
}

/// What `plugin run` shows for a start-up hook: the plugin's change to the
/// registration, as the registrar applies it.
fn registration_decision(
    hook: Hook,
    start: &Registration,
    decided: &Registration,
) -> serde_json::Value {
    match hook {
        Hook::DriverName if decided.name == start.name => serde_json::json!("keep"),
        Hook::DriverName => serde_json::json!({ "rename": decided.name }),
        Hook::Endpoint if decided.endpoint == start.endpoint => serde_json::json!("keep"),
        Hook::Endpoint => serde_json::json!({ "replace": decided.endpoint }),
        _ => serde_json::json!({ "supported_versions": decided.supported_versions }),
    }
}
