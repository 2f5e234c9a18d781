//! The kubelet's `pluginregistration.Registration` service.
//!
//! `GetInfo` answers at once from the decision being advertised. The handlers
//! never act on a verdict themselves: `NotifyRegistrationStatus` reports it on a
//! channel and replies; the composition root decides what happens next.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::Advertised;
use crate::messages;
use crate::metrics::Metrics;
use crate::policy::Registration;
use crate::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
    registration_server::Registration as RegistrationApi,
};

/// The plugin type the kubelet routes to its CSI handler.
pub const CSI_PLUGIN_TYPE: &str = "CSIPlugin";

/// The kubelet's answer to one registration attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub registered: bool,
    pub error: String,
}

/// The service, shared by every connection.
#[derive(Clone)]
pub struct RegistrationService {
    advertised: Arc<Advertised>,
    verdicts: mpsc::UnboundedSender<Verdict>,
    metrics: Arc<Metrics>,
}

impl RegistrationService {
    pub fn new(
        advertised: Arc<Advertised>,
        verdicts: mpsc::UnboundedSender<Verdict>,
        metrics: Arc<Metrics>,
    ) -> Self {
        RegistrationService {
            advertised,
            verdicts,
            metrics,
        }
    }
}

fn plugin_info(r: &Registration) -> PluginInfo {
    PluginInfo {
        r#type: CSI_PLUGIN_TYPE.to_owned(),
        name: r.name.clone(),
        endpoint: r.endpoint.clone(),
        supported_versions: r.supported_versions.clone(),
    }
}

#[tonic::async_trait]
impl RegistrationApi for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        self.metrics.get_info();
        let Some(published) = self.advertised.get() else {
            return Err(Status::unavailable("no registration decided yet"));
        };
        let info = plugin_info(&published.registration);
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
