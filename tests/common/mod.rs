//! Shared by the integration tests, one file per concern:
//!
//! - `sandbox`: the paths one registrar uses, and the registrar in-process
//!   (`testing::Harness`), waited on through its state;
//! - `process`: the registrar binary, for exit codes, signals and the log;
//! - `plugins`: the plugins built from `plugins/`, and policy files naming them;
//! - `http`: the HTTP server, from outside;
//! - `registry`: a real OCI registry on loopback, and `oras`.
#![allow(dead_code, unused_imports, unreachable_pub)]

pub mod http;
pub mod plugins;
pub mod process;
pub mod registry;
pub mod sandbox;

pub use csi_node_driver_registrar::testing::PATIENCE;
pub use http::*;
pub use plugins::*;
pub use process::*;
pub use sandbox::*;
