//! The kubelet-facing service with whatever bytes arrive as its requests: it
//! always replies, reports exactly the verdict it received, and GetInfo keeps
//! answering the decided registration.
#![no_main]

use std::sync::{Arc, OnceLock};

use csi_node_driver_registrar::testing::Metrics;
use csi_node_driver_registrar::testing::Registration;
use csi_node_driver_registrar::testing::proto::registration::registration_server::Registration as _;
use csi_node_driver_registrar::testing::proto::registration::{InfoRequest, RegistrationStatus};
use csi_node_driver_registrar::testing::{KubeletCall, Published, RegistrationService, Snapshot};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let (status, info_request) = match data.split_first() {
        Some((0, rest)) => (RegistrationStatus::decode(rest), Ok(InfoRequest {})),
        Some((_, rest)) => (Ok(RegistrationStatus::default()), InfoRequest::decode(rest)),
        None => return,
    };
    let registration = Registration {
        name: "fuzz.csi.io".into(),
        endpoint: "/var/lib/kubelet/plugins/fuzz/csi.sock".into(),
        supported_versions: vec!["1.0.0".into()],
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let state = tokio::sync::watch::Sender::new(Snapshot {
        published: Some(Published {
            registration: registration.clone(),
            socket: "/var/lib/kubelet/plugins_registry/fuzz.csi.io-reg.sock".into(),
        }),
        ..Snapshot::default()
    });
    let service = RegistrationService::new(state.subscribe(), tx, Arc::new(Metrics::new()));
    runtime().block_on(async {
        if let Ok(status) = status {
            let reply = service.notify_registration_status(tonic::Request::new(status.clone())).await;
            assert!(reply.is_ok());
            let KubeletCall::Verdict(verdict) = rx.try_recv().expect("a verdict for every notification") else {
                panic!("a notification reported as something else than a verdict");
            };
            assert_eq!(verdict.registered, status.plugin_registered);
            assert_eq!(verdict.error, status.error);
        }
        if let Ok(request) = info_request {
            let info = service.get_info(tonic::Request::new(request)).await.unwrap().into_inner();
            assert_eq!(info.r#type, "CSIPlugin");
            assert_eq!(info.name, registration.name);
            assert_eq!(info.supported_versions, registration.supported_versions);
            // The kubelet's GetInfo starts the wait for its verdict.
            assert_eq!(rx.try_recv().ok(), Some(KubeletCall::Info));
        }
    });
});
