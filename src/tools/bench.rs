//! `plugin bench CASES.toml`: the cases of `plugin test`, each decided many
//! times through the registrar's decision path, timed per call: p50 and p99
//! per case and per hook, in µs, with instantiation and the call itself
//! apart. Every call runs in a fresh instance, as in the registrar. The
//! plugin's log lines are shown once per case, and the calls are timed with
//! logging off.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::author;
use super::cases::{self, Loader};
use crate::policy::Hook;
use crate::policy::wasm::{CallPhases, Compiler, Host};

/// Calls made before timing, per case.
const WARM_UP: usize = 20;

pub(super) fn run(
    sources: &author::Sources,
    cases: &Path,
    plugin: Option<&Path>,
    iterations: usize,
) -> anyhow::Result<()> {
    let file = cases::read(cases)?;
    let host = Host::recording_phases(Compiler::default())?;
    let loader = Loader::new(host.clone(), sources, file.plugin(cases, plugin)?)?;
    let mut per_hook: BTreeMap<Hook, Vec<Sample>> = BTreeMap::new();
    let width = file
        .cases
        .iter()
        .map(|c| c.name.len() + 10)
        .max()
        .unwrap_or(0)
        .max(24);
    outln!(
        "{:<width$} {:<12} {:>9} {:>9} {:>7} {:>12} {:>7} {:>7} {:>11}",
        "case",
        "hook",
        "p50 µs",
        "p99 µs",
        "set-up",
        "instantiate",
        "call",
        "rest",
        "memory KiB"
    );
    for case in &file.cases {
        let Ok((chain, ctx, input)) = loader.prepare(&file, case) else {
            outln!(
                "{:<width$} {:<12} skipped: the plugin does not load with these settings",
                case.name,
                case.hook.as_str()
            );
            continue;
        };
        let mut samples = Vec::with_capacity(iterations);
        let mut refused = false;
        for i in 0..WARM_UP + iterations {
            // The plugin's log lines are shown for the first call of a case;
            // the others run with logging off, and are timed without it.
            let quiet = (i > 0).then(|| {
                tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::new())
            });
            let started = Instant::now();
            let decided = author::decide(&chain, case.hook, &ctx, input.clone());
            let took = started.elapsed();
            drop(quiet);
            let phases = host.last_call_phases().unwrap_or_default();
            refused |= decided.is_err();
            if i >= WARM_UP {
                samples.push(Sample { took, phases });
            }
        }
        let name = if refused {
            format!("{} (refused)", case.name)
        } else {
            case.name.clone()
        };
        outln!("{}", row(&name, width, case.hook, &samples));
        per_hook.entry(case.hook).or_default().extend(samples);
    }
    outln!();
    for (hook, samples) in &per_hook {
        let name = format!("all {} cases", hook.as_str());
        outln!("{}", row(&name, width, *hook, samples));
    }
    Ok(())
}

/// One decision: its time in all, and its call's phases.
#[derive(Debug, Clone, Copy)]
struct Sample {
    took: Duration,
    phases: CallPhases,
}

impl Sample {
    /// Neither set-up, instantiation nor the call: reading the output,
    /// dropping the instance, and the chain's checks of the answer.
    fn rest(&self) -> Duration {
        let p = &self.phases;
        self.took
            .saturating_sub(p.setup)
            .saturating_sub(p.instantiate)
            .saturating_sub(p.call)
    }
}

fn row(name: &str, width: usize, hook: Hook, samples: &[Sample]) -> String {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let sorted = |key: fn(&Sample) -> Duration| {
        let mut values: Vec<Duration> = samples.iter().map(key).collect();
        values.sort();
        values
    };
    let took = sorted(|s| s.took);
    format!(
        "{name:<width$} {:<12} {:>9.1} {:>9.1} {:>7.1} {:>12.1} {:>7.1} {:>7.1} {:>11}",
        hook.as_str(),
        us(percentile(&took, 50)),
        us(percentile(&took, 99)),
        us(percentile(&sorted(|s| s.phases.setup), 50)),
        us(percentile(&sorted(|s| s.phases.instantiate), 50)),
        us(percentile(&sorted(|s| s.phases.call), 50)),
        us(percentile(&sorted(Sample::rest), 50)),
        samples.iter().map(|s| s.phases.memory).max().unwrap_or(0) >> 10,
    )
}

/// The `p`th percentile of sorted values (nearest rank).
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p).div_ceil(100).clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(percentile(&ms, 50), Duration::from_millis(100));
        assert_eq!(percentile(&ms, 99), Duration::from_millis(198));
        assert_eq!(percentile(&ms[..1], 99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}
