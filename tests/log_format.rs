//! Drop-in to the last flag and log line: every upstream flag in both Go
//! spellings, klog text and component-base JSON logs checked line by line,
//! and the start-up sequence's upstream messages and keys.

mod common;

use common::*;
use csi_node_driver_registrar::testing::messages as m;
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver};

const DRIVER: &str = "hostpath.csi.k8s.io";

/// The Go registrar v2.17's flags (its `--help`), each with a value it takes.
const UPSTREAM_FLAGS: &[(&str, Option<&str>)] = &[
    ("csi-address", Some("/csi/csi.sock")),
    (
        "kubelet-registration-path",
        Some("/var/lib/kubelet/plugins/d/csi.sock"),
    ),
    ("plugin-registration-path", Some("/registration")),
    ("timeout", Some("2s")),
    ("http-endpoint", Some(":9809")),
    ("health-port", Some("0")),
    ("enable-pprof", None),
    ("mode", Some("kubelet-registration-probe")),
    ("connection-timeout", Some("0s")),
    ("automaxprocs", None),
    ("version", None),
    ("v", Some("3")),
    ("logging-format", Some("text")),
    ("vmodule", Some("app=4")),
    ("log-flush-frequency", Some("5s")),
    ("log-text-split-stream", Some("false")),
    ("log-json-split-stream", Some("false")),
    ("log-text-info-buffer-size", Some("0")),
    ("log-json-info-buffer-size", Some("0")),
];

#[tokio::test]
async fn every_upstream_flag_is_accepted_in_both_spellings() {
    assert_eq!(UPSTREAM_FLAGS.len(), 19);
    for (flag, value) in UPSTREAM_FLAGS {
        for dashes in ["-", "--"] {
            let mut spellings = vec![match value {
                Some(v) => vec![format!("{dashes}{flag}={v}")],
                None => vec![format!("{dashes}{flag}")],
            }];
            // Go's boolean flags take only `=value`; the others also a separate value.
            if let Some(v) = value
                && !flag.ends_with("split-stream")
            {
                spellings.push(vec![format!("{dashes}{flag}"), (*v).to_owned()]);
            }
            for spelling in spellings {
                // The probe mode exits 0 right after the flags are checked.
                let mut args = spelling.clone();
                args.push("--kubelet-registration-path=/k/csi.sock".into());
                args.push("--mode=kubelet-registration-probe".into());
                let (code, stdout, stderr) = run_binary(&args).await;
                assert_eq!(code, 0, "{spelling:?}: {stderr}");
                if *flag == "version" {
                    assert!(stdout.contains(csi_node_driver_registrar::VERSION));
                }
            }
        }
    }
}

#[tokio::test]
async fn invalid_logging_configurations_exit_1_as_upstream() {
    for (args, err) in [
        (
            &["--vmodule=app=2", "--logging-format=json"][..],
            "vmodule: Forbidden: Only supported for text log format",
        ),
        (
            &["--log-text-split-stream=true"],
            "options.text.splitStream: Forbidden: Feature LoggingAlphaOptions is disabled",
        ),
        (
            &["-log-json-info-buffer-size=1Mi"],
            "options.json.infoBufferSize: Forbidden: Feature LoggingAlphaOptions is disabled",
        ),
    ] {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push("--kubelet-registration-path=/k/csi.sock".into());
        let (code, _, stderr) = run_binary(&args).await;
        assert_eq!(code, 1, "{args:?}: {stderr}");
        let line = stderr.lines().next().unwrap();
        check_klog_line(line);
        assert!(line.starts_with('E'), "{line}");
        assert!(
            line.contains(&format!(
                "\"{}\" err=\"{err}\"",
                m::LOGGING_CONFIGURATION_INVALID
            )),
            "{line}"
        );
    }
    // Bad values are flag errors: exit 2, as Go's flag package.
    for bad in [
        "--vmodule=app",
        "--log-text-info-buffer-size=lots",
        "--log-flush-frequency=often",
    ] {
        let (code, _, stderr) = run_binary(&[bad, "--kubelet-registration-path=/k"]).await;
        assert_eq!(code, 2, "{bad}: {stderr}");
    }
}

/// One klog text line: `Lmmdd hh:mm:ss.uuuuuu PID file:line] "msg" k=v ...`.
/// Returns the message and the pairs (values unquoted).
fn check_klog_line(line: &str) -> (String, Vec<(String, String)>) {
    let b = line.as_bytes();
    assert!(b"IWEF".contains(&b[0]), "severity: {line}");
    assert!(
        b[1..5].iter().all(u8::is_ascii_digit) && b[5] == b' ',
        "date: {line}"
    );
    let time = &line[6..21];
    assert!(
        time.len() == 15
            && time.as_bytes()[2] == b':'
            && time.as_bytes()[5] == b':'
            && time.as_bytes()[8] == b'.'
            && time.bytes().filter(u8::is_ascii_digit).count() == 12,
        "time: {line}"
    );
    let rest = line[21..].trim_start();
    let (pid, rest) = rest.split_once(' ').unwrap();
    assert!(pid.parse::<u32>().is_ok(), "pid: {line}");
    let (caller, rest) = rest.split_once("] ").expect("file:line]");
    let (file, n) = caller.rsplit_once(':').unwrap();
    assert!(
        !file.is_empty() && n.parse::<u32>().is_ok(),
        "caller: {line}"
    );
    let mut chars = rest.chars().peekable();
    let quoted = |chars: &mut std::iter::Peekable<std::str::Chars>| -> String {
        assert_eq!(chars.next(), Some('"'), "quote: {line}");
        let mut s = String::new();
        loop {
            match chars
                .next()
                .unwrap_or_else(|| panic!("unterminated: {line}"))
            {
                '"' => return s,
                '\\' => {
                    let c = chars.next().unwrap();
                    s.push(match c {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                }
                c => s.push(c),
            }
        }
    };
    let msg = quoted(&mut chars);
    let mut pairs = Vec::new();
    while chars.peek().is_some() {
        assert_eq!(chars.next(), Some(' '), "separator: {line}");
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        assert_eq!(chars.next(), Some('='));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "key {key:?}: {line}"
        );
        let value = if chars.peek() == Some(&'"') {
            quoted(&mut chars)
        } else {
            std::iter::from_fn(|| chars.next_if(|c| *c != ' ')).collect()
        };
        pairs.push((key, value));
    }
    (msg, pairs)
}

/// The upstream messages of the start-up sequence, in order, with their keys.
fn upstream_sequence(events: &[(String, Vec<(String, String)>)]) -> Vec<(String, Vec<String>)> {
    let upstream = [
        m::VERSION,
        m::RUNNING,
        m::OPENING_CSI_CONNECTION,
        m::DISCOVERING_DRIVER_NAME,
        m::CSI_DRIVER_NAME,
        m::STARTING_REGISTRATION_SERVER,
        m::REGISTRATION_SERVER_STARTED,
        m::SKIPPING_HTTP_SERVER,
    ];
    events
        .iter()
        .filter(|(msg, _)| upstream.contains(&msg.as_str()))
        .map(|(msg, pairs)| (msg.clone(), pairs.iter().map(|(k, _)| k.clone()).collect()))
        .collect()
}

fn expected_sequence() -> Vec<(String, Vec<String>)> {
    let e =
        |msg: &str, keys: &[&str]| (msg.to_owned(), keys.iter().map(|k| k.to_string()).collect());
    vec![
        e(m::VERSION, &["version"]),
        e(m::RUNNING, &["mode"]),
        e(m::OPENING_CSI_CONNECTION, &["csiAddress"]),
        e(m::DISCOVERING_DRIVER_NAME, &[]),
        e(m::CSI_DRIVER_NAME, &["csiDriverName", "vendorVersion"]),
        e(m::STARTING_REGISTRATION_SERVER, &["socketPath", "reason"]),
        e(m::REGISTRATION_SERVER_STARTED, &["socketPath", "reason"]),
        e(m::SKIPPING_HTTP_SERVER, &[]),
    ]
}

async fn startup_log(extra: &[&str]) -> String {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.push("-v=2".into());
    let registrar = Process::spawn(&sb, &args);
    assert!(
        registrar.wait_log(m::SKIPPING_HTTP_SERVER).await,
        "{}",
        registrar.log_text()
    );
    let log = registrar.log_text();
    assert_eq!(registrar.stop().await, 0);
    log
}

#[tokio::test]
async fn text_logs_are_klog_lines_with_upstreams_startup_sequence() {
    let log = startup_log(&[]).await;
    let events: Vec<_> = log.lines().map(check_klog_line).collect();
    assert_eq!(upstream_sequence(&events), expected_sequence(), "{log}");
    let version = &events.iter().find(|(m, _)| m == m::VERSION).unwrap().1;
    assert_eq!(
        version[0].1,
        format!("v{}", csi_node_driver_registrar::VERSION)
    );
    let running = &events.iter().find(|(msg, _)| msg == m::RUNNING).unwrap().1;
    assert_eq!(running[0], ("mode".into(), "registration".into()));
}

#[tokio::test]
async fn json_logs_follow_component_bases_schema() {
    let log = startup_log(&["--logging-format=json"]).await;
    let mut events = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let o = v.as_object().unwrap();
        let keys: Vec<&String> = o.keys().collect();
        assert!(o["ts"].as_f64().unwrap() > 1.7e12, "ts in epoch ms: {line}");
        let caller = o["caller"].as_str().unwrap();
        assert!(
            caller.rsplit_once(':').unwrap().1.parse::<u32>().is_ok(),
            "{line}"
        );
        let msg = o["msg"].as_str().unwrap().to_owned();
        assert!(
            o.contains_key("v") || o.contains_key("err"),
            "info lines carry v: {line}"
        );
        // component-base's order: ts, caller, msg, then v or err, then the pairs.
        let at = |key: &str| line.find(&format!("\"{key}\":")).unwrap();
        assert!(
            line.starts_with("{\"ts\":") && at("caller") < at("msg"),
            "{line}"
        );
        assert!(o.get("v").is_none_or(|_| at("msg") < at("v")), "{line}");
        let _ = keys;
        let pairs = o
            .iter()
            .filter(|(k, _)| !["ts", "caller", "msg", "v", "err"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_owned)))
            .collect();
        events.push((msg, pairs));
    }
    let mut seq = upstream_sequence(&events);
    // serde_json's map is ordered by key; compare the key sets.
    for (_, keys) in seq.iter_mut() {
        keys.sort();
    }
    let mut expected = expected_sequence();
    for (_, keys) in expected.iter_mut() {
        keys.sort();
    }
    assert_eq!(seq, expected, "{log}");
}
