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
who=ggml.sh
. "$here/scripts/bundle.sh"
lib=$("$here/scripts/peer.sh")
# bench/peers/ggml -> the cache (a folder an older ggml.sh made in the clone is replaced)
bundle_setup ggml ggml@0.23.0 "node-llama-cpp@3.21.1 ggml 0.23.0 (include, internal) lib $lib"
bundle_ready include/ggml-backend.h lib/libggml-base.so
bundle_lock
bundle_ready include/ggml-backend.h lib/libggml-base.so
echo "ggml.sh: the headers of ggml 0.23.0 (node-llama-cpp@3.21.1) into $dir" >&2
bundle_extract ggml/include ggml/src/ggml-backend-impl.h
mv tree/ggml/include "$out/include"
mkdir "$out/internal"
mv tree/ggml/src/ggml-backend-impl.h "$out/internal/"
bundle_link_libs "$lib"/libggml-base.so "$lib"/libggml.v0.4.0.so "$lib"/libggml-cpu-*.so
ln -s libggml.v0.4.0.so "$out/lib/libggml.so"
bundle_finish
