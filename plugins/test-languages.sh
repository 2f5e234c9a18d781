#!/usr/bin/env bash
# Builds the examples in every language with their pinned tools and checks
# them in the real host:
# - pool-suffix in Python (componentize-py, PyPI), JavaScript
#   (componentize-js, npm) and Go (go/build-plugin: Go, wit-bindgen and
#   wasm-tools from crates.io): imports, hooks, a decision, a settings
#   refusal, the Rust example's cases.toml (plugin test), and a whole
#   registration through the demo with a pinned policy;
# - versions, retry-backoff, ignore-refusals and default-policy (every hook) in Go: the Rust
#   examples' cases.toml;
# - build-plugin's refusals of what it cannot build, and that it gives the
#   same bytes from another checkout and cache;
# - the Python plugin, too large for a ConfigMap, shipped through an OCI
#   registry and registered through the kubelet's code (tests/peers);
# then prints the figures of pool-suffix in the four languages, side by side
# (docs/figures.md). Uses the release binary, since compiling a 3-18 MB
# component in a debug build of wasmtime is slow.
set -euo pipefail
cd "$(dirname "$0")"
bin=${REGISTRAR:-../target/release/csi-node-driver-registrar}
[ -x "$bin" ] || { echo "build the registrar first: cargo build --release" >&2; exit 1; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

fail() { echo "FAIL: $*" >&2; exit 1; }
passed=0

python/pool-suffix/build.sh
(cd javascript/pool-suffix && npm ci --silent --no-audit --no-fund && node build.mjs)
mkdir -p target/go
for example in pool-suffix versions retry-backoff ignore-refusals default-policy; do
    go/build-plugin -o "target/go/${example//-/_}_go.wasm" "go/examples/$example"
done

wasm_of() {
    case $1 in
    py) echo "$PWD/target/python/pool_suffix_py.wasm" ;;
    js) echo "$PWD/target/javascript/pool_suffix_js.wasm" ;;
    go) echo "$PWD/target/go/pool_suffix_go.wasm" ;;
    rust) echo "$PWD/target/wasm32-wasip2/release/pool_suffix.wasm" ;;
    esac
}

for lang in py js go; do
    wasm=$(wasm_of $lang)
    echo "--- $lang: $(stat -c %s "$wasm") bytes"

    inspect=$("$bin" plugin inspect "$wasm" --json)
    python3 - "$inspect" <<'PY' || fail "$lang: inspect"
import json, sys
i = json.loads(sys.argv[1])
assert i["hooks"] == ["driver-name"], i["hooks"]
policy = {x for x in i["imports"] if x.startswith("csi-registrar:")}
assert {"csi-registrar:policy/host-log@0.1.1", "csi-registrar:policy/types@0.1.1"} <= policy, i["imports"]
assert policy <= {"csi-registrar:policy/host-log@0.1.1", "csi-registrar:policy/types@0.1.1", "csi-registrar:policy/registrar-info@0.1.1"}, i["imports"]
assert not [x for x in i["imports"] if x.startswith("wasi:sockets") or x.startswith("wasi:http")], i["imports"]
PY
    passed=$((passed + 1))

    run=$("$bin" plugin run "$wasm" --hook driver-name --driver-name nfs.csi.k8s.io --settings-json '{"suffix": "-pool-b"}' --timeout-ms 900)
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["decision"]["rename"] == "nfs.csi.k8s.io-pool-b", d; print("decision:", d["decision"], d["took_us"], "us")' "$run" || fail "$lang: run"
    passed=$((passed + 1))

    if err=$("$bin" plugin validate "$wasm" --settings-json '{"suffix": "a/b"}' 2>&1); then fail "$lang: bad settings accepted"; fi
    grep -q "the plugin refused its settings: suffix .a/b. contains ./.; use letters" <<<"$err" || fail "$lang: settings error: $err"
    passed=$((passed + 1))

    # The Rust example's cases, unchanged: every language decides alike.
    "$bin" plugin test examples/pool-suffix/cases.toml --plugin "$wasm" || fail "$lang: cases"
    passed=$((passed + 1))

    dir=$(mktemp -d)
    cat >"$dir/policy.toml" <<TOML
[policy]
cache_dir = "$dir/cache"
cache_key_file = "$dir/cache.key"
[[plugin]]
id = "pool-suffix-$lang"
path = "$wasm"
sha256 = "$(sha256sum "$wasm" | cut -d' ' -f1)"
[plugin.settings]
suffix = "-$lang"
TOML
    "$bin" plugin cache-key >"$dir/cache.key"
    "$bin" plugin precompile "$wasm" --cache-dir "$dir/cache" --cache-key-file "$dir/cache.key" >/dev/null
    out=$("$bin" demo --policy "$dir/policy.toml")
    grep -q "GetInfo -> type=\"CSIPlugin\" name=\"hostpath.csi.k8s.io-$lang\"" <<<"$out" || fail "$lang: demo: $out"
    grep -q "kubelet registered \"hostpath.csi.k8s.io-$lang\": true" <<<"$out" || fail "$lang: demo: $out"
    rm -rf "$dir"
    passed=$((passed + 1))
done

for example in versions retry-backoff ignore-refusals default-policy; do
    echo "--- go: $example"
    "$bin" plugin test "examples/$example/cases.toml" --plugin "$PWD/target/go/${example//-/_}_go.wasm" || fail "go: $example cases"
    passed=$((passed + 1))
done

echo "--- go: what build-plugin refuses"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
sdk=$PWD/go
mkdir -p "$scratch/main" "$scratch/nohooks"
for d in main nohooks; do
    (cd "$scratch/$d" && go mod init example.com/$d >/dev/null 2>&1 &&
        go mod edit -require github.com/csi-registrar/policy-go@v0.0.0 -replace github.com/csi-registrar/policy-go="$sdk")
done
cat >"$scratch/main/main.go" <<'GO'
package main

func main() {}
GO
if err=$(go/build-plugin -o "$scratch/x.wasm" "$scratch/main" 2>&1); then fail "go: package main built"; fi
grep -q "build-plugin: example.com/main is package main; a plugin is a library package that calls policy.Export in an init function" <<<"$err" || fail "go: package main: $err"
passed=$((passed + 1))
cat >"$scratch/nohooks/plugin.go" <<'GO'
package nohooks

import policy "github.com/csi-registrar/policy-go"

type p struct{}

func (p) Name() string            { return "p" }
func (p) Version() string         { return "0" }
func (p) Validate(struct{}) error { return nil }

func init() { policy.Export[struct{}](p{}) }
GO
if err=$(go/build-plugin -o "$scratch/x.wasm" "$scratch/nohooks" 2>&1); then fail "go: a plugin without hooks built"; fi
grep -q "build-plugin: example.com/nohooks implements no hook: implement at least one of DriverNamer, VersionChooser, FailureHandler, EndpointMapper" <<<"$err" || fail "go: no hooks: $err"
passed=$((passed + 1))
if err=$(WASM_TOOLS=true go/build-plugin -o "$scratch/x.wasm" go/examples/pool-suffix 2>&1); then fail "go: built with a wrong wasm-tools"; fi
grep -q "build-plugin: true is not version 1.263.0 (its --version says: nothing); install it with: cargo install --locked wasm-tools@1.263.0" <<<"$err" || fail "go: wrong tool: $err"
passed=$((passed + 1))
[ ! -e "$scratch/x.wasm" ] || fail "go: a refused build left $scratch/x.wasm"

echo "--- go: the same sources give the same bytes, wherever they are"
mkdir -p "$scratch/elsewhere/plugins"
cp -r ../wit "$scratch/elsewhere/"
cp -r go "$scratch/elsewhere/plugins/"
CSI_REGISTRAR_GO_CACHE=$scratch/cache "$scratch/elsewhere/plugins/go/build-plugin" \
    -o "$scratch/again.wasm" "$scratch/elsewhere/plugins/go/examples/pool-suffix" >/dev/null
cmp -s "$scratch/again.wasm" target/go/pool_suffix_go.wasm ||
    fail "go: pool-suffix built from another checkout and cache differs: $(sha256sum "$scratch/again.wasm" target/go/pool_suffix_go.wasm)"
passed=$((passed + 1))

# Shipped the way a ConfigMap cannot carry it: the Python plugin (18 MB)
# pushed to a real registry on loopback, pulled by the registrar and
# registered through the kubelet's own plugin manager (tests/peers), then
# registered again from the cache with the registry gone.
echo "--- py: through an OCI registry to the kubelet 1.37.2's plugin manager"
py_wasm=$(wasm_of py) # before the cd: wasm_of names files from here
(cd ../tests/peers && REGISTRAR_BIN=$bin OCI_PLUGIN_WASM=$py_wasm \
    go test -count=1 -run 'TestKubeletRegistersAPluginPulledFromARegistry' ./...) ||
    fail "py: pulled from a registry and registered"
passed=$((passed + 1))

echo "languages: $passed passed, 0 failed"

echo
echo "--- figures: pool-suffix in four languages, one run (release registrar)"
echo "| language | component | compile | instance memory | p50 | p99 |"
echo "|---|---:|---:|---:|---:|---:|"
for lang in rust go py js; do
    wasm=$(wasm_of $lang)
    [ -f "$wasm" ] || { echo "| $lang | (not built: cargo build --release --target wasm32-wasip2 in plugins/) |"; continue; }
    dir=$(mktemp -d)
    "$bin" plugin cache-key >"$dir/key"
    start=$(date +%s%N)
    "$bin" plugin precompile "$wasm" --cache-dir "$dir/cache" --cache-key-file "$dir/key" >/dev/null
    compile_ms=$((($(date +%s%N) - start) / 1000000))
    rm -rf "$dir"
    # The hook's row: p50, p99, set-up, instantiate, call, rest, memory.
    row=$("$bin" plugin bench examples/pool-suffix/cases.toml --plugin "$wasm" --iterations "${ITERATIONS:-200}" 2>/dev/null | tail -1)
    read -r p50 p99 memory < <(awk '{print $(NF-6), $(NF-5), $NF}' <<<"$row")
    printf '| %s | %s KB | %s ms | %s KiB | %s µs | %s µs |\n' "$lang" "$(($(stat -c %s "$wasm") / 1000))" "$compile_ms" "$memory" "$p50" "$p99"
done
