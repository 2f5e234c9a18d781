//! The kubelet's `pluginregistration.Registration` service.
//!
//! `GetInfo` answers at once from the decisions made at start-up. The handlers
//! never act on a verdict themselves: `NotifyRegistrationStatus` reports it on a
//! channel and replies; the composition root decides what happens next.

use std::sync::{Arc, RwLock};

use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

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
    info: Arc<RwLock<PluginInfo>>,
    verdicts: mpsc::UnboundedSender<Verdict>,
    metrics: Arc<Metrics>,
}

impl RegistrationService {
    pub fn new(
        registration: &Registration,
        verdicts: mpsc::UnboundedSender<Verdict>,
        metrics: Arc<Metrics>,
    ) -> Self {
        RegistrationService {
            info: Arc::new(RwLock::new(plugin_info(registration))),
            verdicts,
            metrics,
        }
    }

    /// Replaces the answer (after a driver change or a policy reload).
    pub fn set_registration(&self, registration: &Registration) {
        *self.info.write().unwrap_or_else(|e| e.into_inner()) = plugin_info(registration);
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
        let info = self.info.read().unwrap_or_else(|e| e.into_inner()).clone();
        tracing::info!(name = %info.name, endpoint = %info.endpoint, versions = ?info.supported_versions, "received GetInfo call");
        Ok(Response::new(info))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        self.metrics.kubelet_notification(status.plugin_registered);
        if status.plugin_registered {
            tracing::info!("kubelet registered the plugin");
        } else {
            tracing::error!(error = %status.error, "kubelet refused the registration");
        }
        // The receiver lives as long as the server; if it is gone we are shutting down.
        let _ = self.verdicts.send(Verdict {
            registered: status.plugin_registered,
            error: status.error,
        });
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
