#!/usr/bin/env bash
# Checks the manifests without a cluster: every object validates against the
# Kubernetes API schemas (kubernetes-validate, pinned, in a venv), and the
# policy.toml that policy-configmaps.sh generates is one the registrar accepts.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/deploy-venv
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "kubernetes-validate==1.37.0"
fi
bin=${REGISTRAR:-target/release/csi-node-driver-registrar}
wasm=plugins/target/wasm32-wasip2/release/pool_suffix.wasm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

REGISTRAR=$bin deploy/policy-configmaps.sh "$wasm" -pool-a > "$work/configmaps.yaml"
"$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.33 \
    deploy/daemonset.yaml deploy/daemonset-with-policy.yaml "$work/configmaps.yaml"

# Lay the ConfigMaps out as the kubelet would mount them, and run the
# registrar's demo with that policy (paths rewritten to the local mount).
python3 - "$work" <<'PY'
import base64, os, sys
work = sys.argv[1]
docs = open(os.path.join(work, "configmaps.yaml")).read().split("\n---\n")
policy = docs[0].split("policy.toml: |\n", 1)[1]
policy = "\n".join(line[4:] for line in policy.splitlines())
plugins = docs[1].split("binaryData:\n", 1)[1].strip()
name, data = plugins.split(": ", 1)
os.makedirs(os.path.join(work, "plugins"))
open(os.path.join(work, "plugins", name.strip()), "wb").write(base64.b64decode(data))
policy = policy.replace("/etc/csi-registrar-plugins/", os.path.join(work, "plugins") + "/")
policy = policy.replace("/var/lib/csi-registrar/cache", os.path.join(work, "cache"))
key = docs[2].split('cache.key: "', 1)[1].split('"', 1)[0]
open(os.path.join(work, "cache.key"), "w").write(key)
policy = policy.replace("/etc/csi-registrar-key/cache.key", os.path.join(work, "cache.key"))
open(os.path.join(work, "policy.toml"), "w").write(policy)
PY
out=$("$bin" demo --policy "$work/policy.toml")
grep -q 'kubelet registered "hostpath.csi.k8s.io-pool-a": true' <<<"$out" || { echo "$out" >&2; exit 1; }
# The key was read and the compiled plugin cached under it.
ls "$work"/cache/*.cwasm >/dev/null || { echo "deploy: nothing was cached; demo output:" >&2; echo "$out" >&2; exit 1; }
echo "deploy: manifests valid; the generated policy registers hostpath.csi.k8s.io-pool-a"
