//! Peers of the registrar, built from the same protos: a CSI driver and a
//! kubelet. The demo runs them; the tests drive them. They follow the real
//! peers closely (the kubelet's checks and error texts are those of
//! `operation_generator.go` and `csi_plugin.go`), but keep no state on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

use crate::plugin_type::PluginType;
use crate::proto::csi::{
    GetPluginInfoRequest, GetPluginInfoResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    ProbeRequest, ProbeResponse, Topology,
    identity_server::{Identity, IdentityServer},
    node_client::NodeClient,
    node_server::{Node, NodeServer},
};
use crate::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, registration_client::RegistrationClient,
};
use crate::validate::{KubeletVersion, highest_supported_version};

/// How the stand-in driver answers.
#[derive(Debug, Clone)]
pub struct DriverSpec {
    /// What GetPluginInfo answers as the name.
    pub name: String,
    /// What GetPluginInfo answers as the vendor version.
    pub vendor_version: String,
    /// What NodeGetInfo answers.
    pub node_id: String,
    /// Answer `GetPluginInfo` with this error instead.
    pub info_error: Option<(tonic::Code, String)>,
    /// Wait this long before answering `GetPluginInfo`.
    pub info_delay: Duration,
    /// Fail this many `GetPluginInfo` calls (Unavailable) before answering.
    pub info_failures: u32,
    /// Close every connection this long after it opened (gRPC's
    /// `MaxConnectionAge`), letting calls in flight finish.
    pub max_connection_age: Option<Duration>,
}

impl DriverSpec {
    /// A driver that answers with `name`.
    pub fn named(name: &str) -> Self {
        DriverSpec {
            name: name.to_owned(),
            vendor_version: "1.2.3".to_owned(),
            node_id: "node-1".to_owned(),
            info_error: None,
            info_delay: Duration::ZERO,
            info_failures: 0,
            max_connection_age: None,
        }
    }
}

/// A call the stand-in driver received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverCall {
    /// `Identity/GetPluginInfo`.
    GetPluginInfo,
    /// `Identity/Probe`.
    Probe,
    /// `Node/NodeGetInfo`.
    NodeGetInfo,
}

#[derive(Clone)]
struct DriverService {
    spec: Arc<DriverSpec>,
    calls: mpsc::UnboundedSender<DriverCall>,
    info_calls: Arc<std::sync::atomic::AtomicU32>,
}

#[tonic::async_trait]
impl Identity for DriverService {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        let _ = self.calls.send(DriverCall::GetPluginInfo);
        if !self.spec.info_delay.is_zero() {
            // Even a zero sleep waits for the next tick of tokio's 1 ms timer.
            tokio::time::sleep(self.spec.info_delay).await;
        }
        let n = self
            .info_calls
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n < self.spec.info_failures {
            return Err(Status::unavailable(format!(
                "still initializing ({} of {})",
                n + 1,
                self.spec.info_failures
            )));
        }
        if let Some((code, msg)) = &self.spec.info_error {
            return Err(Status::new(*code, msg.clone()));
        }
        Ok(Response::new(GetPluginInfoResponse {
            name: self.spec.name.clone(),
            vendor_version: self.spec.vendor_version.clone(),
            manifest: HashMap::new(),
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let _ = self.calls.send(DriverCall::Probe);
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl Node for DriverService {
    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        let _ = self.calls.send(DriverCall::NodeGetInfo);
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.spec.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: Some(Topology {
                segments: HashMap::from([(
                    "topology.example.io/node".to_owned(),
                    self.spec.node_id.clone(),
                )]),
            }),
        }))
    }
}

/// A running CSI driver on a unix socket. Stops (and removes its socket) on drop.
pub struct FakeDriver {
    /// Its socket.
    pub path: PathBuf,
    /// Every call received, in order.
    pub calls: mpsc::UnboundedReceiver<DriverCall>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeDriver {
    /// Serves `spec` on a new socket at `path`.
    pub async fn start(path: &Path, spec: DriverSpec) -> std::io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)?;
        let (tx, calls) = mpsc::unbounded_channel();
        let service = DriverService {
            spec: Arc::new(spec),
            calls: tx,
            info_calls: Arc::default(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let mut server = Server::builder();
        if let Some(age) = service.spec.max_connection_age {
            server = server.max_connection_age(age);
        }
        let task = tokio::spawn(async move {
            let _ = server
                .add_service(IdentityServer::new(service.clone()))
                .add_service(NodeServer::new(service))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(FakeDriver {
            path: path.to_owned(),
            calls,
            stop: Some(stop),
            task,
        })
    }

    /// Waits for the next call, up to `timeout`.
    pub async fn next_call(&mut self, timeout: Duration) -> Option<DriverCall> {
        tokio::time::timeout(timeout, self.calls.recv())
            .await
            .ok()
            .flatten()
    }

    /// Stops serving and removes the socket.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.ok();
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for FakeDriver {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The kubelet's dial timeout for a registration socket.
pub(crate) const KUBELET_DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The kubelet's GetInfo timeout.
pub(crate) const KUBELET_GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// The kubelet's NotifyRegistrationStatus timeout.
pub(crate) const KUBELET_NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// One registration attempt as the kubelet saw it.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The GetInfo answer (with the endpoint defaulted as the kubelet does).
    pub info: PluginInfo,
    /// The NodeGetInfo answer, when the kubelet got that far.
    pub node_id: Option<String>,
    /// What was sent in NotifyRegistrationStatus.
    pub sent: RegistrationStatus,
    /// Whether the registrar replied to NotifyRegistrationStatus.
    pub notify_replied: Result<(), String>,
}

/// What makes the kubelet refuse on purpose.
#[derive(Debug, Clone, Default)]
pub struct KubeletBehaviour {
    /// Refuse every registration with this registration error (as a failing
    /// `RegisterPlugin`, e.g. a CSINode update error).
    pub refuse_with: Option<String>,
}

/// The kubelet's plugin manager for CSI plugins, in memory.
#[derive(Default)]
pub struct FakeKubelet {
    /// Driver name to highest registered version, like `csiDrivers`.
    drivers: Mutex<HashMap<String, KubeletVersion>>,
    /// How it answers.
    pub behaviour: KubeletBehaviour,
}

impl FakeKubelet {
    /// A kubelet that behaves as `behaviour` says.
    pub fn new(behaviour: KubeletBehaviour) -> Self {
        FakeKubelet {
            drivers: Mutex::default(),
            behaviour,
        }
    }

    /// Whether a driver of that name is registered.
    pub fn is_registered(&self, name: &str) -> bool {
        self.drivers.lock().unwrap().contains_key(name)
    }

    /// The socket was removed: deregister by name (what `DeRegisterPlugin` does).
    pub fn deregister(&self, name: &str) {
        self.drivers.lock().unwrap().remove(name);
    }

    /// One pass of `GenerateRegisterPluginFunc` on a socket.
    pub async fn register(&self, socket: &Path) -> Result<Attempt, String> {
        let channel = tokio::time::timeout(KUBELET_DIAL_TIMEOUT, crate::uds::channel(socket))
            .await
            .map_err(|_| format!("dial failed at socket {}: timed out", socket.display()))?
            .map_err(|e| {
                format!(
                    "RegisterPlugin error -- dial failed at socket {0}, err: failed to dial socket {0}, err: {e}",
                    socket.display()
                )
            })?;
        let mut client = RegistrationClient::new(channel);
        let mut info = tokio::time::timeout(KUBELET_GET_INFO_TIMEOUT, client.get_info(InfoRequest {}))
            .await
            .map_err(|_| {
                format!(
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: context deadline exceeded",
                    socket.display()
                )
            })?
            .map_err(|e| {
                format!(
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: {e}",
                    socket.display()
                )
            })?
            .into_inner();
        if info.endpoint.is_empty() {
            info.endpoint = socket.display().to_string();
        }

        let mut node_id = None;
        let error = if info.r#type != PluginType::Csi.as_str() {
            format!(
                "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
                info.r#type,
                socket.display()
            )
        } else if let Err(reason) = self.validate(&info) {
            format!(
                "RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver {} at endpoint {}: kubernetes.io/csi: ValidatePlugin for CSI driver {:?} failed. {reason}",
                info.name, info.endpoint, info.name
            )
        } else {
            match self.register_csi(&info).await {
                Ok(id) => {
                    node_id = Some(id);
                    String::new()
                }
                Err(e) => {
                    format!("RegisterPlugin error -- plugin registration failed with err: {e}")
                }
            }
        };
        let sent = RegistrationStatus {
            plugin_registered: error.is_empty(),
            error,
        };
        let notify_replied = tokio::time::timeout(
            KUBELET_NOTIFY_TIMEOUT,
            client.notify_registration_status(sent.clone()),
        )
        .await
        .map_err(|_| "NotifyRegistrationStatus: no reply within 5s".to_owned())
        .and_then(|r| r.map(drop).map_err(|e| e.to_string()));
        Ok(Attempt {
            info,
            node_id,
            sent,
            notify_replied,
        })
    }

    /// `validateVersions`, including the same-name rule.
    fn validate(&self, info: &PluginInfo) -> Result<KubeletVersion, String> {
        let highest = highest_supported_version(&info.supported_versions).map_err(|e| match e {
            crate::validate::VersionsError::Empty => {
                "Plugin returned an empty list for supported versions".to_owned()
            }
            other => format!(
                "None of the versions specified {:?} are supported. err={other}",
                info.supported_versions
            ),
        })?;
        if let Some(existing) = self.drivers.lock().unwrap().get(&info.name)
            && existing >= &highest
        {
            return Err(format!(
                "Another driver with the same name is already registered with a higher supported version: {:?}",
                existing.to_string()
            ));
        }
        Ok(highest)
    }

    /// `RegisterPlugin`: NodeGetInfo on the advertised endpoint.
    async fn register_csi(&self, info: &PluginInfo) -> Result<String, String> {
        if let Some(refusal) = &self.behaviour.refuse_with {
            return Err(refusal.clone());
        }
        let highest = self.validate(info)?;
        let channel = crate::uds::channel(Path::new(&info.endpoint))
            .await
            .map_err(|e| format!("rpc error: code = Unavailable desc = connection error: {e}"))?;
        let node = NodeClient::new(channel)
            .node_get_info(NodeGetInfoRequest {})
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        if node.node_id.is_empty() {
            return Err("error adding CSI driver node info: driverNodeID must not be empty".into());
        }
        self.drivers
            .lock()
            .unwrap()
            .insert(info.name.clone(), highest);
        Ok(node.node_id)
    }
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes; for conditions
/// that have no event to wait on, such as a file appearing.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
