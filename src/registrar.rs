//! The running registrar: the loop, its state, and one method per kind of event.
//!
//! [`Registrar::run`] selects on the events; every handler returns at once, so
//! every event is heard while another waits. A retry back-off in particular is
//! a deadline the loop selects on, not a sleep.
//!
//! # A back-off, and what ends it early
//!
//! A failure policy that answers `retry(delay)` to a refusal closes the
//! registration socket (the kubelet deregisters the plugin) and sets a
//! deadline `delay` away; at the deadline the socket is created again and the
//! kubelet registers anew. Meanwhile:
//!
//! - a policy reload (SIGHUP) or a driver change that changes what is
//!   advertised ends the back-off at once: the refusal was about the old
//!   registration, so the new one is offered to the kubelet now;
//! - a reload or a driver change that leaves the registration as it was
//!   leaves the back-off running: the refusal still stands;
//! - the refusal count the failure policy sees (`attempt`) runs on until the
//!   kubelet accepts a registration, so a policy that backs off harder on
//!   each attempt keeps doing so across these events.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};

use crate::config::Config;
use crate::csi::{self, CsiError, Driver, DriverWatch, PluginInfo, Refreshed};
use crate::error::AppError;
use crate::policy::{self, Context, Failure, FailureAction, Policy, Registration};
use crate::registration::{KubeletCall, Listened, Slot, Verdict};
use crate::state::State;
use crate::validate;

/// The loop's state.
pub(crate) struct Registrar {
    config: Config,
    state: Arc<State>,
    policy: Arc<dyn Policy>,
    ctx: Context,
    /// The CSI driver (`None` for a DRA driver: nothing to ask or watch).
    driver: Option<Driver>,
    /// When to look at the driver again (`None`: never, `--driver-probe-interval=0`).
    watch: Option<DriverWatch>,
    slot: Slot,
    /// Consecutive refusals: how many, and since when.
    streak: Option<(u32, Instant)>,
    /// When the socket closed for a retry is created again.
    retry_at: Option<Instant>,
    /// When the verdict on the registration the kubelet started (its GetInfo)
    /// is overdue (`None`: none pending, or `--notify-timeout=0`).
    notify_due: Option<Instant>,
}

impl Registrar {
    /// The registrar for the driver `driver` answered as `ctx` says, serving
    /// on `slot`, not listening yet.
    pub(crate) fn new(
        config: Config,
        state: Arc<State>,
        policy: Arc<dyn Policy>,
        ctx: Context,
        driver: Option<Driver>,
        slot: Slot,
    ) -> Self {
        let watch = config
            .probe_interval
            .filter(|_| driver.is_some())
            .map(|every| DriverWatch::new(&config.csi_socket, every));
        Registrar {
            config,
            state,
            policy,
            ctx,
            driver,
            watch,
            slot,
            streak: None,
            retry_at: None,
            notify_due: None,
        }
    }

    /// Serves `registration`, then handles events until the failure policy
    /// decides to exit (its code) or an error. The socket is closed on return.
    pub(crate) async fn run(
        mut self,
        registration: &Registration,
        mut calls: mpsc::UnboundedReceiver<KubeletCall>,
        mut reloads: impl Stream<Item = ()> + Unpin,
    ) -> Result<u8, AppError> {
        self.listen(registration, "startup")?;
        if self.config.http_endpoint.is_none() {
            // Where upstream says it: after the registration server started.
            tracing::info!("{}", crate::messages::SKIPPING_HTTP_SERVER);
        }
        // Every arm returns at once: no event waits for another to finish.
        let code = loop {
            tokio::select! {
                Some(call) = calls.recv() => match call {
                    KubeletCall::Info => self.on_get_info(),
                    KubeletCall::Verdict(verdict) => {
                        if let Some(code) = self.on_verdict(verdict).await? {
                            break code;
                        }
                    }
                },
                () = due(self.retry_at) => self.on_retry_due()?,
                () = due(self.notify_due) => self.on_notify_missed()?,
                () = self.slot.changed() => self.on_registry_event()?,
                () = driver_event(self.driver.as_ref(), &mut self.watch) => self.on_driver_event().await?,
                Some(()) = reloads.next() => self.on_reload().await?,
            }
        };
        self.slot.close();
        self.state.closed();
        Ok(code)
    }

    /// The registration being advertised (set by the first [`Registrar::listen`]).
    fn current(&self) -> Registration {
        self.state
            .get()
            .published
            .expect("published at start-up")
            .registration
    }

    /// Serves `registration` (ending any back-off) and records the outcome.
    fn listen(&mut self, registration: &Registration, reason: &str) -> Result<(), AppError> {
        self.retry_at = None;
        // A new socket: the kubelet starts a new registration on it.
        self.notify_due = None;
        match self.slot.listen(&registration.name, reason)? {
            Listened::Serving(socket) => self.state.serving(registration, socket, reason),
            Listened::StandingBy(socket) => self.state.standing_by(registration, socket),
        }
        Ok(())
    }

    /// The back-off ended: offer the registration to the kubelet again.
    fn on_retry_due(&mut self) -> Result<(), AppError> {
        let current = self.current();
        self.listen(&current, "retry")
    }

    /// Verdicts missed in a row, as the state records them (a verdict clears it).
    fn notify_missed(&self) -> u32 {
        self.state.get().notify_missed.map_or(0, |m| m.times)
    }

    /// How long the kubelet's verdict is waited for after its GetInfo: the
    /// `--notify-timeout`, doubled for each verdict missed in a row (up to 8 times).
    fn notify_wait(&self) -> Option<Duration> {
        let doubling = 1u32 << self.notify_missed().min(3);
        self.config
            .notify_timeout
            .map(|t| t.saturating_mul(doubling))
    }

    /// The kubelet asked for the plugin's info: its verdict is now due. A
    /// GetInfo that repeats (a kubelet retrying) does not move the deadline.
    fn on_get_info(&mut self) {
        if self.notify_due.is_none()
            && let Some(wait) = self.notify_wait()
        {
            self.notify_due = Some(Instant::now() + wait);
        }
    }

    /// The kubelet started a registration and never gave its verdict (it
    /// was lost, kubernetes#138170): create the socket again, so that the
    /// kubelet, old or new, registers the plugin anew.
    fn on_notify_missed(&mut self) -> Result<(), AppError> {
        let waited = self.notify_wait().unwrap_or_default();
        self.notify_due = None;
        let times = self.notify_missed() + 1;
        self.state.notify_missed(times, waited);
        if !self.state.get().serving {
            // Standing by for a newer instance, or backing off: no socket of ours to renew.
            return Ok(());
        }
        tracing::warn!(
            waited = ?waited,
            times,
            next_wait = ?self.notify_wait().unwrap_or_default(),
            "The kubelet asked for the plugin's info but sent no NotifyRegistrationStatus; creating the registration socket again so that it registers anew"
        );
        let current = self.current();
        self.listen(&current, "notify-timeout")
    }

    /// The kubelet's verdict. `Some(code)`: the policy decided to exit.
    async fn on_verdict(&mut self, verdict: Verdict) -> Result<Option<u8>, AppError> {
        self.notify_due = None;
        let Verdict { registered, error } = verdict;
        self.state.verdict(registered, &error);
        if registered {
            self.streak = None;
            return Ok(None);
        }
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
                Some(code)
            }
            Ok(FailureAction::Ignore) => {
                tracing::warn!("Registration refused; the failure policy ignores it");
                None
            }
            Ok(FailureAction::Retry(delay)) => {
                tracing::warn!(
                    ?delay,
                    attempt,
                    "Registration refused; re-creating the registration socket after a delay"
                );
                self.slot.close(); // the kubelet deregisters the plugin
                self.state.backing_off(delay);
                self.retry_at = Some(Instant::now() + delay);
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "Failure policy failed; exiting with code 1");
                Some(policy::EXIT_FAILURE)
            }
        })
    }

    /// Something changed in the registry directory: re-create our socket if
    /// it was deleted, stand by for a newer instance's.
    fn on_registry_event(&mut self) -> Result<(), AppError> {
        let current = self.current();
        match self.slot.reconcile(&current.name)? {
            Some(Listened::Serving(socket)) => self.state.serving(&current, socket, "deleted"),
            Some(Listened::StandingBy(socket)) => self.state.standing_by(&current, socket),
            None => {}
        }
        Ok(())
    }

    /// The driver may have changed (its connection ended, its socket file
    /// changed, or a planned look is due): one GetPluginInfo, over a new
    /// connection if needed, proves it alive and tells whether it changed.
    async fn on_driver_event(&mut self) -> Result<(), AppError> {
        let timeout = self.config.timeout;
        let Some(driver) = &mut self.driver else {
            return Ok(());
        };
        let answer = tokio::time::timeout(timeout, async {
            let refreshed = driver.refresh().await.map_err(CsiError::Dial)?;
            Ok((driver.plugin_info(timeout).await?, refreshed))
        })
        .await
        .unwrap_or(Err(CsiError::Timeout(timeout)));
        if let Some(watch) = &mut self.watch {
            watch.answered(matches!(answer, Ok((_, Refreshed::Current))));
        }
        let now = match answer {
            Err(e) => {
                if !self.state.driver_down(e.to_string()) {
                    tracing::warn!(error = %e, "CSI driver does not answer; still advertising the registration");
                }
                return Ok(());
            }
            Ok((info, _)) => info,
        };
        if self.state.driver_answers() {
            tracing::info!(driver = %now.name, version = %now.vendor_version, "CSI driver answers again");
        }
        if now.name == self.ctx.driver_name && now.vendor_version == self.ctx.driver_version {
            return Ok(());
        }
        tracing::info!(
            from = %self.ctx.driver_name, from_version = %self.ctx.driver_version,
            to = %now.name, to_version = %now.vendor_version,
            "CSI driver changed; registering anew"
        );
        csi::check_name(&now.name)?;
        self.ctx = context(&self.config, &now);
        let next = decide(&self.policy, &self.ctx).await?;
        if next != self.current() || self.retry_at.is_none() {
            self.listen(&next, "driver-changed")?;
        }
        Ok(())
    }

    /// SIGHUP: load the policy again; a policy that fails to load or to
    /// decide is not taken, and the last good one stays.
    async fn on_reload(&mut self) -> Result<(), AppError> {
        let Some(file) = self.config.policy_config.clone() else {
            tracing::info!("SIGHUP without --policy-config: nothing to reload");
            return Ok(());
        };
        tracing::info!(file = %file.display(), "SIGHUP: reloading the policy");
        let loaded = load(&self.config, &self.state).await?;
        let reloaded = match loaded {
            Ok(p) => decide(&p, &self.ctx).await.map(|r| (p, r)),
            Err(e) => Err(e),
        };
        match reloaded {
            Err(e) => {
                self.state.reloaded(false);
                tracing::error!(error = %e, "Policy reload failed; keeping the last good policy");
            }
            Ok((policy, next)) => {
                self.policy = policy;
                if next != self.current() {
                    self.listen(&next, "policy-reloaded")?;
                }
                self.state.reloaded(true);
                tracing::info!("Policy reloaded");
            }
        }
        Ok(())
    }
}

/// Resolves at `at`; never without one. Cancel-safe.
async fn due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the driver should be looked at (never without a watch).
async fn driver_event(driver: Option<&Driver>, watch: &mut Option<DriverWatch>) {
    match (driver, watch) {
        (Some(driver), Some(watch)) => watch.changed(driver.closed()).await,
        _ => std::future::pending().await,
    }
}

/// Loads the policy the configuration names: fetching on this runtime,
/// compiling on its blocking pool (compiling must not stall the loop). The
/// outer error is a panic.
pub(crate) async fn load(
    config: &Config,
    state: &State,
) -> Result<Result<Arc<dyn Policy>, AppError>, AppError> {
    let file = config.policy_config.as_deref();
    match policy::load(
        file,
        config.plugin_type,
        config.compile_worker.clone(),
        state.metrics(),
    )
    .await
    {
        Err(policy::LoadError::Panicked) => Err(AppError::Panicked("policy loading")),
        other => Ok(other.map_err(AppError::from)),
    }
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

/// What a policy is asked about this driver.
pub(crate) fn context(config: &Config, info: &PluginInfo) -> Context {
    Context {
        node_name: config.node_name.clone(),
        driver_name: info.name.clone(),
        driver_version: info.vendor_version.clone(),
        csi_address: config.csi_address.clone(),
        kubelet_registration_path: config.kubelet_registration_path.clone(),
        plugin_registration_path: config.plugin_registration_path.display().to_string(),
        plugin_type: config.plugin_type,
        supported_versions: config.supported_versions.clone(),
    }
}

/// The registration the policy decides for `ctx`.
pub(crate) async fn decide(
    policy: &Arc<dyn Policy>,
    ctx: &Context,
) -> Result<Registration, AppError> {
    let (policy, ctx) = (policy.clone(), ctx.clone());
    let registration = blocking("the policy", move || policy.registration(&ctx)).await??;
    tracing::info!(name = %registration.name, endpoint = %registration.endpoint, versions = ?registration.supported_versions, "Registration decided");
    if let Err(e) = validate::endpoint(&registration.endpoint) {
        // Upstream advertises --kubelet-registration-path verbatim; keep doing so, but say why the kubelet may fail.
        tracing::warn!(error = %e, "Advertised endpoint looks unusable for the kubelet");
    }
    Ok(registration)
}
