//! End to end with plugins: the registrar binary or the in-process registrar,
//! the driver and kubelet stand-ins, over real unix sockets.

mod common;

use common::*;
use csi_node_driver_registrar::testing::{
    DriverSpec, FakeDriver, FakeKubelet, Harness, KubeletBehaviour, wait_until,
};

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
    let mut config = sb.config();
    config.policy_config = Some(write_policy(sb.dir.path(), &toml));
    let mut registrar = Harness::start(config);
    registrar
        .wait_for("the renamed socket", serving("hostpath.csi.k8s.io-pool-a"))
        .await;
    let socket = sb.socket("hostpath.csi.k8s.io-pool-a");
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
    assert_eq!(registrar.stop().await.unwrap(), 0);
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
    let mut config = sb.config();
    config.policy_config = Some(write_policy(sb.dir.path(), &toml));
    let mut registrar = Harness::start(config);
    let socket = sb.socket(DRIVER);
    let kubelet = FakeKubelet::new(KubeletBehaviour {
        refuse_with: Some("error updating Node object: forbidden".into()),
    });
    for attempt in 1..=3 {
        // Each retry removes the socket and listens anew: the kubelet's Remove + Create.
        registrar
            .wait_for(&format!("socket {attempt}"), |s| {
                s.serving && s.sockets_created == attempt
            })
            .await;
        let a = kubelet.register(&socket).await.unwrap();
        assert!(!a.sent.plugin_registered);
        assert_eq!(a.notify_replied, Ok(()));
    }
    let metrics = registrar.metrics();
    assert_eq!(registrar.exited().await.unwrap(), 7);
    assert!(!socket.exists());
    assert!(
        metrics.contains("csi_registrar_registration_socket_creations_total{reason=\"retry\"} 2"),
        "{metrics}"
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
    registers_saying(
        registrar,
        &sb,
        r#"on_error = \"skip\": going on without it"#,
    )
    .await;
}

/// Under an address-space limit of 4 GiB the engine's instance pool cannot
/// be reserved. A plugin that must run stops start-up with the limit to
/// raise; one with `on_error = "skip"` is left out, and the driver registers.
#[tokio::test]
async fn the_engine_reserves_what_the_caps_need_and_one_that_cannot_start_says_what_to_change() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    // A node's container under an address-space limit of 4 GiB.
    let limit = 4 << 30;
    let suffix = |extra: &str| {
        plugin_entry(
            "suffix",
            &plugin("pool-suffix"),
            &format!("{extra}\n[plugin.settings]\nsuffix = \"-pool-a\""),
        )
    };
    // At the default cap (32 MiB), the engine's slots fit: the plugin runs.
    let policy = write_policy(sb.dir.path(), &suffix(""));
    let args = [format!("--policy-config={}", policy.display())];
    let registrar = Process::spawn_limited(&sb, &args, limit);
    let renamed = sb.socket("hostpath.csi.k8s.io-pool-a");
    assert!(appears(&renamed).await, "{}", registrar.log_text());
    assert!(kubelet_registers(&renamed).await);
    assert_eq!(registrar.stop().await, 0);

    // A cap of 4 GiB makes every memory slot 4 GiB: the engine cannot start.
    let policy = write_policy(sb.dir.path(), &suffix("memory_limit_mib = 4096"));
    let args = [format!("--policy-config={}", policy.display())];
    let mut registrar = Process::spawn_limited(&sb, &args, limit);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains("cannot start the WebAssembly engine: ")
            && log.contains(
                "memory slots of 4128 MiB each, for memory_limit_mib up to 4096 MiB); raise or remove the process's address-space limit (ulimit -v, RLIMIT_AS), or lower memory_limit_mib"
            ),
        "{log}"
    );
    assert_eq!(std::fs::read_dir(&sb.registry).unwrap().count(), 0);

    // A plugin that may be skipped is: the built-in policy registers.
    let policy = write_policy(
        sb.dir.path(),
        &suffix("memory_limit_mib = 4096\non_error = \"skip\""),
    );
    let args = [format!("--policy-config={}", policy.display())];
    let registrar = Process::spawn_limited(&sb, &args, limit);
    registers_saying(
        registrar,
        &sb,
        "going on without them, with the built-in policy",
    )
    .await;
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
        log.contains(&format!(
            "policy file {}, line 7, key plugin.timeout: unknown field `timeout`, expected one of",
            policy.display()
        )),
        "file, line and key on one line: {log}"
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
        registrar
            .log_text()
            .contains("plugin \\\"x\\\" has no component: give path"),
        "{}",
        registrar.log_text()
    );
    assert!(b.exists());
    assert!(kubelet_registers(&b).await);
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn a_versions_plugin_is_checked_as_the_kubelet_checks_the_plugin_type() {
    let sb = Sandbox::new();
    let policy = |versions: &str| {
        write_policy(
            sb.dir.path(),
            &plugin_entry(
                "versions",
                &plugin("versions"),
                &format!("[plugin.settings]\nversions = {versions}"),
            ),
        )
    };
    let dra = |policy: &std::path::Path| {
        vec![
            "--plugin-type=DRAPlugin".to_owned(),
            "--driver-name=gpu.example.com".to_owned(),
            format!(
                "--kubelet-registration-path={}",
                sb.dir.path().join("dra.sock").display()
            ),
            format!("--plugin-registration-path={}", sb.registry.display()),
            format!("--policy-config={}", policy.display()),
        ]
    };

    // Semantic versions for a DRA driver: refused at start-up, with the fix.
    let mut registrar = Process::spawn_raw(sb.dir.path(), &dra(&policy(r#"["1.0.0"]"#)));
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains(r#"policy plugin \"versions\", hook versions: invalid decision: none of the supported versions"#)
            && log.contains("is a DRA gRPC service the kubelet can use (v1.DRAPlugin or v1beta1.DRAPlugin)")
            && log.contains(r#"semantic versions such as \"1.0.0\" are for CSI drivers"#),
        "{log}"
    );

    // Service names for a CSI driver: refused too.
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let csi_policy = policy(r#"["v1.DRAPlugin"]"#);
    let mut registrar = Process::spawn(&sb, &[format!("--policy-config={}", csi_policy.display())]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains("these are DRA gRPC service names: a DRA driver is registered with --plugin-type=DRAPlugin"),
        "{log}"
    );
    assert_eq!(std::fs::read_dir(&sb.registry).unwrap().count(), 0);

    // DRA services for a DRA driver: advertised.
    let registrar = Process::spawn_raw(sb.dir.path(), &dra(&policy(r#"["v1beta1.DRAPlugin"]"#)));
    let socket = sb.socket("gpu.example.com");
    assert!(appears(&socket).await, "log:\n{}", registrar.log_text());
    assert!(
        registrar
            .wait_log(r#"versions="[\"v1beta1.DRAPlugin\"]""#)
            .await,
        "{}",
        registrar.log_text()
    );
    assert_eq!(registrar.stop().await, 0);
}

/// The driver's socket appears, the kubelet registers it, the log says
/// `words`, and the registrar then stops cleanly.
async fn registers_saying(registrar: Process, sb: &Sandbox, words: &str) {
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "log:\n{}",
        registrar.log_text()
    );
    assert!(kubelet_registers(&sb.socket(DRIVER)).await);
    let log = registrar.log_text();
    assert!(log.contains(words), "{log}");
    assert_eq!(registrar.stop().await, 0);
}
