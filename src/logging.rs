//! Structured logs on stderr, text or JSON, with klog-style verbosity.
//!
//! Filtering is by target prefix only (`filter::Targets`), which needs no
//! regular-expression engine in the binary.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;

/// Targets whose events are the registrar's own story: the crate and the plugins' `host-log`.
const OWN: &[&str] = &["csi_node_driver_registrar", "plugin"];

/// Maps klog's `-v` to a filter. Dependencies stay at `warn` unless `-v` is 5
/// or more (then `debug`).
pub fn filter(verbosity: u8) -> Targets {
    let (own, deps) = match verbosity {
        0..=3 => (LevelFilter::INFO, LevelFilter::WARN),
        4 => (LevelFilter::DEBUG, LevelFilter::WARN),
        _ => (LevelFilter::TRACE, LevelFilter::DEBUG),
    };
    OWN.iter()
        .fold(Targets::new().with_default(deps), |t, target| {
            t.with_target(*target, own)
        })
}

/// Installs the global subscriber. `json` selects `--logging-format=json`.
pub fn init(verbosity: u8, json: bool) {
    install(filter(verbosity), json);
}

/// For the demo and the plugin tools, whose own output is on stdout: warnings,
/// and the plugins' own log lines; `-v` brings the registrar's log back.
pub fn init_tools(verbosity: u8) {
    let filter = if verbosity == 0 {
        Targets::new()
            .with_default(LevelFilter::WARN)
            .with_target("plugin", LevelFilter::INFO)
    } else {
        filter(verbosity)
    };
    install(filter, false);
}

fn install(filter: Targets, json: bool) {
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry
            .with(fmt.json().flatten_event(true).with_current_span(false))
            .init();
    } else {
        registry.with(fmt.with_ansi(false)).init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn verbosity_levels() {
        let f = filter(0);
        assert!(f.would_enable("csi_node_driver_registrar::app", &Level::INFO));
        assert!(!f.would_enable("csi_node_driver_registrar::app", &Level::DEBUG));
        assert!(!f.would_enable("h2::proto", &Level::INFO));
        assert!(f.would_enable("h2::proto", &Level::WARN));
        assert!(filter(4).would_enable("plugin", &Level::DEBUG));
        assert!(filter(5).would_enable("csi_node_driver_registrar", &Level::TRACE));
        assert!(filter(5).would_enable("hyper::client", &Level::DEBUG));
    }
}
