//! The plugins built from `plugins/`, and policy files naming them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Builds the plugins workspace for wasm32-wasip2 (once per test binary) and
/// returns the path of one component.
pub fn plugin(crate_name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("running cargo to build the plugins");
        assert!(
            out.status.success(),
            "building plugins/ failed (is the wasm32-wasip2 target installed? `rustup target add wasm32-wasip2`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        root.join("target/wasm32-wasip2/release")
    });
    let path = dir.join(format!("{}.wasm", crate_name.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

pub fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// A `[[plugin]]` entry pinned to the file's real digest, plus extra TOML lines.
pub fn plugin_entry(id: &str, path: &Path, extra: &str) -> String {
    format!(
        "[[plugin]]\nid = \"{id}\"\npath = \"{}\"\nsha256 = \"{}\"\n{extra}\n",
        path.display(),
        sha256_hex(path)
    )
}

/// A `[policy]` table with a plugin cache in `cache` and its key in
/// `dir/cache.key` (written here).
pub fn cached_policy(dir: &Path, cache: &Path) -> String {
    let key = dir.join("cache.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef-test-key\n").unwrap();
    format!(
        "[policy]\ncache_dir = \"{}\"\ncache_key_file = \"{}\"\n",
        cache.display(),
        key.display()
    )
}

pub fn write_policy(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("policy.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// The driver every plugin test decides for.
pub const DRIVER: &str = "hostpath.csi.k8s.io";

/// A registration context as the registrar builds it for [`DRIVER`].
pub fn ctx() -> csi_node_driver_registrar::testing::Context {
    csi_node_driver_registrar::testing::Context {
        node_name: "node-a1".into(),
        driver_name: DRIVER.into(),
        driver_version: "1.2.3".into(),
        csi_address: "unix:///csi/csi.sock".into(),
        kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath/csi.sock".into(),
        plugin_registration_path: "/registration".into(),
        ..Default::default()
    }
}

/// Loads a policy file with `toml` as the registrar does; errors as text.
#[cfg(feature = "wasm")]
pub fn load(dir: &Path, toml: &str) -> Result<csi_node_driver_registrar::testing::Chain, String> {
    use csi_node_driver_registrar::testing::{Metrics, PolicyFile, wasm};
    let file = write_policy(dir, toml);
    let cfg = PolicyFile::from_file(&file).map_err(|e| e.to_string())?;
    wasm::load_chain(&cfg, std::sync::Arc::new(Metrics::new())).map_err(|e| e.to_string())
}

/// A `[[plugin]]` entry for the misbehave fixture doing `action`.
pub fn misbehave(action: &str, extra: &str) -> String {
    plugin_entry(
        "m",
        &plugin("misbehave"),
        &format!("{extra}\n[plugin.settings]\ndo = \"{action}\"\n"),
    )
}

/// A component written in WAT, saved as `dir/name`.
pub fn wat_plugin(dir: &Path, name: &str, wat: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
    path
}
