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
use crate::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    registration_server::Registration as RegistrationApi,
};
use crate::state::StateReader;

/// The plugin type the kubelet routes to its CSI handler.
pub(crate) const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

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
    verdicts: mpsc::UnboundedSender<Verdict>,
    metrics: Arc<Metrics>,
}

impl RegistrationService {
    /// Answers `GetInfo` from `state`; verdicts go to `verdicts`.
    pub fn new(
        state: StateReader,
        verdicts: mpsc::UnboundedSender<Verdict>,
        metrics: Arc<Metrics>,
    ) -> Self {
        RegistrationService {
            state,
            verdicts,
            metrics,
        }
    }
}

#[tonic::async_trait]
impl RegistrationApi for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        self.metrics.get_info();
        let info = self.state.borrow().registration().map(|r| PluginInfo {
            r#type: CSI_PLUGIN_TYPE.to_owned(),
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
        let _ = self.verdicts.send(Verdict {
            registered: status.plugin_registered,
            error: status.error,
        });
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
