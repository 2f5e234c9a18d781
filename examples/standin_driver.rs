//! Runs the CSI driver stand-in on a socket until killed (for manual measurements).
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: standin_driver SOCKET [NAME]");
    let name = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "hostpath.csi.k8s.io".into());
    let _driver = FakeDriver::start(std::path::Path::new(&path), DriverSpec::named(&name))
        .await
        .unwrap();
    std::future::pending::<()>().await;
}
