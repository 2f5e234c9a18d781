//! `plugin test CASES.toml`: checks a plugin against a cases file (see
//! `cases`) through the registrar's own decision path, as `plugin run` does.

use std::path::Path;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::author;
use super::cases::{self, Case, CasesFile, Loader};

/// A case's outcome: `Ok` passes; `Err` says what differs.
type Outcome = Result<(), String>;

pub(super) fn run(
    sources: &author::Sources,
    cases: &Path,
    plugin: Option<&Path>,
    junit: Option<&Path>,
) -> anyhow::Result<bool> {
    let file = cases::read(cases)?;
    let loader = Loader::new(author::host()?, sources, file.plugin(cases, plugin)?)?;
    let mut suite = TestSuite::new(cases.display().to_string());
    let (mut passed, mut failed) = (0, 0);
    for case in &file.cases {
        let started = std::time::Instant::now();
        let outcome = check(&loader, &file, case);
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
                outln!("PASS  {}", case.name);
            }
            Err(diff) => {
                failed += 1;
                outln!("FAIL  {}: {diff}", case.name);
            }
        }
    }
    outln!("{passed} passed, {failed} failed");
    if let Some(junit) = junit {
        let mut report = Report::new("plugin test");
        report.add_test_suite(suite);
        let xml = report.to_string()?;
        std::fs::write(junit, xml)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", junit.display()))?;
    }
    Ok(failed == 0)
}

/// Runs one case through the registrar's decision path and compares.
fn check(loader: &Loader, file: &CasesFile, case: &Case) -> Outcome {
    let got = loader.prepare(file, case).and_then(|(chain, ctx, input)| {
        author::decide(&chain, case.hook, &ctx, input).map_err(|e| e.to_string())
    });
    compare(&case.expect, got)
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
}
