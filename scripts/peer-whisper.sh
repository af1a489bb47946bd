#!/bin/sh
# peer-whisper.sh: whisper.cpp in a Node addon (npm @fugood/whisper.node@1.1.3 and its prebuilt
# @fugood/node-whisper-linux-x64: whisper.cpp and ggml linked into one index.node), installed once
# into the npm cache outside the clone (scripts/npm-cache.sh:
# ~/.cache/weightmap/npm/@fugood/whisper.node@1.1.3/, both packages linked into
# bench/peers/node_modules/), and prints that node_modules folder. The trace tests load it
# (tests/trace/whisper_app.mjs). About 15 MB, a few seconds the first time.
# Usage: M=$(scripts/peer-whisper.sh)    (install messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$here/scripts/npm-cache.sh" @fugood/whisper.node@1.1.3 @fugood/node-whisper-linux-x64@1.1.3 \
  -- --omit=optional)
addon="$dir/node_modules/@fugood/node-whisper-linux-x64/index.node"
[ -f "$addon" ] || { echo "peer-whisper.sh: $addon is missing after the install" >&2; exit 1; }
echo "$dir/node_modules"
