//! The registrar's configuration: upstream's flags checked in upstream's order.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::flags::{Flags, MODE_REGISTRATION_PROBE};
use crate::plugin_type::PluginType;
use crate::{csi, messages, validate};

/// Everything the registrar needs to run, checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--csi-address` as given (for the policy context).
    pub csi_address: String,
    /// The driver's socket, from `--csi-address`.
    pub csi_socket: PathBuf,
    /// `--kubelet-registration-path`: the endpoint advertised by default.
    pub kubelet_registration_path: String,
    /// `--plugin-registration-path`: the kubelet's plugin registry.
    pub plugin_registration_path: PathBuf,
    /// `--timeout`: the bound of one GetPluginInfo and of `/healthz`'s GetInfo.
    pub timeout: Duration,
    /// TCP address for the HTTP server.
    pub http_endpoint: Option<String>,
    /// `None`: wait for the driver forever.
    pub driver_wait: Option<Duration>,
    /// The latest a change of driver is noticed after registration (`None`:
    /// the driver is not watched); see `csi::DriverWatch`.
    pub probe_interval: Option<Duration>,
    /// `KUBE_NODE_NAME`.
    pub node_name: String,
    /// `--policy-config`.
    pub policy_config: Option<PathBuf>,
    /// `--plugin-type`.
    pub plugin_type: PluginType,
    /// `--driver-name`: the name of a DRA driver (a CSI driver is asked its own).
    pub driver_name: Option<String>,
    /// `--supported-versions`; `None`: the plugin type's default.
    pub supported_versions: Option<Vec<String>>,
    /// `--pod-uid` (or `POD_UID`): the registration socket is named per pod.
    pub pod_uid: Option<String>,
    /// `--notify-timeout`; `None`: wait for the kubelet's verdict forever.
    pub notify_timeout: Option<Duration>,
    /// Compile policy plugins in child processes of this executable (its
    /// `plugin compile-worker`), so that the compiler's memory is given back;
    /// `None`: in this process. The registrar binary names itself.
    pub compile_worker: Option<PathBuf>,
}

/// Flags that parse but cannot be run with (exit code 1, as upstream).
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    /// `--kubelet-registration-path` is empty.
    #[error("kubelet-registration-path is a required parameter")]
    MissingRegistrationPath,
    /// Both spellings of the HTTP endpoint.
    #[error("only one of `--health-port` and `--http-endpoint` can be set.")]
    HealthPortAndEndpoint,
    /// `--csi-address` is not a unix socket.
    #[error(transparent)]
    CsiAddress(#[from] csi::CsiError),
    /// A DRA driver without `--driver-name`.
    #[error(
        "--driver-name is required with --plugin-type=DRAPlugin: a DRA driver has no CSI Identity service to ask its name; pass the name the driver publishes its ResourceSlices under"
    )]
    MissingDriverName,
    /// `--driver-name` is not a name the kubelet takes.
    #[error("--driver-name {}: {err}", validate::shown(name))]
    DriverName {
        /// The name given.
        name: String,
        /// Why it cannot be used.
        err: validate::NameError,
    },
    /// `--supported-versions` holds nothing the kubelet would take.
    #[error("--supported-versions {}: {err}", validate::shown(given))]
    SupportedVersions {
        /// The flag's value.
        given: String,
        /// Why the kubelet would refuse it.
        err: validate::VersionsError,
    },
    /// `--pod-uid` is not a UID.
    #[error(
        "--pod-uid (or POD_UID) {}: not a pod UID (8-4-4-4-12 hexadecimal digits, as metadata.uid); pass the pod's own with the downward API (fieldRef: metadata.uid)",
        validate::shown(.0)
    )]
    PodUid(String),
    /// `--pod-uid` for a CSI driver.
    #[error(
        "--pod-uid names a registration socket per pod, which the kubelet supports for DRAPlugin only: its CSI handler keeps one endpoint per driver name, so two pods' CSI registrations would replace each other; remove --pod-uid"
    )]
    PodUidForCsi,
}

/// What `main` should do after flag parsing.
#[derive(Debug)]
pub enum Start {
    /// Run the registrar.
    Run(Box<Config>),
    /// `--version` or the probe mode: print nothing more, exit 0.
    ExitOk,
}

impl Config {
    /// What the flags' defaults give for a driver socket, the path the
    /// kubelet advertises for it, and a plugin registry: no HTTP server, no
    /// policy file, no node name, and the driver awaited forever.
    pub fn new(csi_socket: &Path, kubelet_registration_path: &str, registry: &Path) -> Self {
        Config {
            csi_address: format!("unix://{}", csi_socket.display()),
            csi_socket: csi_socket.to_owned(),
            kubelet_registration_path: kubelet_registration_path.to_owned(),
            plugin_registration_path: registry.to_owned(),
            timeout: Duration::from_secs(1),
            http_endpoint: None,
            driver_wait: None,
            probe_interval: Some(Duration::from_secs(10)),
            node_name: String::new(),
            policy_config: None,
            plugin_type: PluginType::Csi,
            driver_name: None,
            supported_versions: None,
            pod_uid: None,
            notify_timeout: Some(DEFAULT_NOTIFY_TIMEOUT),
            compile_worker: None,
        }
    }

    /// Upstream's start-up checks, in upstream's order. `node_name` comes from
    /// `KUBE_NODE_NAME`, read by `main` so that tests never touch the environment.
    pub fn from_flags(flags: &Flags, node_name: String) -> Result<Start, FlagsError> {
        if flags.kubelet_registration_path.is_empty() {
            return Err(FlagsError::MissingRegistrationPath);
        }
        if flags.mode == MODE_REGISTRATION_PROBE {
            tracing::info!(
                "Deprecated --mode=kubelet-registration-probe does nothing here; exiting 0"
            );
            return Ok(Start::ExitOk);
        }
        tracing::info!(version = %format!("v{}", crate::flags::VERSION), "{}", messages::VERSION);
        let mode = if flags.mode.is_empty() {
            messages::MODE_REGISTRATION
        } else {
            &flags.mode
        };
        tracing::info!(mode, "{}", messages::RUNNING);
        if flags.health_port > 0 && !flags.http_endpoint.is_empty() {
            return Err(FlagsError::HealthPortAndEndpoint);
        }
        if flags.connection_timeout > Duration::ZERO {
            tracing::warn!("{}", messages::CONNECTION_TIMEOUT_DEPRECATED);
        }
        if flags.automaxprocs {
            tracing::info!("Flag --automaxprocs is Go-specific and has no effect here");
        }
        if flags.enable_pprof {
            tracing::info!(
                "Flag --enable-pprof: Go's pprof endpoints do not exist in this registrar; /metrics is served instead"
            );
        }
        if !flags.ignored.is_empty() {
            tracing::warn!(args = ?flags.ignored, "Ignoring arguments after the flags");
        }
        let plugin_type = flags.plugin_type;
        let driver_name = match (plugin_type, flags.driver_name.as_str()) {
            (PluginType::Dra, "") => return Err(FlagsError::MissingDriverName),
            (PluginType::Dra, name) => {
                validate::driver_name(name).map_err(|err| FlagsError::DriverName {
                    name: name.to_owned(),
                    err,
                })?;
                Some(name.to_owned())
            }
            (PluginType::Csi, "") => None,
            (PluginType::Csi, name) => {
                tracing::warn!(
                    driverName = name,
                    "Flag --driver-name is ignored for CSIPlugin: the driver's name comes from its GetPluginInfo"
                );
                None
            }
        };
        let supported_versions = match flags.supported_versions.trim() {
            "" => None,
            given => {
                let versions: Vec<String> = given.split(',').map(|v| v.trim().to_owned()).collect();
                plugin_type.check_versions(&versions).map_err(|err| {
                    FlagsError::SupportedVersions {
                        given: given.to_owned(),
                        err,
                    }
                })?;
                Some(versions)
            }
        };
        let pod_uid = match (plugin_type, flags.pod_uid.as_str()) {
            (_, "") => None,
            (PluginType::Csi, _) => return Err(FlagsError::PodUidForCsi),
            (PluginType::Dra, uid) if is_uid(uid) => Some(uid.to_owned()),
            (PluginType::Dra, uid) => return Err(FlagsError::PodUid(uid.to_owned())),
        };
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
            plugin_type,
            driver_name,
            supported_versions,
            pod_uid,
            notify_timeout: (!flags.notify_timeout.is_zero()).then_some(flags.notify_timeout),
            compile_worker: None,
        })))
    }
}

/// `--notify-timeout`'s default: longer than the kubelet's CSI handler may
/// spend in RegisterPlugin (its NodeGetInfo alone may take `csiTimeout`, 2
/// minutes, before the Node and CSINode updates).
pub(crate) const DEFAULT_NOTIFY_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// A Kubernetes object UID as the API server writes it: a UUID in its
/// 8-4-4-4-12 hexadecimal form.
fn is_uid(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}
