//! The registrar's figures, measured the same way every time, printed as a
//! table next to the goals (issue: measured against the Go registrar v2.17 on a
//! 2-core machine). Run with `cargo bench --bench figures`; it asserts nothing.
//!
//! Method: the release binary runs as a child process against the CSI driver
//! stand-in, over real unix sockets, as in production. Start-up is the time
//! from spawn until a GetInfo over the registration socket has been answered
//! (median of 10). RSS is VmRSS after registration and 5 s idle. Idle CPU is
//! the time on CPU of all threads (schedstat) over 30 s idle, per 10 s. Plugin costs use the host
//! API in-process: load without cache (compile + link + validate), load from
//! the on-disk cache, and one start-up decision (fresh instance + call).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{BIN, Sandbox, cached_policy, plugin, plugin_entry, write_policy};
use csi_node_driver_registrar::metrics::Metrics;
use csi_node_driver_registrar::policy::config::PolicyConfig;
use csi_node_driver_registrar::policy::{Context, Policy, wasm};
use csi_node_driver_registrar::proto::registration::{
    InfoRequest, registration_client::RegistrationClient,
};
use csi_node_driver_registrar::standins::{DriverSpec, FakeDriver};

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

async fn get_info(socket: &Path) -> Option<String> {
    let channel = csi_node_driver_registrar::uds::channel(socket).await.ok()?;
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

/// Spawns the registrar and waits for the first answered GetInfo.
async fn start(sb: &Sandbox, extra: &[String], socket: &Path) -> Run {
    let _ = std::fs::remove_file(socket);
    let started = Instant::now();
    let child = std::process::Command::new(registrar_bin())
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
    idle_cpu: Option<Duration>,
}

async fn measure(sb: &Sandbox, extra: &[String], socket: &Path, idle_cpu: bool) -> Figures {
    let startup = median({
        let mut v = Vec::new();
        for _ in 0..10 {
            let run = start(sb, extra, socket).await;
            v.push(run.startup);
            stop(run);
        }
        v
    });
    let run = start(sb, extra, socket).await;
    let pid = run.child.id();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_kib = rss_kib(pid);
    let idle_cpu = if idle_cpu {
        // 30 s holds three driver probes; reported per 10 s.
        let before = cpu_ns(pid);
        tokio::time::sleep(Duration::from_secs(30)).await;
        Some(Duration::from_nanos(cpu_ns(pid).saturating_sub(before) / 3))
    } else {
        None
    };
    stop(run);
    Figures {
        startup,
        rss_kib,
        idle_cpu,
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
    }
}

/// Load without cache (median of `cold_runs`), load from the cache (median of
/// 10), and one decision of the hook the plugin exports (median of 200).
fn plugin_costs(
    path: &Path,
    settings: &str,
    cold_runs: usize,
) -> (usize, Duration, Duration, Duration) {
    let size = std::fs::metadata(path).unwrap().len() as usize;
    let dir = tempfile::tempdir().unwrap();
    let entry = plugin_entry("p", path, &format!("[plugin.settings]\n{settings}"));
    let load = |toml: &str| {
        let file = write_policy(dir.path(), toml);
        let cfg = PolicyConfig::from_file(&file).unwrap();
        let t = Instant::now();
        let chain = wasm::load_chain(&cfg, Arc::new(Metrics::new())).unwrap();
        (t.elapsed(), chain)
    };
    let cold = median((0..cold_runs).map(|_| load(&entry).0).collect());
    let cached_toml = format!(
        "{}{entry}",
        cached_policy(dir.path(), &dir.path().join("cache"))
    );
    load(&cached_toml);
    let cached = median((0..10).map(|_| load(&cached_toml).0).collect());
    let (_, chain) = load(&cached_toml);
    let failure = csi_node_driver_registrar::policy::Failure {
        error: "refused".into(),
        attempt: 1,
        elapsed: Duration::ZERO,
    };
    let failure_hook = path.to_string_lossy().contains("retry");
    let call = median(
        (0..200)
            .map(|_| {
                let t = Instant::now();
                if failure_hook {
                    chain.on_failure(&ctx(), &failure).unwrap();
                } else {
                    chain.registration(&ctx()).unwrap();
                }
                t.elapsed()
            })
            .collect(),
    );
    (size, cold, cached, call)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for the list of benchmarks
    }
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let socket = sb.socket(DRIVER);

    let binary = std::fs::metadata(registrar_bin()).unwrap().len();
    let default = measure(&sb, &[], &socket, true).await;

    // GetInfo latency on one connection, as a kubelet that keeps it open.
    let run = start(&sb, &[], &socket).await;
    let channel = csi_node_driver_registrar::uds::channel(&socket)
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
    let (p50, p99) = (lat[lat.len() / 2], lat[lat.len() * 99 / 100]);
    stop(run);

    // One Rust example plugin, compiled once into the on-disk cache.
    let wasm_path = plugin("pool-suffix");
    let cache = sb.dir.path().join("cache");
    let policy = write_policy(
        sb.dir.path(),
        &format!(
            "{}{}",
            cached_policy(sb.dir.path(), &cache),
            plugin_entry("pool", &wasm_path, "[plugin.settings]\nsuffix = \"-a\"")
        ),
    );
    let plugin_socket = sb.socket("hostpath.csi.k8s.io-a");
    let with_plugin = measure(
        &sb,
        &[format!("--policy-config={}", policy.display())],
        &plugin_socket,
        false,
    )
    .await;

    println!(
        "\n## Registrar ({}, this machine: {} cores)\n",
        registrar_bin(),
        std::thread::available_parallelism().unwrap()
    );
    println!("| figure | Go registrar v2.17 | goal | this registrar |");
    println!("|---|---|---|---|");
    println!(
        "| start-up to first GetInfo, default policy (median of 10) | 14-16 ms | ≤ 7.5 ms | {} |",
        ms(default.startup)
    );
    println!(
        "| start-up to first GetInfo, one Rust plugin from the cache | 14-16 ms | ≤ 14-16 ms | {} |",
        ms(with_plugin.startup)
    );
    println!(
        "| RSS after registration + 5 s idle, default policy | 21.2 MB | ≤ 7 MB | {:.1} MB |",
        default.rss_kib as f64 / 1024.0
    );
    println!(
        "| RSS after registration + 5 s idle, one Rust plugin | 21.2 MB | ≤ 21.2 MB | {:.1} MB |",
        with_plugin.rss_kib as f64 / 1024.0
    );
    println!(
        "| stripped binary | 20.1 MB | ≤ 20 MB | {:.1} MB |",
        binary as f64 / 1e6
    );
    println!(
        "| idle CPU per 10 s (one driver probe included) | ~1 ms | near zero | {} |",
        ms(default.idle_cpu.unwrap())
    );
    println!(
        "| GetInfo p50 / p99, one connection (2000 calls) | ~0.25 ms | | {} / {} |",
        us(p50),
        us(p99)
    );

    println!("\n## Example plugins (in-process host API)\n");
    println!(
        "| plugin | .wasm | load, no cache (compile + link + validate) | load from cache | one decision (fresh instance + call) |"
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
            "| {name} (Rust) | {:.0} KB | {} | {} | {} |",
            size as f64 / 1024.0,
            ms(cold),
            ms(cached),
            us(call)
        );
    }
    // Built by plugins/test-languages.sh (pinned componentize-py / componentize-js).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/target");
    for (label, file) in [
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
            "| {label} | {:.1} MB | {} | {} | {} |",
            size as f64 / 1048576.0,
            ms(cold),
            ms(cached),
            us(call)
        );
    }
}
