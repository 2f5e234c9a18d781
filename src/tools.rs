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

// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run a CSI driver stand-in, the registrar and a kubelet stand-in over real
    /// unix sockets and narrate the registration.
    Demo {
        /// A policy file (TOML) to run the registrar with.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Tools for policy plugin authors: inspect, validate, run, precompile.
    #[cfg(feature = "wasm")]
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[cfg(feature = "wasm")]
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Show a component's WIT version, hooks, imports, size and sha256.
    Inspect {
        wasm: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Load a component with settings, as the registrar does at start-up.
    Validate {
        wasm: PathBuf,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Run one hook against a context and print the decision (as JSON).
    Run {
        wasm: PathBuf,
        /// driver-name, versions, endpoint or failure.
        #[arg(long)]
        hook: crate::policy::config::Hook,
        /// The registration context as a JSON file (keys: node_name, driver_name,
        /// driver_version, csi_address, kubelet_registration_path,
        /// plugin_registration_path); flags below override it.
        #[arg(long)]
        context: Option<PathBuf>,
        #[arg(long)]
        node_name: Option<String>,
        #[arg(long)]
        driver_name: Option<String>,
        #[arg(long)]
        driver_version: Option<String>,
        #[arg(long)]
        kubelet_registration_path: Option<String>,
        /// `current` for driver-name and endpoint (default: from the context, as at start-up).
        #[arg(long)]
        current: Option<String>,
        /// `current` for versions (repeatable; default 1.0.0).
        #[arg(long = "version")]
        versions: Vec<String>,
        /// The kubelet's error text, for the failure hook.
        #[arg(
            long,
            default_value = "RegisterPlugin error -- plugin registration failed with err: example"
        )]
        error: String,
        /// The attempt number, for the failure hook.
        #[arg(long, default_value_t = 1)]
        attempt: u32,
        #[command(flatten)]
        settings: SettingsArgs,
        /// Deadline of the call in milliseconds.
        #[arg(long, default_value_t = crate::policy::config::DEFAULT_TIMEOUT_MS)]
        timeout_ms: u64,
    },
    /// Compile components into a cache directory with this binary, so the
    /// registrar starts without compiling (for image builds or an initContainer).
    Precompile {
        #[arg(required = true)]
        wasm: Vec<PathBuf>,
        #[arg(long)]
        cache_dir: PathBuf,
        /// The key file the registrar's policy names in `policy.cache_key_file`.
        #[arg(long)]
        cache_key_file: PathBuf,
    },
    /// Print a new random key for `policy.cache_key_file` (64 hex digits).
    CacheKey,
    /// Used by the registrar itself: compile the component on stdin, write the
    /// precompiled form on stdout.
    #[command(hide = true)]
    CompileWorker,
}

#[cfg(feature = "wasm")]
#[derive(Debug, clap::Args)]
struct SettingsArgs {
    /// The plugin's settings: a TOML file (the `[plugin.settings]` table's
    /// contents) or a .json file.
    #[arg(long, conflicts_with = "settings_json")]
    settings: Option<PathBuf>,
    /// The plugin's settings as inline JSON.
    #[arg(long)]
    settings_json: Option<String>,
}

#[cfg(feature = "wasm")]
impl SettingsArgs {
    fn json(&self) -> anyhow::Result<String> {
        if let Some(inline) = &self.settings_json {
            let value: serde_json::Value = serde_json::from_str(inline)
                .map_err(|e| anyhow::anyhow!("--settings-json is not JSON: {e}"))?;
            return Ok(value.to_string());
        }
        let Some(path) = &self.settings else {
            return Ok("{}".into());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        if path.extension().is_some_and(|e| e == "json") {
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Ok(value.to_string())
        } else {
            let table: toml::Table =
                toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            Ok(serde_json::to_string(&table)?)
        }
    }
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
    crate::logging::init_tools(tools.verbosity);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building the tokio runtime");
    let result = match tools.command {
        Command::Demo { policy } => runtime.block_on(crate::demo::run(policy)),
        #[cfg(feature = "wasm")]
        Command::Plugin(cmd) => {
            // The plugin tools only print: end quietly when the reader goes away
            // (`| head`) instead of panicking on EPIPE. Not for the demo: its
            // sockets must see EPIPE as an error, not die of SIGPIPE.
            // SAFETY: restoring a signal's default disposition has no preconditions.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            if let PluginCommand::CompileWorker = cmd {
                return Some(crate::policy::wasm::compile_worker());
            }
            plugin(cmd)
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

/// What `plugin run` shows for a start-up hook: the plugin's change to the
/// registration, as the registrar applies it.
#[cfg(feature = "wasm")]
fn registration_decision(
    hook: crate::policy::config::Hook,
    start: &crate::policy::Registration,
    decided: &crate::policy::Registration,
) -> serde_json::Value {
    use crate::policy::config::Hook;
    match hook {
        Hook::DriverName if decided.name == start.name => serde_json::json!("keep"),
        Hook::DriverName => serde_json::json!({ "rename": decided.name }),
        Hook::Endpoint if decided.endpoint == start.endpoint => serde_json::json!("keep"),
        Hook::Endpoint => serde_json::json!({ "replace": decided.endpoint }),
        _ => serde_json::json!({ "supported_versions": decided.supported_versions }),
    }
}

#[cfg(feature = "wasm")]
fn plugin(cmd: PluginCommand) -> anyhow::Result<()> {
    use crate::policy::config::{DEFAULT_MAX_RETRY_MS, DEFAULT_MIN_RETRY_MS, Hook, PluginConfig};
    use crate::policy::{Context, Failure};

    if let PluginCommand::CacheKey = cmd {
        // No engine needed.
        println!("{}", crate::policy::wasm::cache::CacheKey::generate()?);
        return Ok(());
    }
    let host = crate::policy::wasm::Host::new()
        .map_err(|e| anyhow::anyhow!("cannot start the WebAssembly engine: {e:#}"))?;
    match cmd {
        PluginCommand::Inspect { wasm, json } => {
            let i = host.inspect(&wasm)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&i)?);
            } else {
                println!("{} ({} {})", i.path, i.name, i.version);
                println!("  size     {} bytes", i.size_bytes);
                println!("  sha256   {}", i.sha256);
                println!(
                    "  hooks    {}",
                    if i.hooks.is_empty() {
                        "none".into()
                    } else {
                        i.hooks.join(", ")
                    }
                );
                println!("  exports  {}", i.exports.join(", "));
                println!(
                    "  imports  {}",
                    if i.imports.is_empty() {
                        "none".into()
                    } else {
                        i.imports.join(", ")
                    }
                );
            }
            Ok(())
        }
        PluginCommand::Validate { wasm, settings } => {
            let cfg = PluginConfig {
                settings_json: settings.json()?,
                ..PluginConfig::unpinned(&wasm)
            };
            let plugin = host.load(&cfg, None)?;
            let hooks: Vec<_> = plugin.exported_hooks().iter().map(|h| h.as_str()).collect();
            println!(
                "ok: {} loads with these settings; hooks: {}",
                wasm.display(),
                hooks.join(", ")
            );
            Ok(())
        }
        PluginCommand::Run {
            wasm,
            hook,
            context,
            node_name,
            driver_name,
            driver_version,
            kubelet_registration_path,
            current,
            versions,
            error,
            attempt,
            settings,
            timeout_ms,
        } => {
            let mut ctx: Context = match &context {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
                    serde_json::from_str(&text)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
                }
                None => Context {
                    driver_name: "hostpath.csi.k8s.io".into(),
                    driver_version: "1.0.0".into(),
                    csi_address: "/csi/csi.sock".into(),
                    kubelet_registration_path:
                        "/var/lib/kubelet/plugins/hostpath.csi.k8s.io/csi.sock".into(),
                    plugin_registration_path: "/registration".into(),
                    node_name: "node-1".into(),
                },
            };
            for (field, value) in [
                (&mut ctx.node_name, node_name),
                (&mut ctx.driver_name, driver_name),
                (&mut ctx.driver_version, driver_version),
                (
                    &mut ctx.kubelet_registration_path,
                    kubelet_registration_path,
                ),
            ] {
                if let Some(v) = value {
                    *field = v;
                }
            }
            // The registrar's own path: a chain of this one plugin, limited
            // to the hook, with the registrar's checks, clamping and errors.
            let cfg = PluginConfig {
                settings_json: settings.json()?,
                timeout: std::time::Duration::from_millis(timeout_ms),
                hooks: Some([hook].into()),
                ..PluginConfig::unpinned(&wasm)
            };
            // (Loading fails, naming what it exports, if the hook is not one.)
            let plugin = host.load(&cfg, None)?;
            let chain = crate::policy::Chain::new(
                vec![Box::new(plugin)],
                std::time::Duration::from_millis(DEFAULT_MIN_RETRY_MS),
                std::time::Duration::from_millis(DEFAULT_MAX_RETRY_MS),
                std::sync::Arc::new(crate::metrics::Metrics::new()),
            );
            let start = crate::policy::Registration {
                name: current.clone().unwrap_or_else(|| ctx.driver_name.clone()),
                endpoint: current.unwrap_or_else(|| ctx.kubelet_registration_path.clone()),
                supported_versions: if versions.is_empty() {
                    vec!["1.0.0".to_owned()]
                } else {
                    versions
                },
            };
            let started = std::time::Instant::now();
            let decided = match hook {
                Hook::Failure => chain
                    .decide_failure(
                        &ctx,
                        &Failure {
                            error,
                            attempt,
                            elapsed: std::time::Duration::ZERO,
                        },
                    )
                    .map(|d| {
                        let mut out = match d.by {
                            Some(_) => serde_json::json!({ "decision": d.action }),
                            None => serde_json::json!({
                                "decision": "defer",
                                "registrar": { "built_in": d.action },
                            }),
                        };
                        if let Some(asked) = d.asked {
                            out["clamped_from"] = serde_json::json!(asked);
                        }
                        out
                    }),
                _ => chain.registration_from(&ctx, start.clone()).map(
                    |r| serde_json::json!({ "decision": registration_decision(hook, &start, &r) }),
                ),
            };
            let took = started.elapsed().as_micros() as u64;
            match decided {
                Ok(mut out) => {
                    out["hook"] = serde_json::json!(hook.as_str());
                    out["took_us"] = serde_json::json!(took);
                    println!("{}", serde_json::to_string_pretty(&out)?);
                    Ok(())
                }
                Err(e) => {
                    let out = serde_json::json!({
                        "hook": hook.as_str(),
                        "error": e.message,
                        "took_us": took,
                    });
                    println!("{}", serde_json::to_string_pretty(&out)?);
                    Err(e.into())
                }
            }
        }
        PluginCommand::Precompile {
            wasm,
            cache_dir,
            cache_key_file,
        } => {
            let key = crate::policy::wasm::cache::CacheKey::read(&cache_key_file, &cache_dir)
                .map_err(anyhow::Error::msg)?;
            for w in wasm {
                let entry = host.precompile(&w, &cache_dir, &key)?;
                println!("{} -> {}", w.display(), entry.display());
            }
            Ok(())
        }
        PluginCommand::CompileWorker | PluginCommand::CacheKey => {
            unreachable!("handled before the engine is made")
        }
    }
}
