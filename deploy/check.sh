#!/usr/bin/env bash
# Checks the manifests without a cluster: every object validates against the
# Kubernetes API schemas (kubernetes-validate, pinned, in a venv; the image
# volume manifests against 1.36, where image volumes are GA), and each
# manifest's policy, run as its pod would run it (the initContainer's
# arguments, then the registrar), registers the driver:
# - daemonset-with-policy.yaml: the ConfigMaps policy-configmaps.sh writes;
# - daemonset-with-image-volume.yaml: the plugin file where the image volume
#   mounts it;
# - daemonset-with-registry.yaml: the plugin pushed to a real registry on
#   loopback (Debian's docker-registry), pulled by the initContainer, and
#   loaded by the registrar from the cache after the registry has stopped.
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
    deploy/daemonset.yaml deploy/daemonset-with-policy.yaml "$work/configmaps.yaml" \
    deploy/daemonset-dra.yaml

# The DRA manifest's registrar arguments, as the kubelet expands them: the
# registrar starts, and its socket is the per-pod one.
dra_uid=0b6f8c5e-3c1d-4d5e-9f7a-1a2b3c4d5e6f
mkdir -p "$work/dra-registry"
coproc DRA { POD_UID=$dra_uid exec "$bin" --plugin-type=DRAPlugin --driver-name=gpu.example.com \
    "--kubelet-registration-path=/var/lib/kubelet/plugins/gpu.example.com/dra-$dra_uid.sock" \
    --plugin-registration-path="$work/dra-registry" 2>&1; }
dra_pid=$DRA_PID
# Its log says when the socket is up (each line within 20 s, or give up).
started=
while IFS= read -r -t 20 line <&"${DRA[0]}"; do
    echo "$line" >>"$work/dra.log"
    if [[ $line == *"Registration Server started"* ]]; then started=1; break; fi
done
[ -n "$started" ] && [ -S "$work/dra-registry/gpu.example.com-$dra_uid-reg.sock" ] ||
    { cat "$work/dra.log" >&2; kill "$dra_pid" 2>/dev/null || true; exit 1; }
kill -TERM "$dra_pid"
wait "$dra_pid"
[ ! -e "$work/dra-registry/gpu.example.com-$dra_uid-reg.sock" ] || { echo "deploy: the DRA registrar left its socket" >&2; exit 1; }
echo "deploy: daemonset-dra.yaml valid (1.33); its registrar serves gpu.example.com-<pod UID>-reg.sock and removes it on SIGTERM"

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
echo "deploy: daemonset-with-policy.yaml valid; the generated policy registers hostpath.csi.k8s.io-pool-a"

"$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.36 \
    deploy/daemonset-with-image-volume.yaml deploy/daemonset-with-registry.yaml

# The policy and the initContainer's arguments of a manifest, with its paths
# moved under $work/<name>: prints the arguments, one per line.
pod_of() {
    python3 - "$1" "$work/$2" "$3" "${4:-}" <<'PY'
import json, os, re, sys
manifest, root, wasm, oci = sys.argv[1:5]
text = open(manifest).read()
policy = text.split("policy.toml: |\n", 1)[1].split("\n---\n", 1)[0]
policy = "\n".join(line[4:] for line in policy.splitlines())
os.makedirs(os.path.join(root, "plugins"), exist_ok=True)
if "path = \"/etc/csi-registrar-plugins/" in policy:
    data = open(wasm, "rb").read()
    name = re.search(r'path = "/etc/csi-registrar-plugins/([^"]+)"', policy).group(1)
    open(os.path.join(root, "plugins", name), "wb").write(data)
    import hashlib
    policy = re.sub(r'sha256 = "[^"]*"', 'sha256 = "%s"' % hashlib.sha256(data).hexdigest(), policy)
if oci:
    registry = oci.split("/", 1)[0]
    policy = re.sub(r'oci = "[^"]*"', 'oci = "%s"' % oci, policy)
    policy = policy.replace("[policy]\n", '[policy]\ninsecure_registries = ["%s"]\n' % registry, 1)
    os.makedirs(os.path.join(root, "pull-secret"), exist_ok=True)
    open(os.path.join(root, "pull-secret", ".dockerconfigjson"), "w").write('{"auths": {}}')
for path, local in [("/etc/csi-registrar-plugins/", "plugins/"), ("/var/lib/csi-registrar/cache", "cache"),
                    ("/etc/csi-registrar-key/cache.key", "cache.key"),
                    ("/etc/csi-registrar-pull-secret/", "pull-secret/")]:
    policy = policy.replace(path, os.path.join(root, local))
open(os.path.join(root, "cache.key"), "w").write("0123456789abcdef0123456789abcdef-deploy-check\n")
open(os.path.join(root, "policy.toml"), "w").write(policy)
args = json.loads(re.search(r'precompile-policy\n(?:\s+#.*\n)*\s+image: \S+\n\s+args: (\[.*\])', text).group(1))
for a in args:
    print(a.replace("/etc/csi-registrar/policy.toml", os.path.join(root, "policy.toml")))
PY
}

registers() { # $1: policy file, $2: what
    local out
    out=$("$bin" demo --policy "$1")
    grep -q 'kubelet registered "hostpath.csi.k8s.io-pool-a": true' <<<"$out" || { echo "deploy: $2 did not register; demo output:" >&2; echo "$out" >&2; exit 1; }
}

mapfile -t init < <(pod_of deploy/daemonset-with-image-volume.yaml image "$wasm")
"$bin" "${init[@]}" >/dev/null
ls "$work"/image/cache/*.cwasm >/dev/null
registers "$work/image/policy.toml" daemonset-with-image-volume.yaml
echo "deploy: daemonset-with-image-volume.yaml valid (1.36); its initContainer compiles into the cache and the registrar registers hostpath.csi.k8s.io-pool-a"

if ! command -v docker-registry >/dev/null; then
    [ -z "${CI:-}" ] || { echo "deploy: docker-registry is not installed; .ci/run installs it" >&2; exit 1; }
    echo "deploy: SKIP daemonset-with-registry.yaml's run: docker-registry is not installed (apt-get install docker-registry)"
    exit 0
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' "$work/registry" "$port" >"$work/registry.yml"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
# `|| true`: under set -e a failed kill (the registry is stopped below) would
# end the trap, and the script, with status 1.
trap 'kill $registry_pid 2>/dev/null || true; rm -rf "$work"' EXIT
timeout 20 bash -c "until grep -q 'listening on' '$work/registry.log'; do sleep 0.1; done"
ref=$("$bin" plugin push "$wasm" "127.0.0.1:$port/csi/pool-suffix:1" --insecure-registry "127.0.0.1:$port" 2>/dev/null)
ref=${ref#oci = \"}; ref=${ref%\"}
mapfile -t init < <(pod_of deploy/daemonset-with-registry.yaml registry "$wasm" "$ref")
"$bin" "${init[@]}" >/dev/null
kill $registry_pid; wait $registry_pid 2>/dev/null || true
registers "$work/registry/policy.toml" daemonset-with-registry.yaml
echo "deploy: daemonset-with-registry.yaml valid (1.36); its initContainer pulls and compiles, and the registrar registers hostpath.csi.k8s.io-pool-a from the cache with the registry stopped"
