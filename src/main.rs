//! The registrar's binary: everything it does is [`csi_node_driver_registrar::main`].

use std::process::ExitCode;

fn main() -> ExitCode {
    csi_node_driver_registrar::main(std::env::args().collect())
}
