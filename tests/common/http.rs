//! The HTTP server, from outside.

use std::time::Duration;

use csi_node_driver_registrar::testing::PATIENCE;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// Serves `app` on a loopback port until the returned runtime is dropped;
/// its `127.0.0.1:PORT`.
pub fn serve_on_loopback(app: axum::Router) -> (String, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    rt.spawn(async move { axum::serve(listener, app).await });
    (addr, rt)
}
