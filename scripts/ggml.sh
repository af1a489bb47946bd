#!/bin/sh
# ggml.sh: installs ggml for the bridge (include/weightmap_ggml.h, docs/GGML.md) into the npm
# cache outside the clone when it is missing (scripts/npm-cache.sh --root, folder ggml@0.23.0,
# linked as bench/peers/ggml, where WM_GGML=AUTO looks), and prints bench/peers/ggml: include/ holds the headers of
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
link="$here/bench/peers/ggml"
lib=$("$here/scripts/peer.sh")
dir="$("$here/scripts/npm-cache.sh" --root)/ggml@0.23.0"
want="node-llama-cpp@3.21.1 ggml 0.23.0 (include, internal) lib $lib"
# bench/peers/ggml -> the cache (a folder an older ggml.sh made in the clone is replaced)
link_it() {
  [ -L "$link" ] && [ "$(readlink "$link")" = "$dir" ] && return 0
  mkdir -p "$(dirname "$link")"
  rm -rf "$link"
  ln -s "$dir" "$link"
}
if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$want" ] && [ -f "$dir/include/ggml-backend.h" ] \
   && [ -f "$dir/lib/libggml-base.so" ]; then
  link_it
  echo "$link"
  exit 0
fi
command -v git >/dev/null 2>&1 || { echo "ggml.sh: git is not installed" >&2; exit 1; }
tgz=$("$here/scripts/npm-cache.sh" --pack node-llama-cpp@3.21.1)
# one builder at a time (other clones share the cache); the winner's folder serves the rest
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir.lock"
  flock 9
  if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$want" ]; then
    link_it
    echo "$link"
    exit 0
  fi
fi
echo "ggml.sh: the headers of ggml 0.23.0 (node-llama-cpp@3.21.1) into $dir" >&2
tmp=$(mktemp -d "$dir.tmp.XXXXXX")
cd "$tmp"
tar -xzf "$tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git clone -q --bare package/llama/gitRelease.bundle src.git
mkdir tree
git -C src.git archive HEAD ggml/include ggml/src/ggml-backend-impl.h ggml/CMakeLists.txt | tar -x -C tree
ver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' tree/ggml/CMakeLists.txt | paste -sd.)
if [ "$ver" != "0.23.0" ]; then
  echo "ggml.sh: the bundle's ggml is $ver, not 0.23.0 (the peer's libraries)" >&2
  exit 1
fi
commit=$(git -C src.git rev-parse HEAD)
out="$tmp/out"
mkdir -p "$out/lib"
mv tree/ggml/include "$out/include"
mkdir "$out/internal"
mv tree/ggml/src/ggml-backend-impl.h "$out/internal/"
for f in "$lib"/libggml-base.so "$lib"/libggml.v0.4.0.so "$lib"/libggml-cpu-*.so; do
  ln -s "$f" "$out/lib/$(basename "$f")"
done
ln -s libggml.v0.4.0.so "$out/lib/libggml.so"
printf 'llama.cpp source: node-llama-cpp@3.21.1 llama/gitRelease.bundle, commit %s (%s)\n' \
  "$commit" "$(cat package/llama/llama.cpp.info.json | tr -d ' \n')" > "$out/SOURCE"
echo "$want" > "$out/stamp"
cd "$here"
rm -rf "$dir"
mv "$out" "$dir"
rm -rf "$tmp"
link_it
echo "$link"
