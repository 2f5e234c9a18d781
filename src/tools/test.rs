//! `plugin test CASES.toml`: what a plugin must decide, stated as data and
//! checked through the registrar's own decision path (as `plugin run` does).
//!
//! ```toml
//! plugin = "../../target/wasm32-wasip2/release/pool_suffix.wasm"  # relative to this file
//!
//! [settings]                 # the plugin's settings for every case
//! suffix = "-pool-a"
//!
//! [context]                  # the registration context for every case
//! driver_name = "hostpath.csi.k8s.io"
//!
//! [[case]]
//! name = "appends the suffix"
//! hook = "driver-name"
//! expect = { rename = "hostpath.csi.k8s.io-pool-a" }
//!
//! [[case]]
//! name = "a name past 63 characters is refused"
//! hook = "driver-name"
//! current = "a-very-long-driver-name-that-is-already-close-to-the-limit.io"
//! expect = { error = "the CSI spec allows at most 63" }
//! ```
//!
//! A case may set its own `settings` (replacing the file's) and `context`
//! (over the file's); `current` (driver-name, endpoint) or `versions`
//! (versions); `error`, `attempt` and `elapsed_ms` (failure). `expect` is the
//! decision as `plugin run` shows it (`"keep"`, `{ rename = … }`,
//! `{ replace = … }`, `{ supported_versions = […] }`, `{ exit = N }`,
//! `{ retry = MS }`, `"ignore"`, `"defer"`), or `{ error = "…" }`: a refusal
//! (at load or from the call) whose reason contains that text.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Deserialize;

use super::author::{self, HookInput};
use crate::policy::file::PluginConfig;
use crate::policy::read::{MAX_POLICY_FILE, read_regular_file};
use crate::policy::wasm::Host;
use crate::policy::wasm::cache::CacheKey;
use crate::policy::{Context, Failure, Hook};
use crate::toml_file;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    plugin: Option<PathBuf>,
    #[serde(default)]
    settings: toml::Table,
    #[serde(default)]
    context: toml::Table,
    #[serde(default, rename = "case")]
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    hook: Hook,
    settings: Option<toml::Table>,
    #[serde(default)]
    context: toml::Table,
    current: Option<String>,
    #[serde(default)]
    versions: Vec<String>,
    error: Option<String>,
    attempt: Option<u32>,
    elapsed_ms: Option<u64>,
    expect: toml::Value,
}

/// A case's outcome: `Ok` passes; `Err` says what differs.
type Outcome = Result<(), String>;

pub(super) fn run(
    cases: &Path,
    plugin: Option<&Path>,
    junit: Option<&Path>,
) -> anyhow::Result<bool> {
    let file = read(cases)?;
    let wasm = plugin.map(Path::to_owned).or_else(|| {
        file.plugin
            .as_ref()
            .map(|p| cases.parent().unwrap_or(Path::new(".")).join(p))
    });
    let Some(wasm) = wasm else {
        anyhow::bail!(
            "{}: no plugin to test: set plugin = \"FILE.wasm\" at the top of the file, or pass --plugin FILE",
            cases.display()
        );
    };
    let host = author::host()?;
    // Every case loads the plugin anew, with its own settings; a cache of this
    // run compiles the component once (a Python one takes seconds).
    let cache = tempfile::Builder::new().prefix("plugin-test-").tempdir()?;
    let key_file = cache.path().join("key");
    std::fs::write(&key_file, CacheKey::generate()?)?;
    let entries = cache.path().join("entries");
    let key = CacheKey::read(&key_file, &entries).map_err(anyhow::Error::msg)?;
    let mut suite = TestSuite::new(cases.display().to_string());
    let (mut passed, mut failed) = (0, 0);
    for case in &file.cases {
        let started = std::time::Instant::now();
        let outcome = check(&host, (&entries, &key), &wasm, &file, case);
        let mut test_case = TestCase::new(
            case.name.clone(),
            match &outcome {
                Ok(()) => TestCaseStatus::success(),
                Err(diff) => {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status.set_message(diff.clone());
                    status
                }
            },
        );
        test_case.set_classname(case.hook.as_str());
        test_case.set_time(started.elapsed());
        suite.add_test_case(test_case);
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("PASS  {}", case.name);
            }
            Err(diff) => {
                failed += 1;
                println!("FAIL  {}: {diff}", case.name);
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if let Some(junit) = junit {
        let mut report = Report::new("plugin test");
        report.add_test_suite(suite);
        let xml = report.to_string()?;
        std::fs::write(junit, xml)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", junit.display()))?;
    }
    Ok(failed == 0)
}

/// Reads and checks the cases file; errors name the file, the line and the key.
fn read(path: &Path) -> anyhow::Result<CasesFile> {
    let bytes = read_regular_file(path, MAX_POLICY_FILE)
        .map_err(|e| anyhow::anyhow!("cannot read cases file {}: {e}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("cases file {} is not UTF-8", path.display()))?;
    let file: CasesFile = toml_file::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "cases file {}, line {}{}: {}",
            path.display(),
            e.line,
            e.key.map(|k| format!(", key {k}")).unwrap_or_default(),
            e.message
        )
    })?;
    if file.cases.is_empty() {
        anyhow::bail!(
            "cases file {} has no cases: add one or more [[case]] tables (name, hook, expect)",
            path.display()
        );
    }
    Ok(file)
}

/// Runs one case through the registrar's decision path and compares.
fn check(
    host: &Arc<Host>,
    cache: (&Path, &CacheKey),
    wasm: &Path,
    file: &CasesFile,
    case: &Case,
) -> Outcome {
    let settings = case.settings.as_ref().unwrap_or(&file.settings);
    let cfg = PluginConfig {
        settings_json: serde_json::to_string(settings).map_err(|e| e.to_string())?,
        ..author::unpinned(wasm)
    };
    let ctx = context(&file.context, &case.context)?;
    let input = HookInput {
        current: case.current.clone(),
        versions: case.versions.clone(),
        failure: (case.hook == Hook::Failure).then(|| Failure {
            error: case
                .error
                .clone()
                .unwrap_or_else(|| author::EXAMPLE_REFUSAL.into()),
            attempt: case.attempt.unwrap_or(1),
            elapsed: Duration::from_millis(case.elapsed_ms.unwrap_or(0)),
        }),
    };
    let got = author::chain_of(host, cfg, case.hook, Some(cache))
        .map_err(|e| e.to_string())
        .and_then(|chain| {
            author::decide(&chain, case.hook, &ctx, input).map_err(|e| e.to_string())
        });
    compare(&case.expect, got)
}

/// The example context, with the file's `[context]` and then the case's over it.
fn context(file: &toml::Table, case: &toml::Table) -> Result<Context, String> {
    let mut merged = toml::Table::try_from(author::example_context()).map_err(|e| e.to_string())?;
    merged.extend(file.clone());
    merged.extend(case.clone());
    merged
        .try_into()
        .map_err(|e: toml::de::Error| format!("context: {}", e.message()))
}

/// `expect` against what the registrar decided (or why it refused).
fn compare(expect: &toml::Value, got: Result<serde_json::Value, String>) -> Outcome {
    let wanted_error = expect
        .as_table()
        .filter(|t| t.len() == 1)
        .and_then(|t| t.get("error"))
        .and_then(toml::Value::as_str);
    match (wanted_error, got) {
        (Some(want), Err(refused)) if refused.contains(want) => Ok(()),
        (Some(want), Err(refused)) => Err(format!(
            "expected a refusal containing {want:?}, got the refusal {refused:?}"
        )),
        (Some(want), Ok(out)) => Err(format!(
            "expected a refusal containing {want:?}, got the decision {}",
            out["decision"]
        )),
        (None, Err(refused)) => Err(format!(
            "expected the decision {}, got the refusal {refused:?}",
            shown(expect)
        )),
        (None, Ok(out)) => {
            let want = serde_json::to_value(expect).map_err(|e| e.to_string())?;
            if out["decision"] == want {
                Ok(())
            } else {
                Err(format!(
                    "expected the decision {want}, got {}",
                    out["decision"]
                ))
            }
        }
    }
}

fn shown(v: &toml::Value) -> String {
    serde_json::to_value(v).map_or_else(|_| v.to_string(), |j| j.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_and_refusals_are_compared_with_what_differs() {
        let rename: toml::Value =
            toml::from_str::<toml::Table>("e = { rename = \"a-x\" }").unwrap()["e"].clone();
        assert_eq!(
            compare(&rename, Ok(json!({ "decision": { "rename": "a-x" } }))),
            Ok(())
        );
        assert_eq!(
            compare(&rename, Ok(json!({ "decision": "keep" }))),
            Err("expected the decision {\"rename\":\"a-x\"}, got \"keep\"".into())
        );
        assert_eq!(
            compare(&rename, Err("deadline exceeded".into())),
            Err(
                "expected the decision {\"rename\":\"a-x\"}, got the refusal \"deadline exceeded\""
                    .into()
            )
        );
        let refused: toml::Value =
            toml::from_str::<toml::Table>("e = { error = \"at most 63\" }").unwrap()["e"].clone();
        assert_eq!(
            compare(&refused, Err("the CSI spec allows at most 63".into())),
            Ok(())
        );
        assert_eq!(
            compare(&refused, Ok(json!({ "decision": "keep" }))),
            Err("expected a refusal containing \"at most 63\", got the decision \"keep\"".into())
        );
    }

    #[test]
    fn the_case_context_goes_over_the_files() {
        let file: toml::Table =
            toml::from_str("driver_name = \"a.csi.io\"\nnode_name = \"n1\"").unwrap();
        let case: toml::Table = toml::from_str("node_name = \"n2\"").unwrap();
        let ctx = context(&file, &case).unwrap();
        assert_eq!(
            (ctx.driver_name.as_str(), ctx.node_name.as_str()),
            ("a.csi.io", "n2")
        );
        let bad: toml::Table = toml::from_str("node = \"n2\"").unwrap();
        assert!(
            context(&file, &bad)
                .unwrap_err()
                .contains("unknown field `node`")
        );
    }
}
