//! The kubelet side: the registration socket's whole life and the
//! `pluginregistration` service served on it.
//!
//! - `socket`: bind, atomic takeover, ownership and removal of one socket file.
//! - `slot`: the socket the registrar currently serves, its re-creation after
//!   a deletion, and the watch on the registration directory.
//! - `service`: `GetInfo` and `NotifyRegistrationStatus`, answered from the
//!   registration's state.
//! - `authority`: the layer that lets every gRPC client's `:authority` through to h2.
//!
//! This file only names the parts; they import each other, never it.

mod authority;
mod service;
mod slot;
mod socket;

pub(crate) use service::SELF_PROBE;
pub use service::{KubeletCall, RegistrationService, Verdict};
pub(crate) use slot::{AbortOnDrop, Listened, Slot};
pub(crate) use socket::remove_live_sockets;
pub use socket::{SocketError, socket_path};
