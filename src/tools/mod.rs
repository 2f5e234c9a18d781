//! The tools wing: subcommands beside the upstream flags, for people rather
//! than the kubelet. They live under names no upstream flag can take, so an
//! existing DaemonSet's arguments always reach the registrar itself.
//!
//! - `cli`: the tools' command line.
//! - `demo`: a driver stand-in, the registrar and a kubelet stand-in, narrated.
//! - `inspect`, `validate`, `run`, `test`, `precompile`, `cache_key`, `oci`
//!   (push and pull):
//!   `plugin …`, one file per subcommand; `author` holds what they share
//!   (the registrar's decision path for one plugin) and what the tests reach.
//! - `standins`: a CSI driver and a kubelet built from the same protos, for
//!   the demo and the tests.
//!
//! The core never imports this wing; only `main` and the tests reach it.

#[cfg(feature = "wasm")]
#[macro_use]
mod out;
#[cfg(feature = "wasm")]
pub(crate) mod author;
#[cfg(feature = "wasm")]
mod bench;
#[cfg(feature = "wasm")]
mod cache_key;
#[cfg(feature = "wasm")]
mod cases;
mod cli;
mod demo;
#[cfg(feature = "wasm")]
mod inspect;
#[cfg(feature = "oci")]
mod oci;
#[cfg(feature = "wasm")]
mod precompile;
#[cfg(feature = "wasm")]
mod run;
pub(crate) mod standins;
#[cfg(feature = "wasm")]
mod test;
#[cfg(feature = "wasm")]
mod validate;

use std::process::ExitCode;

use clap::Parser;

use cli::{Command, Tools};

/// Runs a tool when `args[1]` names one; `None` lets the registrar run.
pub(crate) fn dispatch(args: &[String]) -> Option<ExitCode> {
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
    crate::logging::init_tools(tools.verbosity);
    let result = match tools.command {
        Command::Demo { policy } => runtime().block_on(demo::run(policy)),
        #[cfg(feature = "wasm")]
        Command::Plugin(cli::PluginArgs {
            registry,
            command: cmd,
        }) => {
            use cli::PluginCommand as P;
            let sources = author::Sources::from_args(&registry);
            let named = match &cmd {
                P::Inspect { wasm, .. } | P::Validate { wasm, .. } => Some(wasm.as_path()),
                P::Run(args) => Some(args.wasm.as_path()),
                P::Test { plugin, .. } | P::Bench { plugin, .. } => plugin.as_deref(),
                _ => None,
            };
            if let Some(Err(e)) = named.map(|n| sources.source_of(n)) {
                eprintln!("error: {e}");
                return Some(ExitCode::from(2));
            }
            // SIGPIPE stays ignored: a registry that closes while a push is
            // being written is an error that names it, not a silent death.
            // A reader of stdout that goes away (`| head`) ends the tool
            // quietly instead (`outln!`).
            match cmd {
                P::CompileWorker { memory_mib } => {
                    return Some(crate::policy::wasm::compile_worker(memory_mib));
                }
                P::CacheKey => cache_key::run(),
                P::Inspect { wasm, json } => inspect::run(&sources, &wasm, json),
                P::Validate { wasm, settings } => validate::run(&sources, &wasm, &settings),
                P::Run(args) => run::run(&sources, args),
                P::Bench {
                    cases,
                    plugin,
                    iterations,
                } => bench::run(&sources, &cases, plugin.as_deref(), iterations),
                P::Test {
                    cases,
                    plugin,
                    junit,
                } => match test::run(&sources, &cases, plugin.as_deref(), junit.as_deref()) {
                    Ok(true) => Ok(()),
                    Ok(false) => return Some(ExitCode::FAILURE),
                    Err(e) => Err(e),
                },
                P::Precompile {
                    wasm,
                    cache_dir,
                    cache_key_file,
                    policy,
                    memory_limit_mib,
                } => match (policy, cache_dir, cache_key_file) {
                    (Some(policy), _, _) => precompile::run_policy(&policy),
                    (None, Some(dir), Some(key)) => {
                        precompile::run(&sources, &wasm, &dir, &key, memory_limit_mib)
                    }
                    _ => Err(anyhow::anyhow!(
                        "give components with --cache-dir and --cache-key-file, or --policy"
                    )),
                },
                #[cfg(feature = "oci")]
                P::Push { wasm, reference } => oci::push(&sources, &wasm, &reference),
                #[cfg(feature = "oci")]
                P::Pull { reference, output } => oci::pull(&sources, &reference, output.as_deref()),
                #[cfg(not(feature = "oci"))]
                P::Push { .. } | P::Pull { .. } => Err(anyhow::anyhow!(
                    "this build has no OCI registry client (built without the `oci` feature)"
                )),
            }
        }
    };
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime")
}
