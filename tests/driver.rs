//! The CSI driver's side, with the registrar in-process and stand-ins over
//! real unix sockets: a late driver, a driver not ready yet, and a driver
//! that goes away, comes back, is replaced or closes every connection.
//!
//! The probe interval is an hour here (`testing::config`): what the tests see,
//! the registrar saw through events (the connection's end, the socket file's
//! creation).

mod common;

use std::time::Duration;

use common::*;
use csi_node_driver_registrar::testing::{
    DriverCall, DriverSpec, FakeDriver, FakeKubelet, Harness, Phase, wait_until,
};

const DRIVER: &str = "hostpath.csi.k8s.io";

#[tokio::test]
async fn waits_for_a_late_driver() {
    let sb = Sandbox::new();
    let mut registrar = Harness::start(sb.config());
    assert_eq!(registrar.snapshot().phase(), Phase::WaitingForDriver);
    assert!(!sb.socket(DRIVER).exists());
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    registrar.wait_for("the socket", serving(DRIVER)).await;
    let attempt = FakeKubelet::default()
        .register(&sb.socket(DRIVER))
        .await
        .unwrap();
    assert!(attempt.sent.plugin_registered);
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

/// Upstream makes one attempt and exits 1; a driver still initializing is
/// asked again.
#[tokio::test]
async fn get_plugin_info_is_retried_until_the_driver_is_ready() {
    let sb = Sandbox::new();
    let mut spec = DriverSpec::named(DRIVER);
    spec.info_failures = 2;
    let mut driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let mut registrar = Harness::start(sb.config());
    registrar.wait_for("the socket", serving(DRIVER)).await;
    for _ in 0..3 {
        assert_eq!(
            driver.next_call(Duration::ZERO).await,
            Some(DriverCall::GetPluginInfo)
        );
    }
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_driver_back_under_another_name_is_registered_anew() {
    let sb = Sandbox::new();
    let (driver, mut registrar) = sb.start(DRIVER).await;
    let old = sb.socket(DRIVER);
    let kubelet = FakeKubelet::default();
    assert!(kubelet.register(&old).await.unwrap().sent.plugin_registered);
    registrar
        .wait_for("registered", |s| s.phase() == Phase::Registered)
        .await;

    // The driver goes away: noticed, not ready, the registration stays.
    driver.stop().await;
    let down = registrar
        .wait_for("the driver noticed gone", |s| s.driver_down.is_some())
        .await;
    assert!(matches!(down.phase(), Phase::DriverUnreachable(_)));
    assert!(down.serving && old.exists());

    // It comes back as another driver: new socket, old one removed.
    let mut spec = DriverSpec::named("nfs.csi.k8s.io");
    spec.vendor_version = "4.0.0".into();
    let _driver = FakeDriver::start(&sb.csi, spec).await.unwrap();
    let back = registrar
        .wait_for("the new driver's socket", serving("nfs.csi.k8s.io"))
        .await;
    assert_eq!(back.driver_down, None);
    assert!(!old.exists(), "the old socket is removed");
    kubelet.deregister(DRIVER);
    let attempt = kubelet
        .register(&sb.socket("nfs.csi.k8s.io"))
        .await
        .unwrap();
    assert_eq!(attempt.info.name, "nfs.csi.k8s.io");
    assert!(attempt.sent.plugin_registered);
    let metrics = registrar.metrics();
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
    assert_eq!(registrar.stop().await.unwrap(), 0);
    assert!(!sb.socket("nfs.csi.k8s.io").exists());
}

#[tokio::test]
async fn a_driver_back_unchanged_keeps_its_registration() {
    let sb = Sandbox::new();
    let (driver, mut registrar) = sb.start(DRIVER).await;
    driver.stop().await;
    registrar
        .wait_for("the driver noticed gone", |s| s.driver_down.is_some())
        .await;
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let back = registrar
        .wait_for("the driver noticed back", |s| s.driver_down.is_none())
        .await;
    assert_eq!(back.sockets_created, 1, "the same socket: {back:#?}");
    assert!(back.serving);
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

/// Surge rollouts of the driver, 20 times: each new driver replaces the
/// socket file (remove, then bind) while the old one still runs and keeps its
/// connection open. Every new driver is registered, and the registrar never
/// takes the gap between remove and bind for a driver gone.
#[tokio::test]
async fn a_new_driver_on_the_socket_is_noticed_while_the_old_one_runs() {
    let sb = Sandbox::new();
    let names = [DRIVER, "nfs.csi.k8s.io"];
    let (first, mut registrar) = sb.start(DRIVER).await;
    let mut drivers = vec![first];
    let mut reader = registrar.reader();
    let went_down = tokio::spawn(async move {
        let down = reader.wait_for(|s| s.driver_down.is_some()).await;
        down.map(|s| s.clone()).ok()
    });
    for round in 1..=20 {
        let (old, new) = (names[(round + 1) % 2], names[round % 2]);
        drivers.push(
            FakeDriver::start(&sb.csi, DriverSpec::named(new))
                .await
                .unwrap(),
        );
        let seen = registrar
            .wait_for(&format!("round {round}"), serving(new))
            .await;
        assert_eq!(seen.sockets_created, round as u64 + 1, "round {round}");
        assert!(!sb.socket(old).exists(), "round {round}");
    }
    assert!(
        !went_down.is_finished(),
        "the driver was taken for gone: {:?}",
        went_down.await
    );
    went_down.abort();
    assert_eq!(registrar.stop().await.unwrap(), 0);
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
    let mut registrar = Harness::start(sb.config());
    registrar.wait_for("the socket", serving(DRIVER)).await;
    while driver.next_call(Duration::ZERO).await.is_some() {} // discovery's
    assert_eq!(
        driver.next_call(PATIENCE).await,
        Some(DriverCall::GetPluginInfo),
        "the closed connection is noticed"
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
        "8 looks in {:?}",
        started.elapsed()
    );
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn a_driver_name_breaking_the_csi_rules_is_final() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named("../escape"))
        .await
        .unwrap();
    let ended = Harness::start(sb.config()).exited().await;
    let text = ended.unwrap_err().to_string();
    assert_eq!(
        text,
        "the CSI driver's name is unusable: driver name \"../escape\" contains '/'; only alphanumerics, '-' and '.' are allowed (CSI naming rule)"
    );
    assert!(
        wait_until(Duration::ZERO, || std::fs::read_dir(&sb.registry)
            .unwrap()
            .next()
            .is_none())
        .await,
        "nothing created"
    );
}
