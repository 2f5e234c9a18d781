//! The registrar's figures, measured the same way every time, printed as
//! tables next to the Go registrar v2.17's, measured in the same run from
//! `../shared/reference/csi-node-driver-registrar` when that binary is there
//! (its column says so when it is not).
//! Run with `cargo bench --bench figures` (`FIGURES=registrar`,
//! `FIGURES=plugins` or `FIGURES=oci` for one part); it asserts nothing.
//!
//! Method: the release binary runs as a child process against the CSI driver
//! stand-in, over real unix sockets, as in production. Start-up is the time
//! from spawn until a GetInfo over the registration socket has been answered
//! (median of 10). RSS is VmRSS after registration and 5 s idle. Idle CPU is
//! the time on CPU of all threads (schedstat) over 30 s idle, per 10 s: built
//! in, and with one Rust plugin with and without the cache. Plugin costs use
//! the host API in-process: load without cache (compile + link + validate),
//! load from the on-disk cache, and one call of each hook (fresh instance + call).
//! OCI: the Python plugin (18 MB; the Rust one when it is not built) pushed to
//! a real registry on loopback (Debian's docker-registry), then the release
//! registrar started on `oci = …` with nothing cached, with the compiled code
//! cached but the blobs not (a pull, then no compile), and with everything
//! cached (median of 5 each): time to the first GetInfo answer and the peak
//! RSS (VmHWM) at that point; and the initContainer's
//! `plugin precompile --policy` (pull and compile), its time and peak RSS.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{BIN, Sandbox, cached_policy, plugin, plugin_entry, write_policy};
use csi_node_driver_registrar::testing::Metrics;
use csi_node_driver_registrar::testing::PolicyFile;
use csi_node_driver_registrar::testing::proto::registration::{
    InfoRequest, registration_client::RegistrationClient,
};
use csi_node_driver_registrar::testing::{Context, Policy, wasm};
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver};

const DRIVER: &str = "hostpath.csi.k8s.io";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// From /proc/<pid>/status.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Time on CPU of every thread of a process, in nanoseconds (the first field of
/// /proc/<pid>/task/*/schedstat; clock ticks are too coarse for idle figures).
/// Threads that ended meanwhile are not counted.
fn cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Context switches of all threads: each is a wake-up (or a preemption).
fn switches(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

async fn get_info(socket: &Path) -> Option<String> {
    let channel = csi_node_driver_registrar::testing::uds_channel(socket)
        .await
        .ok()?;
    let info = RegistrationClient::new(channel)
        .get_info(InfoRequest {})
        .await
        .ok()?;
    Some(info.into_inner().name)
}

/// The binary under test: this build's, or another build of it (the static
/// musl one the image ships) named by REGISTRAR_BIN.
fn registrar_bin() -> String {
    std::env::var("REGISTRAR_BIN").unwrap_or_else(|_| BIN.to_owned())
}

struct Run {
    startup: Duration,
    child: std::process::Child,
}

/// Upstream's registrar v2.17.0, built from its release tag, beside this
/// repository (see its README); `None` on a clone without it.
fn go_registrar() -> Option<std::path::PathBuf> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/csi-node-driver-registrar");
    path.is_file().then_some(path)
}

/// Spawns a registrar and waits for the first answered GetInfo.
async fn start(bin: &Path, sb: &Sandbox, extra: &[String], socket: &Path) -> Run {
    let _ = std::fs::remove_file(socket);
    let started = Instant::now();
    let child = std::process::Command::new(bin)
        .args(sb.args())
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    loop {
        if socket.exists() && get_info(socket).await.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no GetInfo answer"
        );
    }
    Run {
        startup: started.elapsed(),
        child,
    }
}

fn stop(mut run: Run) {
    // SAFETY: our own child.
    unsafe { libc::kill(run.child.id() as libc::pid_t, libc::SIGTERM) };
    run.child.wait().unwrap();
}

struct Figures {
    startup: Duration,
    rss_kib: u64,
    threads: usize,
    idle_cpu: Duration,
    /// Context switches per 10 s idle.
    wakeups: f64,
}

/// Start-up (median of 10), then one run: RSS after registration and 5 s idle,
/// then the time on CPU over 30 s idle, per 10 s. The CPU window starts 11 s
/// after start-up: tokio's blocking threads (policy loading) end after 10 s
/// idle, and a thread that ends takes its time out of the sum.
async fn measure(bin: &Path, sb: &Sandbox, extra: &[String], socket: &Path) -> Figures {
    let startup = median({
        let mut v = Vec::new();
        for _ in 0..10 {
            let run = start(bin, sb, extra, socket).await;
            v.push(run.startup);
            stop(run);
        }
        v
    });
    let run = start(bin, sb, extra, socket).await;
    let pid = run.child.id();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_kib = rss_kib(pid);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    let (before, switched) = (cpu_ns(pid), switches(pid));
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle_cpu = Duration::from_nanos(cpu_ns(pid).saturating_sub(before) / 3);
    let wakeups = switches(pid).saturating_sub(switched) as f64 / 3.0;
    stop(run);
    Figures {
        startup,
        rss_kib,
        threads,
        idle_cpu,
        wakeups,
    }
}

fn ctx() -> Context {
    Context {
        node_name: "node-1".into(),
        driver_name: DRIVER.into(),
        driver_version: "1.0.0".into(),
        csi_address: "/csi/csi.sock".into(),
        kubelet_registration_path: "/var/lib/kubelet/plugins/hostpath/csi.sock".into(),
        plugin_registration_path: "/registration".into(),
        ..Context::default()
    }
}

/// Load without cache (median of `cold_runs`), load from the cache (median of
/// 10), and one call of each hook the plugin exports, alone (median of 200).
fn plugin_costs(
    path: &Path,
    settings: &str,
    cold_runs: usize,
) -> (usize, Duration, Duration, String) {
    let size = std::fs::metadata(path).unwrap().len() as usize;
    let dir = tempfile::tempdir().unwrap();
    let entry = plugin_entry("p", path, &format!("[plugin.settings]\n{settings}"));
    let load = |toml: &str| {
        let file = write_policy(dir.path(), toml);
        let cfg = PolicyFile::from_file(&file).unwrap();
        let t = Instant::now();
        let chain = wasm::load_chain(&cfg, Arc::new(Metrics::new()));
        (t.elapsed(), chain)
    };
    let cold = median((0..cold_runs).map(|_| load(&entry).0).collect());
    let cache_header = cached_policy(dir.path(), &dir.path().join("cache"));
    let cached_toml = format!("{cache_header}{entry}");
    load(&cached_toml).1.unwrap();
    let cached = median((0..10).map(|_| load(&cached_toml).0).collect());
    let failure = csi_node_driver_registrar::testing::Failure {
        error: "refused".into(),
        attempt: 1,
        elapsed: Duration::ZERO,
    };
    let mut calls = Vec::new();
    for hook in ["driver-name", "versions", "endpoint", "failure"] {
        let only = plugin_entry(
            "p",
            path,
            &format!("hooks = [\"{hook}\"]\n[plugin.settings]\n{settings}"),
        );
        let Ok(chain) = load(&format!("{cache_header}{only}")).1 else {
            continue; // not exported
        };
        let call = median(
            (0..200)
                .map(|_| {
                    let t = Instant::now();
                    if hook == "failure" {
                        chain.on_failure(&ctx(), &failure).unwrap();
                    } else {
                        chain.registration(&ctx()).unwrap();
                    }
                    t.elapsed()
                })
                .collect(),
        );
        calls.push(format!("{hook} {}", us(call)));
    }
    (size, cold, cached, calls.join(", "))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks
    }
    // FIGURES=registrar or FIGURES=plugins runs one half.
    let only = std::env::var("FIGURES").unwrap_or_default();
    if only != "plugins" {
        registrar_figures().await;
    }
    if only != "registrar" && only != "oci" {
        plugin_figures();
        seam_figures().await;
    }
    if only.is_empty() || only == "oci" {
        oci_figures().await;
    }
}

fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Pull-and-start figures with a real registry on loopback.
async fn oci_figures() {
    use common::registry::{Options, Registry};
    println!("\n## Plugins from an OCI registry (release registrar, registry on loopback)\n");
    let bin = Path::new(&registrar_bin()).to_owned();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    match std::env::var_os("REGISTRAR_BIN_WITHOUT_OCI") {
        Some(other) => println!(
            "Binary: {:.2} MB with the OCI client, {:.2} MB without (`--no-default-features --features wasm`): +{:.2} MB.\n",
            size(&bin) as f64 / 1e6,
            size(Path::new(&other)) as f64 / 1e6,
            (size(&bin) as f64 - size(Path::new(&other)) as f64) / 1e6
        ),
        None => println!(
            "Binary: {:.2} MB (set REGISTRAR_BIN_WITHOUT_OCI to compare).\n",
            size(&bin) as f64 / 1e6
        ),
    }
    let Some(registry) = Registry::start(Options::default()) else {
        println!("docker-registry is not installed: skipped");
        return;
    };
    let python =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/target/python/pool_suffix_py.wasm");
    let (wasm, label) = if python.exists() {
        (python, "pool-suffix (Python)")
    } else {
        (
            plugin("pool-suffix"),
            "pool-suffix (Rust; run plugins/test-languages.sh for the Python one)",
        )
    };
    let out = std::process::Command::new(&bin)
        .args(["plugin", "push"])
        .arg(&wasm)
        .arg(format!("{}/bench/pool-suffix:1", registry.addr))
        .args(["--insecure-registry", &registry.addr])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let cache = sb.dir.path().join("cache");
    let toml = format!(
        "{}insecure_registries = [\"{}\"]\n[[plugin]]\nid = \"p\"\n{line}\nmemory_limit_mib = 64\n[plugin.settings]\nsuffix = \"-a\"\n",
        cached_policy(sb.dir.path(), &cache),
        registry.addr
    );
    let policy = write_policy(sb.dir.path(), &toml);
    let extra = vec![format!("--policy-config={}", policy.display())];
    let socket = sb.socket(&format!("{DRIVER}-a"));
    let blobs = cache.join("oci");
    let clear = |what: &str| {
        for e in std::fs::read_dir(&cache).into_iter().flatten() {
            let p = e.unwrap().path();
            let is_blobs = p == blobs;
            if (what == "all") || (what == "blobs" && is_blobs) {
                if is_blobs {
                    std::fs::remove_dir_all(&p).unwrap()
                } else {
                    std::fs::remove_file(&p).unwrap()
                }
            }
        }
    };
    println!("{label}: {:.1} MB component.\n", size(&wasm) as f64 / 1e6);
    println!("| start-up | to first GetInfo (median of 5) | peak RSS then |");
    println!("|---|---:|---:|");
    for (what, clearing) in [
        ("nothing cached: pull, compile, load", "all"),
        ("compiled code cached, blobs not: pull, load", "blobs"),
        ("everything cached: no registry contact, no compile", "none"),
    ] {
        let mut times = Vec::new();
        let mut hwm = Vec::new();
        for _ in 0..5 {
            clear(clearing);
            let run = start(&bin, &sb, &extra, &socket).await;
            times.push(run.startup);
            hwm.push(vm_hwm_kib(run.child.id()));
            stop(run);
        }
        hwm.sort_unstable();
        println!(
            "| {what} | {} | {:.1} MiB |",
            ms(median(times)),
            hwm[hwm.len() / 2] as f64 / 1024.0
        );
    }
    // The initContainer: pull and compile into the cache.
    clear("all");
    let started = Instant::now();
    // Reaped by wait4 below, which gives its own rusage.
    #[allow(clippy::zombie_processes)]
    let child = std::process::Command::new(&bin)
        .args(["plugin", "precompile", "--policy"])
        .arg(&policy)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, with valid pointers.
    unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    println!(
        "\nThe initContainer (`plugin precompile --policy`: pull and compile): {}, peak RSS {:.1} MiB.",
        ms(started.elapsed()),
        usage.ru_maxrss as f64 / 1024.0
    );
}

/// GetInfo p50 and p99 on one connection (2000 calls), as a kubelet that
/// keeps it open.
async fn get_info_latency(bin: &Path, sb: &Sandbox, socket: &Path) -> (Duration, Duration) {
    let run = start(bin, sb, &[], socket).await;
    let channel = csi_node_driver_registrar::testing::uds_channel(socket)
        .await
        .unwrap();
    let mut client = RegistrationClient::new(channel);
    let mut lat: Vec<Duration> = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        client.get_info(InfoRequest {}).await.unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    stop(run);
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

async fn registrar_figures() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);
    let ours = std::path::PathBuf::from(registrar_bin());

    let binary = std::fs::metadata(&ours).unwrap().len();
    let default = measure(&ours, &sb, &[], &socket).await;
    let no_probe = measure(&ours, &sb, &["--driver-probe-interval=0".into()], &socket).await;
    let latency = get_info_latency(&ours, &sb, &socket).await;

    // Upstream's, the same way, in the same run.
    let go = match go_registrar() {
        Some(bin) => Some((
            std::fs::metadata(&bin).unwrap().len(),
            measure(&bin, &sb, &[], &socket).await,
            get_info_latency(&bin, &sb, &socket).await,
        )),
        None => None,
    };

    // One Rust example plugin (versions), without a cache and from the cache.
    let wasm_path = plugin("versions");
    let entry = plugin_entry("v", &wasm_path, "[plugin.settings]\nversions = [\"1.0.1\"]");
    let cold_policy = sb.dir.path().join("cold.toml");
    std::fs::write(&cold_policy, &entry).unwrap();
    let cache = sb.dir.path().join("cache");
    let cached_policy_file = sb.dir.path().join("cached.toml");
    std::fs::write(
        &cached_policy_file,
        format!("{}{entry}", cached_policy(sb.dir.path(), &cache)),
    )
    .unwrap();
    let cold = measure(
        &ours,
        &sb,
        &[format!("--policy-config={}", cold_policy.display())],
        &socket,
    )
    .await;
    let cached = measure(
        &ours,
        &sb,
        &[format!("--policy-config={}", cached_policy_file.display())],
        &socket,
    )
    .await;

    println!(
        "\n## Registrar ({}, this machine: {} cores)\n",
        ours.display(),
        std::thread::available_parallelism().unwrap()
    );
    let absent = "not measured: ../shared/reference is absent";
    println!(
        "| figure | Go registrar v2.17 (../shared/reference, this run) | built-in policy | one Rust plugin, no cache | one Rust plugin, from the cache |"
    );
    println!("|---|---|---|---|---|");
    let row = |name: &str, f: &dyn Fn(&Figures) -> String| {
        let upstream = go.as_ref().map_or(absent.to_owned(), |(_, g, _)| f(g));
        println!(
            "| {name} | {upstream} | {} | {} | {} |",
            f(&default),
            f(&cold),
            f(&cached)
        );
    };
    row("start-up to first GetInfo (median of 10)", &|f| {
        ms(f.startup)
    });
    row("RSS after registration + 5 s idle", &|f| {
        format!("{:.1} MB", f.rss_kib as f64 / 1024.0)
    });
    row(
        "idle CPU per 10 s (defaults; upstream does not watch the driver)",
        &|f| ms(f.idle_cpu),
    );
    row("wake-ups per 10 s idle", &|f| format!("{:.1}", f.wakeups));
    row("threads when idle", &|f| f.threads.to_string());
    println!(
        "| idle CPU per 10 s, `--driver-probe-interval=0` (ours only) | | {} | | |",
        ms(no_probe.idle_cpu)
    );
    println!(
        "| stripped binary | {} | {:.1} MB | | |",
        go.as_ref()
            .map_or(absent.to_owned(), |(size, _, _)| format!(
                "{:.1} MB",
                *size as f64 / 1e6
            )),
        binary as f64 / 1e6
    );
    println!(
        "| GetInfo p50 / p99, one connection (2000 calls) | {} | {} / {} | | |",
        go.as_ref()
            .map_or(absent.to_owned(), |(_, _, (p50, p99))| format!(
                "{} / {}",
                us(*p50),
                us(*p99)
            )),
        us(latency.0),
        us(latency.1)
    );
}

/// Why the `Policy` seam stays synchronous: what the hop to the blocking
/// pool costs a decision, against the decision itself, on a current-thread
/// runtime as the registrar's (median of 500 each, after 50 unmeasured).
async fn seam_figures() {
    println!("\n## The Policy seam: a decision on the blocking pool\n");
    println!("| pool-suffix (Rust), driver-name | median |");
    println!("|---|---:|");
    let dir = tempfile::tempdir().unwrap();
    let only = plugin_entry(
        "p",
        &plugin("pool-suffix"),
        "hooks = [\"driver-name\"]\n[plugin.settings]\nsuffix = \"-a\"",
    );
    let cfg = PolicyFile::from_file(&write_policy(dir.path(), &only)).unwrap();
    let chain: Arc<dyn Policy> =
        Arc::new(wasm::load_chain(&cfg, Arc::new(Metrics::new())).unwrap());
    let direct = || {
        let t = Instant::now();
        chain.registration(&ctx()).unwrap();
        t.elapsed()
    };
    let hop = |f: fn()| async move {
        let t = Instant::now();
        tokio::task::spawn_blocking(f).await.unwrap();
        t.elapsed()
    };
    let on_pool = || {
        let chain = chain.clone();
        async move {
            let t = Instant::now();
            tokio::task::spawn_blocking(move || chain.registration(&ctx()).unwrap())
                .await
                .unwrap();
            t.elapsed()
        }
    };
    let mut samples = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..550 {
        let (a, b, c) = (direct(), hop(|| ()).await, on_pool().await);
        if i >= 50 {
            samples.0.push(a);
            samples.1.push(b);
            samples.2.push(c);
        }
    }
    println!(
        "| the decision, called on the runtime's thread | {} |",
        us(median(samples.0))
    );
    println!(
        "| an empty closure through `spawn_blocking` | {} |",
        us(median(samples.1))
    );
    println!(
        "| the decision through `spawn_blocking` (the registrar's path) | {} |",
        us(median(samples.2))
    );
}

fn plugin_figures() {
    println!("\n## Example plugins (in-process host API)\n");
    println!(
        "| plugin | .wasm | load, no cache (compile + link + validate) | load from cache | one call per hook (fresh instance + call) |"
    );
    println!("|---|---|---|---|---|");
    for (name, settings) in [
        ("pool-suffix", "suffix = \"-a\""),
        ("versions", "versions = [\"1.0.1\"]"),
        (
            "endpoint-template",
            "template = \"/var/lib/kubelet/plugins/{driver}/{file}\"",
        ),
        ("retry-backoff", ""),
        ("default-policy", ""),
    ] {
        let (size, cold, cached, call) = plugin_costs(&plugin(name), settings, 5);
        println!(
            "| {name} (Rust) | {:.0} KB | {} | {} | {call} |",
            size as f64 / 1024.0,
            ms(cold),
            ms(cached),
        );
    }
    // Built by plugins/test-languages.sh (build-plugin, pinned
    // componentize-py / componentize-js).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/target");
    for (label, file) in [
        ("pool-suffix (Go)", "go/pool_suffix_go.wasm"),
        ("pool-suffix (Python)", "python/pool_suffix_py.wasm"),
        ("pool-suffix (JavaScript)", "javascript/pool_suffix_js.wasm"),
    ] {
        let path = root.join(file);
        if !path.exists() {
            println!("| {label} | not built (run plugins/test-languages.sh) | | | |");
            continue;
        }
        let (size, cold, cached, call) = plugin_costs(&path, "suffix = \"-a\"", 3);
        println!(
            "| {label} | {:.1} MB | {} | {} | {call} |",
            size as f64 / 1048576.0,
            ms(cold),
            ms(cached),
        );
    }
}
