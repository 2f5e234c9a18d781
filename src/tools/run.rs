//! `plugin run`: one hook against a context, decided through the registrar's
//! own chain, printed as JSON.

use std::time::Duration;

use super::author::{self, HookInput};
use super::cli::RunArgs;
use crate::policy::Context;
use crate::policy::Failure;
use crate::policy::file::PluginConfig;

pub(super) fn run(sources: &author::Sources, args: RunArgs) -> anyhow::Result<()> {
    let RunArgs {
        wasm,
        hook,
        context,
        node_name,
        driver_name,
        driver_version,
        kubelet_registration_path,
        plugin_type,
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
        None => author::example_context(),
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
    if let Some(t) = plugin_type {
        ctx.plugin_type = t;
    }
    let cfg = PluginConfig {
        settings_json: settings.json()?,
        timeout: Duration::from_millis(timeout_ms),
        plugin_type: ctx.plugin_type,
        ..sources.unpinned(&wasm)
    };
    let chain = author::chain_of(&author::host()?, cfg, hook, None)?;
    let input = HookInput {
        current,
        versions,
        failure: Some(Failure {
            error,
            attempt,
            elapsed: Duration::ZERO,
        }),
    };
    let started = std::time::Instant::now();
    let decided = author::decide(&chain, hook, &ctx, input);
    let took = started.elapsed().as_micros() as u64;
    match decided {
        Ok(mut out) => {
            out["hook"] = serde_json::json!(hook.as_str());
            out["took_us"] = serde_json::json!(took);
            outln!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Err(e) => {
            let out = serde_json::json!({
                "hook": hook.as_str(),
                "error": e.message,
                "took_us": took,
            });
            outln!("{}", serde_json::to_string_pretty(&out)?);
            Err(e.into())
        }
    }
}
