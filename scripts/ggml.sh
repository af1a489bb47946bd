#!/bin/sh
# ggml.sh: installs ggml for the bridge (include/weightmap_ggml.h, docs/GGML.md) into
# bench/peers/ggml/ when it is missing, and prints that folder: include/ holds the headers of
# the release the peer's prebuilt libraries were built from, lib/ links to those libraries,
# internal/ holds ggml's backend interface (ggml-backend-impl.h), which only the tests use.
#   libraries: npm @node-llama-cpp/linux-x64@3.21.1 (scripts/peer.sh: libggml-base.so,
#              libggml.v0.4.0.so, libggml-cpu-*.so; llama.cpp v0.4.0, ggml 0.23.0)
#   headers:   npm node-llama-cpp@3.21.1, llama/gitRelease.bundle (a git bundle of that llama.cpp
#              source, one squashed commit): its ggml/include, checked to say ggml 0.23.0
# Usage: G=$(scripts/ggml.sh)   (messages go to stderr; only the folder to stdout). Idempotent:
# a second run finds the stamp and does nothing. Nothing of ggml is committed.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
dir="$here/bench/peers/ggml"
want="node-llama-cpp@3.21.1 ggml 0.23.0 (include, internal)"
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$want" ] && [ -f "$dir/include/ggml-backend.h" ] \
   && [ -f "$dir/lib/libggml-base.so" ]; then
  echo "$dir"
  exit 0
fi
lib=$("$here/scripts/peer.sh")
command -v git >/dev/null 2>&1 || { echo "ggml.sh: git is not installed" >&2; exit 1; }
echo "ggml.sh: fetching the headers of ggml 0.23.0 (node-llama-cpp@3.21.1) into $dir" >&2
tmp="$here/bench/peers/ggml.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
cd "$tmp"
npm pack --silent node-llama-cpp@3.21.1 >/dev/null
tar -xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git clone -q --bare package/llama/gitRelease.bundle src.git
mkdir tree
git -C src.git archive HEAD ggml/include ggml/src/ggml-backend-impl.h ggml/CMakeLists.txt | tar -x -C tree
ver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' tree/ggml/CMakeLists.txt | paste -sd.)
if [ "$ver" != "0.23.0" ]; then
  echo "ggml.sh: the bundle's ggml is $ver, not 0.23.0 (the peer's libraries)" >&2
  exit 1
fi
commit=$(git -C src.git rev-parse HEAD)
rm -rf "$dir"
mkdir -p "$dir/lib"
mv tree/ggml/include "$dir/include"
mkdir "$dir/internal"
mv tree/ggml/src/ggml-backend-impl.h "$dir/internal/"
for f in "$lib"/libggml-base.so "$lib"/libggml.v0.4.0.so "$lib"/libggml-cpu-*.so; do
  ln -s "$f" "$dir/lib/$(basename "$f")"
done
ln -s libggml.v0.4.0.so "$dir/lib/libggml.so"
printf 'llama.cpp source: node-llama-cpp@3.21.1 llama/gitRelease.bundle, commit %s (%s)\n' \
  "$commit" "$(cat package/llama/llama.cpp.info.json | tr -d ' \n')" > "$dir/SOURCE"
cd "$here"
rm -rf "$tmp"
echo "$want" > "$dir/stamp"
echo "$dir"
