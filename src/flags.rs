//! Upstream-compatible command line.
//!
//! Every flag of the Go `csi-node-driver-registrar` is accepted with its default,
//! spelled the way Go's `flag` package accepts it: `-flag` or `--flag`, with
//! `=value` or a separate `value`; boolean flags take only `=value`. Errors exit
//! with code 2 and a usage message, as Go's `flag.ExitOnError` does.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::plugin_type::PluginType;

/// The registrar's flags. Field docs are the `--help` text.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "csi-node-driver-registrar",
    about = "Registers a CSI driver with the kubelet (drop-in replacement for the Kubernetes sidecar).",
    after_help = "Tools: `csi-node-driver-registrar demo [--policy FILE]` runs a self-contained demo; \
                  `csi-node-driver-registrar plugin --help` lists the plugin author commands.",
    disable_version_flag = true,
    // Go's flag package takes a repeated flag's last value.
    args_override_self = true
)]
// The field docs are the `--help` text, in upstream's words ("[Alpha]", "<port>").
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
pub struct Flags {
    /// Path of the CSI driver socket inside the container (a bare path or unix://path).
    #[arg(long = "csi-address", default_value = "/run/csi/socket")]
    pub csi_address: String,

    /// Path of the CSI driver socket on the host, advertised to the kubelet as the endpoint. Required.
    #[arg(long = "kubelet-registration-path", default_value = "")]
    pub kubelet_registration_path: String,

    /// Directory where the registration socket <driver-name>-reg.sock is created.
    #[arg(long = "plugin-registration-path", default_value = "/registration")]
    pub plugin_registration_path: PathBuf,

    /// Deadline of each call to the CSI driver (Go duration: 500ms, 1s, 1m30s).
    #[arg(long, default_value = "1s", value_parser = parse_go_duration)]
    pub timeout: Duration,

    /// TCP address of the HTTP server for /healthz, /readyz and /metrics (":9809", "127.0.0.1:9809"). Empty: off.
    #[arg(long = "http-endpoint", default_value = "")]
    pub http_endpoint: String,

    /// Deprecated: same as --http-endpoint=:<port>. 0: off.
    #[arg(long = "health-port", default_value_t = 0)]
    pub health_port: u16,

    /// Accepted for compatibility; Go's pprof has no Rust equivalent here (logged once).
    #[arg(long = "enable-pprof", default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_pprof: bool,

    /// Deprecated: "kubelet-registration-probe" exits 0 at once; other values run normally.
    #[arg(long, default_value = "")]
    pub mode: String,

    /// Deprecated, no effect.
    #[arg(long = "connection-timeout", default_value = "0s", value_parser = parse_go_duration)]
    pub connection_timeout: Duration,

    /// Go-specific (GOMAXPROCS from the CPU quota); accepted and ignored.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub automaxprocs: bool,

    /// Print the version and exit.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub version: bool,

    /// Log verbosity, klog style: 0 info, 4 debug, 5 and above trace.
    #[arg(long = "v", default_value_t = 0)]
    pub verbosity: u8,

    /// Log format on stderr: klog's text, or component-base's JSON.
    #[arg(long = "logging-format", default_value = "text", value_parser = ["text", "json"])]
    pub logging_format: String,

    /// Comma-separated list of pattern=N settings for file-filtered logging (only works for text log format).
    #[arg(long, default_value = "", value_parser = parse_vmodule)]
    pub vmodule: String,

    /// Maximum number of seconds between log flushes (Go duration). Lines are written as they come here.
    #[arg(long = "log-flush-frequency", default_value = "5s", value_parser = parse_go_duration)]
    pub log_flush_frequency: Duration,

    /// [Alpha] In text format, write error messages to stderr and info messages to stdout. Needs the LoggingAlphaOptions feature, which this binary (like upstream's) does not enable.
    #[arg(long = "log-text-split-stream", default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub log_text_split_stream: bool,

    /// [Alpha] In text format with split output streams, buffer info messages (a quantity, e.g. 1Mi). Needs LoggingAlphaOptions.
    #[arg(long = "log-text-info-buffer-size", default_value = "0", value_parser = parse_quantity)]
    pub log_text_info_buffer_size: Quantity,

    /// [Alpha] In JSON format, write error messages to stderr and info messages to stdout. Needs LoggingAlphaOptions.
    #[arg(long = "log-json-split-stream", default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = parse_go_bool, action = ArgAction::Set)]
    pub log_json_split_stream: bool,

    /// [Alpha] In JSON format with split output streams, buffer info messages (a quantity, e.g. 1Mi). Needs LoggingAlphaOptions.
    #[arg(long = "log-json-info-buffer-size", default_value = "0", value_parser = parse_quantity)]
    pub log_json_info_buffer_size: Quantity,

    /// Policy file (TOML) naming the WebAssembly policy plugins. Empty: the built-in policy, identical to upstream.
    #[arg(long = "policy-config", default_value = "")]
    pub policy_config: String,

    /// How long to wait for the CSI driver socket before giving up (Go duration; 0 waits forever).
    /// Upstream gives up after 30s, which crash-loops slow drivers.
    #[arg(long = "driver-wait-timeout", default_value = "0s", value_parser = parse_go_duration)]
    pub driver_wait_timeout: Duration,

    /// The latest a change of driver is noticed once registered (Go duration; 0: the
    /// driver is not watched). Its connection closing and its socket file changing are
    /// watched, so a restart is noticed at once; the interval is the polling period only
    /// where the socket's directory cannot be watched, and the cap of the retries while
    /// the driver is away. Back under another name or version, it is registered anew.
    #[arg(long = "driver-probe-interval", default_value = "10s", value_parser = parse_go_duration)]
    pub driver_probe_interval: Duration,

    /// The kubelet plugin type registered: CSIPlugin (a CSI driver, asked its name over
    /// --csi-address) or DRAPlugin (a Dynamic Resource Allocation driver, named by
    /// --driver-name; --kubelet-registration-path is its dra.sock on the host).
    #[arg(long = "plugin-type", value_enum, default_value = "CSIPlugin")]
    pub plugin_type: PluginType,

    /// The driver's name, for --plugin-type=DRAPlugin (DRA drivers have no CSI Identity
    /// service to ask). Not used for CSIPlugin.
    #[arg(long = "driver-name", default_value = "")]
    pub driver_name: String,

    /// Comma-separated supported_versions to advertise before any versions plugin. Empty:
    /// "1.0.0" for CSIPlugin, "v1.DRAPlugin,v1beta1.DRAPlugin" for DRAPlugin.
    #[arg(long = "supported-versions", default_value = "")]
    pub supported_versions: String,

    /// The pod's UID (downward API: metadata.uid; the POD_UID environment variable is
    /// read when the flag is empty). DRAPlugin only: the registration socket is then
    /// named per pod, as k8s.io/dynamic-resource-allocation's RollingUpdateRegistrarSocketFile
    /// does, so that two pods of a driver can be registered side by side (kubelet 1.33+).
    #[arg(long = "pod-uid", default_value = "")]
    pub pod_uid: String,

    /// How long after the kubelet's GetInfo its NotifyRegistrationStatus may take (Go
    /// duration; 0: wait forever). Past it, the registration socket is created again so
    /// that the kubelet registers anew, with the bound doubling on each repeat.
    #[arg(long = "notify-timeout", default_value = "5m", value_parser = parse_go_duration)]
    pub notify_timeout: Duration,

    /// Arguments after the flags. Go's flag package stops at the first one and the
    /// upstream registrar ignores them; they are logged and ignored here too.
    #[arg(hide = true)]
    pub ignored: Vec<String>,
}

/// The version printed by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The mode value that turns the binary into an exec probe.
pub(crate) const MODE_REGISTRATION_PROBE: &str = "kubelet-registration-probe";

impl Flags {
    /// component-base's `LoggingConfiguration` validation, with its texts
    /// (`ValidateAndApply` with no feature gates): empty when valid. Upstream
    /// logs `"LoggingConfiguration is invalid"` with these and exits 1.
    pub fn logging_errors(&self) -> Vec<String> {
        let forbidden = |path: &str, why: &str| format!("{path}: Forbidden: {why}");
        let gate = "Feature LoggingAlphaOptions is disabled";
        let mut errs = Vec::new();
        if !self.vmodule.is_empty() && self.logging_format != "text" {
            errs.push(forbidden("vmodule", "Only supported for text log format"));
        }
        if self.log_text_split_stream {
            errs.push(forbidden("options.text.splitStream", gate));
        }
        if !self.log_text_info_buffer_size.is_zero() {
            errs.push(forbidden("options.text.infoBufferSize", gate));
        }
        if self.log_json_split_stream {
            errs.push(forbidden("options.json.splitStream", gate));
        }
        if !self.log_json_info_buffer_size.is_zero() {
            errs.push(forbidden("options.json.infoBufferSize", gate));
        }
        errs
    }

    /// Parses Go-style arguments (the first is the program name).
    pub fn try_parse_go<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        Self::try_parse_from(normalize_go_args(args.into_iter().map(Into::into)))
    }
}

/// Turns Go's single-dash long flags into clap's double-dash ones: `-csi-address=x`
/// becomes `--csi-address=x`, `-v` becomes `--v`. Everything after a bare `--`, or
/// after the first argument that is not a flag, is left as it is.
pub(crate) fn normalize_go_args(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut flags_done = false;
    let mut expect_value = false;
    for (i, arg) in args.enumerate() {
        if i == 0 || flags_done {
            out.push(arg);
            continue;
        }
        if expect_value {
            expect_value = false;
            out.push(arg);
            continue;
        }
        if arg == "--" {
            flags_done = true;
            out.push(arg);
            continue;
        }
        let normalized = if arg.starts_with("--") {
            arg
        } else if arg.len() > 1 && arg.starts_with('-') {
            format!("-{arg}")
        } else {
            // Go's flag package stops at the first non-flag argument.
            flags_done = true;
            out.push("--".to_owned());
            out.push(arg);
            continue;
        };
        // A non-boolean flag without `=` takes the next argument as its value,
        // even if that argument starts with a dash (Go does the same).
        let name = normalized.trim_start_matches('-');
        if !name.contains('=') && !BOOL_FLAGS.contains(&name) && name != "help" && name != "h" {
            expect_value = true;
        }
        out.push(normalized);
    }
    out
}

const BOOL_FLAGS: &[&str] = &[
    "enable-pprof",
    "automaxprocs",
    "version",
    "log-text-split-stream",
    "log-json-split-stream",
];

fn parse_vmodule(s: &str) -> Result<String, String> {
    crate::logging::Verbosity::parse_vmodule(s).map(|_| s.to_owned())
}

/// A Kubernetes resource quantity (`0`, `512Ki`, `1Mi`, `1e6`), as far as the
/// flags need it: its syntax, and whether it is zero.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity(f64);

impl Quantity {
    pub fn is_zero(&self) -> bool {
        self.0 == 0.0
    }
}

fn parse_quantity(s: &str) -> Result<Quantity, String> {
    let err = || {
        format!(
            "invalid quantity {s:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    };
    let number_end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(s.len(), |(i, _)| i);
    let (number, suffix) = s.split_at(number_end);
    let value: f64 = number.parse().map_err(|_| err())?;
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()));
    if !suffix_ok {
        return Err(err());
    }
    Ok(Quantity(value))
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("invalid boolean value {s:?} (use true or false)")),
    }
}

/// Go's `time.ParseDuration` ("300ms", "1.5h", "2h45m"); negative durations are refused.
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = go_parse_duration::parse_duration(s).map_err(|_| {
        format!("invalid duration {s:?} (Go syntax: a number and a unit ns, us, ms, s, m or h, e.g. 500ms or 1m30s)")
    })?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("invalid duration {s:?}: must not be negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Flags, clap::Error> {
        Flags::try_parse_go(std::iter::once("registrar").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_match_upstream() {
        let f = parse(&[]).unwrap();
        assert_eq!(f.csi_address, "/run/csi/socket");
        assert_eq!(f.kubelet_registration_path, "");
        assert_eq!(f.plugin_registration_path, PathBuf::from("/registration"));
        assert_eq!(f.timeout, Duration::from_secs(1));
        assert_eq!(f.http_endpoint, "");
        assert_eq!(f.health_port, 0);
        assert!(!f.enable_pprof && !f.automaxprocs && !f.version);
        assert_eq!(f.verbosity, 0);
        assert_eq!(f.logging_format, "text");
    }

    #[test]
    fn go_spellings() {
        let f = parse(&[
            "-csi-address=/csi/csi.sock",
            "--kubelet-registration-path",
            "/var/lib/kubelet/plugins/x/csi.sock",
            "-timeout",
            "1m30s",
            "-v=5",
            "--enable-pprof",
            "-automaxprocs=false",
            "--health-port=9809",
        ])
        .unwrap();
        assert_eq!(f.csi_address, "/csi/csi.sock");
        assert_eq!(
            f.kubelet_registration_path,
            "/var/lib/kubelet/plugins/x/csi.sock"
        );
        assert_eq!(f.timeout, Duration::from_secs(90));
        assert_eq!(f.verbosity, 5);
        assert!(f.enable_pprof);
        assert!(!f.automaxprocs);
        assert_eq!(f.health_port, 9809);
        assert_eq!(parse(&["-v", "2"]).unwrap().verbosity, 2);
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            &["--timeout=soon"][..],
            &["--no-such-flag"],
            &["--logging-format=xml"],
            &["--v=loud"],
            &["--enable-pprof=maybe"],
            &["--timeout=-1s"],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
        }
        let err = parse(&["--timeout=soon"]).unwrap_err().to_string();
        assert!(err.contains("invalid duration \"soon\""), "{err}");
    }

    #[test]
    fn logging_flags_validate_as_component_base_does() {
        let f = parse(&["--vmodule=app=4", "-log-flush-frequency=10s"]).unwrap();
        assert_eq!(f.vmodule, "app=4");
        assert_eq!(f.log_flush_frequency, Duration::from_secs(10));
        assert!(f.logging_errors().is_empty());
        for defaults in [
            &[
                "--log-text-split-stream=false",
                "--log-text-info-buffer-size=0",
            ][..],
            &[
                "-log-json-split-stream=false",
                "-log-json-info-buffer-size",
                "0Mi",
            ],
        ] {
            assert!(
                parse(defaults).unwrap().logging_errors().is_empty(),
                "{defaults:?}"
            );
        }
        let json = parse(&["--vmodule=app=4", "--logging-format=json"]).unwrap();
        assert_eq!(
            json.logging_errors(),
            ["vmodule: Forbidden: Only supported for text log format"]
        );
        let alpha = parse(&["--log-text-split-stream", "--log-json-info-buffer-size=1Mi"]).unwrap();
        assert_eq!(
            alpha.logging_errors(),
            [
                "options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled",
                "options.json.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is disabled"
            ]
        );
        for bad in [
            &["--vmodule=app"][..],
            &["--log-text-info-buffer-size=lots"],
            &["--log-json-info-buffer-size=1Xi"],
            &["--log-flush-frequency=often"],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
        assert!(parse(&["--log-json-info-buffer-size=1e6"]).is_ok());
    }

    #[test]
    fn stops_at_first_non_flag() {
        let f = parse(&["-v=1", "extra", "--timeout=bad"]).unwrap();
        assert_eq!(f.verbosity, 1);
        assert_eq!(f.ignored, vec!["extra", "--timeout=bad"]);
    }
}
