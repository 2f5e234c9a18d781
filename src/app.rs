//! The composition root: wires the CSI driver, the policy, the registration
//! socket and the HTTP server, and decides when to stop.
//!
//! [`run`] sets everything up and runs one loop; each of its arms is a method of
//! [`Registrar`]. Handlers never end the process: the kubelet's verdicts arrive
//! on a channel and are acted on here, after the kubelet got its reply.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Server;

use crate::config::{Config, ConfigError};
use crate::csi::{self, CsiError, Driver, DriverWatch, Refreshed};
use crate::health::{self, HttpError, Phase, Status};
use crate::metrics::Metrics;
use crate::policy::config::PolicyConfig;
use crate::policy::{Context, DefaultPolicy, Failure, FailureAction, Policy, Registration};
use crate::proto::registration::registration_server::RegistrationServer;
use crate::registration::slot::{AbortOnDrop, Listened};
use crate::registration::{RegistrationService, Slot, Verdict};
use crate::validate;

/// How long in-flight kubelet calls may take to finish on the way out.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long to wait between GetPluginInfo attempts, at most.
const INFO_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Why the registrar stopped with a failure (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Csi(#[from] csi::CsiError),
    #[error("driver name is empty")]
    EmptyDriverName,
    #[error("the CSI driver's name is unusable: {0}")]
    DriverName(#[from] validate::NameError),
    #[error(transparent)]
    Socket(#[from] crate::registration::SocketError),
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error(transparent)]
    PolicyConfig(#[from] crate::policy::config::ConfigError),
    #[error("{0}")]
    PolicyLoad(String),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("{0} panicked; see the log above")]
    Panicked(&'static str),
}

/// Loads the policy: the built-in one without a file or without plugins (no
/// WebAssembly engine is created then), the plugin chain otherwise.
pub fn load_policy(config: &Config, metrics: &Arc<Metrics>) -> Result<Arc<dyn Policy>, AppError> {
    let Some(path) = &config.policy_config else {
        return Ok(Arc::new(DefaultPolicy));
    };
    let policy = PolicyConfig::from_file(path)?;
    if policy.plugins.is_empty() {
        tracing::info!(file = %path.display(), "Policy file names no plugins; using the built-in policy");
        return Ok(Arc::new(DefaultPolicy));
    }
    #[cfg(feature = "wasm")]
    {
        let chain = crate::policy::wasm::load_chain(&policy, metrics.clone())
            .map_err(|e| AppError::PolicyLoad(e.to_string()))?;
        tracing::info!(plugins = ?chain.plugin_ids(), "Policy plugins loaded");
        Ok(Arc::new(chain))
    }
    #[cfg(not(feature = "wasm"))]
    {
        let _ = metrics;
        Err(AppError::PolicyLoad(format!(
            "policy file {} names plugins, but this build has no WebAssembly policy host (built without the `wasm` feature)",
            path.display()
        )))
    }
}

/// Logs why the registrar stops with exit code 1, with upstream's message
/// where upstream has one for that failure.
pub fn log_failure(e: &AppError) {
    use crate::messages as m;
    match e {
        AppError::Config(ConfigError::MissingRegistrationPath) => {
            tracing::error!("{}", m::REGISTRATION_PATH_REQUIRED);
        }
        AppError::Config(ConfigError::HealthPortAndEndpoint) => tracing::error!("{e}"),
        AppError::Csi(csi::CsiError::ConnectTimeout { .. }) => {
            tracing::error!(error = %e, "{}", m::ERROR_CONNECTING);
        }
        AppError::Csi(_) | AppError::EmptyDriverName | AppError::DriverName(_) => {
            tracing::error!(error = %e, "{}", m::ERROR_DRIVER_NAME);
        }
        AppError::Socket(_) => tracing::error!(error = %e, "{}", m::FAILED_TO_LISTEN),
        _ => tracing::error!(error = %e, "Registrar stopped with an error"),
    }
}

/// Runs the registrar until `shutdown` resolves or the policy decides to exit;
/// each item of `reloads` re-reads the policy. Returns the exit code.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reloads: impl Stream<Item = ()> + Unpin,
) -> Result<u8, AppError> {
    let metrics = Arc::new(Metrics::new());
    let status = Arc::new(Status::default());
    run_with(config, shutdown, reloads, metrics, status).await
}

/// [`run`] with the metrics and status supplied by the caller (the demo reads them).
pub async fn run_with(
    config: Config,
    shutdown: impl Future<Output = ()>,
    reloads: impl Stream<Item = ()> + Unpin,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
) -> Result<u8, AppError> {
    // SIGTERM ends the registrar at once, whatever it is doing: a plugin call
    // or a driver probe in flight is abandoned, and dropping the loop's state
    // removes the registration socket.
    tokio::select! {
        biased;
        () = shutdown => Ok(0),
        code = serve(config, reloads, metrics, status) => code,
    }
}

/// The registrar until the policy decides to exit (or an error).
async fn serve(
    config: Config,
    mut reloads: impl Stream<Item = ()> + Unpin,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
) -> Result<u8, AppError> {
    let _http = match &config.http_endpoint {
        Some(address) => Some(serve_http(address, &status, &metrics, config.timeout).await?),
        None => None,
    };
    let policy = blocking("policy loading", {
        let (config, metrics) = (config.clone(), metrics.clone());
        move || load_policy(&config, &metrics)
    })
    .await??;

    let deadline = config.driver_wait.map(|w| Instant::now() + w);
    let (driver, info) = discover(&config, deadline).await?;
    let ctx = context(&config, &info);
    let registration = decide(&policy, &ctx).await?;

    let (verdict_tx, mut verdicts) = mpsc::unbounded_channel();
    let service = RegistrationService::new(status.advertised(), verdict_tx, metrics.clone());
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
        conn_tx,
        metrics.clone(),
        status.advertised(),
    );
    let watch = config
        .probe_interval
        .map(|every| DriverWatch::new(&config.csi_socket, every));
    let mut registrar = Registrar {
        config,
        metrics,
        status,
        policy,
        ctx,
        driver,
        watch,
        slot,
        streak: None,
    };
    registrar.listen(&registration, "startup")?;
    if registrar.config.http_endpoint.is_none() {
        // Where upstream says it: after the registration server started.
        tracing::info!("{}", crate::messages::SKIPPING_HTTP_SERVER);
    }

    let code = loop {
        tokio::select! {
            Some(verdict) = verdicts.recv() => match registrar.on_verdict(verdict).await? {
                Next::Continue => {}
                Next::Exit(code) => break code,
                Next::RetryAfter(delay) => {
                    tokio::time::sleep(delay).await;
                    registrar.relisten("retry")?;
                }
            },
            () = registrar.slot.changed() => registrar.on_registry_event()?,
            () = driver_event(&registrar.driver, &mut registrar.watch) => registrar.on_driver_event().await?,
            Some(()) = reloads.next() => registrar.on_reload().await?,
        }
    };

    // Let in-flight kubelet calls (the NotifyRegistrationStatus that led here) get their reply.
    let _ = stop_server.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "Kubelet calls still running after the grace period; stopping anyway");
    }
    registrar.slot.close();
    Ok(code)
}

/// What the loop does after a kubelet verdict.
enum Next {
    Continue,
    Exit(u8),
    /// The socket is closed; create it again after the delay.
    RetryAfter(Duration),
}

/// The running registrar: the loop's state, one method per kind of event.
struct Registrar {
    config: Config,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
    policy: Arc<dyn Policy>,
    ctx: Context,
    /// The CSI driver.
    driver: Driver,
    /// When to look at the driver again (`None`: never, `--driver-probe-interval=0`).
    watch: Option<DriverWatch>,
    slot: Slot,
    /// Consecutive refusals: how many, and since when.
    streak: Option<(u32, Instant)>,
}

impl Registrar {
    /// The registration being advertised (set by the first [`Registrar::listen`]).
    fn current(&self) -> Registration {
        self.status
            .advertised()
            .get()
            .expect("published at start-up")
            .registration
    }

    fn listen(
        &mut self,
        registration: &Registration,
        reason: &'static str,
    ) -> Result<(), AppError> {
        if self.slot.listen(registration, reason)? == Listened::Serving {
            self.status.set_phase(Phase::WaitingForKubelet);
        }
        Ok(())
    }

    fn relisten(&mut self, reason: &'static str) -> Result<(), AppError> {
        let current = self.current();
        self.listen(&current, reason)
    }

    async fn on_verdict(&mut self, verdict: Verdict) -> Result<Next, AppError> {
        let Verdict { registered, error } = verdict;
        self.metrics.set_registered(registered);
        if registered {
            self.streak = None;
            self.status.set_phase(Phase::Registered);
            return Ok(Next::Continue);
        }
        self.status.set_phase(Phase::Rejected(error.clone()));
        let (attempt, since) = self.streak.map_or((1, Instant::now()), |(n, t)| (n + 1, t));
        self.streak = Some((attempt, since));
        let failure = Failure {
            error,
            attempt,
            elapsed: since.elapsed(),
        };
        let (policy, ctx) = (self.policy.clone(), self.ctx.clone());
        let action = blocking("the failure policy", move || {
            policy.on_failure(&ctx, &failure)
        })
        .await?;
        Ok(match action {
            Ok(FailureAction::Exit(code)) => {
                tracing::error!(
                    code,
                    "Registration refused; exiting as the failure policy decided"
                );
                Next::Exit(code)
            }
            Ok(FailureAction::Ignore) => {
                tracing::warn!("Registration refused; the failure policy ignores it");
                Next::Continue
            }
            Ok(FailureAction::Retry(delay)) => {
                tracing::warn!(
                    ?delay,
                    attempt,
                    "Registration refused; re-creating the registration socket after a delay"
                );
                self.slot.close(); // the kubelet deregisters the plugin
                Next::RetryAfter(delay)
            }
            Err(e) => {
                tracing::error!(error = %e, "Failure policy failed; exiting with code 1");
                Next::Exit(crate::policy::EXIT_FAILURE)
            }
        })
    }

    fn on_registry_event(&mut self) -> Result<(), AppError> {
        if self.slot.reconcile()? == Some(Listened::Serving) {
            self.status.set_phase(Phase::WaitingForKubelet);
        }
        Ok(())
    }

    /// The driver may have changed (its connection ended, its socket file
    /// changed, or a planned look is due): one GetPluginInfo, over a new
    /// connection if needed, proves it alive and tells whether it changed.
    async fn on_driver_event(&mut self) -> Result<(), AppError> {
        let timeout = self.config.timeout;
        let answer = tokio::time::timeout(timeout, async {
            let refreshed = self.driver.refresh().await.map_err(CsiError::Dial)?;
            Ok((self.driver.plugin_info(timeout).await?, refreshed))
        })
        .await
        .unwrap_or(Err(CsiError::Timeout(timeout)));
        if let Some(watch) = &mut self.watch {
            watch.answered(matches!(answer, Ok((_, Refreshed::Current))));
        }
        match answer.map(|(info, _)| info) {
            Err(e) => {
                if !self.status.set_driver_down(Some(e.to_string())) {
                    tracing::warn!(error = %e, "CSI driver does not answer; still advertising the registration");
                }
            }
            Ok(now) => {
                if self.status.set_driver_down(None) {
                    self.metrics.driver_reconnected();
                    tracing::info!(driver = %now.name, version = %now.vendor_version, "CSI driver answers again");
                }
                if now.name != self.ctx.driver_name || now.vendor_version != self.ctx.driver_version
                {
                    tracing::info!(
                        from = %self.ctx.driver_name, from_version = %self.ctx.driver_version,
                        to = %now.name, to_version = %now.vendor_version,
                        "CSI driver changed; registering anew"
                    );
                    check_driver_name(&now.name)?;
                    self.ctx = context(&self.config, &now);
                    let next = decide(&self.policy, &self.ctx).await?;
                    self.listen(&next, "driver-changed")?;
                }
            }
        }
        Ok(())
    }

    async fn on_reload(&mut self) -> Result<(), AppError> {
        let Some(file) = &self.config.policy_config else {
            tracing::info!("SIGHUP without --policy-config: nothing to reload");
            return Ok(());
        };
        tracing::info!(file = %file.display(), "SIGHUP: reloading the policy");
        let loaded = blocking("policy loading", {
            let (config, metrics) = (self.config.clone(), self.metrics.clone());
            move || load_policy(&config, &metrics)
        })
        .await?;
        let reloaded = match loaded {
            Ok(p) => decide(&p, &self.ctx).await.map(|r| (p, r)),
            Err(e) => Err(e),
        };
        match reloaded {
            Err(e) => {
                self.metrics.policy_reload(false);
                tracing::error!(error = %e, "Policy reload failed; keeping the last good policy");
            }
            Ok((policy, next)) => {
                self.metrics.policy_reload(true);
                self.policy = policy;
                if next != self.current() {
                    self.listen(&next, "policy-reloaded")?;
                }
                tracing::info!("Policy reloaded");
            }
        }
        Ok(())
    }
}

async fn serve_http(
    address: &str,
    status: &Arc<Status>,
    metrics: &Arc<Metrics>,
    timeout: Duration,
) -> Result<AbortOnDrop, HttpError> {
    let listener = health::bind_http(address).await?;
    tracing::info!(endpoint = %address, "{}", crate::messages::STARTING_HTTP_SERVER);
    let router = health::router(status.clone(), metrics.clone(), timeout);
    Ok(AbortOnDrop(tokio::spawn(async move {
        if let Err(e) = health::serve(listener, router).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    })))
}

/// Runs `f` on the blocking pool (plugin calls and compilation must not stall
/// the runtime); a panic in it becomes an error.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AppError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| AppError::Panicked(what))
}

/// Resolves when the driver should be looked at (never without a watch).
async fn driver_event(driver: &Driver, watch: &mut Option<DriverWatch>) {
    match watch {
        Some(watch) => watch.changed(driver.closed()).await,
        None => std::future::pending().await,
    }
}

fn check_driver_name(name: &str) -> Result<(), AppError> {
    if name.is_empty() {
        return Err(AppError::EmptyDriverName);
    }
    Ok(validate::driver_name(name)?)
}

/// Connects to the driver and asks its name, retrying with backoff until
/// `deadline` (`None`: forever). A name that breaks the rules is final.
async fn discover(
    config: &Config,
    deadline: Option<Instant>,
) -> Result<(Driver, csi::PluginInfo), AppError> {
    let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let driver = Driver::connect(&config.csi_socket, remaining()).await?;
    tracing::info!(v = 1, "{}", crate::messages::DISCOVERING_DRIVER_NAME);
    let mut backoff = Duration::from_millis(100);
    loop {
        match driver.plugin_info(config.timeout).await {
            Ok(info) => {
                check_driver_name(&info.name)?;
                tracing::info!(v = 2, csiDriverName = %info.name, vendorVersion = %info.vendor_version, "{}", crate::messages::CSI_DRIVER_NAME);
                return Ok((driver, info));
            }
            Err(e) if remaining().is_some_and(|r| r.is_zero()) => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "GetPluginInfo failed; retrying");
                tokio::time::sleep(remaining().map_or(backoff, |r| r.min(backoff))).await;
                backoff = (backoff * 2).min(INFO_BACKOFF_CAP);
            }
        }
    }
}

fn context(config: &Config, info: &csi::PluginInfo) -> Context {
    Context {
        node_name: config.node_name.clone(),
        driver_name: info.name.clone(),
        driver_version: info.vendor_version.clone(),
        csi_address: config.csi_address.clone(),
        kubelet_registration_path: config.kubelet_registration_path.clone(),
        plugin_registration_path: config.plugin_registration_path.display().to_string(),
    }
}

async fn decide(policy: &Arc<dyn Policy>, ctx: &Context) -> Result<Registration, AppError> {
    let (policy, ctx) = (policy.clone(), ctx.clone());
    let registration = blocking("the policy", move || policy.registration(&ctx)).await??;
    tracing::info!(name = %registration.name, endpoint = %registration.endpoint, versions = ?registration.supported_versions, "Registration decided");
    if let Err(e) = validate::endpoint(&registration.endpoint) {
        // Upstream advertises --kubelet-registration-path verbatim; keep doing so, but say why the kubelet may fail.
        tracing::warn!(error = %e, "Advertised endpoint looks unusable for the kubelet");
    }
    Ok(registration)
}
