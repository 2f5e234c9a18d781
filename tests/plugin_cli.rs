//! The author CLI (`plugin inspect|validate|run|precompile|cache-key`), and
//! `plugin run` deciding exactly as the registrar does.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use csi_node_driver_registrar::testing::{Context, Failure, FailureAction, Policy};

fn tool(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn author_cli_inspects_validates_runs_and_precompiles() {
    let pool = plugin("pool-suffix");
    let pool = pool.to_str().unwrap();

    let (code, out, err) = tool(&["plugin", "inspect", pool, "--json"]);
    assert_eq!(code, 0, "{err}");
    let i: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(i["hooks"], serde_json::json!(["driver-name"]));
    assert_eq!(i["name"], "pool-suffix");
    assert_eq!(i["sha256"], sha256_hex(Path::new(pool)));
    assert!(
        i["exports"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("csi-registrar:policy/driver-name@0.1.1")),
        "{out}"
    );

    let (code, out, _) = tool(&[
        "plugin",
        "validate",
        pool,
        "--settings-json",
        r#"{"suffix": "-a"}"#,
    ]);
    assert_eq!(code, 0);
    assert!(out.starts_with("ok:"), "{out}");
    let (code, _, err) = tool(&[
        "plugin",
        "validate",
        pool,
        "--settings-json",
        r#"{"suffix": "a b"}"#,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("the plugin refused its settings: suffix \"a b\" contains ' '"),
        "{err}"
    );

    let (code, out, err) = tool(&[
        "plugin",
        "run",
        pool,
        "--hook",
        "driver-name",
        "--driver-name",
        "nfs.csi.k8s.io",
        "--settings-json",
        r#"{"suffix": "-a"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["decision"]["rename"], "nfs.csi.k8s.io-a");
    assert!(r.get("error").is_none());

    let retry = plugin("retry-backoff");
    let (_, out, _) = tool(&[
        "plugin",
        "run",
        retry.to_str().unwrap(),
        "--hook",
        "failure",
        "--attempt",
        "2",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["decision"], serde_json::json!({"retry": 1000}));

    let m = plugin("misbehave");
    let (code, out, _) = tool(&[
        "plugin",
        "run",
        m.to_str().unwrap(),
        "--hook",
        "endpoint",
        "--settings-json",
        r#"{"do": "invalid"}"#,
    ]);
    assert_eq!(code, 1);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        r["error"],
        "invalid decision: endpoint \"relative/csi.sock\" is not an absolute path"
    );

    let (code, _, err) = tool(&[
        "plugin",
        "run",
        pool,
        "--hook",
        "failure",
        "--settings-json",
        r#"{"suffix": "-a"}"#,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: policy plugin \"pool_suffix\"")
            && err.contains(
                "does not export csi-registrar:policy/failure@0.1.1; it exports driver-name"
            ),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let policy_header = cached_policy(dir.path(), &cache);
    let (code, out, err) = tool(&[
        "plugin",
        "precompile",
        pool,
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-key-file",
        dir.path().join("cache.key").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let entry = out.trim().rsplit(" -> ").next().unwrap();
    assert!(Path::new(entry).exists(), "{out}");
    // The registrar then loads it from there without compiling (same key).
    let toml = format!(
        "{policy_header}{}",
        plugin_entry("p", Path::new(pool), "[plugin.settings]\nsuffix = \"-a\"")
    );
    let before = std::fs::metadata(entry).unwrap().modified().unwrap();
    load(dir.path(), &toml).unwrap();
    assert_eq!(
        std::fs::metadata(entry).unwrap().modified().unwrap(),
        before
    );
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
}

/// `plugin run` decides as the registrar does, for every hook: an answer the
/// registrar refuses is shown refused, with the registrar's own error; one it
/// clamps is shown clamped; one it takes is shown as taken.
#[test]
fn plugin_run_and_the_registrar_agree_on_every_hook() {
    let dir = tempfile::tempdir().unwrap();
    let m = plugin("misbehave");
    let failure = Failure {
        error: "RegisterPlugin error -- plugin registration failed with err: example".into(),
        attempt: 1,
        elapsed: Duration::ZERO,
    };
    let default_ctx = Context {
        node_name: "node-1".into(),
        driver_name: "hostpath.csi.k8s.io".into(),
        driver_version: "1.0.0".into(),
        csi_address: "/csi/csi.sock".into(),
        kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock".into(),
        plugin_registration_path: "/registration".into(),
        ..Context::default()
    };
    for hook in ["driver-name", "versions", "endpoint", "failure"] {
        for action in ["invalid", "trap", "error", "sleep", "echo"] {
            // Deadlines far from what the calls take, except where it is the point.
            let timeout_ms = if action == "sleep" { "100" } else { "900" };
            let (code, out, err) = tool(&[
                "plugin",
                "run",
                m.to_str().unwrap(),
                "--hook",
                hook,
                "--timeout-ms",
                timeout_ms,
                "--settings-json",
                &format!(r#"{{"do": "{action}"}}"#),
            ]);
            let shown: serde_json::Value = serde_json::from_str(&out)
                .unwrap_or_else(|e| panic!("{hook} {action}: {e}: {out} {err}"));
            let chain = load(
                dir.path(),
                &plugin_entry(
                    "misbehave",
                    &m,
                    &format!("hooks = [\"{hook}\"]\ntimeout_ms = {timeout_ms}\n[plugin.settings]\ndo = \"{action}\""),
                ),
            )
            .unwrap();
            let registrar = if hook == "failure" {
                chain
                    .on_failure(&default_ctx, &failure)
                    .map(|a| serde_json::json!(a))
            } else {
                chain
                    .registration(&default_ctx)
                    .map(|r| serde_json::json!(r))
            };
            match registrar {
                Err(e) => {
                    assert_eq!(
                        code, 1,
                        "{hook} {action}: the registrar refuses: {e}; {out}"
                    );
                    assert_eq!(shown["error"], e.message, "{hook} {action}");
                    assert_eq!(
                        err.lines().find(|l| l.starts_with("error:")),
                        Some(format!("error: {e}").as_str()),
                        "{hook} {action}: the error's first line names plugin, hook and cause"
                    );
                }
                Ok(decided) => {
                    assert_eq!(code, 0, "{hook} {action}: {err}");
                    let registrar_view = match hook {
                        "driver-name" if decided["name"] == default_ctx.driver_name => {
                            serde_json::json!("keep")
                        }
                        "driver-name" => serde_json::json!({ "rename": decided["name"] }),
                        "endpoint"
                            if decided["endpoint"] == default_ctx.kubelet_registration_path =>
                        {
                            serde_json::json!("keep")
                        }
                        "endpoint" => serde_json::json!({ "replace": decided["endpoint"] }),
                        "versions" => {
                            serde_json::json!({ "supported_versions": decided["supported_versions"] })
                        }
                        _ => shown["registrar"]["built_in"].clone(),
                    };
                    let tool_view = if hook == "failure" && shown["decision"] == "defer" {
                        shown["registrar"]["built_in"].clone()
                    } else {
                        shown["decision"].clone()
                    };
                    assert_eq!(
                        tool_view,
                        if hook == "failure" {
                            decided.clone()
                        } else {
                            registrar_view
                        },
                        "{hook} {action}: {out}"
                    );
                }
            }
        }
    }

    // A delay under policy.min_retry_ms is clamped, and shown so.
    let retry = plugin("retry-backoff");
    let (code, out, err) = tool(&[
        "plugin",
        "run",
        retry.to_str().unwrap(),
        "--hook",
        "failure",
        "--settings-json",
        r#"{"initial_delay_ms": 10}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        shown["decision"],
        serde_json::json!({"retry": 500}),
        "{out}"
    );
    assert_eq!(
        shown["clamped_from"],
        serde_json::json!({"retry": 10}),
        "{out}"
    );
    let chain = load(
        dir.path(),
        &plugin_entry("retry", &retry, "[plugin.settings]\ninitial_delay_ms = 10"),
    )
    .unwrap();
    assert_eq!(
        chain.on_failure(&default_ctx, &failure).unwrap(),
        FailureAction::Retry(Duration::from_millis(500))
    );
}

/// Every example's `cases.toml` passes through the registrar's decision path.
#[test]
fn every_examples_cases_pass() {
    plugin("pool-suffix"); // builds the plugins workspace
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/examples");
    for example in [
        "pool-suffix",
        "versions",
        "endpoint-template",
        "retry-backoff",
        "ignore-refusals",
        "default-policy",
    ] {
        let cases = examples.join(example).join("cases.toml");
        let (code, out, err) = tool(&["plugin", "test", cases.to_str().unwrap()]);
        assert_eq!(code, 0, "{example}:\n{out}\n{err}");
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.ends_with(" passed, 0 failed") && !last.starts_with("0 "),
            "{example}: {out}"
        );
    }
}

/// A plugin built against WIT 0.1.0 (tests/vectors/wit-0.1.0) still decides
/// as its cases say in a registrar implementing a later 0.1.x.
#[test]
fn a_plugin_built_against_wit_0_1_0_still_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let old = root.join("tests/vectors/wit-0.1.0/pool_suffix.wasm");
    let (code, out, err) = tool(&["plugin", "inspect", old.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("csi-registrar:policy/driver-name@0.1.0"),
        "{out}"
    );
    let cases = root.join("plugins/examples/pool-suffix/cases.toml");
    let (code, out, err) = tool(&[
        "plugin",
        "test",
        cases.to_str().unwrap(),
        "--plugin",
        old.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.lines()
            .last()
            .unwrap_or_default()
            .ends_with(" passed, 0 failed"),
        "{out}"
    );
}

/// A wrong expectation is a FAIL line that says what differs, the count says
/// so, the exit code is 1, and the JUnit file records the failure.
#[test]
fn a_wrong_case_fails_with_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.toml");
    std::fs::write(
        &cases,
        r#"[settings]
suffix = "-pool-a"

[[case]]
name = "right"
hook = "driver-name"
expect = { rename = "hostpath.csi.k8s.io-pool-a" }

[[case]]
name = "wrong"
hook = "driver-name"
expect = { rename = "hostpath.csi.k8s.io-pool-b" }

[[case]]
name = "expects a refusal"
hook = "driver-name"
expect = { error = "at most 63" }
"#,
    )
    .unwrap();
    let junit = dir.path().join("junit.xml");
    let wasm = plugin("pool-suffix");
    let (code, out, err) = tool(&[
        "plugin",
        "test",
        cases.to_str().unwrap(),
        "--plugin",
        wasm.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "PASS  right",
            "FAIL  wrong: expected the decision {\"rename\":\"hostpath.csi.k8s.io-pool-b\"}, got {\"rename\":\"hostpath.csi.k8s.io-pool-a\"}",
            "FAIL  expects a refusal: expected a refusal containing \"at most 63\", got the decision {\"rename\":\"hostpath.csi.k8s.io-pool-a\"}",
            "1 passed, 2 failed",
        ]
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("tests=\"3\"") && xml.contains("failures=\"2\""),
        "{xml}"
    );
    assert!(xml.contains("<testcase name=\"wrong\""), "{xml}");
}

/// A mistake in the cases file is reported as a policy file's would be: the
/// file, the line, the key, and what is expected.
#[test]
fn a_bad_cases_file_names_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.toml");
    let wasm = plugin("pool-suffix");
    for (text, expected) in [
        (
            "[[case]]\nname = \"x\"\nhook = \"rename\"\nexpect = \"keep\"\n",
            "line 3, key case.hook: unknown variant `rename`, expected one of `driver-name`, `versions`, `failure`, `endpoint`",
        ),
        (
            "[[case]]\nname = \"x\"\nhook = \"driver-name\"\nexpected = \"keep\"\n",
            "line 4, key case.expected: unknown field `expected`",
        ),
        (
            "[[case]]\nname = \"x\"\nhook = \"driver-name\"\n",
            "key case: missing field `expect`",
        ),
        (
            "# nothing\n",
            "has no cases: add one or more [[case]] tables",
        ),
    ] {
        std::fs::write(&cases, text).unwrap();
        let (code, out, err) = tool(&[
            "plugin",
            "test",
            cases.to_str().unwrap(),
            "--plugin",
            wasm.to_str().unwrap(),
        ]);
        assert_eq!(code, 1, "{out}\n{err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with(&format!("error: cases file {}", cases.display()))
                && first.contains(expected),
            "expected {expected:?} in the first line: {err}"
        );
    }
}

/// `plugin bench` times every case that loads, per call, and per hook:
/// p50 <= p99, instantiation and the call apart, in µs.
#[test]
fn bench_reports_p50_and_p99_per_case_and_per_hook() {
    plugin("pool-suffix"); // builds the plugins workspace
    let cases =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/examples/pool-suffix/cases.toml");
    let (code, out, err) = tool(&[
        "plugin",
        "bench",
        cases.to_str().unwrap(),
        "--iterations",
        "5",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].split_whitespace().collect::<Vec<_>>()
            == [
                "case",
                "hook",
                "p50",
                "µs",
                "p99",
                "µs",
                "set-up",
                "instantiate",
                "call",
                "rest",
                "memory",
                "KiB"
            ],
        "{out}"
    );
    let figures = |line: &str| -> Vec<f64> {
        line.split_whitespace()
            .rev()
            .take(7)
            .map(|f| {
                f.parse()
                    .unwrap_or_else(|_| panic!("not a figure in {line:?}"))
            })
            .collect()
    };
    let timed: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("driver-name") && !l.contains("skipped"))
        .collect();
    assert_eq!(timed.len(), 4, "three cases and the hook's row: {out}");
    for line in &timed {
        let [memory, rest, call, instantiate, setup, p99, p50] = figures(line)[..] else {
            unreachable!()
        };
        assert!(0.0 < p50 && p50 <= p99, "{line}");
        assert!(instantiate > 0.0 && call > 0.0, "{line}");
        assert!(setup > 0.0 && rest > 0.0, "{line}");
        // A Rust plugin's memory: its 64 KiB stack, data and heap.
        assert!((64.0..4096.0).contains(&memory), "{line}");
    }
    assert!(
        timed[2].contains("(refused)"),
        "the registrar refuses a name past 63 characters: {out}"
    );
    assert!(timed[3].starts_with("all driver-name cases"), "{out}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with("skipped: the plugin does not load with these settings"))
            .count(),
        2,
        "{out}"
    );
}
