//! A temporary directory with the paths one registrar uses, and the
//! registrar started in-process in it.

use std::path::{Path, PathBuf};

use csi_node_driver_registrar::Config;
use csi_node_driver_registrar::testing::{
    self, DriverSpec, FakeDriver, FakeKubelet, Harness, PATIENCE, Snapshot, wait_until,
};

/// A temporary directory with the paths one registrar uses.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub csi: PathBuf,
    pub registry: PathBuf,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("reg").tempdir().unwrap();
        let registry = dir.path().join("registry");
        std::fs::create_dir(&registry).unwrap();
        Sandbox {
            csi: dir.path().join("csi.sock"),
            registry,
            dir,
        }
    }

    /// The flags every test passes: the driver socket, its host path and the registry.
    pub fn args(&self) -> Vec<String> {
        vec![
            format!("--csi-address=unix://{}", self.csi.display()),
            format!("--kubelet-registration-path={}", self.csi.display()),
            format!("--plugin-registration-path={}", self.registry.display()),
        ]
    }

    pub fn socket(&self, driver: &str) -> PathBuf {
        self.registry.join(format!("{driver}-reg.sock"))
    }

    /// The configuration the binary would get from [`Sandbox::args`].
    pub fn config(&self) -> Config {
        testing::config(&self.csi, &self.registry)
    }

    /// A driver stand-in named `name`, and the registrar in-process, once
    /// its socket is up.
    pub async fn start(&self, name: &str) -> (FakeDriver, Harness) {
        let driver = FakeDriver::start(&self.csi, DriverSpec::named(name))
            .await
            .unwrap();
        let mut registrar = Harness::start(self.config());
        registrar.wait_for("the socket", serving(name)).await;
        (driver, registrar)
    }
}

/// Whether a new kubelet (a stand-in with no memory) registers the plugin
/// behind `socket`.
pub async fn kubelet_registers(socket: &Path) -> bool {
    FakeKubelet::default()
        .register(socket)
        .await
        .unwrap()
        .sent
        .plugin_registered
}

/// A state in which our socket for the driver `name` is up.
pub fn serving(name: &str) -> impl Fn(&Snapshot) -> bool + '_ {
    move |s| s.serving && s.registration().is_some_and(|r| r.name == name)
}

/// Waits for a path to exist.
pub async fn appears(path: &Path) -> bool {
    wait_until(PATIENCE, || path.exists()).await
}
