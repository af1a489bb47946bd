#!/bin/sh
# peer.sh: installs llama.cpp's prebuilt loader (npm @node-llama-cpp/linux-x64@3.21.1,
# llama.cpp v0.4.0) into bench/peers/ when it is missing, and prints its library folder: the
# tests, the benchmarks and tools/gen find it there (tests/oracle/oracle.c), or in $WM_PEER_DIR.
# Usage: L=$(scripts/peer.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/bench/peers"
lib="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
if [ ! -f "$lib/libggml-base.so" ] || [ ! -f "$lib/libllama.v0.4.0.so" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "peer.sh: npm is not installed (Debian: apt-get install npm)" >&2
    exit 1
  fi
  echo "peer.sh: installing @node-llama-cpp/linux-x64@3.21.1 into $dir" >&2
  mkdir -p "$dir"
  cd "$dir"
  [ -f package.json ] || npm init -y >/dev/null
  npm i -E --no-audit --no-fund @node-llama-cpp/linux-x64@3.21.1 >&2
  if [ ! -f "$lib/libggml-base.so" ]; then
    echo "peer.sh: the package installed but $lib/libggml-base.so is missing" >&2
    exit 1
  fi
fi
echo "$lib"
