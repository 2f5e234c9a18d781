//! Appends a suffix to the driver name: `hostpath.csi.k8s.io` becomes
//! `hostpath.csi.k8s.io-pool-a`, so a second instance of one driver (another
//! node pool, another backend) registers under its own name.

use csi_registrar_policy::{Context, DriverName, NameDecision, Plugin};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// Appended to the driver's name, e.g. "-pool-a".
    suffix: String,
}

struct PoolSuffix;

impl Plugin for PoolSuffix {
    type Settings = Settings;
    const NAME: &'static str = "pool-suffix";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn validate(s: &Settings) -> Result<(), String> {
        match s
            .suffix
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.')))
        {
            Some(c) => Err(format!(
                "suffix {:?} contains {c:?}; use letters, digits, '-' and '.'",
                s.suffix
            )),
            None if s.suffix.is_empty() => Err("suffix must be a non-empty string".into()),
            None => Ok(()),
        }
    }
}

impl DriverName for PoolSuffix {
    fn rewrite_driver_name(ctx: &Context<Settings>, current: &str) -> Result<NameDecision, String> {
        Ok(NameDecision::Rename(format!(
            "{current}{}",
            ctx.settings.suffix
        )))
    }
}

csi_registrar_policy::export_policy!(PoolSuffix: driver_name);
