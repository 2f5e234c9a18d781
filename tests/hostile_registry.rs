//! A registry, a token endpoint and a cache as hostile as a plugin: one test
//! per fault class of the pull path. Each asserts the words a person reads,
//! that nothing outside the cache changed (a victim file beside it), and that
//! the store holds only complete, verified blobs.
//!
//! The stand-in registry follows the distribution spec's routes
//! (distribution/distribution `docs/spec/api.md`: `GET /v2/`,
//! `/v2/<name>/manifests/<reference>`, `/v2/<name>/blobs/<digest>`, `POST
//! /v2/<name>/blobs/uploads/` then `PUT <location>?digest=`) and its token
//! auth (`docs/spec/auth/token.md`: a `401` with `WWW-Authenticate: Bearer
//! realm=…,service=…`, then `GET realm?service=…&scope=…`), and lies where
//! a real registry cannot be made to.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::get;
use common::registry::stray_files;
use common::*;
use sha2::Digest;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const TAR_GZ: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn manifest(layers: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(b"{}"), "size": 2},
        "layers": layers,
    }))
    .unwrap()
}

/// What the stand-in serves and what it was asked.
#[derive(Default)]
struct Served {
    /// By path (`/v2/r/manifests/sha256:…`, `/v2/r/blobs/sha256:…`).
    files: Mutex<Vec<(String, Vec<u8>)>>,
    /// Every path asked for.
    asked: Mutex<Vec<String>>,
}

impl Served {
    fn serve(&self, path: &str, bytes: Vec<u8>) {
        self.files.lock().unwrap().push((path.to_owned(), bytes));
    }

    fn asked(&self, prefix: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(prefix))
            .count()
    }
}

/// A stand-in registry on loopback serving `served`, with `extra` routes;
/// stopped with its runtime.
struct StandIn {
    addr: String,
    served: Arc<Served>,
    _rt: tokio::runtime::Runtime,
}

impl StandIn {
    fn start(extra: Router) -> StandIn {
        let served = Arc::new(Served::default());
        let s = served.clone();
        let app = extra.fallback(move |uri: Uri| {
            let s = s.clone();
            async move {
                let path = uri.path().to_owned();
                s.asked.lock().unwrap().push(path.clone());
                if path == "/v2/" {
                    return (StatusCode::OK, HeaderMap::new(), b"{}".to_vec());
                }
                let found = s
                    .files
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|(p, _)| *p == path)
                    .map(|(_, b)| b.clone());
                match found {
                    Some(bytes) => {
                        let mut h = HeaderMap::new();
                        if path.contains("/manifests/") {
                            h.insert("content-type", MANIFEST.parse().unwrap());
                        }
                        (StatusCode::OK, h, bytes)
                    }
                    None => (StatusCode::NOT_FOUND, HeaderMap::new(), Vec::new()),
                }
            }
        });
        let (addr, rt) = serve_on_loopback(app);
        StandIn {
            addr,
            served,
            _rt: rt,
        }
    }

    /// Serves a manifest in repository `r`; its digest.
    fn manifest(&self, bytes: Vec<u8>) -> String {
        let d = digest(&bytes);
        self.served.serve(&format!("/v2/r/manifests/{d}"), bytes);
        d
    }

    fn blob(&self, bytes: Vec<u8>) -> String {
        let d = digest(&bytes);
        self.served.serve(&format!("/v2/r/blobs/{d}"), bytes);
        d
    }
}

/// A test's directory: the cache in `cache/`, a victim file beside it.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("victim"), b"a host file").unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        Node { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn store(&self) -> PathBuf {
        self.path().join("cache/oci")
    }

    /// Loads a policy pulling `r@pin` from `registry`, with `keys` in `[policy]`.
    fn load(&self, registry: &StandIn, pin: &str, keys: &str, plugin: &str) -> String {
        let toml = format!(
            "{}insecure_registries = [\"{}\"]\n{keys}\n[[plugin]]\nid = \"p\"\noci = \"{}/r@{pin}\"\n{plugin}\n",
            cached_policy(self.path(), &self.path().join("cache")),
            registry.addr,
            registry.addr
        );
        match load(self.path(), &toml) {
            Ok(_) => panic!("a hostile source loaded"),
            Err(e) => e,
        }
    }

    /// Nothing outside the cache changed, and the store holds only
    /// complete blobs named by their own digest (no partial files).
    fn assert_unharmed(&self) {
        assert_eq!(
            std::fs::read(self.path().join("victim")).unwrap(),
            b"a host file",
            "the file beside the cache is untouched"
        );
        let mut outside: Vec<_> = std::fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        outside.sort();
        assert_eq!(outside, ["cache", "cache.key", "policy.toml", "victim"]);
        assert_eq!(stray_files(&self.store()), Vec::<String>::new());
    }
}

#[test]
fn a_digest_that_is_a_path_never_names_a_host_file() {
    let registry = StandIn::start(Router::new());
    let node = Node::new();
    let victim = node.path().join("victim").display().to_string();
    for bad in [
        format!("sha256:{victim}"),
        "sha256:../../../victim".to_owned(),
    ] {
        let layer =
            serde_json::json!([{"mediaType": "application/wasm", "digest": bad, "size": 11}]);
        let pin = registry.manifest(manifest(layer));
        let err = node.load(&registry, &pin, "", "");
        assert!(
            err.contains(&format!(
                "digest {bad:?} is not sha256:<64 lowercase hex digits>"
            )),
            "{err}"
        );
        // An index entry too.
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": MANIFEST, "digest": bad, "size": 10,
                "platform": {"os": "linux", "architecture": "wasm"}}],
        }))
        .unwrap();
        let pin = registry.manifest(index);
        let err = node.load(&registry, &pin, "", "");
        assert!(
            err.contains("is not sha256:<64 lowercase hex digits>"),
            "{err}"
        );
        node.assert_unharmed();
    }
    assert_eq!(
        registry.served.asked("/v2/r/blobs/"),
        0,
        "no blob was asked for"
    );
}

#[test]
fn an_unsupported_digest_algorithm_is_named_not_called_tampering() {
    let registry = StandIn::start(Router::new());
    let node = Node::new();
    let layer = serde_json::json!([{"mediaType": "application/wasm",
        "digest": format!("sha512:{}", "ab".repeat(64)), "size": 11}]);
    let pin = registry.manifest(manifest(layer));
    let err = node.load(&registry, &pin, "", "");
    assert!(
        err.contains(
            "uses sha512, which this registrar does not support: only sha256 digests are read"
        ),
        "{err}"
    );
    node.assert_unharmed();
}

/// A token endpoint that streams without end, on the same host (listed as
/// insecure). The CLI runs under an address-space limit of 1 GiB: reading
/// the token whole would end in an allocation failure, not this error.
#[test]
fn a_token_endpoint_that_streams_forever_is_cut_off() {
    let endless = || {
        Body::from_stream(tokio_stream::iter(std::iter::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(vec![b'a'; 64 << 10]))
        })))
    };
    let addr = Arc::new(Mutex::new(String::new()));
    let a = addr.clone();
    let registry = StandIn::start(
        Router::new()
            .route(
                "/v2/",
                get(move || {
                    let realm = format!("http://{}/token", a.lock().unwrap());
                    async move {
                        (
                            StatusCode::UNAUTHORIZED,
                            [(
                                "www-authenticate",
                                format!("Bearer realm=\"{realm}\",service=\"test\""),
                            )],
                        )
                    }
                }),
            )
            .route("/token", get(move || async move { endless() })),
    );
    *addr.lock().unwrap() = registry.addr.clone();
    let node = Node::new();
    let out = cli_capped(&[
        "plugin",
        "pull",
        &format!("{}/r:v1", registry.addr),
        "--insecure-registry",
        &registry.addr,
        "--oci-cache-dir",
        &node.store().display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot pull from registry {}, repository r: http://{}/token?service=test&scope=repository%3Ar%3Apull: the registry sent more than the 65536 bytes allowed (a token response's 64 KiB); stopped reading",
            registry.addr, registry.addr
        )),
        "{stderr}"
    );
}

/// A registry reached over plain HTTP (listed) whose token realm is another
/// host that is not listed: the credentials are not sent there.
#[test]
fn credentials_never_go_to_a_plain_http_token_realm() {
    let tokens = StandIn::start(Router::new());
    let realm = format!(
        "http://localhost:{}/token",
        tokens.addr.rsplit_once(':').unwrap().1
    );
    let r = realm.clone();
    let registry = StandIn::start(Router::new().route(
        "/v2/",
        get(move || {
            let r = r.clone();
            async move {
                (
                    StatusCode::UNAUTHORIZED,
                    [(
                        "www-authenticate",
                        format!("Bearer realm=\"{r}\",service=\"test\""),
                    )],
                )
            }
        }),
    ));
    let node = Node::new();
    let auth = node.path().join("cache.auth");
    std::fs::write(
        &auth,
        format!(
            "{{\"auths\": {{\"{}\": {{\"auth\": \"YWxpY2U6czNjcjN0\"}}}}}}",
            registry.addr
        ),
    )
    .unwrap();
    let pin = digest(b"anything");
    let err = node.load(
        &registry,
        &pin,
        &format!("registry_auth_file = \"{}\"", auth.display()),
        "",
    );
    assert!(
        err.contains(&format!(
            "the registry {} sends for tokens to {realm}, which is plain HTTP: credentials and tokens are only sent over TLS",
            registry.addr
        )),
        "{err}"
    );
    assert_eq!(tokens.served.asked(""), 0, "the realm was never asked");
    std::fs::remove_file(auth).unwrap();
    node.assert_unharmed();
}

#[test]
fn ten_thousand_layers_are_refused_before_any_is_fetched() {
    let registry = StandIn::start(Router::new());
    let node = Node::new();
    let layers: Vec<_> = (0..10_000u32)
        .map(|i| serde_json::json!({"mediaType": TAR_GZ, "digest": digest(&i.to_le_bytes()), "size": 10}))
        .collect();
    let pin = registry.manifest(manifest(serde_json::Value::Array(layers)));
    let err = node.load(&registry, &pin, "", "oci_path = \"/plugin.wasm\"");
    assert!(
        err.contains("it has 10000 layers, more than the 128 a plugin's image may have"),
        "{err}"
    );
    assert_eq!(registry.served.asked("/v2/r/blobs/"), 0);
    node.assert_unharmed();
}

/// 64 MiB of zeros compress to about 64 KiB; `pull_max_mib = 1` bounds what
/// comes out of the decompressor, not only what the registry sends. The zeros
/// are another file in front of the component, so no header gives them away:
/// only counting what is decompressed stops them.
#[test]
fn a_decompression_bomb_stops_at_pull_max_mib() {
    let registry = StandIn::start(Router::new());
    let node = Node::new();
    let mut tar = tar::Builder::new(Vec::new());
    for (name, size) in [("filler", 64u64 << 20), ("plugin.wasm", 8)] {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, std::io::repeat(0).take_bytes(size))
            .unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar.into_inner().unwrap()).unwrap();
    let layer = gz.finish().unwrap();
    assert!(layer.len() < 1 << 20, "{}", layer.len());
    let size = layer.len();
    let d = registry.blob(layer);
    let pin = registry.manifest(manifest(
        serde_json::json!([{"mediaType": TAR_GZ, "digest": d, "size": size}]),
    ));
    let err = node.load(
        &registry,
        &pin,
        "pull_max_mib = 1",
        "oci_path = \"/plugin.wasm\"",
    );
    assert!(
        err.contains("the layers decompress to more than the 1048576 bytes allowed (pull_max_mib); stopped reading"),
        "{err}"
    );
    node.assert_unharmed();
}

/// Someone who can write the cache put a link to a host file where a blob
/// goes, a FIFO where the manifest goes, and left a killed pull's partial
/// file. The link and the FIFO are removed (never followed, never waited
/// on), the partial file is cleaned, and the pull goes on from the registry.
#[test]
fn links_fifos_and_partial_files_in_the_cache_are_never_followed_or_kept() {
    let registry = StandIn::start(Router::new());
    let node = Node::new();
    let blob = b"not a component".to_vec();
    let layer = registry.blob(blob.clone());
    let pin = registry.manifest(manifest(
        serde_json::json!([{"mediaType": "application/wasm", "digest": layer, "size": blob.len()}]),
    ));
    let blobs = node.store().join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    std::os::unix::fs::symlink(node.path().join("victim"), blobs.join(&layer[7..])).unwrap();
    let fifo = std::ffi::CString::new(blobs.join(&pin[7..]).display().to_string()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::write(blobs.join(".partial-0123456789abcdef"), b"cut off").unwrap();

    let err = node.load(&registry, &pin, "", "");
    assert!(
        err.contains("not a WebAssembly binary (no \\0asm header)"),
        "{err}"
    );
    node.assert_unharmed();
    let mut kept: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    let mut want = vec![layer[7..].to_owned(), pin[7..].to_owned()];
    want.sort();
    assert_eq!(
        kept, want,
        "the pulled blobs, as regular files, and nothing else"
    );
    assert!(
        std::fs::symlink_metadata(blobs.join(&layer[7..]))
            .unwrap()
            .is_file()
    );
}

/// With `HTTP_PROXY` set to a proxy that is down, the error names the proxy.
#[test]
fn a_proxy_that_is_down_is_named() {
    let registry = StandIn::start(Router::new());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let node = Node::new();
    let out = Command::new(env!("CARGO_BIN_EXE_csi-node-driver-registrar"))
        .args(["plugin", "pull", &format!("{}/r:v1", registry.addr)])
        .args(["--insecure-registry", &registry.addr, "--oci-cache-dir"])
        .arg(node.store())
        .env("HTTP_PROXY", &proxy)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("http_proxy")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("(through the proxy {proxy}, from HTTP_PROXY): check that the proxy is up and reachable, or list the registry in NO_PROXY")),
        "{stderr}"
    );
    assert_eq!(registry.served.asked(""), 0, "nothing reached the registry");
}

/// An HTTP/1.1 request's line, its headers read past (no body: the stand-ins
/// answer before reading one); `None` at the end of the connection.
fn read_request(reader: &mut impl BufRead) -> Option<String> {
    let mut request = String::new();
    if reader.read_line(&mut request).unwrap_or(0) == 0 {
        return None;
    }
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            return Some(request);
        }
    }
}

/// Runs the binary under an address-space limit of 1 GiB, at most PATIENCE.
fn cli_capped(args: &[&str]) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_csi-node-driver-registrar"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(PATIENCE) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: the child is ours and not yet reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{args:?} did not end within {PATIENCE:?}");
        }
    }
}

/// A registry that answers 413 to an upload and closes while the component
/// is still being written: the push is an error that names the registry,
/// never a death by SIGPIPE. Raw HTTP/1.1 on a socket, since the early close
/// is the point.
#[test]
fn a_registry_that_closes_during_a_push_is_an_error_not_a_silent_death() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let puts = Arc::new(AtomicUsize::new(0));
    let p = puts.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            let p = p.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                while let Some(request) = read_request(&mut reader) {
                    let answer = match request.split(' ').next().unwrap_or("") {
                        "GET" => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
                        "HEAD" => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                        "POST" => {
                            "HTTP/1.1 202 Accepted\r\nLocation: /v2/big/blobs/uploads/1\r\nContent-Length: 0\r\n\r\n"
                        }
                        _ => {
                            p.fetch_add(1, Ordering::SeqCst);
                            let _ = conn.write_all(b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
                            let _ = conn.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    };
                    if conn.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    // A real component with a 32 MiB custom section: far more than the
    // socket buffers hold, so the registry closes mid-write.
    let dir = tempfile::tempdir().unwrap();
    let mut wasm = std::fs::read(plugin("pool-suffix")).unwrap();
    let payload = 32usize << 20;
    let name = b"padding";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    let size = section.len() + payload;
    wasm.push(0);
    let mut n = size;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            wasm.push(byte);
            break;
        }
        wasm.push(byte | 0x80);
    }
    wasm.extend_from_slice(&section);
    wasm.resize(wasm.len() + payload, 0);
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, wasm).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_csi-node-driver-registrar"))
        .args(["plugin", "push"])
        .arg(&big)
        .args([&format!("{addr}/big:v1"), "--insecure-registry", &addr])
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), None, "killed by a signal: {out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: cannot push to registry {addr}, repository big: cannot push the component: "
        )),
        "{stderr}"
    );
    assert_eq!(puts.load(Ordering::SeqCst), 1);
}

trait TakeBytes: std::io::Read + Sized {
    fn take_bytes(self, n: u64) -> std::io::Take<Self> {
        self.take(n)
    }
}
impl<R: std::io::Read> TakeBytes for R {}

/// An HTTPS registry (trusted through `registry_ca_file`) that redirects a
/// manifest to plain HTTP: the redirect is not followed, and nothing reaches
/// the plain-HTTP address. HTTP/1.1 over rustls on a socket, since the
/// redirect is the point.
#[test]
fn a_redirect_from_https_to_http_is_not_followed() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let node = Node::new();
    let tls = tempfile::tempdir().unwrap();
    let (cert, key) = common::registry::tls_files(tls.path());
    let certs: Vec<_> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    plain.set_nonblocking(true).unwrap();
    let target = format!(
        "http://{}/v2/r/blobs/elsewhere",
        plain.local_addr().unwrap()
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let location = target.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { break };
            let (config, location) = (config.clone(), location.clone());
            std::thread::spawn(move || {
                let server = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(server, conn);
                let mut reader = BufReader::new(&mut tls);
                while let Some(request) = read_request(&mut reader) {
                    let answer = if request.starts_with("GET /v2/ ") {
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_owned()
                    } else {
                        format!(
                            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
                        )
                    };
                    let stream = reader.get_mut();
                    if stream
                        .write_all(answer.as_bytes())
                        .and_then(|()| stream.flush())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    let toml = format!(
        "{}registry_ca_file = \"{}\"\n[[plugin]]\nid = \"p\"\noci = \"{addr}/r@{}\"\n",
        cached_policy(node.path(), &node.path().join("cache")),
        tls.path().join("ca.pem").display(),
        digest(b"anything")
    );
    let err = match load(node.path(), &toml) {
        Ok(_) => panic!("a redirect to plain HTTP loaded"),
        Err(e) => e,
    };
    assert!(
        err.contains(&format!(
            "the registry redirected from HTTPS to {target}, which is plain HTTP: not followed"
        )),
        "{err}"
    );
    assert!(
        matches!(plain.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing reached the plain-HTTP address"
    );
    node.assert_unharmed();
}
