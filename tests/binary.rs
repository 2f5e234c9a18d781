//! The registrar binary, for what only the binary shows: exit codes, signals,
//! flags, the HTTP endpoints and upstream's log lines. Everything else runs
//! in-process (tests/socket.rs, tests/driver.rs, tests/backoff.rs).

mod common;

use std::time::Duration;

use common::*;
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver, FakeKubelet, KubeletBehaviour};

const DRIVER: &str = "hostpath.csi.k8s.io";

#[tokio::test]
async fn registers_like_upstream_and_cleans_up_on_sigterm() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Process::spawn(&sb, &[]);
    let socket = sb.socket(DRIVER);
    assert!(
        appears(&socket).await,
        "no socket; log:\n{}",
        registrar.log_text()
    );
    let kubelet = FakeKubelet::default();
    let attempt = kubelet.register(&socket).await.unwrap();
    assert_eq!(attempt.info.r#type, "CSIPlugin");
    assert_eq!(attempt.info.name, DRIVER);
    assert_eq!(
        attempt.info.endpoint,
        sb.csi.display().to_string(),
        "--kubelet-registration-path verbatim"
    );
    assert_eq!(attempt.info.supported_versions, vec!["1.0.0"]);
    assert_eq!(attempt.node_id.as_deref(), Some("node-1"));
    assert!(attempt.sent.plugin_registered, "{:?}", attempt.sent);
    assert_eq!(attempt.notify_replied, Ok(()));
    assert!(kubelet.is_registered(DRIVER));
    assert!(registrar.wait_log("PluginRegistered:true").await);

    assert_eq!(registrar.stop().await, 0);
    assert!(!socket.exists(), "SIGTERM removes the registration socket");
}

#[tokio::test]
async fn sigint_also_removes_the_socket() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Process::spawn(&sb, &[]);
    assert!(appears(&sb.socket(DRIVER)).await);
    registrar.signal(libc::SIGINT);
    assert_eq!(registrar.exit_code().await, 0);
    assert!(!sb.socket(DRIVER).exists());
}

#[tokio::test]
async fn gives_up_after_driver_wait_timeout() {
    let sb = Sandbox::new();
    let mut registrar = Process::spawn(&sb, &["--driver-wait-timeout=300ms".into()]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(log.contains("did not accept a connection within"), "{log}");
    assert!(
        log.contains(&sb.csi.display().to_string()),
        "names the socket: {log}"
    );
}

async fn refused_driver(spec: DriverSpec, expect: &str) {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let mut registrar = Process::spawn(&sb, &["--driver-wait-timeout=500ms".into()]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(log.contains(expect), "expected {expect:?} in:\n{log}");
    assert_eq!(
        std::fs::read_dir(&sb.registry).unwrap().count(),
        0,
        "nothing created"
    );
}

#[tokio::test]
async fn empty_driver_name_exits_1() {
    refused_driver(DriverSpec::named(""), "driver name is empty").await;
}

#[tokio::test]
async fn driver_name_breaking_csi_rules_exits_1() {
    refused_driver(
        DriverSpec::named("../escape"),
        "contains '/'; only alphanumerics, '-' and '.' are allowed (CSI naming rule)",
    )
    .await;
    refused_driver(
        DriverSpec::named(&"x".repeat(64)),
        "the CSI spec allows at most 63",
    )
    .await;
}

#[tokio::test]
async fn get_plugin_info_error_exits_1() {
    let mut spec = DriverSpec::named(DRIVER);
    spec.info_error = Some((
        tonic::Code::FailedPrecondition,
        "backend not configured".into(),
    ));
    refused_driver(spec, "backend not configured").await;
}

#[tokio::test]
async fn slow_get_plugin_info_times_out_with_timeout_flag() {
    let sb = Sandbox::new();
    let mut spec = DriverSpec::named(DRIVER);
    spec.info_delay = Duration::from_secs(30);
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let mut registrar = Process::spawn(
        &sb,
        &[
            "--timeout=200ms".into(),
            "--driver-wait-timeout=300ms".into(),
        ],
    );
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(
        log.contains("GetPluginInfo did not answer within 200ms"),
        "{log}"
    );
}

#[tokio::test]
async fn kubelet_refusal_gets_a_reply_then_exit_1_and_socket_removed() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Process::spawn(&sb, &[]);
    let socket = sb.socket(DRIVER);
    assert!(appears(&socket).await);
    let kubelet = FakeKubelet::new(KubeletBehaviour {
        refuse_with: Some("error updating CSINode object: conflict".into()),
    });
    let attempt = kubelet.register(&socket).await.unwrap();
    assert!(!attempt.sent.plugin_registered);
    assert_eq!(
        attempt.sent.error,
        "RegisterPlugin error -- plugin registration failed with err: error updating CSINode object: conflict"
    );
    // Upstream exits inside the handler and the kubelet never gets a reply.
    assert_eq!(
        attempt.notify_replied,
        Ok(()),
        "the registrar replies before acting"
    );
    assert_eq!(registrar.exit_code().await, 1);
    assert!(!socket.exists(), "the socket is removed on the way out");
    assert!(
        registrar
            .log_text()
            .contains("error updating CSINode object: conflict")
    );
}

#[tokio::test]
async fn healthz_and_readyz_follow_the_registration() {
    let sb = Sandbox::new();
    let port = free_port();
    let registrar = Process::spawn(&sb, &[format!("--http-endpoint=127.0.0.1:{port}")]);
    // No driver yet: alive, not ready.
    assert_eq!(
        http_until(port, "/healthz", 200).await,
        Some((200, "ok: waiting for the CSI driver".into()))
    );
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((503, "waiting for the CSI driver".into()))
    );
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    assert!(appears(&sb.socket(DRIVER)).await);
    assert_eq!(
        http_until(port, "/healthz", 200).await,
        Some((200, "ok".into()))
    );
    assert_eq!(
        http_until(port, "/readyz", 503).await,
        Some((503, "waiting for the kubelet to register the plugin".into()))
    );
    assert!(kubelet_registers(&sb.socket(DRIVER)).await);
    assert_eq!(
        http_until(port, "/readyz", 200).await,
        Some((200, "ok".into()))
    );
    let (code, metrics) = http_get(port, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    assert!(metrics.contains("csi_registrar_registered 1"), "{metrics}");
    assert!(
        metrics.contains("csi_registrar_kubelet_notifications_total{registered=\"true\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("csi_registrar_get_info_requests_total"),
        "{metrics}"
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn health_port_is_the_deprecated_spelling() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let port = free_port();
    let registrar = Process::spawn(&sb, &[format!("-health-port={port}")]);
    assert!(appears(&sb.socket(DRIVER)).await);
    assert_eq!(
        http_until(port, "/healthz", 200).await,
        Some((200, "ok".into()))
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn flag_errors_and_exit_codes() {
    let (code, _, err) = run_binary(&["--no-such-flag"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--no-such-flag") && err.contains("Usage"),
        "{err}"
    );

    let (code, _, err) = run_binary(&["-timeout=soon", "--kubelet-registration-path=/x"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("invalid duration \"soon\""), "{err}");

    let (code, _, err) = run_binary::<&str>(&[]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("kubelet-registration-path is a required parameter"),
        "{err}"
    );

    let (code, _, err) = run_binary(&[
        "--kubelet-registration-path=/x",
        "--health-port=9809",
        "--http-endpoint=:9810",
    ])
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("only one of `--health-port` and `--http-endpoint` can be set"),
        "{err}"
    );

    let (code, out, _) = run_binary(&["--version"]).await;
    assert_eq!(code, 0);
    // Upstream prints its argv[0] and the version. (Under a qemu wrapper,
    // argv[0] is the emulated binary's path, not the wrapper's.)
    let version = format!(" {}\n", env!("CARGO_PKG_VERSION"));
    assert!(
        out.ends_with(&version)
            && out
                .trim_end_matches(&version)
                .ends_with("csi-node-driver-registrar")
            && !out.trim_end_matches(&version).contains(' '),
        "{out}"
    );

    let (code, out, _) = run_binary(&["-help"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("--kubelet-registration-path"), "{out}");
}

#[tokio::test]
async fn probe_mode_exits_0_at_once() {
    // No driver, no registry: the probe mode must not touch either.
    let (code, _, err) = run_binary(&[
        "--mode=kubelet-registration-probe",
        "--kubelet-registration-path=/x",
        "--csi-address=/nonexistent",
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    // The required-flag check comes first.
    let (code, _, _) = run_binary(&["-mode=kubelet-registration-probe"]).await;
    assert_eq!(code, 1);
}
