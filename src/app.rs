//! The wiring: the CSI driver, the policy, the registration socket, the
//! kubelet's service and the HTTP server, around one loop that hands each
//! event to the [`Registrar`]. The only place that decides to stop.
//!
//! Handlers never end the process: the kubelet's verdicts arrive on a
//! channel and are acted on here, after the kubelet got its reply.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;

use crate::config::Config;
use crate::csi;
use crate::error::AppError;
use crate::health;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::proto::registration::registration_server::RegistrationServer;
use crate::registrar::{self, Registrar};
use crate::registration::{AbortOnDrop, RegistrationService, Slot};
use crate::state::State;

/// Runs the registrar until `shutdown` resolves (exit code 0) or the policy
/// decides to exit (its code); each item of `reloads` re-reads the policy.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reloads: impl Stream<Item = ()> + Unpin,
) -> Result<u8, AppError> {
    let state = Arc::new(State::new(Arc::new(Metrics::new())));
    run_with(config, shutdown, reloads, state, None).await
}

/// [`run`] with the state supplied by the caller (the demo and the tests read
/// it), and optionally a policy given as code instead of the configured one.
pub(crate) async fn run_with(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reloads: impl Stream<Item = ()> + Unpin,
    state: Arc<State>,
    policy: Option<Arc<dyn Policy>>,
) -> Result<u8, AppError> {
    // SIGTERM ends the registrar at once, whatever it is doing: a plugin call
    // or a driver probe in flight is abandoned, and dropping the loop's state
    // removes the registration socket.
    tokio::select! {
        biased;
        () = shutdown => Ok(0),
        code = serve(config, reloads, state, policy) => code,
    }
}

/// How long in-flight kubelet calls may take to finish on the way out.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The registrar until the policy decides to exit (or an error).
async fn serve(
    config: Config,
    reloads: impl Stream<Item = ()> + Unpin,
    state: Arc<State>,
    policy: Option<Arc<dyn Policy>>,
) -> Result<u8, AppError> {
    let _http = match &config.http_endpoint {
        Some(address) => Some(serve_http(address, &state, config.timeout).await?),
        None => None,
    };
    let policy = match policy {
        Some(policy) => policy,
        None => registrar::load(&config, &state).await??,
    };

    let (driver, info) = match &config.driver_name {
        // A DRA driver (the only kind named by the flag): its service socket is the kubelet's to dial.
        Some(name) => {
            tracing::info!(driverName = %name, pluginType = %config.plugin_type, "Registering a DRA driver named by --driver-name");
            (None, csi::PluginInfo::named(name))
        }
        None => {
            let deadline = config.driver_wait.map(|w| Instant::now() + w);
            let (driver, info) =
                csi::discover(&config.csi_socket, config.timeout, deadline).await?;
            (Some(driver), info)
        }
    };
    let ctx = registrar::context(&config, &info);
    let registration = registrar::decide(&policy, &ctx).await?;

    let (calls_tx, calls) = mpsc::unbounded_channel();
    let service = RegistrationService::new(state.reader(), calls_tx, state.metrics().clone())
        .of_type(config.plugin_type);
    let (conn_tx, conn_rx) = mpsc::channel(16);
    let (stop_server, server_stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(RegistrationServer::new(service))
            .serve_with_incoming_shutdown(ReceiverStream::new(conn_rx), async {
                let _ = server_stopped.await;
            }),
    );
    let slot = Slot::new(
        config.plugin_registration_path.clone(),
        config.pod_uid.clone(),
        conn_tx,
    );
    let registrar = Registrar::new(config, state, policy, ctx, driver, slot);
    let code = registrar.run(&registration, calls, reloads).await?;

    // Let in-flight kubelet calls (the NotifyRegistrationStatus that led here) get their reply.
    let _ = stop_server.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "Kubelet calls still running after the grace period; stopping anyway");
    }
    Ok(code)
}

async fn serve_http(
    address: &str,
    state: &State,
    timeout: Duration,
) -> Result<AbortOnDrop, AppError> {
    let listener = health::bind_http(address).await?;
    tracing::info!(endpoint = %address, "{}", crate::messages::STARTING_HTTP_SERVER);
    let router = health::router(state.reader(), state.metrics().clone(), timeout);
    Ok(AbortOnDrop(tokio::spawn(async move {
        if let Err(e) = health::serve(listener, router).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    })))
}
