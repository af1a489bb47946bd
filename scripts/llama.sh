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
#   internal/ ggml's backend interface of the same source (ggml/src/ggml-backend-impl.h: the
#             layout of a buffer and a buffer type, which the bridge's own weight buffers need:
#             bridge/llama_own.c alone is given this folder)
#             and ggml-version.h (WM_GGML_HEADER_VERSION, the version that source says, written
#             here: the bridge checks it against ggml_version() before it relies on that layout)
#   SOURCE    which commit of the source the headers came from
# The headers are those of the release the libraries were built from: npm node-llama-cpp@3.21.1
# ships that llama.cpp source as llama/gitRelease.bundle (a git bundle of one squashed commit);
# the script checks that its ggml/CMakeLists.txt says 0.23.0 and that llama.h declares
# llama_model_init_from_user. Idempotent: a second run finds the stamp and does nothing (the
# stamp names the release; a folder an older llama.sh made, without internal/, is made again).
# Usage: L=$(scripts/llama.sh)   (messages go to stderr; only the folder to stdout)
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
who=llama.sh
. "$here/scripts/bundle.sh"
lib=$("$here/scripts/peer.sh")
bundle_setup llama llama@0.4.0 \
  "node-llama-cpp@3.21.1 llama.cpp v0.4.0 ggml 0.23.0 (include, ggml-include) lib $lib"
bundle_ready include/llama.h ggml-include/ggml.h internal/ggml-backend-impl.h internal/ggml-version.h lib/libllama.so
bundle_lock
bundle_ready include/llama.h ggml-include/ggml.h internal/ggml-backend-impl.h internal/ggml-version.h lib/libllama.so
echo "llama.sh: the headers of llama.cpp v0.4.0 (node-llama-cpp@3.21.1) into $dir" >&2
bundle_extract include ggml/include ggml/src/ggml-backend-impl.h
if ! grep -q 'llama_model_init_from_user' tree/include/llama.h; then
  echo "llama.sh: the bundle's llama.h has no llama_model_init_from_user" >&2
  exit 1
fi
mv tree/include "$out/include"
mv tree/ggml/include "$out/ggml-include"
mkdir "$out/internal"
mv tree/ggml/src/ggml-backend-impl.h "$out/internal/"
printf '/* written by scripts/llama.sh from the source bundle'"'"'s ggml/CMakeLists.txt */\n#define WM_GGML_HEADER_VERSION "%s"\n' \
  "$ver" > "$out/internal/ggml-version.h"
bundle_link_libs "$lib"/libggml-base.so "$lib"/libggml.v0.4.0.so "$lib"/libllama.v0.4.0.so \
  "$lib"/libggml-cpu-*.so
ln -s libggml.v0.4.0.so "$out/lib/libggml.so"
ln -s libllama.v0.4.0.so "$out/lib/libllama.so"
bundle_finish
