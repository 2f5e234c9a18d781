//! A real OCI registry on loopback (the CNCF distribution registry, Debian's
//! `docker-registry`), with a temporary storage directory, optionally with TLS
//! and basic auth; and `oras`, a second client. Both are installed by
//! `.ci/run`; where they are missing (a user's fresh clone), the tests that
//! need them say so and skip, except under CI, where they fail.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::PATIENCE;

/// `user` / `s3cret`, bcrypt (the registry's htpasswd accepts only bcrypt).
pub const USER: &str = "alice";
pub const PASSWORD: &str = "s3cret";
const HTPASSWD: &str = "alice:$2b$05$TxEbZuJphVGCFJ4etOQYfudSmGo1AkVlV3DlhMJO/EygU5l/6DVoG\n";

/// A program the tests need: its path, or `None` (skip) outside CI.
pub fn tool(name: &str, install: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain(std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/bin")))
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed; CI installs it: {install}"
        );
        eprintln!("SKIP: {name} is not installed ({install})");
    }
    found
}

/// A CA (`DIR/ca.pem`) and a certificate for 127.0.0.1 signed by it
/// (`DIR/cert.pem`, key `DIR/key.pem`, P-256), made with openssl: a
/// self-signed CA used as the server's own is refused by webpki.
pub fn tls_files(d: &Path) -> (PathBuf, PathBuf) {
    // A CA, and a server certificate for 127.0.0.1 signed by it (a
    // self-signed CA used as the server's own is refused by webpki).
    let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "2",
                "-subj",
                "/CN=test-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "key.pem",
                "-out",
                "leaf.csr",
            ],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "cert.pem",
        ],
    ] {
        let out = Command::new("openssl")
            .current_dir(d)
            .args(&args)
            .output()
            .expect("running openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (cert, key)
}

/// A registry process, stopped when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its storage, config and certificates.
    pub dir: tempfile::TempDir,
    /// With TLS: the CA (here, the self-signed certificate) to trust.
    pub ca: Option<PathBuf>,
}

/// How a registry is started.
#[derive(Default, Clone, Copy)]
pub struct Options {
    pub tls: bool,
    pub auth: bool,
}

impl Registry {
    /// Starts one; `None` when `docker-registry` is not installed (outside CI).
    pub fn start(opts: Options) -> Option<Registry> {
        let bin = tool("docker-registry", "apt-get install docker-registry")?;
        let dir = tempfile::tempdir().unwrap();
        // A port the kernel just handed out; the registry binds it itself.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            dir.path().join("data").display()
        );
        let mut ca = None;
        if opts.tls {
            let (cert, key) = tls_files(dir.path());
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
            ca = Some(dir.path().join("ca.pem"));
        }
        if opts.auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, HTPASSWD).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config_file = dir.path().join("config.yml");
        std::fs::write(&config_file, config).unwrap();
        let mut child = Command::new(bin)
            .arg("serve")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting docker-registry");
        // Ready when it says it listens (its log goes to stderr); the rest of
        // the log is drained so the registry never blocks on a full pipe.
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr).lines();
            let mut tx = Some(tx);
            while let Some(Ok(line)) = lines.next() {
                if line.contains("listening on")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        let ready = rx.recv_timeout(PATIENCE);
        let mut r = Registry {
            child,
            addr,
            dir,
            ca,
        };
        if ready.is_err() {
            let _ = r.child.kill();
            panic!("docker-registry did not start listening within {PATIENCE:?}");
        }
        Some(r)
    }

    /// A `.dockerconfigjson` with this registry's credentials.
    pub fn auth_file(&self, password: &str) -> PathBuf {
        use base64::Engine as _;
        let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let path = self.dir.path().join("dockerconfig.json");
        let auth = encode(format!("{USER}:{password}").as_bytes());
        std::fs::write(
            &path,
            format!(
                "{{\"auths\": {{\"{}\": {{\"auth\": \"{auth}\"}}}}}}",
                self.addr
            ),
        )
        .unwrap();
        path
    }

    /// Stops it (as a node losing its registry would see it).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `oras COMMAND --plain-http ARGS…` in `dir`; its stdout, or the failure.
pub fn oras(oras: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(oras)
        .current_dir(dir)
        .arg(args[0])
        .arg("--plain-http")
        .args(&args[1..])
        .output()
        .expect("running oras");
    assert!(
        out.status.success(),
        "oras {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The digest oras printed for what it pushed (`Digest: sha256:…`).
pub fn pushed_digest(oras_output: &str) -> String {
    oras_output
        .lines()
        .find_map(|l| l.strip_prefix("Digest: "))
        .unwrap_or_else(|| panic!("no digest in oras' output: {oras_output}"))
        .trim()
        .to_owned()
}

/// Files under `store` that are not blobs named by their own digest: what a
/// failed pull must never leave.
pub fn stray_files(store: &Path) -> Vec<String> {
    use sha2::Digest;
    let blobs = store.join("blobs/sha256");
    let Ok(entries) = std::fs::read_dir(&blobs) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap())) != name
        })
        .map(|p| p.display().to_string())
        .collect()
}
