//! Plugins pulled from a real OCI registry (the CNCF distribution registry on
//! loopback), pushed by our `plugin push` and by `oras`, in the three formats
//! in use; and every bad input refused with its words, leaving nothing
//! half-written in the cache.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::registry::{Options, PASSWORD, Registry, oras, pushed_digest, stray_files, tool};
use common::*;
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver, Policy};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_csi-node-driver-registrar")
}

/// `plugin push` with `flags`; the `oci = "…"` line it printed.
fn push(wasm: &Path, reference: &str, flags: &[&str]) -> String {
    let out = Command::new(bin())
        .args(["plugin", "push"])
        .arg(wasm)
        .arg(reference)
        .args(flags)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "plugin push failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find(|l| l.starts_with("oci = ")).unwrap();
    line.trim_start_matches("oci = ")
        .trim_matches('"')
        .to_owned()
}

/// `plugin push` of `wasm` to `repository` (`REPO:TAG`) of a plain-HTTP
/// registry; the `oci = "…"` line it printed.
fn push_over_http(registry: &Registry, wasm: &Path, repository: &str) -> String {
    push(
        wasm,
        &format!("{}/{repository}", registry.addr),
        &["--insecure-registry", &registry.addr],
    )
}

/// A policy pulling `reference` into `dir/cache`, with `policy` lines in
/// `[policy]` and `plugin` lines in the entry.
fn policy(dir: &Path, reference: &str, policy: &str, plugin: &str) -> String {
    format!(
        "{}{policy}\n[[plugin]]\nid = \"p\"\noci = \"{reference}\"\n{plugin}\n[plugin.settings]\nsuffix = \"-a\"\n",
        cached_policy(dir, &dir.join("cache"))
    )
}

fn insecure(r: &Registry) -> String {
    format!("insecure_registries = [\"{}\"]", r.addr)
}

fn store(dir: &Path) -> PathBuf {
    dir.join("cache/oci")
}

fn renames(dir: &Path, toml: &str) {
    let chain = load(dir, toml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        chain.registration(&ctx()).unwrap().name,
        "hostpath.csi.k8s.io-a"
    );
}

#[test]
fn a_pushed_plugin_is_pulled_once_then_loaded_from_the_cache_without_the_registry() {
    let Some(mut registry) = Registry::start(Options::default()) else {
        return;
    };
    let wasm = plugin("pool-suffix");
    let reference = push_over_http(&registry, &wasm, "policies/pool-suffix:v1");
    assert!(reference.contains(":v1@sha256:"), "{reference}");
    // The same component gives the same pin.
    let again = push_over_http(&registry, &wasm, "policies/pool-suffix:v2");
    assert_eq!(
        reference.rsplit_once('@').unwrap().1,
        again.rsplit_once('@').unwrap().1
    );

    let dir = tempfile::tempdir().unwrap();
    let toml = policy(dir.path(), &reference, &insecure(&registry), "");
    renames(dir.path(), &toml);
    let layer = store(dir.path())
        .join("blobs/sha256")
        .join(sha256_hex(&wasm));
    assert_eq!(
        std::fs::read(&layer).unwrap(),
        std::fs::read(&wasm).unwrap()
    );
    assert!(stray_files(&store(dir.path())).is_empty());

    // What an initContainer runs: pull and compile every plugin of the
    // policy into its cache, for a registrar that then needs neither.
    let init = tempfile::tempdir().unwrap();
    let init_toml = policy(init.path(), &reference, &insecure(&registry), "");
    let file = write_policy(init.path(), &init_toml);
    let out = Command::new(bin())
        .args(["plugin", "precompile", "--policy"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!(
            "p (oci://{reference}) -> {}",
            init.path().join("cache").display()
        )),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with(".cwasm"), "{stdout}");

    // The registry goes away: a restart still loads, from the cache.
    registry.stop();
    renames(dir.path(), &toml);
    renames(init.path(), &init_toml);
}

#[test]
fn oras_and_plugin_push_artefacts_are_interchangeable() {
    let (Some(registry), Some(oras_bin)) = (
        Registry::start(Options::default()),
        tool("oras", "go install oras.land/oras/cmd/oras@v1.3.6"),
    ) else {
        return;
    };
    let wasm = plugin("pool-suffix");
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(&wasm, work.path().join("plugin.wasm")).unwrap();
    std::fs::write(
        work.path().join("config.json"),
        r#"{"architecture":"wasm","os":"wasip2"}"#,
    )
    .unwrap();
    let repo = format!("{}/policies/from-oras", registry.addr);

    // 1. The CNCF wasm artefact, 2. the older layer type.
    let cncf = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &[
            "push",
            &format!("{repo}:cncf"),
            "--config",
            "config.json:application/vnd.wasm.config.v0+json",
            "plugin.wasm:application/wasm",
        ],
    ));
    let old = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &[
            "push",
            &format!("{repo}:old"),
            "plugin.wasm:application/vnd.wasm.content.layer.v1+wasm",
        ],
    ));
    // 3. A container image: `FROM scratch`, `COPY plugin.wasm /`, as a
    // gzipped tar layer with an image config.
    let tar = Command::new("tar")
        .current_dir(work.path())
        .args(["czf", "layer.tar.gz", "plugin.wasm"])
        .status()
        .unwrap();
    assert!(tar.success());
    std::fs::write(
        work.path().join("image.json"),
        r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
    )
    .unwrap();
    let image = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &[
            "push",
            &format!("{repo}:image"),
            "--config",
            "image.json:application/vnd.oci.image.config.v1+json",
            "layer.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip",
        ],
    ));

    for (digest, extra) in [
        (cncf, ""),
        (old, ""),
        (image, "oci_path = \"/plugin.wasm\""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        renames(
            dir.path(),
            &policy(
                dir.path(),
                &format!("{repo}@{digest}"),
                &insecure(&registry),
                extra,
            ),
        );
    }

    // And what `plugin push` wrote, oras pulls as the same file.
    let ours = push(
        &wasm,
        &format!("{repo}:ours"),
        &["--insecure-registry", &registry.addr],
    );
    let out = work.path().join("pulled");
    oras(
        &oras_bin,
        work.path(),
        &["pull", &ours, "-o", out.to_str().unwrap()],
    );
    assert_eq!(
        std::fs::read(out.join("pool_suffix.wasm")).unwrap(),
        std::fs::read(&wasm).unwrap()
    );
}

#[test]
fn tls_and_basic_auth_as_an_image_pull_secret_gives_them() {
    let Some(registry) = Registry::start(Options {
        tls: true,
        auth: true,
    }) else {
        return;
    };
    let ca = registry.ca.clone().unwrap();
    let good = registry.auth_file(PASSWORD);
    let reference = push(
        &plugin("pool-suffix"),
        &format!("{}/policies/p:v1", registry.addr),
        &[
            "--registry-ca-file",
            ca.to_str().unwrap(),
            "--registry-auth-file",
            good.to_str().unwrap(),
        ],
    );
    let keys = |auth: Option<&Path>, ca: Option<&Path>| {
        let mut k = String::new();
        if let Some(a) = auth {
            k.push_str(&format!("registry_auth_file = \"{}\"\n", a.display()));
        }
        if let Some(c) = ca {
            k.push_str(&format!("registry_ca_file = \"{}\"\n", c.display()));
        }
        k
    };
    let dir = tempfile::tempdir().unwrap();
    let declared = format!(
        "policy plugin \"p\" (oci://{reference}, policy file {} line 8): cannot pull from registry {}, repository policies/p: ",
        dir.path().join("policy.toml").display(),
        registry.addr
    );

    // Without the CA: the certificate is not trusted.
    let err = load(
        dir.path(),
        &policy(dir.path(), &reference, &keys(Some(&good), None), ""),
    )
    .err()
    .unwrap();
    assert!(err.starts_with(&declared), "{err}");
    assert!(err.contains("certificate") && err.ends_with("trust its CA with registry_ca_file (--registry-ca-file), or, for a registry without TLS, list it in insecure_registries (--insecure-registry)"), "{err}");

    // Without credentials: 401, and how to give them.
    let err = load(
        dir.path(),
        &policy(dir.path(), &reference, &keys(None, Some(&ca)), ""),
    )
    .err()
    .unwrap();
    assert!(err.starts_with(&declared), "{err}");
    assert!(err.contains(&format!("401 Unauthorized: the registry wants credentials: give a .dockerconfigjson with an entry for {} in registry_auth_file (--registry-auth-file)", registry.addr)), "{err}");

    // With a wrong password: refused.
    let wrong = registry.dir.path().join("wrong.json");
    std::fs::copy(registry.auth_file("wrong"), &wrong).unwrap();
    let err = load(
        dir.path(),
        &policy(dir.path(), &reference, &keys(Some(&wrong), Some(&ca)), ""),
    )
    .err()
    .unwrap();
    assert!(
        err.contains("the registry refused the credentials"),
        "{err}"
    );
    assert!(
        !store(dir.path()).join("blobs/sha256").exists()
            || std::fs::read_dir(store(dir.path()).join("blobs/sha256"))
                .unwrap()
                .next()
                .is_none(),
        "nothing was stored"
    );

    registry.auth_file(PASSWORD);
    renames(
        dir.path(),
        &policy(dir.path(), &reference, &keys(Some(&good), Some(&ca)), ""),
    );
    assert!(stray_files(&store(dir.path())).is_empty());
}

#[test]
fn bad_artefacts_and_registries_are_refused_and_nothing_is_left_half_written() {
    let (Some(registry), Some(oras_bin)) = (
        Registry::start(Options::default()),
        tool("oras", "go install oras.land/oras/cmd/oras@v1.3.6"),
    ) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let repo = format!("{}/policies/bad", registry.addr);
    let check = |reference: &str, policy_keys: &str, plugin_keys: &str, words: &str| {
        let dir = tempfile::tempdir().unwrap();
        let err = load(
            dir.path(),
            &policy(dir.path(), reference, policy_keys, plugin_keys),
        )
        .err()
        .unwrap_or_else(|| panic!("{reference} loaded"));
        assert!(err.contains(words), "want {words:?} in: {err}");
        assert!(
            stray_files(&store(dir.path())).is_empty(),
            "{:?}",
            stray_files(&store(dir.path()))
        );
        let partial = std::fs::read_dir(store(dir.path()).join("blobs/sha256"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".partial")
                })
                .count()
            })
            .unwrap_or(0);
        assert_eq!(partial, 0, "a partial blob was left");
        err
    };

    // A digest the registry does not have.
    let missing = format!("{repo}@sha256:{}", "ab".repeat(32));
    check(
        &missing,
        &insecure(&registry),
        "",
        "404 Not Found: no such manifest or blob in this repository",
    );

    // A manifest that is not a wasm artefact.
    std::fs::write(work.path().join("notes.txt"), "not a plugin").unwrap();
    let text = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &["push", &format!("{repo}:text"), "notes.txt:text/plain"],
    ));
    check(
        &format!("{repo}@{text}"),
        &insecure(&registry),
        "",
        "it is not a wasm artefact: config application/vnd.oci.empty.v1+json, layers [text/plain]",
    );

    // A layer over the cap (pull_max_mib = 1).
    let mut big = std::fs::File::create(work.path().join("big.wasm")).unwrap();
    big.write_all(&vec![7u8; 3 << 19]).unwrap();
    let big = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &["push", &format!("{repo}:big"), "big.wasm:application/wasm"],
    ));
    check(
        &format!("{repo}@{big}"),
        &format!("{}\npull_max_mib = 1", insecure(&registry)),
        "",
        "its wasm layer is 1572864 bytes, more than the 1048576 allowed (pull_max_mib)",
    );

    // A registry that accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let err = check(
        &format!("{silent_addr}/policies/p@sha256:{}", "ab".repeat(32)),
        &format!("insecure_registries = [\"{silent_addr}\"]\npull_timeout_ms = 300"),
        "",
        "no complete answer within 300 ms (pull_timeout_ms); gave up",
    );
    assert!(
        err.contains(&format!(
            "cannot pull from registry {silent_addr}, repository policies/p"
        )),
        "{err}"
    );
    drop(silent);

    // An image without the file oci_path names.
    std::fs::write(work.path().join("other"), "x").unwrap();
    assert!(
        Command::new("tar")
            .current_dir(work.path())
            .args(["czf", "layer.tar.gz", "other"])
            .status()
            .unwrap()
            .success()
    );
    let image = pushed_digest(&oras(
        &oras_bin,
        work.path(),
        &[
            "push",
            &format!("{repo}:image"),
            "layer.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip",
        ],
    ));
    check(
        &format!("{repo}@{image}"),
        &insecure(&registry),
        "oci_path = \"/plugin.wasm\"",
        "the image has no file /plugin.wasm in its 1 layer(s)",
    );
}

#[test]
fn a_cache_entry_edited_on_disk_is_never_used() {
    let Some(mut registry) = Registry::start(Options::default()) else {
        return;
    };
    let wasm = plugin("pool-suffix");
    let reference = push_over_http(&registry, &wasm, "policies/p:v1");
    let dir = tempfile::tempdir().unwrap();
    let toml = policy(dir.path(), &reference, &insecure(&registry), "");
    renames(dir.path(), &toml);
    let layer = store(dir.path())
        .join("blobs/sha256")
        .join(sha256_hex(&wasm));

    // Edited while the registry is up: pulled again, and right.
    std::fs::write(&layer, b"\0asm edited").unwrap();
    renames(dir.path(), &toml);
    assert_eq!(
        std::fs::read(&layer).unwrap(),
        std::fs::read(&wasm).unwrap()
    );

    // Edited with the registry gone: refused, naming the registry and the
    // cause; the edited entry is gone, not kept.
    std::fs::write(&layer, b"\0asm edited").unwrap();
    registry.stop();
    let err = load(dir.path(), &toml).err().unwrap();
    assert!(
        err.contains(&format!(
            "cannot pull from registry {}, repository policies/p: ",
            registry.addr
        )) && err.contains("onnection refused"),
        "{err}"
    );
    assert!(!layer.exists(), "the edited blob was removed");
    assert!(stray_files(&store(dir.path())).is_empty());
}

/// SIGHUP with a pin the registry does not have: the pull fails, and the
/// registrar keeps the last good policy and its registration.
#[tokio::test]
async fn a_reload_whose_pull_fails_keeps_the_last_good_policy() {
    let Some(registry) = Registry::start(Options::default()) else {
        return;
    };
    let reference = push_over_http(&registry, &plugin("pool-suffix"), "policies/p:v1");
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let policy_file = write_policy(
        sb.dir.path(),
        &policy(sb.dir.path(), &reference, &insecure(&registry), ""),
    );
    let registrar = Process::spawn(&sb, &[format!("--policy-config={}", policy_file.display())]);
    let a = sb.socket("hostpath.csi.k8s.io-a");
    assert!(appears(&a).await, "{}", registrar.log_text());
    assert!(registrar.log_text().contains("Policy plugin pulled"));

    let (repo, _) = reference.rsplit_once('@').unwrap();
    let missing = format!("{repo}@sha256:{}", "cd".repeat(32));
    write_policy(
        sb.dir.path(),
        &policy(sb.dir.path(), &missing, &insecure(&registry), ""),
    );
    registrar.signal(libc::SIGHUP);
    assert!(
        registrar
            .wait_log("Policy reload failed; keeping the last good policy")
            .await
    );
    let log = registrar.log_text();
    assert!(
        log.contains(&format!(
            "cannot pull from registry {}, repository policies/p: ",
            registry.addr
        )) && log.contains("404 Not Found"),
        "{log}"
    );
    assert!(a.exists());
    assert!(kubelet_registers(&a).await);
    assert_eq!(registrar.stop().await, 0);
}

/// A registry that lies, which the real one cannot be made to do: it
/// declares a 100-byte layer and then streams without end (chunked, no
/// Content-Length), or streams a manifest without end. Its routes are the
/// distribution spec's (`/v2/`, `/v2/<name>/manifests/<ref>`,
/// `/v2/<name>/blobs/<digest>`). The registrar stops reading at the bound
/// and keeps nothing.
#[test]
fn a_registry_that_sends_too_much_is_cut_off() {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use sha2::Digest;

    let layer = format!("sha256:{}", "ab".repeat(32));
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": format!("sha256:{}", "cd".repeat(32)), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer, "size": 100}],
    }))
    .unwrap();
    let manifest_digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&manifest)));
    let endless = || {
        Body::from_stream(tokio_stream::iter(std::iter::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(vec![0u8; 64 << 10]))
        })))
    };
    let m = manifest.clone();
    let app = Router::new()
        .route("/v2/", get(|| async { "{}" }))
        .route(
            "/v2/lies/blob/manifests/{reference}",
            get(move || {
                let m = m.clone();
                async move {
                    (
                        [("content-type", "application/vnd.oci.image.manifest.v1+json")],
                        m,
                    )
                }
            }),
        )
        .route(
            "/v2/lies/blob/blobs/{digest}",
            get(move || async move { endless() }),
        )
        .route(
            "/v2/lies/manifest/manifests/{reference}",
            get(move || async move { endless() }),
        );
    let (addr, _server) = serve_on_loopback(app);

    let keys = format!("insecure_registries = [\"{addr}\"]");
    for (reference, words) in [
        (
            format!("{addr}/lies/blob@{manifest_digest}"),
            format!("/v2/lies/blob/blobs/{layer}: the registry sent more than the 100 bytes allowed (the size the manifest declares, at most pull_max_mib); stopped reading"),
        ),
        (
            format!("{addr}/lies/manifest@{manifest_digest}"),
            "the registry sent more than the 4194304 bytes allowed (a manifest's 4 MiB); stopped reading".to_owned(),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path(), &policy(dir.path(), &reference, &keys, "")).err().unwrap();
        assert!(err.contains(&words), "want {words:?} in: {err}");
        let left: Vec<_> = std::fs::read_dir(store(dir.path()).join("blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| !n.to_string_lossy().starts_with(&manifest_digest[7..]))
            .collect();
        assert!(left.is_empty(), "left in the cache: {left:?}");
    }
}

/// `cosign_key`: the artefact must carry a cosign signature by that key,
/// made by the real cosign (v2.6.5, key pair, no transparency log).
#[test]
fn a_cosign_signature_by_the_key_is_required_when_one_is_named() {
    let (Some(mut registry), Some(cosign)) = (
        Registry::start(Options::default()),
        tool(
            "cosign",
            "go install github.com/sigstore/cosign/v2/cmd/cosign@v2.6.5",
        ),
    ) else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let cosign_run = |args: &[&str]| {
        let out = Command::new(&cosign)
            .current_dir(keys.path())
            .env("COSIGN_PASSWORD", "")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cosign {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cosign_run(&["generate-key-pair"]);
    cosign_run(&["generate-key-pair", "--output-key-prefix", "other"]);
    let reference = push_over_http(&registry, &plugin("pool-suffix"), "policies/signed:v1");
    let digest = reference.rsplit_once('@').unwrap().1.to_owned();
    let dir = tempfile::tempdir().unwrap();
    let insecure = insecure(&registry);
    let with_key = |key: &str| {
        policy(
            dir.path(),
            &reference,
            &insecure,
            &format!("cosign_key = \"{}\"", keys.path().join(key).display()),
        )
    };

    let err = load(dir.path(), &with_key("cosign.pub")).err().unwrap();
    assert!(err.contains(&format!("cosign signature: {digest} is not signed: the repository has no sha256-{}.sig; sign it with `cosign sign --key cosign.key REF@{digest}`", &digest[7..])), "{err}");

    cosign_run(&[
        "sign",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "--allow-insecure-registry",
        "--allow-http-registry",
        "-y",
        &format!("{}/policies/signed@{digest}", registry.addr),
    ]);
    renames(dir.path(), &with_key("cosign.pub"));

    let err = load(dir.path(), &with_key("other.pub")).err().unwrap();
    assert!(err.contains(&format!("cosign signature: no signature of {digest} by the key in {}: 1 signature(s) at sha256-{}.sig checked (", keys.path().join("other.pub").display(), &digest[7..])) && err.contains("it is not signed by the key in"), "{err}");

    // The verified signature is kept: a restart without the registry still
    // checks it with the key.
    registry.stop();
    renames(dir.path(), &with_key("cosign.pub"));
    assert!(load(dir.path(), &with_key("other.pub")).is_err());

    std::fs::write(keys.path().join("bad.pub"), "not a key").unwrap();
    let err = load(dir.path(), &with_key("bad.pub")).err().unwrap();
    assert!(
        err.contains("is not a PEM ECDSA P-256 public key")
            && err.contains("cosign generate-key-pair"),
        "{err}"
    );
}
