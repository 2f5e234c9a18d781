#!/usr/bin/env bash
# Writes the two ConfigMaps daemonset-with-policy.yaml mounts, for one plugin:
#   registrar-policy   policy.toml, pinned to the component's sha256
#   registrar-plugins  the component itself (binaryData)
# Usage: deploy/policy-configmaps.sh PLUGIN.wasm SUFFIX > configmaps.yaml
# (for the pool-suffix example: the driver registers as <name><SUFFIX>).
set -euo pipefail
wasm=${1:?usage: $0 PLUGIN.wasm SUFFIX}
suffix=${2:?usage: $0 PLUGIN.wasm SUFFIX}
file=$(basename "$wasm")
sha=$(sha256sum "$wasm" | cut -d' ' -f1)
cat <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: registrar-policy
  namespace: kube-system
data:
  policy.toml: |
    [policy]
    cache_dir = "/var/lib/csi-registrar/cache"

    [[plugin]]
    id = "pool-suffix"
    path = "/etc/csi-registrar-plugins/$file"
    sha256 = "$sha"
    hooks = ["driver-name"]
    [plugin.settings]
    suffix = "$suffix"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: registrar-plugins
  namespace: kube-system
binaryData:
  $file: $(base64 -w0 "$wasm")
YAML
