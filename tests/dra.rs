//! The binary as the registrar of a DRA driver (`--plugin-type=DRAPlugin`),
//! per-pod registration sockets (`--pod-uid`), and `--notify-timeout`: what
//! the kubelet's own code does with all three is in tests/peers (dra_test.go,
//! notify_test.go); here, the flags, the errors and the socket's life.

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use csi_node_driver_registrar::testing::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, registration_client::RegistrationClient,
};
use csi_node_driver_registrar::testing::{
    DriverSpec, FakeDriver, PATIENCE, uds_channel, wait_until,
};

const DRA_DRIVER: &str = "gpu.example.com";
const POD_UID: &str = "0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f";

/// The kubelet's first call on a registration socket.
async fn get_info(socket: &std::path::Path) -> PluginInfo {
    let channel = uds_channel(socket).await.unwrap();
    RegistrationClient::new(channel)
        .get_info(InfoRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// The kubelet's whole registration, as far as the registrar sees it.
async fn register(socket: &std::path::Path) {
    let channel = uds_channel(socket).await.unwrap();
    let mut client = RegistrationClient::new(channel);
    client.get_info(InfoRequest {}).await.unwrap();
    client
        .notify_registration_status(RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();
}

/// klog's text with its quoting undone (`\"` and `\\`), as a person reads it.
fn klog_unquoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some(next @ ('"' | '\\'))) => {
                out.push(next);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

fn inode(path: &std::path::Path) -> Option<u64> {
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

#[tokio::test]
async fn bad_dra_flags_are_refused_at_start_up_with_the_fix() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--plugin-type=DevicePlugin"],
            2,
            "invalid value 'DevicePlugin' for '--plugin-type <PLUGIN_TYPE>'",
        ),
        (
            &["--plugin-type=DRAPlugin"],
            1,
            "--driver-name is required with --plugin-type=DRAPlugin: a DRA driver has no CSI Identity service to ask its name",
        ),
        (
            &["--plugin-type=DRAPlugin", "--driver-name=-gpu"],
            1,
            "--driver-name \"-gpu\": ",
        ),
        (
            &[
                "--plugin-type=DRAPlugin",
                "--driver-name=gpu.example.com",
                "--pod-uid=pod-1",
            ],
            1,
            "--pod-uid (or POD_UID) \"pod-1\": not a pod UID (8-4-4-4-12 hexadecimal digits, as metadata.uid); pass the pod's own with the downward API (fieldRef: metadata.uid)",
        ),
        (
            &["--pod-uid=0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f"],
            1,
            "--pod-uid names a registration socket per pod, which the kubelet supports for DRAPlugin only: its CSI handler keeps one endpoint per driver name",
        ),
        (
            &[
                "--plugin-type=DRAPlugin",
                "--driver-name=gpu.example.com",
                "--supported-versions=1.0.0",
            ],
            1,
            "--supported-versions \"1.0.0\": none of the supported versions \"[\\\"1.0.0\\\"]\" is a DRA gRPC service the kubelet can use (v1.DRAPlugin or v1beta1.DRAPlugin); semantic versions such as \"1.0.0\" are for CSI drivers",
        ),
        (
            &["--supported-versions=v1.DRAPlugin"],
            1,
            "these are DRA gRPC service names: a DRA driver is registered with --plugin-type=DRAPlugin",
        ),
    ];
    for (flags, want_code, want) in cases {
        let mut args = vec!["--kubelet-registration-path=/var/lib/kubelet/plugins/x/dra.sock"];
        args.extend_from_slice(flags);
        let (code, _, err) = run_binary(&args).await;
        let err = klog_unquoted(&err);
        assert_eq!(code, *want_code, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: want {want:?} in:\n{err}");
        // The reason is on the error line itself, not only in a field after it.
        if *want_code == 1 {
            let line = err.lines().find(|l| l.starts_with('E')).unwrap_or_default();
            assert!(line.contains(want), "{flags:?}: {line}");
        }
    }
}

#[tokio::test]
async fn a_dra_driver_is_registered_by_name_under_its_pods_socket_without_any_csi_driver() {
    let sb = Sandbox::new();
    let dra_sock = sb.dir.path().join("dra.sock");
    let registrar = Process::spawn_raw(
        sb.dir.path(),
        &[
            "--plugin-type=DRAPlugin".into(),
            format!("--driver-name={DRA_DRIVER}"),
            format!("--kubelet-registration-path={}", dra_sock.display()),
            format!("--plugin-registration-path={}", sb.registry.display()),
            format!("--pod-uid={POD_UID}"),
            // Nothing listens here: a DRA registrar never dials it.
            format!("--csi-address={}", sb.csi.display()),
        ],
    );
    let socket = sb.registry.join(format!("{DRA_DRIVER}-{POD_UID}-reg.sock"));
    assert!(appears(&socket).await, "log:\n{}", registrar.log_text());
    let info = get_info(&socket).await;
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, DRA_DRIVER);
    assert_eq!(info.endpoint, dra_sock.display().to_string());
    assert_eq!(
        info.supported_versions,
        vec!["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    );
    register(&socket).await;
    assert!(registrar.wait_log("PluginRegistered:true").await);
    assert_eq!(registrar.stop().await, 0);
    assert!(!socket.exists(), "SIGTERM removes the pod's socket");
}

#[tokio::test]
async fn a_getinfo_left_without_a_verdict_recreates_the_socket_with_a_growing_wait() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let port = free_port();
    let registrar = Process::spawn(
        &sb,
        &[
            "--notify-timeout=200ms".into(),
            format!("--http-endpoint=127.0.0.1:{port}"),
        ],
    );
    let socket = sb.socket(DRIVER);
    assert!(appears(&socket).await);
    // Our own /healthz asks GetInfo too: that starts no wait.
    assert_eq!(
        http_until(port, "/healthz", 200).await,
        Some((200, "ok".into()))
    );
    let first = inode(&socket);

    // The kubelet asks, then its verdict never comes (kubernetes#138170).
    get_info(&socket).await;
    assert!(
        registrar
            .wait_log("sent no NotifyRegistrationStatus; creating the registration socket again")
            .await,
        "log:\n{}",
        registrar.log_text()
    );
    assert!(
        registrar.log_text().contains("next_wait=\"400ms\""),
        "{}",
        registrar.log_text()
    );
    assert!(
        wait_until(PATIENCE, || inode(&socket)
            .is_some_and(|i| Some(i) != first))
        .await,
        "the socket was not created again"
    );
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((
            503,
            "waiting for the kubelet to register the plugin: it asked for the plugin's info but sent no \
             NotifyRegistrationStatus within 200ms (1 in a row); the registration socket was created again \
             so that it registers anew"
                .into()
        ))
    );

    // Again: the wait doubles.
    get_info(&socket).await;
    assert!(
        registrar.wait_log("next_wait=\"800ms\"").await,
        "{}",
        registrar.log_text()
    );
    let (_, metrics) = http_get(port, "/metrics").await.unwrap();
    assert!(
        metrics.contains("csi_registrar_notify_timeouts_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "csi_registrar_registration_socket_creations_total{reason=\"notify-timeout\"} 2"
        ),
        "{metrics}"
    );

    // A registration that completes ends it all.
    register(&socket).await;
    assert_eq!(
        http_until(port, "/readyz", 200).await,
        Some((200, "ok".into()))
    );
    assert_eq!(registrar.stop().await, 0);
}
