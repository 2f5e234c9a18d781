//! The kinds of kubelet plugin the registrar registers, and the rules the
//! kubelet applies to each (read from k8s.io/kubernetes v1.37.2): CSI drivers
//! go to the CSI handler (pkg/volume/csi), DRA drivers to the DRA plugin
//! manager (pkg/kubelet/cm/dra/plugin).

use crate::validate::{self, VersionsError};

/// Upstream's `supportedVersions`: what a CSI driver advertises by default.
const CSI_DEFAULT_VERSIONS: &[&str] = &["1.0.0"];

/// `PluginInfo.type`, as `GetInfo` answers it; spelled the same way in
/// `--plugin-type` and in a policy context.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum PluginType {
    /// A CSI driver (`CSIPlugin`): named by its Identity service, versions
    /// are semantic versions with a 1.x among them.
    #[default]
    #[serde(rename = "CSIPlugin")]
    #[value(name = "CSIPlugin")]
    Csi,
    /// A Dynamic Resource Allocation driver (`DRAPlugin`): named by
    /// `--driver-name`, versions are the gRPC services it serves.
    #[serde(rename = "DRAPlugin")]
    #[value(name = "DRAPlugin")]
    Dra,
}

impl PluginType {
    /// The type as the kubelet reads it (`registerapi.CSIPlugin`, `registerapi.DRAPlugin`).
    pub fn as_str(self) -> &'static str {
        match self {
            PluginType::Csi => "CSIPlugin",
            PluginType::Dra => "DRAPlugin",
        }
    }

    /// What is advertised without `--supported-versions` or a versions plugin:
    /// upstream's `["1.0.0"]` for CSI; for DRA, what the kubelet can use and the
    /// Go helper (kubeletplugin.Start) advertises by default, without the
    /// optional health service a driver may not serve.
    pub fn default_versions(self) -> Vec<String> {
        let versions: &[&str] = match self {
            PluginType::Csi => CSI_DEFAULT_VERSIONS,
            PluginType::Dra => validate::DRA_SERVICES,
        };
        versions.iter().map(|v| (*v).to_owned()).collect()
    }

    /// Whether the kubelet would take `versions` from a plugin of this type.
    pub fn check_versions(self, versions: &[String]) -> Result<(), VersionsError> {
        match self {
            PluginType::Csi => validate::supported_versions(versions).map(drop),
            PluginType::Dra => validate::dra_services(versions).map(drop),
        }
    }
}

impl std::fmt::Display for PluginType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn each_type_takes_its_own_kind_of_version_and_says_what_the_other_kind_is() {
        use clap::ValueEnum as _;
        assert_eq!(
            PluginType::from_str("DRAPlugin", false),
            Ok(PluginType::Dra)
        );
        assert!(PluginType::from_str("dra", false).is_err());
        assert!(
            PluginType::Csi
                .check_versions(&PluginType::Csi.default_versions())
                .is_ok()
        );
        assert!(
            PluginType::Dra
                .check_versions(&PluginType::Dra.default_versions())
                .is_ok()
        );
        // The kubelet takes the first service it knows; unknown ones may come first.
        assert!(
            PluginType::Dra
                .check_versions(&list(&["v2.DRAPlugin", "v1beta1.DRAPlugin"]))
                .is_ok()
        );

        let err = PluginType::Dra
            .check_versions(&list(&["1.0.0"]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "none of the supported versions \"[\\\"1.0.0\\\"]\" is a DRA gRPC service the kubelet can use \
             (v1.DRAPlugin or v1beta1.DRAPlugin); semantic versions such as \"1.0.0\" are for CSI drivers: \
             a DRA driver advertises the services it serves, e.g. \"v1.DRAPlugin\""
        );
        let err = PluginType::Csi
            .check_versions(&list(&["v1.DRAPlugin"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                "these are DRA gRPC service names: a DRA driver is registered with --plugin-type=DRAPlugin"
            ),
            "{err}"
        );
        assert_eq!(
            PluginType::Dra.check_versions(&[]).unwrap_err().to_string(),
            "supported versions are empty; the kubelet needs a DRA gRPC service name (v1.DRAPlugin or v1beta1.DRAPlugin)"
        );
        // A health service alone is not enough: the kubelet needs NodePrepareResources.
        assert!(
            PluginType::Dra
                .check_versions(&list(&["v1.DRAResourceHealth"]))
                .is_err()
        );
    }
}
