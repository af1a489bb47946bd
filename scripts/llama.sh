#!/bin/sh
# llama.sh: installs llama.cpp v0.4.0 for the llama.cpp bridge (include/weightmap_llama.h,
# docs/LLAMA.md) into the npm cache outside the clone when it is missing
# (scripts/npm-cache.sh --root, folder llama@0.4.0, linked as bench/peers/llama, where
# WM_LLAMA=AUTO looks), and prints bench/peers/llama:
#   include/  llama.h and llama-cpp.h (the source's include/)
#   ggml-include/  ggml's headers of the same source (ggml/include: llama.h includes ggml.h,
#             ggml-cpu.h, ggml-backend.h, ggml-opt.h), a folder of their own so that a program
#             that also has scripts/ggml.sh's copy of them on its include path (the CLI with both
#             bridges) finds one copy of each, not two
#   lib/      links to the prebuilt libraries of npm @node-llama-cpp/linux-x64@3.21.1
#             (scripts/peer.sh): libllama.so -> libllama.v0.4.0.so, libggml-base.so,
#             libggml.so -> libggml.v0.4.0.so, and the libggml-cpu-*.so variants
#   SOURCE    which commit of the source the headers came from
# The headers are those of the release the libraries were built from: npm node-llama-cpp@3.21.1
# ships that llama.cpp source as llama/gitRelease.bundle (a git bundle of one squashed commit);
# the script checks that its ggml/CMakeLists.txt says 0.23.0 and that llama.h declares
# llama_model_init_from_user. Idempotent: a second run finds the stamp and does nothing.
# Usage: L=$(scripts/llama.sh)   (messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
link="$here/bench/peers/llama"
lib=$("$here/scripts/peer.sh")
dir="$("$here/scripts/npm-cache.sh" --root)/llama@0.4.0"
want="node-llama-cpp@3.21.1 llama.cpp v0.4.0 ggml 0.23.0 (include, ggml-include) lib $lib"
link_it() {
  [ -L "$link" ] && [ "$(readlink "$link")" = "$dir" ] && return 0
  mkdir -p "$(dirname "$link")"
  rm -rf "$link"
  ln -s "$dir" "$link"
}
ready() {
  [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$want" ] && [ -f "$dir/include/llama.h" ] \
    && [ -f "$dir/ggml-include/ggml.h" ] \
    && [ -f "$dir/lib/libllama.so" ]
}
if ready; then
  link_it
  echo "$link"
  exit 0
fi
command -v git >/dev/null 2>&1 || { echo "llama.sh: git is not installed" >&2; exit 1; }
tgz=$("$here/scripts/npm-cache.sh" --pack node-llama-cpp@3.21.1)
# one builder at a time (other clones share the cache); the winner's folder serves the rest
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir.lock"
  flock 9
  if ready; then
    link_it
    echo "$link"
    exit 0
  fi
fi
echo "llama.sh: the headers of llama.cpp v0.4.0 (node-llama-cpp@3.21.1) into $dir" >&2
tmp=$(mktemp -d "$dir.tmp.XXXXXX")
cd "$tmp"
tar -xzf "$tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
git clone -q --bare package/llama/gitRelease.bundle src.git
mkdir tree
git -C src.git archive HEAD include ggml/include ggml/CMakeLists.txt | tar -x -C tree
ver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' tree/ggml/CMakeLists.txt | paste -sd.)
if [ "$ver" != "0.23.0" ]; then
  echo "llama.sh: the bundle's ggml is $ver, not 0.23.0 (the peer's libraries)" >&2
  exit 1
fi
if ! grep -q 'llama_model_init_from_user' tree/include/llama.h; then
  echo "llama.sh: the bundle's llama.h has no llama_model_init_from_user" >&2
  exit 1
fi
commit=$(git -C src.git rev-parse HEAD)
out="$tmp/out"
mkdir -p "$out/lib"
mv tree/include "$out/include"
mv tree/ggml/include "$out/ggml-include"
for f in "$lib"/libggml-base.so "$lib"/libggml.v0.4.0.so "$lib"/libllama.v0.4.0.so "$lib"/libggml-cpu-*.so; do
  ln -s "$f" "$out/lib/$(basename "$f")"
done
ln -s libggml.v0.4.0.so "$out/lib/libggml.so"
ln -s libllama.v0.4.0.so "$out/lib/libllama.so"
printf 'llama.cpp source: node-llama-cpp@3.21.1 llama/gitRelease.bundle, commit %s (%s)\n' \
  "$commit" "$(tr -d ' \n' < package/llama/llama.cpp.info.json)" > "$out/SOURCE"
echo "$want" > "$out/stamp"
cd "$here"
rm -rf "$dir"
mv "$out" "$dir"
rm -rf "$tmp"
link_it
echo "$link"
