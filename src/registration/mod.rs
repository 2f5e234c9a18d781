//! The kubelet side: the registration socket's whole life and the
//! `pluginregistration` service served on it.
//!
//! - [`socket`]: bind, atomic takeover, ownership and removal of one socket file.
//! - [`slot`]: the socket the registrar currently serves, its re-creation after
//!   a deletion, and the watch on the registration directory.
//! - [`service`]: `GetInfo` and `NotifyRegistrationStatus`.
//! - [`authority`]: the layer that lets every gRPC client's `:authority` through to h2.
//!
//! [`Advertised`] is the one record of what is advertised and where: the
//! service answers `GetInfo` from it, `/healthz` checks it, and only the slot
//! changes it.

mod authority;
pub mod service;
pub(crate) mod slot;
pub mod socket;

use std::path::PathBuf;
use std::sync::RwLock;

pub use authority::AuthorityFix;
pub use service::{RegistrationService, Verdict};
pub(crate) use slot::Slot;
pub use socket::{RegistrationSocket, SocketError};

use crate::policy::Registration;

/// What the registrar advertises, and the socket path it serves it on.
#[derive(Debug, Default)]
pub struct Advertised(RwLock<Option<Published>>);

/// A decided registration and the path of its socket (whether a socket of
/// ours is there right now is for whoever looks to find out, as `/healthz` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub registration: Registration,
    pub socket: PathBuf,
}

impl Advertised {
    pub fn get(&self) -> Option<Published> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn publish(&self, published: Published) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(published);
    }
}
