//! Why the registrar stopped with a failure (exit code 1), and how that is
//! logged: with upstream's message where upstream has one.

use crate::config::FlagsError;
use crate::csi::CsiError;
use crate::health::HttpError;
use crate::messages as m;
use crate::policy::{LoadError, PolicyError};
use crate::registration::SocketError;

/// Why the registrar stopped with a failure (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Flags that cannot be run with.
    #[error(transparent)]
    Flags(#[from] FlagsError),
    /// The CSI driver cannot be reached, or its name is unusable.
    #[error(transparent)]
    Csi(#[from] CsiError),
    /// The registration socket cannot be created.
    #[error(transparent)]
    Socket(#[from] SocketError),
    /// The policy could not decide.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The policy cannot be loaded.
    #[error(transparent)]
    PolicyLoad(#[from] LoadError),
    /// The HTTP server cannot start.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// A task panicked.
    #[error("{0} panicked; see the log above")]
    Panicked(&'static str),
}

impl AppError {
    /// Logs why the registrar stops with exit code 1.
    pub fn log(&self) {
        match self {
            AppError::Flags(FlagsError::MissingRegistrationPath) => {
                tracing::error!("{}", m::REGISTRATION_PATH_REQUIRED);
            }
            AppError::Flags(FlagsError::CsiAddress(_)) => {
                tracing::error!(error = %self, "Registrar stopped with an error");
            }
            AppError::Flags(_) => tracing::error!("{self}"),
            AppError::Csi(CsiError::ConnectTimeout { .. }) => {
                tracing::error!(error = %self, "{}", m::ERROR_CONNECTING);
            }
            AppError::Csi(_) => tracing::error!(error = %self, "{}", m::ERROR_DRIVER_NAME),
            AppError::Socket(_) => tracing::error!(error = %self, "{}", m::FAILED_TO_LISTEN),
            _ => tracing::error!(error = %self, "Registrar stopped with an error"),
        }
    }
}
