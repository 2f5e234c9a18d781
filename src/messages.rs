//! Log messages. Upstream's events log upstream's messages, verbosity and keys
//! (the Go registrar v2.17 through k8s.io/component-base), so that alerts and
//! dashboards built on them keep working; they are kept here so they cannot
//! drift. The registrar's own events use messages in the same style, at the
//! call site.
//!
//! | v | message | keys |
//! |---|---|---|
//! | 0 | [`VERSION`] | version |
//! | 0 | [`RUNNING`] | mode |
//! | 0 (warning) | [`CONNECTION_TIMEOUT_DEPRECATED`] | |
//! | 1 | [`OPENING_CSI_CONNECTION`] | csiAddress |
//! | 1 | [`DISCOVERING_DRIVER_NAME`] | |
//! | 2 | [`CSI_DRIVER_NAME`] | csiDriverName |
//! | 0 | [`STARTING_REGISTRATION_SERVER`], [`REGISTRATION_SERVER_STARTED`] | socketPath |
//! | 0 | [`SKIPPING_HTTP_SERVER`], [`STARTING_HTTP_SERVER`] | endpoint |
//! | 4 | [`RECEIVED_GET_INFO`] | request |
//! | 0 | [`RECEIVED_NOTIFY`] | status |
//! | error | [`REGISTRATION_FAILED`] | err |
//! | error | [`ERROR_CONNECTING`], [`ERROR_DRIVER_NAME`], [`FAILED_TO_LISTEN`], [`FAILED_TO_REMOVE_SOCKET`], [`HEALTH_CHECK_FAILED`], [`REGISTRATION_PATH_REQUIRED`], [`LOGGING_CONFIGURATION_INVALID`] | err, socketPath, socket |
//! | 5 | [`HEALTH_CHECK_SUCCEEDED`] | |

// Each constant is documented by its row in the table above.
#![allow(missing_docs)]

pub const VERSION: &str = "Version";
pub const RUNNING: &str = "Running node-driver-registrar";
pub const CONNECTION_TIMEOUT_DEPRECATED: &str =
    "--connection-timeout is deprecated and will have no effect";
pub const OPENING_CSI_CONNECTION: &str = "Attempting to open a gRPC connection";
pub const DISCOVERING_DRIVER_NAME: &str = "Calling CSI driver to discover driver name";
pub const CSI_DRIVER_NAME: &str = "CSI driver name";
pub const STARTING_REGISTRATION_SERVER: &str = "Starting Registration Server";
pub const REGISTRATION_SERVER_STARTED: &str = "Registration Server started";
pub const SKIPPING_HTTP_SERVER: &str = "Skipping HTTP server";
pub const STARTING_HTTP_SERVER: &str = "Starting HTTP server";
pub const RECEIVED_GET_INFO: &str = "Received GetInfo call";
pub const RECEIVED_NOTIFY: &str = "Received NotifyRegistrationStatus call";
pub const REGISTRATION_FAILED: &str =
    "Registration process failed with error, restarting registration container";
pub const ERROR_CONNECTING: &str = "Error connecting to CSI driver";
/// Sic: upstream's spelling, which alerts match.
pub const ERROR_DRIVER_NAME: &str = "Error retreiving CSI driver name";
pub const FAILED_TO_LISTEN: &str = "Failed to listen on socket";
pub const FAILED_TO_REMOVE_SOCKET: &str = "Failed to remove socket with error";
pub const HEALTH_CHECK_FAILED: &str = "Health check failed";
pub const HEALTH_CHECK_SUCCEEDED: &str = "Health check succeeded";
pub const REGISTRATION_PATH_REQUIRED: &str = "kubelet-registration-path is a required parameter";
pub const LOGGING_CONFIGURATION_INVALID: &str = "LoggingConfiguration is invalid";

/// The mode upstream reports when `--mode` is not the probe.
pub const MODE_REGISTRATION: &str = "registration";
