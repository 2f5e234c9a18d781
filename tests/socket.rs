//! The registration socket's life, with the registrar in-process and a
//! kubelet stand-in over real unix sockets: stale and foreign files,
//! deletions, kubelet restarts, and surge rollouts of the registrar itself.
//! Each test waits on the registrar's state, not on its log.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use common::*;
use csi_node_driver_registrar::testing::{
    DriverCall, DriverSpec, FakeDriver, FakeKubelet, Harness, Snapshot, wait_until,
};
use csi_node_driver_registrar::{AppError, SocketError};

const DRIVER: &str = "hostpath.csi.k8s.io";

/// A state in which a newer instance holds the path and we stand by.
fn standing_by(s: &Snapshot) -> bool {
    !s.serving && s.published.is_some() && s.retry_in.is_none()
}

#[tokio::test]
async fn the_socket_is_owner_only_and_answers_like_upstream() {
    let sb = Sandbox::new();
    let (mut driver, mut registrar) = sb.start(DRIVER).await;
    let socket = sb.socket(DRIVER);
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
    registrar
        .wait_for("the kubelet's verdict", |s| {
            s.phase() == csi_node_driver_registrar::testing::Phase::Registered
        })
        .await;
    assert!(
        registrar.metrics().contains("csi_registrar_registered 1"),
        "{}",
        registrar.metrics()
    );

    assert_eq!(registrar.stop().await.unwrap(), 0);
    assert!(!socket.exists(), "stopping removes the registration socket");
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let sb = Sandbox::new();
    let socket = sb.socket(DRIVER);
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap()); // a dead registrar's socket
    let (_driver, registrar) = sb.start(DRIVER).await;
    assert!(kubelet_registers(&socket).await);
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn non_socket_file_is_never_removed() {
    let sb = Sandbox::new();
    let path = sb.socket(DRIVER);
    std::fs::write(&path, "operator's notes").unwrap();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let ended = Harness::start(sb.config()).exited().await;
    let Err(AppError::Socket(e @ SocketError::NotASocket { .. })) = ended else {
        panic!("expected a refusal to touch the file, got {ended:?}");
    };
    assert!(
        e.to_string()
            .contains("is not a socket (it is a regular file); refusing to remove it"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "operator's notes");
}

#[tokio::test]
async fn deleted_socket_is_recreated_and_the_kubelet_registers_again() {
    let sb = Sandbox::new();
    let (_driver, mut registrar) = sb.start(DRIVER).await;
    let socket = sb.socket(DRIVER);
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
    registrar
        .wait_for("the socket re-created", |s| s.sockets_created == 2)
        .await;
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
            .metrics()
            .contains("csi_registrar_registration_socket_creations_total{reason=\"deleted\"} 1"),
        "{}",
        registrar.metrics()
    );
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn kubelet_restart_registers_again() {
    let sb = Sandbox::new();
    let (_driver, registrar) = sb.start(DRIVER).await;
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
    assert_eq!(registrar.stop().await.unwrap(), 0);
}

#[tokio::test]
async fn kubelet_version_rule_refuses_a_second_same_name_registration() {
    let sb = Sandbox::new();
    let (_driver, registrar) = sb.start(DRIVER).await;
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
        registrar.exited().await.unwrap(),
        1,
        "the default policy exits on refusal"
    );
}

#[tokio::test]
async fn a_newer_instances_socket_survives_our_exit() {
    let sb = Sandbox::new();
    let (_driver, mut old) = sb.start(DRIVER).await;
    let socket = sb.socket(DRIVER);
    // A surge rollout: the new pod's registrar replaces the socket.
    let mut new = Harness::start(sb.config());
    new.wait_for("the newer instance's socket", serving(DRIVER))
        .await;
    old.wait_for("the older instance to stand by", standing_by)
        .await;
    assert_eq!(old.stop().await.unwrap(), 0);
    assert!(
        socket.exists(),
        "the old instance must not delete the new one's socket"
    );
    assert!(kubelet_registers(&socket).await);
    assert_eq!(new.stop().await.unwrap(), 0);
    assert!(!socket.exists());
}

/// A surge rollout, 200 times over: each new instance starts while the old one
/// serves, takes the path over, and the old one's exit leaves it alone.
#[tokio::test]
async fn two_hundred_rollouts_never_fail_the_newer_instance() {
    let sb = Sandbox::new();
    let (_driver, mut old) = sb.start(DRIVER).await;
    let socket = sb.socket(DRIVER);
    for round in 0..200 {
        let mut new = Harness::start(sb.config());
        new.wait_for(&format!("round {round}: the takeover"), serving(DRIVER))
            .await;
        assert_eq!(old.stop().await.unwrap(), 0, "round {round}");
        assert!(
            socket.exists(),
            "round {round}: the old instance's exit took the new socket away"
        );
        old = new;
    }
    assert!(kubelet_registers(&socket).await);
    assert_eq!(old.stop().await.unwrap(), 0);
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
    let (_driver, mut old) = sb.start(DRIVER).await;
    let socket = sb.socket(DRIVER);
    let mut new = Harness::start(sb.config());
    new.wait_for("the takeover", serving(DRIVER)).await;
    old.wait_for("the older instance to stand by", standing_by)
        .await;
    assert_eq!(new.stop().await.unwrap(), 0);
    old.wait_for("the older instance to take the path back", serving(DRIVER))
        .await;
    assert!(kubelet_registers(&socket).await);
    assert_eq!(old.stop().await.unwrap(), 0);
    assert!(!socket.exists());
}

/// The socket is deleted while a newer instance takes over, at whatever
/// moment the scheduler picks: the older instance may re-create it, but the
/// newer one takes the path back, the older one stands by, and in the end
/// the newer one owns the only socket.
#[tokio::test]
async fn a_deletion_during_a_takeover_leaves_the_newest_instance_owning_the_socket() {
    let sb = Sandbox::new();
    let mut driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);
    for round in 0..40 {
        let mut old = Harness::start(sb.config());
        old.wait_for("the first socket", serving(DRIVER)).await;
        while driver.next_call(std::time::Duration::ZERO).await.is_some() {}
        let mut new = Harness::start(sb.config());
        // Delete whatever is there right away or once the new instance asked
        // the driver its name (round parity), so the deletion lands before,
        // during or after the takeover.
        if round % 2 == 1 {
            driver.next_call(PATIENCE).await;
        }
        let _ = std::fs::remove_file(&socket);
        new.wait_for(&format!("round {round}: the takeover"), serving(DRIVER))
            .await;
        old.wait_for(
            &format!("round {round}: the older instance to stand by"),
            standing_by,
        )
        .await;
        assert_eq!(old.stop().await.unwrap(), 0, "round {round}");
        // The older instance is gone: what is at the path (now, or once the
        // newer one re-created what the older one's exit or the deletion
        // took) can only be the newer instance's, which its exit removes.
        assert!(
            wait_until(PATIENCE, || socket.exists()).await,
            "round {round}: {:#?}",
            new.snapshot()
        );
        assert!(kubelet_registers(&socket).await, "round {round}");
        assert_eq!(new.stop().await.unwrap(), 0, "round {round}");
        assert!(
            !socket.exists(),
            "round {round}: the newer instance removes its own socket"
        );
    }
}
