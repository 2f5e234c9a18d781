//! When the kubelet refuses the registration with an error that matches one
//! of `matching` (every error when it is empty), keep serving: `ignore`. Since
//! kubernetes#133335 (1.36) the kubelet deregisters a plugin whose registration
//! failed and retries it by itself, with back-off, so the registrar needs to
//! do nothing. Other refusals, and any after `max_attempts` in a row, are
//! deferred to the next plugin or the built-in policy (exit 1).

use csi_registrar_policy::{
    Context, Failure, FailureAction, Level, Plugin, RegistrationFailure, log,
};

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    /// Substrings of the kubelet's error; empty: every refusal.
    matching: Vec<String>,
    /// Defer from this refusal in a row on; 0: never.
    max_attempts: u32,
}

struct IgnoreRefusals;

impl Plugin for IgnoreRefusals {
    type Settings = Settings;
    const NAME: &'static str = "ignore-refusals";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn validate(s: &Settings) -> Result<(), String> {
        if s.matching.iter().any(String::is_empty) {
            return Err("matching holds an empty string, which would match every error: leave matching empty for that".into());
        }
        Ok(())
    }
}

impl Failure for IgnoreRefusals {
    fn on_registration_failure(
        ctx: &Context<Settings>,
        f: &RegistrationFailure,
    ) -> Result<FailureAction, String> {
        let s = &ctx.settings;
        if s.max_attempts > 0 && f.attempt >= s.max_attempts {
            log(
                Level::Warn,
                &format!("refusal {} in a row: no longer ignored", f.attempt),
            );
            return Ok(FailureAction::Defer);
        }
        let matches = s.matching.is_empty() || s.matching.iter().any(|m| f.error.contains(m));
        if !matches {
            return Ok(FailureAction::Defer);
        }
        log(
            Level::Info,
            &format!(
                "refusal {} ignored; the kubelet retries it: {}",
                f.attempt, f.error
            ),
        );
        Ok(FailureAction::Ignore)
    }
}

csi_registrar_policy::export_policy!(IgnoreRefusals: failure);
