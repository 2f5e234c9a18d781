//! The one door through which the tests, benches and fuzz targets reach
//! inside the crate. Not part of the API: nothing here is stable.
//!
//! [`Harness`] runs the registrar in-process (the same `app` wiring as the
//! binary) and lets a test wait for the registration's state to change,
//! instead of for a line of log text.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;

pub use crate::health::router as http_router;
pub use crate::metrics::Metrics;
pub use crate::policy::file::{
    DEFAULT_MAX_RETRY_MS, DEFAULT_MIN_RETRY_MS, MAX_MEMORY_LIMIT_MIB, MAX_TIMEOUT_MS, Mode,
    OnError, PluginConfig, PolicyFile,
};
pub use crate::policy::{
    CallError, Chain, Context, DefaultPolicy, Failure, FailureAction, Hook, PluginHooks, Policy,
    PolicyError, Registration,
};
pub use crate::policy::{OciReference, OciSource, PluginSource, RegistryOptions};
/// The generated protos: the kubelet's `pluginregistration` and CSI Identity.
pub mod proto {
    pub use crate::proto::*;
}
pub use crate::registration::{KubeletCall, RegistrationService, Verdict, socket_path};
pub use crate::state::{Kubelet, Phase, Published, Snapshot, State, StateReader};
pub use crate::tools::standins::{
    Attempt, DriverCall, DriverSpec, FakeDriver, FakeKubelet, KubeletBehaviour, wait_until,
};
pub use crate::uds::channel as uds_channel;
/// Upstream's log messages.
pub mod messages {
    pub use crate::messages::*;
}

/// The kubelet's and the CSI spec's rules.
pub mod validate {
    pub use crate::validate::*;
}
pub use crate::config::Config;
pub use crate::error::AppError;

/// The wasmtime host and the author tools' helpers.
#[cfg(feature = "wasm")]
pub mod wasm {
    pub use crate::policy::wasm::cache::CacheKey;
    pub use crate::policy::wasm::{
        CompileError, Compiler, CompilerKilled, Host, Reservation, WasmPlugin,
    };
    pub use crate::tools::author::{Inspection, Sources, inspect, unpinned};

    /// Loads the policy file at `path` as the registrar does on this
    /// runtime (fetch here, compile on the blocking pool), with the plugins'
    /// WASI clocks on this runtime too; compiling in this process.
    pub async fn load_policy(
        path: &std::path::Path,
        metrics: &std::sync::Arc<crate::metrics::Metrics>,
    ) -> Result<std::sync::Arc<dyn crate::policy::Policy>, crate::policy::LoadError> {
        crate::policy::load::load(
            Some(path),
            crate::plugin_type::PluginType::Csi,
            None,
            metrics,
        )
        .await
    }

    /// Loads a policy file's plugins as the registrar does (its two steps:
    /// fetch, then compile and link), from synchronous code.
    pub fn load_chain(
        cfg: &crate::policy::file::PolicyFile,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> Result<crate::policy::Chain, crate::policy::PluginLoadError> {
        let components = crate::policy::fetch::run_blocking(crate::policy::load::fetch_all(cfg));
        let compiler = crate::policy::wasm::compiler_for(cfg, None);
        crate::policy::wasm::load_chain(cfg, compiler, None, components, metrics)
    }
}

/// What the pull path makes of what a registry sends (for the fuzz target).
pub mod oci {
    /// The most layers a plugin's image may have.
    pub const MAX_LAYERS: usize = crate::policy::manifest::MAX_LAYERS;

    /// The blobs a manifest's plan would fetch next, as store file names
    /// (`blobs/sha256/<name>`) with the sizes the manifest gives them, or
    /// why it is refused.
    pub fn planned_blobs(
        manifest: &[u8],
        path_in_image: Option<&str>,
        max: u64,
    ) -> Result<Vec<(String, u64)>, String> {
        crate::policy::manifest::planned(manifest, path_in_image, max)
            .map(|ds| ds.iter().map(|d| (d.digest.hex(), d.size)).collect())
    }

    /// The store file name of a digest as text, if it is one.
    pub fn store_name(digest: &str) -> Option<String> {
        crate::policy::Digest::parse(digest).ok().map(|d| d.hex())
    }
}

/// Generous: CI machines are slow and shared, and nothing here waits this
/// long unless something is broken.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The configuration the binary would get from these paths and upstream's
/// defaults, except that the driver is looked at only on events (a probe
/// interval of an hour), so a test sees what events did.
pub fn config(csi: &Path, registry: &Path) -> Config {
    Config {
        probe_interval: Some(Duration::from_secs(3600)),
        node_name: "node-a1".into(),
        ..Config::new(csi, &csi.display().to_string(), registry)
    }
}

/// The registrar, running in-process on the test's runtime. Stopped (as by
/// SIGTERM) when dropped.
pub struct Harness {
    state: StateReader,
    metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    reloads: mpsc::UnboundedSender<()>,
    task: Option<JoinHandle<Result<u8, AppError>>>,
}

impl Harness {
    /// Runs the registrar with `config`, loading the policy it names.
    pub fn start(config: Config) -> Self {
        Self::spawn(config, None)
    }

    /// Runs the registrar with `policy` instead of the one `config` names (a
    /// SIGHUP still loads the configured file).
    pub fn with_policy(config: Config, policy: Arc<dyn Policy>) -> Self {
        Self::spawn(config, Some(policy))
    }

    fn spawn(config: Config, policy: Option<Arc<dyn Policy>>) -> Self {
        let metrics = Arc::new(Metrics::new());
        let state = Arc::new(State::new(metrics.clone()));
        let reader = state.reader();
        let (stop, stopped) = oneshot::channel::<()>();
        let (reloads, reload_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(crate::app::run_with(
            config,
            async {
                let _ = stopped.await;
            },
            UnboundedReceiverStream::new(reload_rx),
            state,
            policy,
        ));
        Harness {
            state: reader,
            metrics,
            stop: Some(stop),
            reloads,
            task: Some(task),
        }
    }

    /// The state now.
    pub fn snapshot(&self) -> Snapshot {
        self.state.borrow().clone()
    }

    /// A reader of the state, to wait on from another task.
    pub fn reader(&self) -> StateReader {
        self.state.clone()
    }

    /// The metrics, as `/metrics` shows them.
    pub fn metrics(&self) -> String {
        self.metrics.encode()
    }

    /// Waits until the state satisfies `cond` (checked now, then at each
    /// change); panics after [`PATIENCE`], naming `what` and the last state,
    /// or if the registrar stops first.
    pub async fn wait_for(&mut self, what: &str, cond: impl FnMut(&Snapshot) -> bool) -> Snapshot {
        self.wait_for_within(PATIENCE, what, cond).await
    }

    /// [`Harness::wait_for`] with a bound of its own.
    pub async fn wait_for_within(
        &mut self,
        within: Duration,
        what: &str,
        mut cond: impl FnMut(&Snapshot) -> bool,
    ) -> Snapshot {
        let task = self.task.as_mut().expect("running");
        let waited = tokio::time::timeout(within, async {
            tokio::select! {
                seen = self.state.wait_for(|s| cond(s)) => Ok(seen.map(|s| s.clone())),
                ended = task => Err(ended),
            }
        })
        .await;
        match waited {
            Ok(Ok(Ok(snapshot))) => snapshot,
            Ok(Ok(Err(_))) => panic!("waiting for {what}: the registrar's state was dropped"),
            Ok(Err(ended)) => {
                self.task = None;
                panic!("waiting for {what}: the registrar stopped: {ended:?}")
            }
            Err(_) => panic!(
                "waiting for {what}: not within {within:?}; the state is {:#?}",
                self.snapshot()
            ),
        }
    }

    /// As SIGHUP: reload the policy.
    pub fn reload(&self) {
        let _ = self.reloads.send(());
    }

    /// As SIGTERM: stops the registrar and returns how it ended.
    pub async fn stop(mut self) -> Result<u8, AppError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await
    }

    /// Waits for the registrar to stop by itself (a policy's exit, an error).
    pub async fn exited(mut self) -> Result<u8, AppError> {
        self.join().await
    }

    async fn join(&mut self) -> Result<u8, AppError> {
        let task = self.task.take().expect("running");
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the registrar did not stop")
            .expect("the registrar's task panicked")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
