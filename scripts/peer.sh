#!/bin/sh
# peer.sh: llama.cpp's prebuilt loader (npm @node-llama-cpp/linux-x64@3.21.1, llama.cpp v0.4.0),
# installed once into the npm cache outside the clone (scripts/npm-cache.sh:
# ~/.cache/weightmap/npm/@node-llama-cpp/linux-x64@3.21.1/, linked as
# bench/peers/node_modules/@node-llama-cpp/linux-x64), and prints its library folder: the tests,
# the benchmarks and tools/gen find it there (tests/oracle/oracle.c), or in $WM_PEER_DIR.
# Usage: L=$(scripts/peer.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
spec=@node-llama-cpp/linux-x64@3.21.1
dir=$("$here/scripts/npm-cache.sh" "$spec")
lib="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
for f in libggml-base.so libllama.v0.4.0.so; do
  [ -f "$lib/$f" ] || { echo "peer.sh: $spec installed but $lib/$f is missing" >&2; exit 1; }
done
echo "$lib"
