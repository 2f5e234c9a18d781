//! Load: many concurrent kubelet-like clients on the registration socket and
//! many `/healthz` probes on loopback, all answered without error, with memory
//! that stops growing. Bounded in count; no timing assertions.

mod common;

use std::time::Duration;

use common::*;
use csi_node_driver_registrar::testing::proto::registration::{
    InfoRequest, registration_client::RegistrationClient,
};
use csi_node_driver_registrar::testing::{DriverSpec, FakeDriver};

const DRIVER: &str = "hostpath.csi.k8s.io";
const CLIENTS: usize = 64;
const CALLS_PER_CLIENT: usize = 50;
const PROBERS: usize = 16;
const PROBES_PER_PROBER: usize = 20;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// One round: every client on its own connection, all at once. Returns the errors.
async fn round(socket: &std::path::Path, port: u16) -> Vec<String> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let socket = socket.to_owned();
        tasks.spawn(async move {
            let channel = csi_node_driver_registrar::testing::uds_channel(&socket)
                .await
                .map_err(|e| e.to_string())?;
            let mut client = RegistrationClient::new(channel);
            for _ in 0..CALLS_PER_CLIENT {
                let info = client
                    .get_info(InfoRequest {})
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                if info.name != DRIVER {
                    return Err(format!("wrong name {}", info.name));
                }
            }
            Ok(())
        });
    }
    for _ in 0..PROBERS {
        tasks.spawn(async move {
            for _ in 0..PROBES_PER_PROBER {
                match http_get(port, "/healthz").await {
                    Some((200, body)) if body == "ok" => {}
                    other => return Err(format!("/healthz: {other:?}")),
                }
            }
            Ok(())
        });
    }
    let mut errors = Vec::new();
    while let Some(result) = tasks.join_next().await {
        if let Err(e) = result.unwrap() {
            errors.push(e);
        }
    }
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_get_info_and_healthz_without_errors_or_growth() {
    let sb = Sandbox::new();
    let _driver = FakeDriver::start(&sb.csi, DriverSpec::named(DRIVER))
        .await
        .unwrap();
    let port = free_port();
    // /healthz's own GetInfo runs under --timeout: this test counts errors,
    // not latency, so a slow shared machine must not turn into a 500.
    let registrar = Process::spawn(
        &sb,
        &[
            format!("--http-endpoint=127.0.0.1:{port}"),
            "--timeout=20s".into(),
        ],
    );
    let socket = sb.socket(DRIVER);
    assert!(appears(&socket).await);
    assert_eq!(
        http_until(port, "/healthz", 200).await.map(|r| r.0),
        Some(200)
    );
    let pid = registrar.pid();

    let before = rss_kib(pid);
    let mut after = Vec::new();
    for _ in 0..2 {
        let errors = round(&socket, port).await;
        assert!(
            errors.is_empty(),
            "{} errors, first: {:?}",
            errors.len(),
            errors.first()
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // let closed connections be reaped
        after.push(rss_kib(pid));
    }
    let (after_first, after_second) = (after[0], after[1]);

    // Bounded: the first round may grow buffers and pools, the second must not add much.
    assert!(
        after_first < before + 32 * 1024,
        "RSS {before} -> {after_first} KiB"
    );
    assert!(
        after_second < after_first + 4 * 1024,
        "RSS keeps growing: {before} -> {after_first} -> {after_second} KiB"
    );
    let (_, metrics) = http_get(port, "/metrics").await.unwrap();
    let expected = 2 * CLIENTS * CALLS_PER_CLIENT;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("csi_registrar_get_info_requests_total ")
                && l.split(' ').nth(1).and_then(|n| n.parse::<usize>().ok()) >= Some(expected)),
        "{metrics}"
    );
    assert_eq!(registrar.stop().await, 0);
}
