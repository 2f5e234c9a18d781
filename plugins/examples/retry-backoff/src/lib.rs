//! When the kubelet refuses the registration, re-create the registration
//! socket after an exponential backoff instead of exiting (upstream exits at
//! once, which crash-loops the pod on kubelet-side problems); give up with
//! `exit_code` after `max_attempts` refusals in a row.

use csi_registrar_policy::{
    Context, Failure, FailureAction, Level, Plugin, RegistrationFailure, log,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    initial_delay_ms: u32,
    factor: u32,
    max_delay_ms: u32,
    /// 0: never give up.
    max_attempts: u32,
    exit_code: u8,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            initial_delay_ms: 500,
            factor: 2,
            max_delay_ms: 60_000,
            max_attempts: 5,
            exit_code: 1,
        }
    }
}

struct RetryBackoff;

impl Plugin for RetryBackoff {
    type Settings = Settings;
    const NAME: &'static str = "retry-backoff";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");

    fn validate(s: &Settings) -> Result<(), String> {
        if s.factor == 0 || s.initial_delay_ms == 0 {
            return Err("factor and initial_delay_ms must be at least 1".into());
        }
        if s.exit_code == 0 {
            return Err("exit_code must be 1-255: giving up is a failure".into());
        }
        Ok(())
    }
}

impl Failure for RetryBackoff {
    fn on_registration_failure(
        ctx: &Context<Settings>,
        f: &RegistrationFailure,
    ) -> Result<FailureAction, String> {
        let s = &ctx.settings;
        if s.max_attempts > 0 && f.attempt >= s.max_attempts {
            log(
                Level::Warn,
                &format!("giving up after {} refusals: {}", f.attempt, f.error),
            );
            return Ok(FailureAction::Exit(s.exit_code));
        }
        let exp = f.attempt.saturating_sub(1).min(31);
        let delay = u64::from(s.initial_delay_ms) * u64::from(s.factor).saturating_pow(exp);
        let delay_ms = delay.min(u64::from(s.max_delay_ms)) as u32;
        log(
            Level::Info,
            &format!("refusal {}: retrying in {delay_ms} ms", f.attempt),
        );
        Ok(FailureAction::Retry { delay_ms })
    }
}

csi_registrar_policy::export_policy!(RetryBackoff: failure);
