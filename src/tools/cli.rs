//! The tools' command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// A refusal as the kubelet words one: the failure hook's input when a case
/// or `plugin run` gives none.
#[cfg(feature = "wasm")]
pub(crate) const EXAMPLE_REFUSAL: &str =
    "RegisterPlugin error -- plugin registration failed with err: example";

#[derive(Debug, Parser)]
#[command(name = "csi-node-driver-registrar")]
pub(super) struct Tools {
    #[command(subcommand)]
    pub(super) command: Command,
    /// Log verbosity (0 info, 4 debug, 5 trace).
    #[arg(short = 'v', long = "v", global = true, default_value_t = 0)]
    pub(super) verbosity: u8,
}

// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Run a CSI driver stand-in, the registrar and a kubelet stand-in over real
    /// unix sockets and narrate the registration.
    Demo {
        /// A policy file (TOML) to run the registrar with.
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Tools for policy plugin authors: inspect, validate, run, test, bench,
    /// precompile, push, pull. Where a component is asked for, an
    /// `oci://REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]` reference is accepted too.
    #[cfg(feature = "wasm")]
    Plugin(PluginArgs),
}

/// `plugin`'s arguments: the registry flags, then the subcommand.
#[cfg(feature = "wasm")]
#[derive(Debug, clap::Args)]
pub(super) struct PluginArgs {
    #[command(flatten)]
    pub(super) registry: RegistryArgs,
    #[command(subcommand)]
    pub(super) command: PluginCommand,
}

/// How `oci://` components are reached: the policy file's `[policy]` keys, as flags.
#[cfg(feature = "wasm")]
#[derive(Debug, Clone, clap::Args)]
pub(super) struct RegistryArgs {
    /// Registry credentials: a .dockerconfigjson file (`registry_auth_file`).
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) registry_auth_file: Option<PathBuf>,
    /// PEM certificates trusted for registries besides the system's (`registry_ca_file`).
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) registry_ca_file: Option<PathBuf>,
    /// A registry reached over plain HTTP (repeatable; `insecure_registries`).
    #[arg(long = "insecure-registry", global = true, value_name = "HOST:PORT")]
    pub(super) insecure_registries: Vec<String>,
    /// Require a cosign signature by this public key (`cosign_key`).
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) cosign_key: Option<PathBuf>,
    /// For an image: the component's path in its layers (`oci_path`).
    #[arg(long, global = true, value_name = "PATH")]
    pub(super) oci_path: Option<String>,
    /// Where pulled blobs are kept (default: $XDG_CACHE_HOME or ~/.cache, then
    /// csi-node-driver-registrar/oci).
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) oci_cache_dir: Option<PathBuf>,
}

#[cfg(feature = "wasm")]
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(super) enum PluginCommand {
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
    Run(RunArgs),
    /// Check a plugin against a cases file (what it must decide, as data):
    /// one PASS or FAIL line per case, then `N passed, N failed`; exit 1 if
    /// any case fails.
    Test {
        /// The cases file (TOML).
        cases: PathBuf,
        /// The component to test (default: the file's `plugin`).
        #[arg(long)]
        plugin: Option<PathBuf>,
        /// Also write the results as JUnit XML.
        #[arg(long)]
        junit: Option<PathBuf>,
    },
    /// Time a plugin on a cases file: each case decided many times, per call
    /// p50 and p99 in µs, with instantiation and the call itself apart.
    Bench {
        /// The cases file (TOML), as for `plugin test`.
        cases: PathBuf,
        /// The component to time (default: the file's `plugin`).
        #[arg(long)]
        plugin: Option<PathBuf>,
        /// Timed calls per case.
        #[arg(long, default_value_t = 1000)]
        iterations: usize,
    },
    /// Compile components into a cache directory with this binary, so the
    /// registrar starts without compiling (for image builds or an initContainer).
    ///
    /// With --policy: every plugin the policy file names, into its cache_dir
    /// with its cache_key_file, pulling those from registries first (what an
    /// initContainer with room to compile runs before the registrar starts).
    Precompile {
        #[arg(required_unless_present = "policy", conflicts_with = "policy")]
        wasm: Vec<PathBuf>,
        #[arg(long, required_unless_present = "policy")]
        cache_dir: Option<PathBuf>,
        /// The key file the registrar's policy names in `policy.cache_key_file`.
        #[arg(long, required_unless_present = "policy")]
        cache_key_file: Option<PathBuf>,
        /// A policy file: its plugins, cache_dir and cache_key_file.
        #[arg(long, conflicts_with_all = ["cache_dir", "cache_key_file", "memory_limit_mib"])]
        policy: Option<PathBuf>,
        /// The largest `memory_limit_mib` of the policy the components run
        /// in: the engine's memory slots, and so the compiled code, follow it.
        #[arg(long, default_value_t = crate::policy::file::DEFAULT_MEMORY_LIMIT_MIB,
              value_parser = clap::value_parser!(u64).range(1..=crate::policy::file::MAX_MEMORY_LIMIT_MIB))]
        memory_limit_mib: u64,
    },
    /// Print a new random key for `policy.cache_key_file` (64 hex digits).
    CacheKey,
    /// Push a component to a registry as the CNCF wasm artefact (config
    /// application/vnd.wasm.config.v0+json, one application/wasm layer), and
    /// print the pinned `oci = "…@sha256:…"` line for the policy file.
    Push {
        /// The component (.wasm).
        wasm: PathBuf,
        /// REGISTRY/REPOSITORY[:TAG]
        reference: String,
    },
    /// Pull a plugin (a wasm artefact, or a file of an image with --oci-path),
    /// verify and load it, and print the pinned `oci = "…@sha256:…"` line.
    Pull {
        /// REGISTRY/REPOSITORY[:TAG|@sha256:DIGEST]
        reference: String,
        /// Also write the component to this file.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Used by the registrar itself: compile the component on stdin, write the
    /// precompiled form on stdout.
    #[command(hide = true)]
    CompileWorker {
        /// The engine's memory reservation per slot, in MiB.
        #[arg(long)]
        memory_mib: u64,
    },
}

/// `plugin run`'s arguments.
#[cfg(feature = "wasm")]
#[derive(Debug, clap::Args)]
pub(super) struct RunArgs {
    pub(super) wasm: PathBuf,
    /// driver-name, versions, endpoint or failure.
    #[arg(long)]
    pub(super) hook: crate::policy::Hook,
    /// The registration context as a JSON file (keys: node_name, driver_name,
    /// driver_version, csi_address, kubelet_registration_path,
    /// plugin_registration_path, plugin_type, supported_versions); flags below override it.
    #[arg(long)]
    pub(super) context: Option<PathBuf>,
    #[arg(long)]
    pub(super) node_name: Option<String>,
    #[arg(long)]
    pub(super) driver_name: Option<String>,
    #[arg(long)]
    pub(super) driver_version: Option<String>,
    #[arg(long)]
    pub(super) kubelet_registration_path: Option<String>,
    /// The kubelet plugin type the plugin serves (`registrar-info`), as `--plugin-type`.
    #[arg(long, value_enum)]
    pub(super) plugin_type: Option<crate::plugin_type::PluginType>,
    /// `current` for driver-name and endpoint (default: from the context, as at start-up).
    #[arg(long)]
    pub(super) current: Option<String>,
    /// `current` for versions (repeatable; default: the plugin type's, 1.0.0 for CSI).
    #[arg(long = "version")]
    pub(super) versions: Vec<String>,
    /// The kubelet's error text, for the failure hook.
    #[arg(
        long,
        default_value = EXAMPLE_REFUSAL
    )]
    pub(super) error: String,
    /// The attempt number, for the failure hook.
    #[arg(long, default_value_t = 1)]
    pub(super) attempt: u32,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
    /// Deadline of the call in milliseconds.
    #[arg(long, default_value_t = crate::policy::file::DEFAULT_TIMEOUT_MS)]
    pub(super) timeout_ms: u64,
}

#[cfg(feature = "wasm")]
#[derive(Debug, clap::Args)]
pub(super) struct SettingsArgs {
    /// The plugin's settings: a TOML file (the `[plugin.settings]` table's
    /// contents) or a .json file.
    #[arg(long, conflicts_with = "settings_json")]
    pub(super) settings: Option<PathBuf>,
    /// The plugin's settings as inline JSON.
    #[arg(long)]
    pub(super) settings_json: Option<String>,
}

#[cfg(feature = "wasm")]
impl SettingsArgs {
    pub(super) fn json(&self) -> anyhow::Result<String> {
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
