//! Every `/healthz` and `/readyz` answer, from the real HTTP router over
//! loopback, with real registration sockets behind it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::http_get;
use csi_node_driver_registrar::testing::proto::registration::registration_server::RegistrationServer;
use csi_node_driver_registrar::testing::{
    Kubelet, Metrics, Published, Registration, RegistrationService, Snapshot, http_router,
};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

/// Serves the router over the state `state` sends, on a loopback port;
/// returns the port.
async fn serve(state: &watch::Sender<Snapshot>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let router = http_router(
        state.subscribe(),
        Arc::new(Metrics::new()),
        Duration::from_secs(1),
    );
    tokio::spawn(async move { axum_serve(listener, router).await });
    port
}

async fn axum_serve(listener: tokio::net::TcpListener, router: axum::Router) {
    axum::serve(listener, router).await.unwrap();
}

/// Advertises the registration of driver `name` on the socket at `path`.
fn publish(state: &watch::Sender<Snapshot>, path: &std::path::Path, name: &str) {
    state.send_modify(|s| {
        s.published = Some(Published {
            registration: Registration {
                name: name.into(),
                endpoint: "/csi/csi.sock".into(),
                supported_versions: vec!["1.0.0".into()],
            },
            socket: path.to_owned(),
        })
    });
}

/// A registration service answering for `name` on a unix socket at `path`.
async fn registration_socket(path: &std::path::Path, name: &str) {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let state = watch::Sender::new(Snapshot::default());
    publish(&state, path, name);
    let service = RegistrationService::new(state.subscribe(), tx, Arc::new(Metrics::new()));
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming(UnixListenerStream::new(listener)),
    );
}

#[tokio::test]
async fn healthz_answers() {
    let dir = tempfile::tempdir().unwrap();
    let state = watch::Sender::new(Snapshot::default());
    let port = serve(&state).await;

    // Before the driver answered there is no socket by design.
    assert_eq!(
        http_get(port, "/healthz").await,
        Some((200, "ok: waiting for the CSI driver".into()))
    );

    // The socket file is gone: upstream's 404.
    let path = dir.path().join("d.csi.io-reg.sock");
    publish(&state, &path, "d.csi.io");
    assert_eq!(
        http_get(port, "/healthz").await,
        Some((404, "registration socket does not exist".into()))
    );

    // It answers for our name: 200 ok.
    registration_socket(&path, "d.csi.io").await;
    assert_eq!(http_get(port, "/healthz").await, Some((200, "ok".into())));

    // It answers for another name: 500 with the reason.
    let other = dir.path().join("other-reg.sock");
    registration_socket(&other, "other.csi.io").await;
    publish(&state, &other, "d.csi.io");
    let (code, body) = http_get(port, "/healthz").await.unwrap();
    assert_eq!(code, 500);
    assert_eq!(
        body,
        "registration socket answers for driver \"other.csi.io\", expected \"d.csi.io\""
    );

    // Something that is not a listening socket: 500, cannot connect.
    let file = dir.path().join("file-reg.sock");
    std::fs::write(&file, "").unwrap();
    publish(&state, &file, "d.csi.io");
    let (code, body) = http_get(port, "/healthz").await.unwrap();
    assert_eq!(code, 500);
    assert!(
        body.starts_with("failed to connect to registration socket"),
        "{body}"
    );
}

#[tokio::test]
async fn readyz_answers() {
    let state = watch::Sender::new(Snapshot::default());
    let port = serve(&state).await;
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((503, "waiting for the CSI driver".into()))
    );
    state.send_modify(|s| s.kubelet = Kubelet::Waiting);
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((503, "waiting for the kubelet to register the plugin".into()))
    );
    state.send_modify(|s| s.kubelet = Kubelet::Registered);
    assert_eq!(http_get(port, "/readyz").await, Some((200, "ok".into())));
    state.send_modify(|s| s.kubelet = Kubelet::Refused("driver name is empty".into()));
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((
            503,
            "kubelet refused the registration: driver name is empty".into()
        ))
    );
}

#[tokio::test]
async fn readyz_names_a_driver_that_does_not_answer() {
    let state = watch::Sender::new(Snapshot::default());
    let port = serve(&state).await;
    state.send_modify(|s| {
        s.kubelet = Kubelet::Registered;
        s.driver_down = Some("connection refused".into());
    });
    assert_eq!(
        http_get(port, "/readyz").await,
        Some((
            503,
            "the CSI driver does not answer: connection refused".into()
        ))
    );
}
