#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) with cargo fuzz, starting
# from the corpus in fuzz/corpus. cargo fuzz needs nightly features; this
# toolchain is stable, and RUSTC_BOOTSTRAP=1 enables them for this build only.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
export RUSTC_BOOTSTRAP=1
for target in policy_config decisions registration_service digests manifests; do
    mkdir -p "corpus/$target"
    log=$(mktemp)
    rc=0
    cargo fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 >"$log" 2>&1 || rc=$?
    grep -E "^(#[0-9]+\s+(DONE|INITED)|Done|==|SUMMARY|thread|panicked)" "$log" || true
    # A failing target makes cargo fuzz exit non-zero and leaves an input in fuzz/artifacts.
    if [ "$rc" -ne 0 ]; then tail -40 "$log" >&2; echo "fuzz target $target failed" >&2; exit 1; fi
    rm -f "$log"
    echo "fuzz: $target ran ${seconds}s without a failure"
done
