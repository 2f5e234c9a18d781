//! The composition root: wires the CSI driver, the policy, the registration
//! socket and the HTTP server, and decides when to stop.
//!
//! Handlers never end the process. The kubelet's verdicts arrive on a channel
//! and are acted on here, after the kubelet got its reply.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Channel, Server};

use crate::cli::{Flags, MODE_REGISTRATION_PROBE};
use crate::health::{self, Phase, Status};
use crate::metrics::Metrics;
use crate::policy::config::PolicyConfig;
use crate::policy::{Context, DefaultPolicy, Failure, FailureAction, Policy, Registration};
use crate::proto::registration::registration_server::RegistrationServer;
use crate::registration::socket::{Bound, Generation, SocketState, socket_path};
use crate::registration::{AuthorityFix, RegistrationService, RegistrationSocket, Verdict};
use crate::{csi, validate};

/// How often the registration socket is checked for deletion when inotify is
/// not available.
pub const RECONCILE_EVERY: Duration = Duration::from_millis(500);
/// With inotify, a slow check as a safety net (a watch lost with its directory).
pub const RECONCILE_FALLBACK: Duration = Duration::from_secs(10);
/// How long in-flight kubelet calls may take to finish on the way out.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Everything the registrar needs to run, checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--csi-address` as given (for the policy context).
    pub csi_address: String,
    pub csi_socket: PathBuf,
    pub kubelet_registration_path: String,
    pub plugin_registration_path: PathBuf,
    pub timeout: Duration,
    /// TCP address for the HTTP server.
    pub http_endpoint: Option<String>,
    /// `None`: wait for the driver forever.
    pub driver_wait: Option<Duration>,
    /// How often the driver is probed after registration (`None`: never).
    pub probe_interval: Option<Duration>,
    pub node_name: String,
    pub policy_config: Option<PathBuf>,
}

/// Why the registrar stopped with a failure (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("kubelet-registration-path is a required parameter")]
    MissingRegistrationPath,
    #[error("only one of `--health-port` and `--http-endpoint` can be set")]
    HealthPortAndEndpoint,
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
    #[error("cannot listen on --http-endpoint {address}: {source}")]
    Http {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// What `main` should do after flag parsing.
#[derive(Debug)]
pub enum Start {
    Run(Box<Config>),
    /// `--version` or the probe mode: print nothing more, exit 0.
    ExitOk,
}

impl Config {
    /// Upstream's start-up checks, in upstream's order. `node_name` comes from
    /// `KUBE_NODE_NAME`, read by `main` so that tests never touch the environment.
    pub fn from_flags(flags: &Flags, node_name: String) -> Result<Start, AppError> {
        if flags.kubelet_registration_path.is_empty() {
            return Err(AppError::MissingRegistrationPath);
        }
        if flags.health_port > 0 && !flags.http_endpoint.is_empty() {
            return Err(AppError::HealthPortAndEndpoint);
        }
        if flags.mode == MODE_REGISTRATION_PROBE {
            tracing::info!(
                "--mode=kubelet-registration-probe is deprecated and does nothing; exiting 0"
            );
            return Ok(Start::ExitOk);
        }
        if flags.connection_timeout > Duration::ZERO {
            tracing::warn!("--connection-timeout is deprecated and has no effect");
        }
        if flags.automaxprocs {
            tracing::info!("--automaxprocs is Go-specific and has no effect here");
        }
        if flags.enable_pprof {
            tracing::info!(
                "--enable-pprof: Go's pprof endpoints do not exist in this registrar; /metrics is served instead"
            );
        }
        if !flags.ignored.is_empty() {
            tracing::warn!(args = ?flags.ignored, "ignoring arguments after the flags");
        }
        let http_endpoint = if flags.health_port > 0 {
            Some(format!(":{}", flags.health_port))
        } else if flags.http_endpoint.is_empty() {
            None
        } else {
            Some(flags.http_endpoint.clone())
        };
        Ok(Start::Run(Box::new(Config {
            csi_address: flags.csi_address.clone(),
            csi_socket: csi::socket_path(&flags.csi_address)?,
            kubelet_registration_path: flags.kubelet_registration_path.clone(),
            plugin_registration_path: flags.plugin_registration_path.clone(),
            timeout: flags.timeout,
            http_endpoint,
            driver_wait: (!flags.driver_wait_timeout.is_zero())
                .then_some(flags.driver_wait_timeout),
            probe_interval: (!flags.driver_probe_interval.is_zero())
                .then_some(flags.driver_probe_interval),
            node_name,
            policy_config: (!flags.policy_config.is_empty())
                .then(|| PathBuf::from(&flags.policy_config)),
        })))
    }
}

/// Binds Go-style addresses: `:9809` means every interface.
pub async fn bind_http(address: &str) -> Result<tokio::net::TcpListener, AppError> {
    let err = |source| AppError::Http {
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

/// Loads the policy: the built-in one without a file or without plugins (no
/// WebAssembly engine is created then), the plugin chain otherwise.
pub fn load_policy(config: &Config, metrics: &Arc<Metrics>) -> Result<Arc<dyn Policy>, AppError> {
    let Some(path) = &config.policy_config else {
        return Ok(Arc::new(DefaultPolicy));
    };
    let policy = PolicyConfig::from_file(path)?;
    if policy.plugins.is_empty() {
        tracing::info!(file = %path.display(), "policy file names no plugins; using the built-in policy");
        return Ok(Arc::new(DefaultPolicy));
    }
    #[cfg(feature = "wasm")]
    {
        let chain = crate::policy::wasm::load_chain(&policy, metrics.clone())
            .map_err(|e| AppError::PolicyLoad(e.to_string()))?;
        tracing::info!(plugins = ?chain.plugin_ids(), "policy plugins loaded");
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

/// How long to wait between GetPluginInfo attempts, at most.
const INFO_BACKOFF_CAP: Duration = Duration::from_secs(5);

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
    mut reloads: impl Stream<Item = ()> + Unpin,
    metrics: Arc<Metrics>,
    status: Arc<Status>,
) -> Result<u8, AppError> {
    let mut shutdown = std::pin::pin!(shutdown);

    let _http = match &config.http_endpoint {
        Some(address) => {
            let listener = bind_http(address).await?;
            tracing::info!(address = %address, "serving /healthz, /readyz and /metrics");
            let router = health::router(status.clone(), metrics.clone(), config.timeout);
            Some(AbortOnDrop(tokio::spawn(async move {
                if let Err(e) = health::serve(listener, router).await {
                    tracing::error!(error = %e, "HTTP server stopped");
                }
            })))
        }
        None => None,
    };

    let mut policy = load_policy_blocking(&config, &metrics).await?;

    let deadline = config.driver_wait.map(|w| Instant::now() + w);
    let (channel, info) = tokio::select! {
        found = discover(&config, deadline) => found?,
        () = &mut shutdown => return Ok(0),
    };
    let mut ctx = context(&config, &info);
    let mut current = decide(&policy, &ctx).await?;

    let (verdict_tx, mut verdicts) = mpsc::unbounded_channel();
    let service = RegistrationService::new(&current, verdict_tx, metrics.clone());
    let (conn_tx, conn_rx) = mpsc::channel::<std::io::Result<KubeletConn>>(16);
    let (stop_server, server_stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        Server::builder()
            .add_service(RegistrationServer::new(service.clone()))
            .serve_with_incoming_shutdown(ReceiverStream::new(conn_rx), async {
                let _ = server_stopped.await;
            }),
    );

    let mut slot = Slot {
        dir: config.plugin_registration_path.clone(),
        conns: conn_tx,
        metrics: metrics.clone(),
        phase: PhaseTracker::new(status.clone()),
        current: None,
        generation: Generation::now(),
        standby: None,
    };
    slot.listen(&current.name, "startup")?;

    let mut streak: Option<(u32, Instant)> = None;
    // Deletions are noticed by inotify at once and without waking up while
    // idle; the interval is the safety net, or the mechanism without inotify.
    let mut registry_events = watch_registry(&config.plugin_registration_path);
    let mut reconcile = reconcile_interval(registry_events.is_some());
    let mut probe =
        tokio::time::interval(config.probe_interval.unwrap_or(Duration::from_secs(3600)));
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    probe.reset();
    let code = loop {
        tokio::select! {
            () = &mut shutdown => break 0,
            Some(Verdict { registered, error }) = verdicts.recv() => {
                metrics.set_registered(registered);
                if registered {
                    streak = None;
                    slot.phase.kubelet(Phase::Registered);
                    continue;
                }
                slot.phase.kubelet(Phase::Rejected(error.clone()));
                let (attempt, since) = streak.map_or((1, Instant::now()), |(n, t)| (n + 1, t));
                streak = Some((attempt, since));
                let failure = Failure { error, attempt, elapsed: since.elapsed() };
                let action = {
                    let (policy, ctx) = (policy.clone(), ctx.clone());
                    tokio::task::spawn_blocking(move || policy.on_failure(&ctx, &failure))
                        .await
                        .expect("failure policy panicked")
                };
                match action {
                    Ok(FailureAction::Exit(code)) => {
                        tracing::error!(code, "registration refused; exiting as the failure policy decided");
                        break code;
                    }
                    Ok(FailureAction::Ignore) => tracing::warn!("registration refused; the failure policy ignores it"),
                    Ok(FailureAction::Retry(delay)) => {
                        tracing::warn!(?delay, attempt, "registration refused; re-creating the registration socket after a delay");
                        slot.close(); // the kubelet deregisters the plugin
                        tokio::select! {
                            () = tokio::time::sleep(delay) => {}
                            () = &mut shutdown => break 0,
                        }
                        slot.listen(&current.name, "retry")?;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "failure policy failed; exiting with code 1");
                        break crate::policy::EXIT_FAILURE;
                    }
                }
            }
            _ = reconcile.tick() => slot.reconcile(&current.name)?,
            event = next_event(&mut registry_events) => {
                match event {
                    Ok(gone) => {
                        if gone {
                            // The directory itself was removed or replaced: watch it anew.
                            registry_events = watch_registry(&config.plugin_registration_path);
                            reconcile = reconcile_interval(registry_events.is_some());
                        }
                        slot.reconcile(&current.name)?;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "watching the registration directory failed; polling instead");
                        registry_events = None;
                        reconcile = reconcile_interval(false);
                    }
                }
            }
            _ = probe.tick(), if config.probe_interval.is_some() => {
                let answer = match csi::probe(&channel, config.timeout).await {
                    Ok(()) => csi::get_plugin_info(&channel, config.timeout).await,
                    Err(e) => Err(e),
                };
                match answer {
                    Err(e) => {
                        if !slot.phase.driver_down(Some(e.to_string())) {
                            tracing::warn!(error = %e, "the CSI driver does not answer; still advertising the registration");
                        }
                    }
                    Ok(now) => {
                        if slot.phase.driver_down(None) {
                            metrics.driver_reconnected();
                            tracing::info!(driver = %now.name, version = %now.vendor_version, "the CSI driver answers again");
                        }
                        if now.name != ctx.driver_name || now.vendor_version != ctx.driver_version {
                            tracing::info!(
                                from = %ctx.driver_name, from_version = %ctx.driver_version,
                                to = %now.name, to_version = %now.vendor_version,
                                "the CSI driver changed; registering anew"
                            );
                            check_driver_name(&now.name)?;
                            ctx = context(&config, &now);
                            let next = decide(&policy, &ctx).await?;
                            service.set_registration(&next);
                            slot.listen(&next.name, "driver-changed")?;
                            current = next;
                        }
                    }
                }
            }
            Some(()) = reloads.next() => {
                let Some(file) = &config.policy_config else {
                    tracing::info!("SIGHUP: no --policy-config to reload");
                    continue;
                };
                tracing::info!(file = %file.display(), "SIGHUP: reloading the policy");
                let reloaded = match load_policy_blocking(&config, &metrics).await {
                    Ok(p) => decide(&p, &ctx).await.map(|r| (p, r)),
                    Err(e) => Err(e),
                };
                match reloaded {
                    Err(e) => {
                        metrics.policy_reload(false);
                        tracing::error!(error = %e, "policy reload failed; keeping the last good policy");
                    }
                    Ok((p, next)) => {
                        metrics.policy_reload(true);
                        policy = p;
                        if next != current {
                            service.set_registration(&next);
                            slot.listen(&next.name, "policy-reloaded")?;
                            current = next;
                        }
                        tracing::info!("policy reloaded");
                    }
                }
            }
        }
    };

    // Let in-flight kubelet calls (the NotifyRegistrationStatus that led here) get their reply.
    let _ = stop_server.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "kubelet calls still running after the grace period; stopping anyway");
    }
    slot.close();
    Ok(code)
}

/// A kubelet connection: any client's `:authority` gets through to h2.
type KubeletConn = AuthorityFix<UnixStream>;

type RegistryEvents = inotify::EventStream<[u8; 1024]>;

/// Watches the registration directory for entries removed or replaced.
fn watch_registry(dir: &std::path::Path) -> Option<RegistryEvents> {
    use inotify::{Inotify, WatchMask};
    let watch = || -> std::io::Result<RegistryEvents> {
        let inotify = Inotify::init()?;
        inotify.watches().add(
            dir,
            WatchMask::DELETE
                | WatchMask::MOVED_FROM
                | WatchMask::MOVED_TO
                | WatchMask::CREATE
                | WatchMask::DELETE_SELF
                | WatchMask::MOVE_SELF,
        )?;
        inotify.into_event_stream([0u8; 1024])
    };
    watch()
        .inspect_err(|e| tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the registration directory; polling it instead"))
        .ok()
}

fn reconcile_interval(watched: bool) -> tokio::time::Interval {
    let period = if watched {
        RECONCILE_FALLBACK
    } else {
        RECONCILE_EVERY
    };
    let mut interval = tokio::time::interval_at(Instant::now() + period, period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// The next directory event: `Ok(true)` when the directory itself went away.
/// Never resolves without a watch.
async fn next_event(events: &mut Option<RegistryEvents>) -> std::io::Result<bool> {
    use inotify::EventMask;
    let Some(stream) = events else {
        return std::future::pending().await;
    };
    match stream.next().await {
        Some(Ok(event)) => Ok(event
            .mask
            .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED)),
        Some(Err(e)) => Err(e),
        None => Err(std::io::Error::other("inotify stream ended")),
    }
}

async fn load_policy_blocking(
    config: &Config,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn Policy>, AppError> {
    let (config, metrics) = (config.clone(), metrics.clone());
    tokio::task::spawn_blocking(move || load_policy(&config, &metrics))
        .await
        .expect("policy loading panicked")
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
) -> Result<(Channel, csi::PluginInfo), AppError> {
    let remaining = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let channel = csi::connect(&config.csi_socket, remaining()).await?;
    let mut backoff = Duration::from_millis(100);
    loop {
        match csi::get_plugin_info(&channel, config.timeout).await {
            Ok(info) => {
                check_driver_name(&info.name)?;
                tracing::info!(driver = %info.name, version = %info.vendor_version, "CSI driver name");
                return Ok((channel, info));
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
    let registration = tokio::task::spawn_blocking(move || policy.registration(&ctx))
        .await
        .expect("policy panicked")?;
    tracing::info!(name = %registration.name, endpoint = %registration.endpoint, versions = ?registration.supported_versions, "registration decided");
    if let Err(e) = validate::endpoint(&registration.endpoint) {
        // Upstream advertises --kubelet-registration-path verbatim; keep doing so, but say why the kubelet may fail.
        tracing::warn!(error = %e, "the advertised endpoint looks unusable for the kubelet");
    }
    Ok(registration)
}

/// What `/readyz` shows: the kubelet's side, unless the driver is away.
struct PhaseTracker {
    status: Arc<Status>,
    kubelet: Phase,
    driver_down: Option<String>,
}

impl PhaseTracker {
    fn new(status: Arc<Status>) -> Self {
        PhaseTracker {
            status,
            kubelet: Phase::WaitingForKubelet,
            driver_down: None,
        }
    }

    fn kubelet(&mut self, phase: Phase) {
        self.kubelet = phase;
        self.publish();
    }

    /// Records whether the driver answers; returns whether it was already down.
    fn driver_down(&mut self, error: Option<String>) -> bool {
        let was_down = self.driver_down.is_some();
        self.driver_down = error;
        self.publish();
        was_down
    }

    fn publish(&self) {
        self.status.set_phase(match &self.driver_down {
            Some(e) => Phase::DriverUnreachable(e.clone()),
            None => self.kubelet.clone(),
        });
    }
}

/// The registration socket: where it is, and the only code that creates,
/// re-creates or removes it.
struct Slot {
    dir: PathBuf,
    conns: mpsc::Sender<std::io::Result<KubeletConn>>,
    metrics: Arc<Metrics>,
    phase: PhaseTracker,
    current: Option<Listening>,
    /// When this instance started: of two live instances, the newer keeps the path.
    generation: Generation,
    /// Set while a newer instance's socket holds our path.
    standby: Option<PathBuf>,
}

impl Slot {
    /// (Re)creates `<dir>/<name>-reg.sock` (see [`RegistrationSocket::bind`]
    /// for how the path is taken over). The previous socket is dropped only
    /// once the new one is in place: at the same path it was swapped out
    /// atomically, under another name it is removed then.
    fn listen(&mut self, name: &str, reason: &'static str) -> Result<(), AppError> {
        let path = socket_path(&self.dir, name);
        let previous = self.current.as_ref().map(|l| &l.socket);
        let Some(listening) =
            Listening::start(path.clone(), self.generation, previous, &self.conns)?
        else {
            self.close();
            self.standby = Some(path.clone());
            tracing::warn!(socket = %path.display(), reason, "a newer instance's registration socket is at the path; leaving it to that instance");
            return Ok(());
        };
        self.standby = None;
        if let Some(mut previous) = self.current.replace(listening)
            && previous.socket.path() == path
        {
            previous.socket.disown(); // swapped out and removed by the takeover
        }
        self.metrics.socket_created(reason);
        self.phase.status.set_socket(path.clone(), name.to_owned());
        self.phase.kubelet(Phase::WaitingForKubelet);
        tracing::info!(socket = %path.display(), reason, "registration socket ready; waiting for the kubelet");
        Ok(())
    }

    /// Removes the socket (if it is still ours): the kubelet deregisters.
    fn close(&mut self) {
        self.current = None;
    }

    /// Re-creates the socket if someone deleted it; leaves a newer instance's alone.
    fn reconcile(&mut self, name: &str) -> Result<(), AppError> {
        let Some(current) = &self.current else {
            // Standing by for a newer instance: should its socket vanish (it
            // exited, or the clocks disagree on which of us is newer), take the
            // path back rather than leave the driver unregistered.
            if let Some(path) = &self.standby
                && !path.exists()
            {
                tracing::warn!(socket = %path.display(), "the newer instance's registration socket is gone; creating ours");
                self.listen(name, "deleted")?;
            }
            return Ok(());
        };
        match current.socket.state() {
            SocketState::Ours => {}
            SocketState::Missing => {
                tracing::warn!(socket = %current.socket.path().display(), "registration socket was deleted; re-creating it so the kubelet registers again");
                self.listen(name, "deleted")?;
            }
            SocketState::Replaced => {
                // Another instance's socket: a newer one keeps it (and we stop
                // watching); an older or dead one's is taken back.
                tracing::info!(socket = %current.socket.path().display(), "registration socket was replaced by another instance's");
                self.listen(name, "replaced")?;
            }
        }
        Ok(())
    }
}

/// A bound registration socket and the task feeding its connections to the server.
struct Listening {
    socket: RegistrationSocket,
    _accept: AbortOnDrop,
}
impl Listening {
    /// `None`: a newer instance's live socket is at the path.
    fn start(
        path: PathBuf,
        generation: Generation,
        previous: Option<&RegistrationSocket>,
        conns: &mpsc::Sender<std::io::Result<KubeletConn>>,
    ) -> Result<Option<Self>, AppError> {
        let (socket, listener) = match RegistrationSocket::bind(path, generation, previous)? {
            Bound::Ours(socket, listener) => (socket, listener),
            Bound::Taken => return Ok(None),
        };
        let conns = conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let conn = listener
                    .accept()
                    .await
                    .map(|(stream, _)| AuthorityFix::new(stream));
                if let Err(e) = &conn {
                    tracing::warn!(error = %e, "accepting a kubelet connection failed");
                    continue;
                }
                if conns.send(conn).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(Listening {
            socket,
            _accept: AbortOnDrop(accept),
        }))
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
