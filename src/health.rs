//! The HTTP server: `/healthz` as upstream answers it, `/readyz` tied to the
//! kubelet's verdict, and `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::messages;
use crate::metrics::Metrics;
use crate::proto::registration::{InfoRequest, registration_client::RegistrationClient};
use crate::registration::SELF_PROBE;
use crate::state::{Phase, StateReader};

/// The HTTP server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on --http-endpoint {address}: {source}")]
pub struct HttpError {
    address: String,
    #[source]
    source: std::io::Error,
}

/// Binds Go-style addresses: `:9809` means every interface.
pub(crate) async fn bind_http(address: &str) -> Result<tokio::net::TcpListener, HttpError> {
    let err = |source| HttpError {
        address: address.to_owned(),
        source,
    };
    if let Some(port) = address.strip_prefix(':') {
        // Dual-stack first; fall back to IPv4 where IPv6 is disabled.
        match tokio::net::TcpListener::bind(format!("[::]:{port}")).await {
            Ok(l) => Ok(l),
            Err(_) => tokio::net::TcpListener::bind(format!("0.0.0.0:{port}"))
                .await
                .map_err(err),
        }
    } else {
        tokio::net::TcpListener::bind(address).await.map_err(err)
    }
}

#[derive(Clone)]
struct Shared {
    state: StateReader,
    metrics: Arc<Metrics>,
    timeout: Duration,
}

/// `/healthz`, `/readyz` and `/metrics`, answered from `state` and `metrics`;
/// `timeout` bounds the `/healthz` GetInfo.
pub fn router(state: StateReader, metrics: Arc<Metrics>, timeout: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared {
            state,
            metrics,
            timeout,
        })
}

/// Serves until the listener fails or the task is dropped.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
) -> std::io::Result<()> {
    axum::serve(listener, router).await
}

/// Upstream: 200 `ok` when the socket exists and a GetInfo over it returns our
/// driver name; 404 when the file is gone; 500 with the error otherwise. While
/// the driver has not answered yet there is no socket by design, and the
/// process is doing its job, so that phase answers 200 (readiness says
/// not-ready): a liveness probe must not kill a registrar waiting for a slow driver.
async fn healthz(AxumState(s): AxumState<Shared>) -> (StatusCode, String) {
    let published = s.state.borrow().published.clone();
    let Some(published) = published else {
        return (StatusCode::OK, "ok: waiting for the CSI driver".into());
    };
    let (path, name) = (published.socket, published.registration.name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::error!(
                "{}, registration socket does not exist",
                messages::HEALTH_CHECK_FAILED
            );
            return (
                StatusCode::NOT_FOUND,
                "registration socket does not exist".into(),
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "{}", messages::HEALTH_CHECK_FAILED);
            return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
        Ok(_) => {}
    }
    let check = async {
        let channel = crate::uds::channel(&path).await.map_err(|e| {
            format!(
                "failed to connect to registration socket {}: {e}",
                path.display()
            )
        })?;
        let mut request = tonic::Request::new(InfoRequest {});
        request.metadata_mut().insert(
            SELF_PROBE,
            tonic::metadata::MetadataValue::from_static("healthz"),
        );
        let info = RegistrationClient::new(channel)
            .get_info(request)
            .await
            .map_err(|e| format!("failed to call GetInfo on registration socket: {e}"))?
            .into_inner();
        if info.name != name {
            return Err(format!(
                "registration socket answers for driver {:?}, expected {name:?}",
                info.name
            ));
        }
        Ok(())
    };
    let failure = match tokio::time::timeout(s.timeout, check).await {
        Ok(Ok(())) => {
            tracing::info!(v = 5, "{}", messages::HEALTH_CHECK_SUCCEEDED);
            return (StatusCode::OK, "ok".into());
        }
        Ok(Err(e)) => e,
        Err(_) => format!(
            "GetInfo on registration socket did not answer within {:?}",
            s.timeout
        ),
    };
    tracing::error!(error = %failure, "{}", messages::HEALTH_CHECK_FAILED);
    (StatusCode::INTERNAL_SERVER_ERROR, failure)
}

/// 200 once the kubelet accepted the registration; 503 with the reason before and after a refusal.
async fn readyz(AxumState(s): AxumState<Shared>) -> (StatusCode, String) {
    let phase = s.state.borrow().phase();
    match phase {
        Phase::Registered => (StatusCode::OK, "ok".into()),
        Phase::WaitingForDriver => (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the CSI driver".into(),
        ),
        Phase::WaitingForKubelet => (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the kubelet to register the plugin".into(),
        ),
        Phase::Rejected(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("kubelet refused the registration: {e}"),
        ),
        Phase::DriverUnreachable(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the CSI driver does not answer: {e}"),
        ),
        Phase::NotifyMissed(missed) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "waiting for the kubelet to register the plugin: it asked for the plugin's info but sent no NotifyRegistrationStatus within {:?} ({} in a row); the registration socket was created again so that it registers anew",
                missed.waited, missed.times
            ),
        ),
    }
}

async fn metrics_text(AxumState(s): AxumState<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}
