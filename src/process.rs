//! What the binary does: flags, then logging, the panic hook and the
//! runtime, then [`crate::run`], then the exit code.

use std::process::ExitCode;

use crate::config::{Config, Start};
use crate::error::AppError;
use crate::flags::Flags;
use crate::flags::VERSION;
use crate::logging::{self, Verbosity};
use crate::registration::remove_live_sockets;
use crate::{app, messages, signal, tools};

/// The registrar's binary: a tool when `args[1]` names one, the registrar
/// otherwise. Exit codes as upstream: 0 (`--version`, probe mode, SIGTERM),
/// 1 (runtime failures), 2 (flag errors).
pub fn main(args: Vec<String>) -> ExitCode {
    if let Some(code) = tools::dispatch(&args) {
        return code;
    }
    let flags = match Flags::try_parse_go(args.iter().cloned()) {
        Ok(f) => f,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if flags.version {
        println!("{} {VERSION}", args[0]);
        return ExitCode::SUCCESS;
    }
    // component-base validates the logging flags first and logs with its
    // defaults (text) when they are invalid.
    let invalid = flags.logging_errors();
    if !invalid.is_empty() {
        logging::init(Verbosity::new(flags.verbosity), false);
        let err = match invalid.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        tracing::error!(error = %err, "{}", messages::LOGGING_CONFIGURATION_INVALID);
        return ExitCode::FAILURE;
    }
    logging::init(
        Verbosity {
            v: flags.verbosity,
            vmodule: Verbosity::parse_vmodule(&flags.vmodule).unwrap_or_default(),
        },
        flags.logging_format == "json",
    );
    // Release builds abort on panic without running destructors: remove the
    // registration socket here so the kubelet is not left dialing a dead one.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        remove_live_sockets();
    }));

    let node_name = std::env::var("KUBE_NODE_NAME").unwrap_or_default();
    // The downward API's pod UID, for DRA rolling updates; a CSI driver's pod
    // may well have POD_UID set for other reasons, so only DRA reads it.
    let mut flags = flags;
    if flags.pod_uid.is_empty() && flags.plugin_type == crate::plugin_type::PluginType::Dra {
        flags.pod_uid = std::env::var("POD_UID").unwrap_or_default();
    }
    let config = match Config::from_flags(&flags, node_name) {
        // Plugins compile in child processes: the compiler's memory is not kept.
        Ok(Start::Run(config)) => Config {
            compile_worker: std::env::current_exe().ok(),
            ..*config
        },
        Ok(Start::ExitOk) => return ExitCode::SUCCESS,
        Err(e) => {
            AppError::from(e).log();
            return ExitCode::FAILURE;
        }
    };
    // One thread serves everything: a registrar's load is a few calls a minute,
    // and a single thread has no cross-thread wake-ups when idle. Plugin calls
    // and policy loading run on tokio's blocking pool; the plugins' WASI
    // clocks on this runtime, the only one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let outcome =
        runtime.block_on(async { app::run(config, signal::shutdown(), signal::reloads()).await });
    // Do not wait for a plugin call still running on the blocking pool: its
    // deadline would end it, but SIGTERM is honoured at once.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            e.log();
            ExitCode::FAILURE
        }
    }
}
