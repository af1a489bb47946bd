#!/bin/sh
# peer-node.sh: installs llama.rn's Node twin (npm @fugood/llama.node@1.7.15 and its prebuilt
# @fugood/node-llama-linux-x64: llama.cpp linked into one index.node) into bench/peers/ when it
# is missing, and prints the node_modules folder. About 22 MB, a few seconds.
# Usage: M=$(scripts/peer-node.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/bench/peers"
addon="$dir/node_modules/@fugood/node-llama-linux-x64/index.node"
if [ ! -f "$addon" ] || [ ! -f "$dir/node_modules/@fugood/llama.node/package.json" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "peer-node.sh: npm is not installed (Debian: apt-get install npm)" >&2
    exit 1
  fi
  echo "peer-node.sh: installing @fugood/llama.node@1.7.15 into $dir" >&2
  mkdir -p "$dir"
  cd "$dir"
  [ -f package.json ] || npm init -y >/dev/null
  npm i -E --no-audit --no-fund --omit=optional @fugood/llama.node@1.7.15 \
    @fugood/node-llama-linux-x64@1.7.15 >&2
  [ -f "$addon" ] || { echo "peer-node.sh: $addon is missing after the install" >&2; exit 1; }
fi
echo "$dir/node_modules"
