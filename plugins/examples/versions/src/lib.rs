//! Advertises the supported versions from its settings instead of `["1.0.0"]`.
//!
//! The kubelet refuses a second registration of a driver name unless it
//! advertises a strictly higher version, so a same-name handover (a new
//! registrar taking over while the old one still runs) advertises e.g.
//! `["1.0.1"]`.

use csi_registrar_policy::{Context, Plugin, Versions};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    versions: Vec<String>,
}

struct ChooseVersions;

impl Plugin for ChooseVersions {
    type Settings = Settings;
    const NAME: &'static str = "versions";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn validate(s: &Settings) -> Result<(), String> {
        if s.versions.is_empty() {
            return Err("versions is empty; the kubelet needs at least one 1.x version".into());
        }
        Ok(())
    }
}

impl Versions for ChooseVersions {
    fn supported_versions(
        ctx: &Context<Settings>,
        _current: Vec<String>,
    ) -> Result<Vec<String>, String> {
        Ok(ctx.settings.versions.clone())
    }
}

csi_registrar_policy::export_policy!(ChooseVersions: versions);
