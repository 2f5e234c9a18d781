//! `csi-node-driver-registrar demo`: a CSI driver stand-in, the registrar and a
//! kubelet stand-in over real unix sockets in a temporary directory, narrated
//! on stdout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::standins::{DriverCall, DriverSpec, FakeDriver, FakeKubelet};
use crate::app;
use crate::config::Config;
use crate::error::AppError;
use crate::metrics::Metrics;
use crate::state::{Phase, State};

/// The driver name the stand-in reports.
pub(crate) const DEMO_DRIVER: &str = "hostpath.csi.k8s.io";

/// Runs one registration end to end, with the policy file if one is given.
pub(crate) async fn run(policy: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("registrar-demo-")
        .tempdir()?;
    let csi_socket = dir.path().join("csi.sock");
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir(&registry)?;

    println!("== demo in {}", dir.path().display());
    match &policy {
        Some(p) => println!("== policy: {}", p.display()),
        None => println!("== policy: built-in (identical to the upstream registrar)"),
    }
    let mut driver = FakeDriver::start(&csi_socket, DriverSpec::named(DEMO_DRIVER)).await?;
    println!(
        "[driver]    CSI driver stand-in {DEMO_DRIVER:?} listening on {}",
        csi_socket.display()
    );

    // The driver's socket as the kubelet sees it: in the demo, the same path.
    let config = Config {
        driver_wait: Some(Duration::from_secs(10)),
        probe_interval: None,
        node_name: "demo-node".into(),
        policy_config: policy,
        ..Config::new(&csi_socket, &csi_socket.display().to_string(), &registry)
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let state = Arc::new(State::new(Arc::new(Metrics::new())));
    let mut reader = state.reader();
    let mut registrar = tokio::spawn(app::run_with(
        config,
        async {
            let _ = stopped.await;
        },
        tokio_stream::pending(),
        state,
        None,
    ));
    let ended_early = |ended: Result<u8, AppError>| match ended {
        Err(e) => anyhow::anyhow!("the registrar stopped: {e}"),
        Ok(code) => anyhow::anyhow!("the registrar exited with {code} before creating its socket"),
    };
    // A registrar that stops at start-up (a plugin refusing, say) is reported
    // as soon as it stops, not when the wait for its socket runs out.
    let serving = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            snapshot = reader.wait_for(|s| s.serving) => Ok(snapshot.ok().and_then(|s| s.published.clone())),
            ended = &mut registrar => Err(ended),
        }
    })
    .await;
    let socket = match serving {
        Ok(Ok(Some(published))) => published.socket,
        Ok(Err(ended)) => return Err(ended_early(ended?)),
        Ok(Ok(None)) | Err(_) => {
            let _ = stop.send(());
            return Err(ended_early(registrar.await?));
        }
    };
    if driver.next_call(Duration::from_secs(1)).await == Some(DriverCall::GetPluginInfo) {
        println!("[driver]    <- GetPluginInfo from the registrar");
    }
    println!(
        "[registrar] registration socket created: {}",
        socket.display()
    );

    let kubelet = FakeKubelet::default();
    println!(
        "[kubelet]   found {}; dialing it",
        socket.file_name().unwrap_or_default().to_string_lossy()
    );
    let attempt = kubelet
        .register(&socket)
        .await
        .map_err(anyhow::Error::msg)?;
    let i = &attempt.info;
    println!(
        "[kubelet]   GetInfo -> type={:?} name={:?} endpoint={:?} supported_versions={:?}",
        i.r#type, i.name, i.endpoint, i.supported_versions
    );
    if let Some(node_id) = &attempt.node_id {
        println!(
            "[kubelet]   NodeGetInfo on {:?} -> node_id={node_id:?}",
            i.endpoint
        );
    }
    println!(
        "[kubelet]   NotifyRegistrationStatus(plugin_registered={}, error={:?}) -> reply: {}",
        attempt.sent.plugin_registered,
        attempt.sent.error,
        match &attempt.notify_replied {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.clone(),
        }
    );
    let registered = tokio::time::timeout(
        Duration::from_secs(2),
        reader.wait_for(|s| s.phase() == Phase::Registered),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    println!(
        "[registrar] state: {:?}; kubelet registered {:?}: {}",
        reader.borrow().phase(),
        i.name,
        kubelet.is_registered(&i.name)
    );

    let _ = stop.send(());
    let code = registrar.await??;
    println!(
        "[registrar] stopped with exit code {code}; registration socket removed: {}",
        !socket.exists()
    );
    driver.stop().await;
    anyhow::ensure!(registered && code == 0, "the registration did not complete");
    Ok(())
}
