//! Signals.
//!
//! SIGTERM is what the kubelet sends; SIGINT is what a person sends. Upstream
//! handles only SIGTERM and so leaves its socket behind on Ctrl-C; both end the
//! registrar cleanly here (exit 0, socket removed). SIGHUP re-reads the policy.

use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::Stream;
use tokio_stream::wrappers::SignalStream;

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn shutdown() {
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}

/// One item per SIGHUP: a request to reload the policy.
pub fn reloads() -> impl Stream<Item = ()> + Unpin {
    SignalStream::new(signal(SignalKind::hangup()).expect("installing a SIGHUP handler"))
}
