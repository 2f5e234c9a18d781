//! The kubelet side: the registration socket and the `pluginregistration`
//! service served on it.

pub mod authority;
pub mod service;
pub mod socket;

pub use authority::AuthorityFix;
pub use service::{RegistrationService, Verdict};
pub use socket::{RegistrationSocket, SocketError};
