//! Shared by the integration tests: the registrar as a real child process, the
//! stand-ins in-process, and the plugins built from `plugins/`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use csi_node_driver_registrar::standins::wait_until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const BIN: &str = env!("CARGO_BIN_EXE_csi-node-driver-registrar");
/// Generous: CI machines are slow and shared, and nothing here waits this
/// long unless something is broken.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A temporary directory with the paths one registrar uses.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub csi: PathBuf,
    pub registry: PathBuf,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("reg").tempdir().unwrap();
        let registry = dir.path().join("registry");
        std::fs::create_dir(&registry).unwrap();
        Sandbox {
            csi: dir.path().join("csi.sock"),
            registry,
            dir,
        }
    }

    /// The flags every test passes: the driver socket, its host path and the registry.
    pub fn args(&self) -> Vec<String> {
        vec![
            format!("--csi-address=unix://{}", self.csi.display()),
            format!("--kubelet-registration-path={}", self.csi.display()),
            format!("--plugin-registration-path={}", self.registry.display()),
        ]
    }

    pub fn socket(&self, driver: &str) -> PathBuf {
        self.registry.join(format!("{driver}-reg.sock"))
    }
}

/// The registrar binary, running. Killed if the test ends without stopping it.
pub struct Registrar {
    child: tokio::process::Child,
    pub log: PathBuf,
}

impl Registrar {
    pub fn spawn(sandbox: &Sandbox, extra: &[String]) -> Self {
        let mut args = sandbox.args();
        args.extend(extra.iter().cloned());
        Self::spawn_raw(sandbox.dir.path(), &args)
    }

    /// With exactly these arguments; the log goes to a file in `dir`.
    pub fn spawn_raw(dir: &Path, args: &[String]) -> Self {
        let log = tempfile::Builder::new()
            .prefix("registrar-")
            .suffix(".log")
            .tempfile_in(dir)
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let mut command = tokio::process::Command::new(BIN);
        command
            .args(args)
            .env("KUBE_NODE_NAME", "node-a1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        // SAFETY: prctl is async-signal-safe. If the test process dies without
        // running destructors (a crash), the kernel still kills the registrar.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        Registrar { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("registrar still running")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str) -> bool {
        wait_until(PATIENCE, || self.log_text().contains(needle)).await
    }

    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id().expect("registrar still running") as libc::pid_t;
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits for the process to exit; panics with its log if it does not.
    pub async fn exit(&mut self) -> ExitStatus {
        match tokio::time::timeout(PATIENCE, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("registrar did not exit; log:\n{}", self.log_text()),
        }
    }

    pub async fn exit_code(&mut self) -> i32 {
        let status = self.exit().await;
        status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {status:?}; log:\n{}", self.log_text()))
    }

    pub async fn stop(mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.exit_code().await
    }
}

/// Runs the binary to its end: exit code, stdout, stderr.
pub async fn run_binary<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits for a path to exist.
pub async fn appears(path: &Path) -> bool {
    wait_until(PATIENCE, || path.exists()).await
}

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

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET over HTTP/1.0; returns the status code and the body. `None` if nothing listens.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut raw = String::new();
    conn.read_to_string(&mut raw).await.ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// Waits until the HTTP server answers `path` with `code`; returns the last answer.
pub async fn http_until(port: u16, path: &str, code: u16) -> Option<(u16, String)> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        last = http_get(port, path).await;
        if matches!(&last, Some((c, _)) if *c == code) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last
}
