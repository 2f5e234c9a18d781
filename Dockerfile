# A minimal image: one static binary and the licence, nothing else; the same
# rootfs scripts/image builds without Docker, for amd64 and arm64 at once and
# reproducibly (docs/image.md). This recipe is for people with a Docker engine.
#
#   docker build -t csi-node-driver-registrar-rs .
#   docker build --build-arg CARGO_FLAGS=--no-default-features -t csi-node-driver-registrar-rs:slim .
#
# The slim build has no WebAssembly policy host (built-in policy only).
# The registrar runs as root in the DaemonSet: it writes its socket into the
# kubelet's root-owned plugin registry (see deploy/daemonset.yaml, which drops
# every capability and forbids privilege escalation).

FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto proto
COPY wit wit
COPY src src
COPY benches benches
ARG CARGO_FLAGS=""
RUN cargo build --release --locked --target x86_64-unknown-linux-musl \
        --bin csi-node-driver-registrar ${CARGO_FLAGS}

FROM scratch
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/csi-node-driver-registrar /csi-node-driver-registrar
COPY LICENSE /LICENSE
ENTRYPOINT ["/csi-node-driver-registrar"]
