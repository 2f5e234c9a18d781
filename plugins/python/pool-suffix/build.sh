#!/usr/bin/env bash
# Builds pool_suffix_py.wasm with a pinned componentize-py, in a venv under
# plugins/target (nothing is installed system-wide).
set -euo pipefail
cd "$(dirname "$0")"
COMPONENTIZE_PY_VERSION=0.25.1
venv=../../target/python-venv
out=../../target/python
if [ ! -x "$venv/bin/componentize-py" ] || ! "$venv/bin/pip" show componentize-py 2>/dev/null | grep -qx "Version: $COMPONENTIZE_PY_VERSION"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY_VERSION"
fi
mkdir -p "$out"
"$venv/bin/componentize-py" -d ../../../wit -w driver-name-policy componentize --stub-wasi app -o "$out/pool_suffix_py.wasm"
ls -l "$out/pool_suffix_py.wasm"
