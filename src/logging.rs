//! Structured logs on stderr, text or JSON, with klog-style verbosity.

use tracing_subscriber::EnvFilter;

/// Maps klog's `-v` to a filter. Dependencies stay at `warn` unless `-v` is 5
/// or more, so the log shows the registrar's own story.
pub fn filter(verbosity: u8) -> EnvFilter {
    let (own, deps) = match verbosity {
        0..=3 => ("info", "warn"),
        4 => ("debug", "warn"),
        _ => ("trace", "debug"),
    };
    EnvFilter::new(format!(
        "{deps},csi_node_driver_registrar={own},plugin={own},h2=warn,hyper=warn,tower=warn,cranelift_codegen=warn,wasmtime=warn,wasmtime_cranelift=warn"
    ))
}

/// Installs the global subscriber. `json` selects `--logging-format=json`.
pub fn init(verbosity: u8, json: bool) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(verbosity))
        .with_writer(std::io::stderr);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder.with_ansi(false).init();
    }
}

/// For the demo and the plugin tools, whose own output is on stdout: warnings,
/// and the plugins' own log lines; `-v` brings the registrar's log back.
pub fn init_tools(verbosity: u8) {
    let filter = if verbosity == 0 {
        EnvFilter::new("warn,plugin=info")
    } else {
        filter(verbosity)
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
