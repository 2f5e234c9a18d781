//! The registrar binary against a CSI driver stand-in and a kubelet stand-in,
//! over real unix sockets: the upstream contract, case by case.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::time::Duration;

use common::*;
use csi_node_driver_registrar::standins::{
    DriverCall, DriverSpec, FakeDriver, FakeKubelet, KubeletBehaviour, wait_until,
};

const DRIVER: &str = "hostpath.csi.k8s.io";

#[tokio::test]
async fn registers_like_upstream_and_cleans_up_on_sigterm() {
    let sb = Sandbox::new();
    let mut driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Registrar::spawn(&sb, &[]);
    let socket = sb.socket(DRIVER);
    assert!(
        appears(&socket).await,
        "no socket; log:\n{}",
        registrar.log_text()
    );
    assert_eq!(
        driver.next_call(PATIENCE).await,
        Some(DriverCall::GetPluginInfo)
    );

    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o700,
        "owner-only, as under umask 0077"
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
    let mut registrar = Registrar::spawn(&sb, &[]);
    assert!(appears(&sb.socket(DRIVER)).await);
    registrar.signal(libc::SIGINT);
    assert_eq!(registrar.exit_code().await, 0);
    assert!(!sb.socket(DRIVER).exists());
}

#[tokio::test]
async fn waits_for_a_late_driver() {
    let sb = Sandbox::new();
    // -v=1: upstream's "Attempting to open a gRPC connection" is a V(1) line.
    let registrar = Registrar::spawn(&sb, &["-v=1".into()]);
    assert!(
        registrar
            .wait_log("Attempting to open a gRPC connection")
            .await
    );
    assert!(!sb.socket(DRIVER).exists());
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "log:\n{}",
        registrar.log_text()
    );
    let attempt = FakeKubelet::default()
        .register(&sb.socket(DRIVER))
        .await
        .unwrap();
    assert!(attempt.sent.plugin_registered);
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn gives_up_after_driver_wait_timeout() {
    let sb = Sandbox::new();
    let mut registrar = Registrar::spawn(&sb, &["--driver-wait-timeout=300ms".into()]);
    assert_eq!(registrar.exit_code().await, 1);
    let log = registrar.log_text();
    assert!(log.contains("did not accept a connection within"), "{log}");
    assert!(
        log.contains(&sb.csi.display().to_string()),
        "names the socket: {log}"
    );
}

/// A driver whose answer is final (a bad name), or that keeps failing until
/// the wait deadline: exit 1, nothing created.
async fn refused_driver(spec: DriverSpec, expect: &str) {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let mut registrar = Registrar::spawn(&sb, &["--driver-wait-timeout=500ms".into()]);
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
    let mut registrar = Registrar::spawn(
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
async fn get_plugin_info_is_retried_until_the_driver_is_ready() {
    let sb = Sandbox::new();
    let mut spec = DriverSpec::named(DRIVER);
    spec.info_failures = 2;
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    // Upstream makes one attempt and exits 1.
    let registrar = Registrar::spawn(&sb, &[]);
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "log:\n{}",
        registrar.log_text()
    );
    let log = registrar.log_text();
    assert_eq!(
        log.matches("GetPluginInfo failed; retrying").count(),
        2,
        "{log}"
    );
    assert!(log.contains("still initializing (2 of 2)"), "{log}");
    assert_eq!(registrar.stop().await, 0);
}

// The probe interval is an hour in these tests: what they see, the registrar
// saw through events (the connection's end, the socket file's creation).

#[tokio::test]
async fn a_driver_back_under_another_name_is_registered_anew() {
    let sb = Sandbox::new();
    let driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let port = free_port();
    let registrar = Registrar::spawn(
        &sb,
        &[
            "--driver-probe-interval=1h".into(),
            format!("--http-endpoint=127.0.0.1:{port}"),
        ],
    );
    let old = sb.socket(DRIVER);
    assert!(appears(&old).await);
    let kubelet = FakeKubelet::default();
    assert!(kubelet.register(&old).await.unwrap().sent.plugin_registered);
    assert_eq!(
        http_until(port, "/readyz", 200).await.map(|r| r.0),
        Some(200)
    );

    // The driver goes away: noticed, not ready, the registration stays.
    driver.stop().await;
    assert!(
        registrar.wait_log("CSI driver does not answer").await,
        "{}",
        registrar.log_text()
    );
    let (code, body) = http_until(port, "/readyz", 503).await.unwrap();
    assert_eq!(code, 503);
    assert!(body.starts_with("the CSI driver does not answer"), "{body}");
    assert!(old.exists());

    // It comes back as another driver: new socket, old one removed.
    let mut spec = DriverSpec::named("nfs.csi.k8s.io");
    spec.vendor_version = "4.0.0".into();
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let new = sb.socket("nfs.csi.k8s.io");
    assert!(appears(&new).await, "{}", registrar.log_text());
    assert!(
        wait_until(PATIENCE, || !old.exists()).await,
        "the old socket is removed"
    );
    kubelet.deregister(DRIVER);
    let attempt = kubelet.register(&new).await.unwrap();
    assert_eq!(attempt.info.name, "nfs.csi.k8s.io");
    assert!(attempt.sent.plugin_registered);
    let (_, metrics) = http_get(port, "/metrics").await.unwrap();
    assert!(
        metrics.contains("csi_registrar_driver_reconnects_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "csi_registrar_registration_socket_creations_total{reason=\"driver-changed\"} 1"
        ),
        "{metrics}"
    );
    assert_eq!(registrar.stop().await, 0);
    assert!(!new.exists());
}

#[tokio::test]
async fn a_driver_back_unchanged_keeps_its_registration() {
    let sb = Sandbox::new();
    let driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Registrar::spawn(&sb, &["--driver-probe-interval=1h".into()]);
    assert!(appears(&sb.socket(DRIVER)).await);
    driver.stop().await;
    assert!(registrar.wait_log("CSI driver does not answer").await);
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    assert!(
        registrar.wait_log("CSI driver answers again").await,
        "{}",
        registrar.log_text()
    );
    let log = registrar.log_text();
    assert!(!log.contains("registering anew"), "{log}");
    assert_eq!(
        log.matches("Registration Server started").count(),
        1,
        "{log}"
    );
    assert_eq!(registrar.stop().await, 0);
}

/// Surge rollouts of the driver, 20 times: each new driver replaces the
/// socket file (remove, then bind) while the old one still runs and keeps its
/// connection open. Every new driver is registered, and the registrar never
/// takes the gap between remove and bind for a driver gone.
#[tokio::test]
async fn a_new_driver_on_the_socket_is_noticed_while_the_old_one_runs() {
    let sb = Sandbox::new();
    let names = [DRIVER, "nfs.csi.k8s.io"];
    let mut drivers = vec![
        FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
            .await
            .unwrap(),
    ];
    let registrar = Registrar::spawn(&sb, &["--driver-probe-interval=1h".into()]);
    assert!(appears(&sb.socket(DRIVER)).await);
    for round in 1..=20 {
        let (old, new) = (names[(round + 1) % 2], names[round % 2]);
        drivers.push(
            FakeDriver::start(&sb.csi, DriverSpec::named(new))
                .await
                .unwrap(),
        );
        let (old, new) = (sb.socket(old), sb.socket(new));
        assert!(
            wait_until(PATIENCE, || new.exists() && !old.exists()).await,
            "round {round}: {}",
            registrar.log_text()
        );
    }
    let log = registrar.log_text();
    assert_eq!(
        log.matches("CSI driver changed; registering anew").count(),
        20,
        "{log}"
    );
    assert!(!log.contains("does not answer"), "{log}");
    assert_eq!(registrar.stop().await, 0);
    drop(drivers);
}

/// A driver that closes every connection right after it opened (a tiny
/// gRPC `MaxConnectionAge`): each closed connection makes the registrar look
/// again, but not sooner than 100 ms after its last look. Eight looks take at
/// least 300 ms then; a registrar that redials on every closed connection
/// makes them in a few milliseconds.
#[tokio::test]
async fn a_driver_that_closes_every_connection_does_not_make_the_registrar_spin() {
    let sb = Sandbox::new();
    let mut spec = DriverSpec::named(DRIVER);
    spec.max_connection_age = Some(Duration::from_millis(1));
    let mut driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let registrar = Registrar::spawn(&sb, &["--driver-probe-interval=1h".into()]);
    assert!(
        appears(&sb.socket(DRIVER)).await,
        "{}",
        registrar.log_text()
    );
    while driver.next_call(Duration::ZERO).await.is_some() {} // discovery's
    assert_eq!(
        driver.next_call(PATIENCE).await,
        Some(DriverCall::GetPluginInfo),
        "the closed connection is noticed: {}",
        registrar.log_text()
    );
    let started = std::time::Instant::now();
    for _ in 1..8 {
        assert_eq!(
            driver.next_call(PATIENCE).await,
            Some(DriverCall::GetPluginInfo)
        );
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "8 looks in {:?}: {}",
        started.elapsed(),
        registrar.log_text()
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn kubelet_refusal_gets_a_reply_then_exit_1_and_socket_removed() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Registrar::spawn(&sb, &[]);
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
async fn kubelet_version_rule_refuses_a_second_same_name_registration() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Registrar::spawn(&sb, &[]);
    assert!(appears(&sb.socket(DRIVER)).await);
    let kubelet = FakeKubelet::default();
    assert!(
        kubelet
            .register(&sb.socket(DRIVER))
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    // The same kubelet sees the socket again (e.g. a second registrar for the
    // same driver): ["1.0.0"] is not strictly higher, so it is refused.
    let again = kubelet.register(&sb.socket(DRIVER)).await.unwrap();
    assert!(!again.sent.plugin_registered);
    assert!(
        again.sent.error.contains("Another driver with the same name is already registered with a higher supported version"),
        "{}",
        again.sent.error
    );
    assert_eq!(
        registrar.exit_code().await,
        1,
        "the default policy exits on refusal"
    );
}

#[tokio::test]
async fn kubelet_restart_registers_again() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Registrar::spawn(&sb, &[]);
    assert!(appears(&sb.socket(DRIVER)).await);
    let first = FakeKubelet::default()
        .register(&sb.socket(DRIVER))
        .await
        .unwrap();
    assert!(first.sent.plugin_registered);
    // A restarted kubelet has no memory: it walks the directory and calls GetInfo again.
    let restarted = FakeKubelet::default();
    let second = restarted.register(&sb.socket(DRIVER)).await.unwrap();
    assert!(second.sent.plugin_registered);
    assert_eq!(first.info, second.info);
    assert!(restarted.is_registered(DRIVER));
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let sb = Sandbox::new();
    let socket = sb.socket(DRIVER);
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap()); // a dead registrar's socket
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Registrar::spawn(&sb, &[]);
    assert!(
        registrar.wait_log("Registration Server started").await,
        "{}",
        registrar.log_text()
    );
    assert!(
        registrar
            .log_text()
            .contains("Replaced the socket of a previous instance or a stale socket")
    );
    assert!(
        FakeKubelet::default()
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn non_socket_file_is_never_removed() {
    let sb = Sandbox::new();
    let path = sb.socket(DRIVER);
    std::fs::write(&path, "operator's notes").unwrap();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let mut registrar = Registrar::spawn(&sb, &[]);
    assert_eq!(registrar.exit_code().await, 1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "operator's notes");
    let log = registrar.log_text();
    assert!(
        log.contains("is not a socket (it is a regular file); refusing to remove it"),
        "{log}"
    );
}

#[tokio::test]
async fn deleted_socket_is_recreated_and_the_kubelet_registers_again() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let registrar = Registrar::spawn(&sb, &[]);
    let socket = sb.socket(DRIVER);
    assert!(appears(&socket).await);
    let kubelet = FakeKubelet::default();
    assert!(
        kubelet
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    // Someone deletes it (a surge rollout's old pod, an operator): the kubelet deregisters.
    std::fs::remove_file(&socket).unwrap();
    kubelet.deregister(DRIVER);
    assert!(
        appears(&socket).await,
        "re-created; log:\n{}",
        registrar.log_text()
    );
    assert!(
        kubelet
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert!(
        registrar
            .log_text()
            .contains("Registration socket was deleted; re-creating it")
    );
    assert_eq!(registrar.stop().await, 0);
}

#[tokio::test]
async fn a_newer_instances_socket_survives_our_exit() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let old = Registrar::spawn(&sb, &[]);
    let socket = sb.socket(DRIVER);
    assert!(appears(&socket).await);
    // A surge rollout: the new pod's registrar replaces the socket.
    let new = Registrar::spawn(&sb, &[]);
    assert!(
        new.wait_log("Replaced the socket of a previous instance")
            .await,
        "{}",
        new.log_text()
    );
    assert!(new.wait_log("Registration Server started").await);
    assert!(
        old.wait_log("leaving it to that instance").await,
        "{}",
        old.log_text()
    );
    assert_eq!(old.stop().await, 0);
    assert!(
        socket.exists(),
        "the old instance must not delete the new one's socket"
    );
    assert!(
        FakeKubelet::default()
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert_eq!(new.stop().await, 0);
    assert!(!socket.exists());
}

/// A surge rollout, 200 times over: each new instance starts while the old one
/// serves, takes the path over, and the old one's exit leaves it alone.
#[tokio::test]
async fn two_hundred_rollouts_never_fail_the_newer_instance() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);
    let mut old = Registrar::spawn(&sb, &[]);
    assert!(old.wait_log("Registration Server started").await);
    for round in 0..200 {
        let new = Registrar::spawn(&sb, &[]);
        assert!(
            new.wait_log("Registration Server started").await,
            "round {round}: the new instance did not take over:\n{}",
            new.log_text()
        );
        assert_eq!(old.stop().await, 0, "round {round}");
        assert!(
            socket.exists(),
            "round {round}: the old instance's exit took the new socket away"
        );
        old = new;
    }
    assert!(
        FakeKubelet::default()
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert_eq!(old.stop().await, 0);
    assert!(!socket.exists());
    let left: Vec<_> = std::fs::read_dir(&sb.registry).unwrap().collect();
    assert!(left.is_empty(), "temporary names left behind: {left:?}");
}

/// An instance that left the path to a newer one stands by: when the newer one
/// goes away first (its pod deleted, or the clocks disagree on which is newer),
/// it registers again rather than leave the driver unregistered.
#[tokio::test]
async fn an_instance_standing_by_takes_the_path_back_when_the_newer_one_leaves() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);
    let old = Registrar::spawn(&sb, &[]);
    assert!(old.wait_log("Registration Server started").await);
    let new = Registrar::spawn(&sb, &[]);
    assert!(new.wait_log("Registration Server started").await);
    assert!(
        old.wait_log("leaving it to that instance").await,
        "{}",
        old.log_text()
    );
    assert_eq!(new.stop().await, 0);
    assert!(
        old.wait_log("The newer instance's registration socket is gone; creating ours")
            .await,
        "{}",
        old.log_text()
    );
    assert!(appears(&socket).await);
    assert!(
        FakeKubelet::default()
            .register(&socket)
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
    assert_eq!(old.stop().await, 0);
    assert!(!socket.exists());
}

/// The socket is deleted while a newer instance takes over, at whatever
/// moment the scheduler picks: the older instance may re-create it, but the
/// newer one takes the path back, the older one says it leaves it to that
/// instance, and in the end the newer one owns the only socket.
#[tokio::test]
async fn a_deletion_during_a_takeover_leaves_the_newest_instance_owning_the_socket() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);
    for round in 0..40 {
        let old = Registrar::spawn(&sb, &[]);
        assert!(old.wait_log("Registration Server started").await);
        let new = Registrar::spawn(&sb, &[]);
        // Delete whatever is there right away or once the new instance is at
        // work (round parity), so the deletion lands before, during or after
        // the takeover.
        if round % 2 == 1 {
            let _ = wait_until(PATIENCE, || {
                new.log_text().contains("Connected to the CSI driver")
            })
            .await;
        }
        let _ = std::fs::remove_file(&socket);
        assert!(
            new.wait_log("Registration Server started").await,
            "round {round}:\n{}",
            new.log_text()
        );
        assert!(
            old.wait_log("leaving it to that instance").await,
            "round {round}: the older instance kept the path; old:\n{}\nnew:\n{}",
            old.log_text(),
            new.log_text()
        );
        assert_eq!(old.stop().await, 0, "round {round}");
        // The older instance is gone: what is at the path (now, or once the
        // newer one re-created what the older one's exit or the deletion
        // took) can only be the newer instance's, which its exit removes.
        assert!(appears(&socket).await, "round {round}:\n{}", new.log_text());
        assert!(
            FakeKubelet::default()
                .register(&socket)
                .await
                .unwrap()
                .sent
                .plugin_registered,
            "round {round}"
        );
        assert_eq!(new.stop().await, 0, "round {round}");
        assert!(
            !socket.exists(),
            "round {round}: the newer instance removes its own socket"
        );
    }
}

#[tokio::test]
async fn healthz_and_readyz_follow_the_registration() {
    let sb = Sandbox::new();
    let port = free_port();
    let registrar = Registrar::spawn(&sb, &[format!("--http-endpoint=127.0.0.1:{port}")]);
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
    assert!(
        FakeKubelet::default()
            .register(&sb.socket(DRIVER))
            .await
            .unwrap()
            .sent
            .plugin_registered
    );
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
    let registrar = Registrar::spawn(&sb, &[format!("-health-port={port}")]);
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
    assert_eq!(out, format!("{BIN} {}\n", env!("CARGO_PKG_VERSION")));

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
