#!/usr/bin/env bash
# Writes what daemonset-with-policy.yaml mounts, for one plugin:
#   registrar-policy     (ConfigMap) policy.toml, pinned to the component's sha256
#   registrar-plugins    (ConfigMap) the component itself (binaryData)
#   registrar-cache-key  (Secret) a new random key that binds the compiled cache
#                        to the pin (REGISTRAR: the binary that makes the key)
# Usage: deploy/policy-configmaps.sh PLUGIN.wasm SUFFIX > configmaps.yaml
# (for the pool-suffix example: the driver registers as <name><SUFFIX>).
set -euo pipefail
wasm=${1:?usage: $0 PLUGIN.wasm SUFFIX}
suffix=${2:?usage: $0 PLUGIN.wasm SUFFIX}
file=$(basename "$wasm")
sha=$(sha256sum "$wasm" | cut -d' ' -f1)
key=$("${REGISTRAR:-csi-node-driver-registrar}" plugin cache-key)
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
    cache_key_file = "/etc/csi-registrar-key/cache.key"

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
---
apiVersion: v1
kind: Secret
metadata:
  name: registrar-cache-key
  namespace: kube-system
stringData:
  cache.key: "$key"
YAML
