#!/usr/bin/env bash
# Builds the Python and JavaScript ports of pool-suffix with their pinned tools
# (componentize-py from PyPI, componentize-js from npm) and checks them in the
# real host: imports, hooks, a decision, a settings refusal, the Rust
# example's cases.toml (plugin test), and a whole registration through the
# demo with a pinned policy. Uses the release binary,
# since compiling a 12-18 MB component in a debug build of wasmtime is slow.
set -euo pipefail
cd "$(dirname "$0")"
bin=${REGISTRAR:-../target/release/csi-node-driver-registrar}
[ -x "$bin" ] || { echo "build the registrar first: cargo build --release" >&2; exit 1; }

fail() { echo "FAIL: $*" >&2; exit 1; }
passed=0

python/pool-suffix/build.sh
(cd javascript/pool-suffix && npm ci --silent --no-audit --no-fund && node build.mjs)

for lang in py js; do
    wasm=$PWD/target/$([ $lang = py ] && echo python || echo javascript)/pool_suffix_$lang.wasm
    echo "--- $lang: $(stat -c %s "$wasm") bytes"

    inspect=$("$bin" plugin inspect "$wasm" --json)
    python3 - "$inspect" <<'PY' || fail "$lang: inspect"
import json, sys
i = json.loads(sys.argv[1])
assert i["hooks"] == ["driver-name"], i["hooks"]
assert sorted(i["imports"]) == ["csi-registrar:policy/host-log@0.1.0", "csi-registrar:policy/types@0.1.0"], i["imports"]
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
echo "languages: $passed passed, 0 failed"
