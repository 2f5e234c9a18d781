#![cfg(feature = "wasm")]
//! Policy plugins: real components built from `plugins/` (and, for malformed
//! inputs, written as WAT) loaded into the real host, in-process and through
//! the registrar binary as the kubelet stand-in sees it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use csi_node_driver_registrar::testing::Metrics;
use csi_node_driver_registrar::testing::PolicyFile;
use csi_node_driver_registrar::testing::{
    Context, DefaultPolicy, Failure, FailureAction, Policy, wasm,
};
use csi_node_driver_registrar::testing::{
    DriverSpec, FakeDriver, FakeKubelet, KubeletBehaviour, wait_until,
};

const DRIVER: &str = "hostpath.csi.k8s.io";

fn ctx() -> Context {
    Context {
        node_name: "node-a1".into(),
        driver_name: DRIVER.into(),
        driver_version: "1.2.3".into(),
        csi_address: "unix:///csi/csi.sock".into(),
        kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath/csi.sock".into(),
        plugin_registration_path: "/registration".into(),
    }
}

fn load(dir: &Path, toml: &str) -> Result<csi_node_driver_registrar::testing::Chain, String> {
    let file = write_policy(dir, toml);
    let cfg = PolicyFile::from_file(&file).map_err(|e| e.to_string())?;
    wasm::load_chain(&cfg, Arc::new(Metrics::new())).map_err(|e| e.to_string())
}

fn misbehave(action: &str, extra: &str) -> String {
    plugin_entry(
        "m",
        &plugin("misbehave"),
        &format!("{extra}\n[plugin.settings]\ndo = \"{action}\"\n"),
    )
}

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

#[test]
fn load_errors_speak_the_authors_language() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // A wrong pin.
    let pool = plugin("pool-suffix");
    let toml = format!(
        "[[plugin]]\nid = \"p\"\npath = \"{}\"\nsha256 = \"{}\"\n[plugin.settings]\nsuffix = \"-a\"\n",
        pool.display(),
        "00".repeat(32)
    );
    let err = load(d, &toml).unwrap_err();
    assert!(
        err.contains(&format!(
            "sha256 is {}, but the policy file pins 0000",
            sha256_hex(&pool)
        )),
        "{err}"
    );
    assert!(
        err.contains("ship the pinned file or update the pin"),
        "{err}"
    );

    // Settings the plugin refuses, and settings of the wrong type.
    let err = load(
        d,
        &plugin_entry("p", &pool, "[plugin.settings]\nsuffix = \"a/b\""),
    )
    .unwrap_err();
    assert!(
        err.contains("the plugin refused its settings: suffix \"a/b\" contains '/'"),
        "{err}"
    );
    let err = load(
        d,
        &plugin_entry("p", &pool, "[plugin.settings]\nsufix = \"-a\""),
    )
    .unwrap_err();
    assert!(
        err.contains("invalid settings for pool-suffix: unknown field `sufix`"),
        "{err}"
    );

    // A hooks filter naming a hook the component does not export.
    let err = load(
        d,
        &plugin_entry(
            "p",
            &pool,
            "hooks = [\"failure\"]\n[plugin.settings]\nsuffix = \"-a\"",
        ),
    )
    .unwrap_err();
    assert!(
        err.contains(
            "hooks lists \"failure\" but the component does not export csi-registrar:policy/failure@0.1.0; it exports driver-name"
        ),
        "{err}"
    );

    // A missing file.
    let err = load(
        d,
        &format!(
            "[[plugin]]\nid = \"p\"\npath = \"{}/nope.wasm\"\nallow_unpinned = true\n",
            d.display()
        ),
    )
    .unwrap_err();
    assert!(
        err.contains("nope.wasm, policy file ")
            && err.contains("policy.toml line 3): cannot read the file: No such file"),
        "{err}"
    );
}

fn wat_plugin(dir: &Path, name: &str, wat: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    path
}

#[test]
fn a_component_for_another_wit_version_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_plugin(
        dir.path(),
        "future.wasm",
        r#"(component
             (instance $i)
             (export "csi-registrar:policy/plugin@0.2.0" (instance $i)))"#,
    );
    let err = load(dir.path(), &plugin_entry("future", &path, "")).unwrap_err();
    assert!(
        err.contains("it exports csi-registrar:policy/plugin@0.2.0, but this registrar implements csi-registrar:policy@0.1.0"),
        "{err}"
    );
    assert!(err.contains("rebuild the plugin against the wit/"), "{err}");
}

#[test]
fn a_component_without_the_plugin_interface_is_not_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_plugin(dir.path(), "other.wasm", "(component)");
    let err = load(dir.path(), &plugin_entry("other", &path, "")).unwrap_err();
    assert!(
        err.contains("does not export csi-registrar:policy/plugin@0.1.0"),
        "{err}"
    );
}

#[test]
fn a_core_module_or_random_bytes_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let core = wat_plugin(dir.path(), "core.wasm", "(module)");
    let err = load(dir.path(), &plugin_entry("core", &core, "")).unwrap_err();
    assert!(
        err.contains(
            "this is a core WebAssembly module, not a component: build for the wasm32-wasip2 target"
        ),
        "{err}"
    );
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"#!/bin/sh\necho hi\n").unwrap();
    let err = load(dir.path(), &plugin_entry("junk", &junk, "")).unwrap_err();
    assert!(err.contains("not a WebAssembly binary"), "{err}");
}

#[test]
fn compiled_components_are_cached_and_a_bad_cache_entry_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let toml = format!(
        "{}{}",
        cached_policy(dir.path(), &cache),
        plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        )
    );
    load(dir.path(), &toml).unwrap();
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].extension().is_some_and(|e| e == "cwasm"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700
    );

    // A second load uses the entry as it is.
    let before = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().modified().unwrap(),
        before
    );

    // A corrupt entry is discarded and rewritten, never fatal. (Replaced by
    // rename, as the registrar itself writes: a live component maps the old
    // file, and truncating a mapped file in place would fault.)
    drop(chain);
    let garbage = cache.join("garbage.tmp");
    std::fs::write(&garbage, b"garbage").unwrap();
    std::fs::rename(&garbage, &entries[0]).unwrap();
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_ne!(std::fs::read(&entries[0]).unwrap(), b"garbage");
}

#[test]
fn a_cache_dir_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let toml = format!(
        "{}{}",
        cached_policy(dir.path(), &cache),
        plugin_entry(
            "p",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-a\""
        )
    );
    let chain = load(dir.path(), &toml).unwrap();
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "nothing written or read there"
    );
}

// End to end: the registrar binary, the driver and kubelet stand-ins.

#[tokio::test]
async fn every_start_up_hook_changes_what_the_kubelet_sees() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    // This node's kubelet sees the driver socket under another root dir.
    let host_root = sb.dir.path().join("node-a1");
    std::fs::create_dir(&host_root).unwrap();
    std::os::unix::fs::symlink(&sb.csi, host_root.join("csi.sock")).unwrap();
    let toml = format!(
        "{}{}{}",
        plugin_entry(
            "suffix",
            &plugin("pool-suffix"),
            "[plugin.settings]\nsuffix = \"-pool-a\""
        ),
        plugin_entry(
            "versions",
            &plugin("versions"),
            "[plugin.settings]\nversions = [\"1.1.0\"]"
        ),
        plugin_entry(
            "endpoint",
            &plugin("endpoint-template"),
            &format!(
                "[plugin.settings]\ntemplate = \"{}/{{node}}/{{file}}\"",
                sb.dir.path().display()
            )
        ),
    );
    let policy = write_policy(sb.dir.path(), &toml);
    let registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    let socket = sb.socket("hostpath.csi.k8s.io-pool-a");
    assert!(appears(&socket).await, "log:\n{}", registrar.log_text());
    let kubelet = FakeKubelet::default();
    let attempt = kubelet.register(&socket).await.unwrap();
    assert_eq!(attempt.info.name, "hostpath.csi.k8s.io-pool-a");
    assert_eq!(attempt.info.supported_versions, vec!["1.1.0"]);
    assert_eq!(
        attempt.info.endpoint,
        host_root.join("csi.sock").display().to_string()
    );
    assert!(attempt.sent.plugin_registered, "{:?}", attempt.sent);
    assert!(kubelet.is_registered("hostpath.csi.k8s.io-pool-a"));
    assert_eq!(registrar.stop().await, 0);
    assert!(!socket.exists());
}

#[tokio::test]
async fn failure_hook_retry_recreates_the_socket_then_exits_with_its_code() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let toml = format!(
        "[policy]\nmin_retry_ms = 10\n{}",
        plugin_entry(
            "retry",
            &plugin("retry-backoff"),
            "[plugin.settings]\ninitial_delay_ms = 20\nmax_attempts = 3\nexit_code = 7"
        )
    );
    let policy = write_policy(sb.dir.path(), &toml);
    let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    let socket = sb.socket(DRIVER);
    let kubelet = FakeKubelet::new(KubeletBehaviour {
        refuse_with: Some("error updating Node object: forbidden".into()),
    });
    for attempt in 1..=3 {
        // Each retry removes the socket and listens anew: the kubelet's Remove + Create.
        assert!(
            wait_until(PATIENCE, || registrar
                .log_text()
                .matches("Registration Server started")
                .count()
                == attempt)
            .await,
            "attempt {attempt}: no new socket; log:\n{}",
            registrar.log_text()
        );
        assert!(appears(&socket).await);
        let a = kubelet.register(&socket).await.unwrap();
        assert!(!a.sent.plugin_registered);
        assert_eq!(a.notify_replied, Ok(()));
    }
    assert_eq!(registrar.exit_code().await, 7);
    assert!(!socket.exists());
    let log = registrar.log_text();
    assert_eq!(
        log.matches("re-creating the registration socket after a delay")
            .count(),
        2,
        "{log}"
    );
    assert!(
        log.contains("giving up after 3 refusals"),
        "the plugin's own log line: {log}"
    );
}

#[tokio::test]
async fn monitor_mode_logs_but_does_not_apply() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let toml = plugin_entry(
        "suffix",
        &plugin("pool-suffix"),
        "mode = \"monitor\"\n[plugin.settings]\nsuffix = \"-x\"",
    );
    let policy = write_policy(sb.dir.path(), &toml);
    let registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "log:\n{}",
        registrar.log_text()
    );
    assert!(
        registrar
            .log_text()
            .contains("monitor mode: decision logged, not applied")
    );
    assert!(
        registrar.log_text().contains("hostpath.csi.k8s.io-x"),
        "the decision is in the log"
    );
    assert_eq!(registrar.stop().await, 0);
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

#[tokio::test]
async fn files_that_are_not_files_are_refused_at_once_naming_file_and_line() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let fifo = sb.dir.path().join("plugin.wasm");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (std::path::Path::new("/dev/zero"), "a device"),
    ] {
        let toml = format!(
            "\n[[plugin]]\nid = \"x\"\npath = \"{}\"\nallow_unpinned = true\n",
            path.display()
        );
        let policy = write_policy(sb.dir.path(), &toml);
        let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
        assert_eq!(registrar.exit_code().await, 1);
        let log = registrar.log_text();
        let line = log
            .lines()
            .find(|l| l.starts_with('E'))
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            line.contains(&format!(
                "policy plugin \\\"x\\\" ({}, policy file {} line 4): cannot read the file: it is {kind}, not a regular file",
                path.display(),
                policy.display()
            )),
            "{line}"
        );
    }
    // The policy file itself.
    let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", fifo.display())]);
    assert_eq!(registrar.exit_code().await, 1);
    assert!(
        registrar
            .log_text()
            .contains("it is a FIFO, not a regular file"),
        "{}",
        registrar.log_text()
    );
}

#[tokio::test]
async fn a_failing_plugin_stops_start_up_or_is_skipped_as_configured() {
    // on_error = "fail": the registrar refuses to start, naming plugin and hook.
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let policy = write_policy(
        sb.dir.path(),
        &misbehave("loop", "timeout_ms = 30\nhooks = [\"driver-name\"]"),
    );
    let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains(r#"policy plugin \"m\", hook driver-name: deadline of 30ms exceeded"#),
        "{log}"
    );
    assert_eq!(std::fs::read_dir(&sb.registry).unwrap().count(), 0);

    // on_error = "skip": it registers with what the chain had.
    let policy = write_policy(
        sb.dir.path(),
        &misbehave(
            "loop",
            "timeout_ms = 30\non_error = \"skip\"\nhooks = [\"driver-name\"]",
        ),
    );
    let registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "log:\n{}",
        registrar.log_text()
    );
    assert!(
        FakeKubelet::default()
            .register(&sb.socket(DRIVER))
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert!(
        registrar
            .log_text()
            .contains(r#"on_error = \"skip\": going on without it"#),
        "{}",
        registrar.log_text()
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn plugin_logs_and_output_reach_the_registrar_log() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let policy = write_policy(
        sb.dir.path(),
        &misbehave("escape", "hooks = [\"driver-name\"]"),
    );
    let registrar = Process::spawn(
        &sb,
        &[
            format!("--policy-config={}", policy.display()),
            "-v=4".into(),
        ],
    );
    assert!(
        appears(&sb.socket("file-false.env-false.net-false.args-false")).await,
        "{}",
        registrar.log_text()
    );
    let log = registrar.log_text();
    assert!(
        log.contains(
            r#""driver-name hook called with hostpath.csi.k8s.io" plugin="m" hook="driver-name""#
        ),
        "host-log line, tagged with plugin and hook: {log}"
    );
    assert!(
        log.contains("misbehave: escape attempt: file=false"),
        "captured stdout: {log}"
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn a_bad_policy_file_names_file_line_and_key() {
    let sb = Sandbox::new();
    let policy = write_policy(
        sb.dir.path(),
        "[policy]\ncache_dir = \"/x\"\n\n[[plugin]]\nid = \"a\"\npath = \"a.wasm\"\ntimeout = 5\n",
    );
    let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains(&format!("policy file {}", policy.display())),
        "{log}"
    );
    assert!(
        log.contains("line 7") && log.contains("unknown field `timeout`"),
        "{log}"
    );
}

#[tokio::test]
async fn sighup_reloads_the_policy_and_keeps_the_last_good_one() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let suffix = |s: &str| {
        plugin_entry(
            "suffix",
            &plugin("pool-suffix"),
            &format!("[plugin.settings]\nsuffix = \"{s}\""),
        )
    };
    let policy = write_policy(sb.dir.path(), &suffix("-a"));
    let registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy.display())]);
    let a = sb.socket("hostpath.csi.k8s.io-a");
    assert!(appears(&a).await, "{}", registrar.log_text());

    write_policy(sb.dir.path(), &suffix("-b"));
    registrar.signal(libc::SIGHUP);
    let b = sb.socket("hostpath.csi.k8s.io-b");
    assert!(appears(&b).await, "{}", registrar.log_text());
    assert!(wait_until(PATIENCE, || !a.exists()).await);
    assert_eq!(
        FakeKubelet::default().register(&b).await.unwrap().info.name,
        "hostpath.csi.k8s.io-b"
    );

    // A broken file: logged, counted, and the last good policy stays.
    write_policy(sb.dir.path(), "[[plugin]]\nid = \"x\"\n");
    registrar.signal(libc::SIGHUP);
    assert!(
        registrar
            .wait_log("Policy reload failed; keeping the last good policy")
            .await
    );
    assert!(
        registrar.log_text().contains("missing field `path`"),
        "{}",
        registrar.log_text()
    );
    assert!(b.exists());
    assert!(
        FakeKubelet::default()
            .register(&b)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert_eq!(registrar.stop().await, 0);
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
        },
        Context {
            driver_name: "x".repeat(63),
            node_name: "ip-10-0-0-1.ec2.internal".into(),
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
    assert_eq!(
        load_example("default-policy")
            .registration(&ctx())
            .unwrap()
            .name,
        DRIVER
    );
}

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
            .contains(&serde_json::json!("csi-registrar:policy/driver-name@0.1.0")),
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
                "does not export csi-registrar:policy/failure@0.1.0; it exports driver-name"
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
