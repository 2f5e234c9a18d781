//! Subcommands beside the upstream flags: `demo` and the plugin author tools.
//! They live under names no upstream flag can take, so an existing DaemonSet's
//! arguments always reach the registrar itself.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "csi-node-driver-registrar")]
struct Tools {
    #[command(subcommand)]
    command: Command,
    /// Log verbosity (0 info, 4 debug, 5 trace).
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0)]
    verbosity: u8,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a CSI driver stand-in, the registrar and a kubelet stand-in over real
    /// unix sockets and narrate the registration.
    Demo {
        /// A policy file (TOML) to run the registrar with.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
}

/// Runs a tool when `args[1]` names one; `None` lets the registrar run.
pub fn dispatch(args: &[String]) -> Option<ExitCode> {
    if !matches!(args.get(1).map(String::as_str), Some("demo" | "plugin")) {
        return None;
    }
    let tools = match Tools::try_parse_from(args) {
        Ok(t) => t,
        Err(e) => {
            let _ = e.print();
            return Some(ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2)));
        }
    };
    crate::logging::init(tools.verbosity, false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let result = match tools.command {
        Command::Demo { policy } => runtime.block_on(crate::demo::run(policy)),
    };
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    })
}
