#!/bin/sh
# peer-onnx.sh: ONNX Runtime in a Node addon (npm onnxruntime-node@1.31.1: its prebuilt
# onnxruntime_binding.node and libonnxruntime.so.1 for each platform ship in the package),
# installed once into the npm cache outside the clone (scripts/npm-cache.sh:
# ~/.cache/weightmap/npm/onnxruntime-node@1.31.1/, linked into bench/peers/node_modules/), and
# prints that node_modules folder. Its install script is not run (--ignore-scripts: it would
# fetch the CUDA provider from the network; the CPU runtime is in the package). The trace tests
# load it (tests/trace/onnx_app.mjs). About 300 MB (every platform's binaries), a few seconds
# the first time.
# Usage: M=$(scripts/peer-onnx.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$here/scripts/npm-cache.sh" onnxruntime-node@1.31.1 -- --ignore-scripts)
lib="$dir/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1"
[ -f "$lib" ] || { echo "peer-onnx.sh: $lib is missing after the install" >&2; exit 1; }
echo "$dir/node_modules"
