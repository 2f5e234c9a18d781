//! Policy plugins built from `plugins/`, loaded into the real host and run
//! through the registrar's own chain, in-process: deadlines, memory caps,
//! traps, invalid answers, on_error, monitor mode, pipelines, and the examples.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use csi_node_driver_registrar::PluginType;
use csi_node_driver_registrar::testing::{
    Context, DefaultPolicy, Failure, FailureAction, Metrics, Policy, PolicyFile, wasm,
};

fn registration_error(action: &str, extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let chain = load(dir.path(), &misbehave(action, extra)).unwrap();
    chain.registration(&ctx()).unwrap_err().to_string()
}

#[test]
fn a_plugin_that_loops_forever_hits_the_deadline() {
    let err = registration_error("loop", "timeout_ms = 50");
    assert_eq!(
        err,
        "policy plugin \"m\", hook driver-name: deadline of 50ms exceeded"
    );
}

#[test]
fn a_plugin_that_allocates_without_bound_hits_the_memory_cap() {
    let err = registration_error("alloc", "memory_limit_mib = 16");
    assert_eq!(
        err,
        "policy plugin \"m\", hook driver-name: memory limit of 16 MiB exceeded (the instance asked for 17 MiB in all)"
    );
}

#[test]
fn a_trap_is_contained_and_named() {
    let err = registration_error("trap", "");
    // Plugin, hook and cause first; the wasm backtrace is for the debug log.
    assert!(
        err.starts_with("policy plugin \"m\", hook driver-name: trapped: wasm trap: wasm `unreachable` instruction executed (its last output: "),
        "{err}"
    );
    assert!(err.contains("misbehave: trap requested"), "{err}");
    assert!(
        !err.contains("wasm function") && !err.contains('\n'),
        "{err}"
    );
}

#[test]
fn a_policy_error_is_reported_with_its_text() {
    let err = registration_error("error", "");
    assert_eq!(
        err,
        "policy plugin \"m\", hook driver-name: the plugin reported an error: misbehave: error requested"
    );
}

#[test]
fn invalid_decisions_are_refused_by_the_host() {
    let err = registration_error("invalid", "hooks = [\"driver-name\"]");
    assert!(
        err.contains(
            "hook driver-name: invalid decision: driver name \"../../etc/evil\" contains '/'"
        ),
        "{err}"
    );
    let err = registration_error("invalid", "hooks = [\"versions\"]");
    assert!(
        err.contains("hook versions: invalid decision: supported versions are empty"),
        "{err}"
    );
    let err = registration_error("invalid", "hooks = [\"endpoint\"]");
    assert!(
        err.contains("hook endpoint: invalid decision: endpoint \"relative/csi.sock\" is not an absolute path"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let chain = load(dir.path(), &misbehave("invalid", "hooks = [\"failure\"]")).unwrap();
    let failure = Failure {
        error: "refused".into(),
        attempt: 1,
        elapsed: Duration::ZERO,
    };
    let err = chain.on_failure(&ctx(), &failure).unwrap_err().to_string();
    assert!(
        err.contains("hook failure: invalid decision: exit(0) after a refusal"),
        "{err}"
    );
}

#[test]
fn the_sandbox_gives_no_files_environment_network_or_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let chain = load(
        dir.path(),
        &misbehave("escape", "hooks = [\"driver-name\"]"),
    )
    .unwrap();
    let reg = chain.registration(&ctx()).unwrap();
    assert_eq!(reg.name, "file-false.env-false.net-false.args-false");
}

#[test]
fn the_context_reaches_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let chain = load(dir.path(), &misbehave("echo", "hooks = [\"driver-name\"]")).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io.node-a1"
    );
}

#[test]
fn on_error_skip_goes_on_and_later_plugins_still_run() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}",
        misbehave("trap", "on_error = \"skip\""),
        plugin_entry(
            "suffix",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-b\""
        )
    );
    let chain = load(dir.path(), &toml).unwrap();
    let reg = chain.registration(&ctx()).unwrap();
    assert_eq!(reg.name, "hostpath.csi.k8s.io-b");
    assert_eq!(reg.supported_versions, vec!["1.0.0"]);
}

#[test]
fn hooks_chain_as_a_pipeline_in_toml_order() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{}{}{}",
        plugin_entry(
            "a",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        ),
        plugin_entry(
            "b",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-b\""
        ),
        plugin_entry(
            "v",
            &plugin("versions"),
            "[plugin.settings]\nversions = [\"1.1.0\", \"2.0.0\"]"
        ),
    );
    let reg = load(dir.path(), &toml)
        .unwrap()
        .registration(&ctx())
        .unwrap();
    assert_eq!(reg.name, "hostpath.csi.k8s.io-a-b");
    assert_eq!(reg.supported_versions, vec!["1.1.0", "2.0.0"]);
    assert_eq!(reg.endpoint, "/var/lib/kubelet/plugins/hostpath/csi.sock");
}

#[test]
fn failure_hook_retries_with_backoff_then_exits_and_clamps() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[policy]\nmin_retry_ms = 100\nmax_retry_ms = 1000\n{}",
        plugin_entry(
            "retry",
            &plugin("retry-backoff"),
            "[plugin.settings]\ninitial_delay_ms = 10\nfactor = 10\nmax_delay_ms = 100000\nmax_attempts = 4\nexit_code = 7"
        )
    );
    let chain = load(dir.path(), &toml).unwrap();
    let at = |attempt| {
        chain
            .on_failure(
                &ctx(),
                &Failure {
                    error: "x".into(),
                    attempt,
                    elapsed: Duration::ZERO,
                },
            )
            .unwrap()
    };
    assert_eq!(
        at(1),
        FailureAction::Retry(Duration::from_millis(100)),
        "10 ms clamped up to min_retry_ms"
    );
    assert_eq!(at(2), FailureAction::Retry(Duration::from_millis(100)));
    assert_eq!(
        at(3),
        FailureAction::Retry(Duration::from_millis(1000)),
        "1000 ms"
    );
    assert_eq!(at(4), FailureAction::Exit(7));
}

#[test]
fn all_defer_falls_back_to_upstream_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let chain = load(dir.path(), &misbehave("defer", "hooks = [\"failure\"]")).unwrap();
    let failure = Failure {
        error: "x".into(),
        attempt: 1,
        elapsed: Duration::ZERO,
    };
    assert_eq!(
        chain.on_failure(&ctx(), &failure).unwrap(),
        FailureAction::Exit(1)
    );
}

/// Plugin-controlled text is bounded before it reaches an error or a log line,
/// and an answer the kubelet could never take is refused when it is given.
#[test]
fn huge_plugin_answers_are_refused_and_shown_bounded() {
    for (action, hooks, rule) in [
        (
            "huge",
            "[\"driver-name\"]",
            "the CSI spec allows at most 63",
        ),
        (
            "huge",
            "[\"versions\"]",
            "at most 16 of at most 64 bytes each can be advertised",
        ),
        (
            "huge-error",
            "[\"driver-name\"]",
            "the plugin reported an error: misbehave: eeee",
        ),
    ] {
        let err = registration_error(
            action,
            &format!("hooks = {hooks}\ntimeout_ms = 900\nmemory_limit_mib = 512"),
        );
        assert!(
            err.contains(rule),
            "{action} {hooks}: {}",
            &err[..err.len().min(500)]
        );
        assert!(
            err.len() < 8 << 10,
            "{action} {hooks}: an error of {} bytes",
            err.len()
        );
        assert!(
            !err.contains('\n'),
            "{action}: a newline from the plugin reached the message"
        );
    }
}

/// A plugin in monitor mode never changes the outcome, whatever it does: a
/// trap, a timeout or an error in any hook, even with on_error = "fail", and
/// even a failure to load.
#[test]
fn a_monitor_mode_plugin_never_changes_the_outcome() {
    for action in ["trap", "loop", "error", "invalid"] {
        let dir = tempfile::tempdir().unwrap();
        let toml = misbehave(
            action,
            "mode = \"monitor\"\non_error = \"fail\"\ntimeout_ms = 50",
        );
        let chain = load(dir.path(), &toml).unwrap();
        let reg = chain
            .registration(&ctx())
            .unwrap_or_else(|e| panic!("{action}: {e}"));
        assert_eq!(reg, DefaultPolicy.registration(&ctx()).unwrap(), "{action}");
        let failure = Failure {
            error: "refused".into(),
            attempt: 1,
            elapsed: Duration::ZERO,
        };
        assert_eq!(
            chain.on_failure(&ctx(), &failure).unwrap(),
            DefaultPolicy.on_failure(&ctx(), &failure).unwrap(),
            "{action}"
        );
    }
    // Refusing its settings at load: the registrar starts without it.
    let dir = tempfile::tempdir().unwrap();
    let toml = plugin_entry(
        "m",
        &plugin("misbehave"),
        "mode = \"monitor\"\n[plugin.settings]\ndo = \"keep\"\nrefuse-settings = true\n",
    );
    let chain = load(dir.path(), &toml).unwrap();
    assert!(chain.plugin_ids().is_empty());
}

#[test]
fn the_default_policy_component_agrees_with_the_built_in_one() {
    use csi_node_driver_registrar::testing::DefaultPolicy;
    let dir = tempfile::tempdir().unwrap();
    let chain = load(
        dir.path(),
        &plugin_entry("default", &plugin("default-policy"), ""),
    )
    .unwrap();
    let contexts = [
        ctx(),
        Context {
            node_name: String::new(),
            driver_name: "a".into(),
            driver_version: String::new(),
            csi_address: "/csi/csi.sock".into(),
            kubelet_registration_path: "/var/lib/k0s/kubelet/plugins/a/csi.sock".into(),
            plugin_registration_path: "/var/lib/kubelet/plugins_registry".into(),
            ..ctx()
        },
        Context {
            driver_name: "x".repeat(63),
            node_name: "ip-10-0-0-1.ec2.internal".into(),
            ..ctx()
        },
        // A DRA driver: the plugin asks registrar-info and advertises its services.
        Context {
            driver_name: "gpu.example.com".into(),
            kubelet_registration_path: "/var/lib/kubelet/plugins/gpu.example.com/dra.sock".into(),
            plugin_type: PluginType::Dra,
            ..ctx()
        },
    ];
    for c in &contexts {
        assert_eq!(
            chain.registration(c).unwrap(),
            DefaultPolicy.registration(c).unwrap(),
            "{c:?}"
        );
        for attempt in [1, 2, 50] {
            let f = Failure {
                error: "RegisterPlugin error -- plugin registration failed with err: x".into(),
                attempt,
                elapsed: Duration::from_secs(u64::from(attempt)),
            };
            assert_eq!(
                chain.on_failure(c, &f).unwrap(),
                DefaultPolicy.on_failure(c, &f).unwrap()
            );
        }
    }
}

#[test]
fn example_policies_load_and_decide() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/examples");
    plugin("pool-suffix"); // builds them all
    let load_example = |name: &str| {
        let cfg = PolicyFile::from_file(&examples.join(name).join("policy.toml")).unwrap();
        wasm::load_chain(&cfg, Arc::new(Metrics::new())).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert_eq!(
        load_example("pool-suffix")
            .registration(&ctx())
            .unwrap()
            .name,
        "hostpath.csi.k8s.io-pool-a"
    );
    assert_eq!(
        load_example("versions")
            .registration(&ctx())
            .unwrap()
            .supported_versions,
        vec!["1.0.1"]
    );
    let endpoint = load_example("endpoint-template");
    assert_eq!(
        endpoint.registration(&ctx()).unwrap().endpoint,
        "/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock"
    );
    let k0s = Context {
        node_name: "k0s-worker-1".into(),
        ..ctx()
    };
    assert_eq!(
        endpoint.registration(&k0s).unwrap().endpoint,
        "/var/lib/k0s/kubelet/plugins/hostpath.csi.k8s.io/csi.sock"
    );
    let retry = load_example("retry-backoff");
    let at = |attempt| {
        retry
            .on_failure(
                &ctx(),
                &Failure {
                    error: "x".into(),
                    attempt,
                    elapsed: Duration::ZERO,
                },
            )
            .unwrap()
    };
    assert_eq!(at(1), FailureAction::Retry(Duration::from_secs(1)));
    assert_eq!(at(3), FailureAction::Retry(Duration::from_secs(4)));
    assert_eq!(at(8), FailureAction::Exit(1));
    // ignore-refusals: a refusal the kubelet retries is ignored; others, and
    // the fifth in a row, get the built-in exit 1.
    let ignore = load_example("ignore-refusals");
    let refused = |error: &str, attempt| {
        ignore
            .on_failure(
                &ctx(),
                &Failure {
                    error: error.into(),
                    attempt,
                    elapsed: Duration::ZERO,
                },
            )
            .unwrap()
    };
    let retried = "RegisterPlugin error -- plugin registration failed with err: error adding CSI driver node info: driverNodeID must not be empty";
    assert_eq!(refused(retried, 1), FailureAction::Ignore);
    assert_eq!(refused(retried, 5), FailureAction::Exit(1));
    assert_eq!(
        refused("plugin validation failed", 1),
        FailureAction::Exit(1)
    );
    assert_eq!(
        load_example("default-policy")
            .registration(&ctx())
            .unwrap()
            .name,
        DRIVER
    );
}
