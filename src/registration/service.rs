//! The kubelet's `pluginregistration.Registration` service.
//!
//! `GetInfo` answers at once from the decision being advertised. The handlers
//! never act on a verdict themselves: `NotifyRegistrationStatus` reports it on a
//! channel and replies; the composition root decides what happens next.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::messages;
use crate::metrics::Metrics;
use crate::plugin_type::PluginType;
use crate::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    registration_server::Registration as RegistrationApi,
};
use crate::state::StateReader;

/// Metadata our own `/healthz` sends with its GetInfo, so that it is not taken
/// for the kubelet's (which starts the wait for a NotifyRegistrationStatus).
pub(crate) const SELF_PROBE: &str = "x-csi-registrar-self-probe";

/// What the kubelet did on the registration socket, for the registrar's loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletCall {
    /// It asked for the plugin's info: a registration has started, and its
    /// `NotifyRegistrationStatus` is due.
    Info,
    /// It gave its verdict.
    Verdict(Verdict),
}

/// The kubelet's answer to one registration attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the kubelet registered the plugin.
    pub registered: bool,
    /// The kubelet's error text when it did not.
    pub error: String,
}

/// The service, shared by every connection.
#[derive(Clone)]
pub struct RegistrationService {
    state: StateReader,
    calls: mpsc::UnboundedSender<KubeletCall>,
    metrics: Arc<Metrics>,
    plugin_type: PluginType,
}

impl RegistrationService {
    /// Answers `GetInfo` from `state` for a CSI driver; the kubelet's calls
    /// are reported on `calls`.
    pub fn new(
        state: StateReader,
        calls: mpsc::UnboundedSender<KubeletCall>,
        metrics: Arc<Metrics>,
    ) -> Self {
        RegistrationService {
            state,
            calls,
            metrics,
            plugin_type: PluginType::Csi,
        }
    }

    /// The same, answering `GetInfo` with `plugin_type`.
    pub fn of_type(mut self, plugin_type: PluginType) -> Self {
        self.plugin_type = plugin_type;
        self
    }
}

#[tonic::async_trait]
impl RegistrationApi for RegistrationService {
    async fn get_info(
        &self,
        request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        self.metrics.get_info();
        let info = self.state.borrow().registration().map(|r| PluginInfo {
            r#type: self.plugin_type.as_str().to_owned(),
            name: r.name.clone(),
            endpoint: r.endpoint.clone(),
            supported_versions: r.supported_versions.clone(),
        });
        let Some(info) = info else {
            return Err(Status::unavailable("no registration decided yet"));
        };
        tracing::info!(
            v = 4,
            request = "&InfoRequest{}",
            "{}",
            messages::RECEIVED_GET_INFO
        );
        if !request.metadata().contains_key(SELF_PROBE) {
            let _ = self.calls.send(KubeletCall::Info);
        }
        Ok(Response::new(info))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        self.metrics.kubelet_notification(status.plugin_registered);
        // Go's %+v of the request, as upstream logs it.
        let shown = format!(
            "&RegistrationStatus{{PluginRegistered:{},Error:{},}}",
            status.plugin_registered, status.error
        );
        tracing::info!(status = %shown, "{}", messages::RECEIVED_NOTIFY);
        if !status.plugin_registered {
            tracing::error!(error = %status.error, "{}", messages::REGISTRATION_FAILED);
        }
        // The receiver lives as long as the server; if it is gone we are shutting down.
        let _ = self.calls.send(KubeletCall::Verdict(Verdict {
            registered: status.plugin_registered,
            error: status.error,
        }));
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
