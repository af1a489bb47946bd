#!/bin/sh
# peer-node.sh: llama.rn's Node twin (npm @fugood/llama.node@1.7.15 and its prebuilt
# @fugood/node-llama-linux-x64: llama.cpp linked into one index.node), installed once into the
# npm cache outside the clone (scripts/npm-cache.sh: ~/.cache/weightmap/npm/@fugood/llama.node@1.7.15/,
# both packages linked into bench/peers/node_modules/), and prints that node_modules folder.
# About 22 MB, a few seconds the first time.
# Usage: M=$(scripts/peer-node.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$here/scripts/npm-cache.sh" @fugood/llama.node@1.7.15 @fugood/node-llama-linux-x64@1.7.15 \
  -- --omit=optional)
addon="$dir/node_modules/@fugood/node-llama-linux-x64/index.node"
[ -f "$addon" ] || { echo "peer-node.sh: $addon is missing after the install" >&2; exit 1; }
echo "$dir/node_modules"
