//! Code generated from `proto/` by `build.rs`.

/// The kubelet's plugin registration API (package `pluginregistration`).
#[allow(missing_docs, unreachable_pub)]
pub mod registration {
    tonic::include_proto!("pluginregistration");
}

/// The CSI spec (package `csi.v1`), trimmed to what the registrar uses.
#[allow(missing_docs, unreachable_pub)]
pub mod csi {
    tonic::include_proto!("csi.v1");
}
