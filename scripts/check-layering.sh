#!/bin/sh
# check-layering.sh: the directions docs/ARCHITECTURE.md states, checked on the sources (a step
# of `make test`, docs/TESTING.md; it reads the files only, in well under a second):
#   1. src/format/ never calls up into src/file.c (the public getters): no function file.c
#      defines is named in src/format/; and src/format/ parses bytes, it does no I/O: no call of
#      src/os/ but wm__os_page_size (opening and reading files is src/open/'s);
#   1b. the reading engine (src/read/) calls nothing above it: none of src/backend/'s headers,
#      no wm_model, no function of src/read.c, src/file.c or src/model.c;
#   2. only src/os/ includes operating-system headers: elsewhere in src/ an #include <...> names
#      a C11 standard header, or a toolkit's (CUDA, NCCL) or the compiler's (cpuid.h,
#      immintrin.h, arm_neon.h);
#   3. the CLI (cli/ and the tracer's command) and the Python extension use only the public
#      header: no quoted include but their own headers and weightmap.h, nothing from src/;
#   4. the tracer's interposer (tools/trace/, the files that are not the command) does not use
#      the library at all;
#   5. the bridges (bridge/: ggml, llama.cpp) use only the public headers (and bridge/'s own
#      ggml_check.h and llama_bridge.h, which use only public headers themselves), quoted or in
#      angle brackets: a ggml, gguf or llama.cpp header named in bridge/ is one of their public
#      include/ folders' (an internal one, such as ggml-backend-impl.h, ggml-version.h or
#      llama.cpp's src/ headers, is a breach), except in bridge/llama_own.c, the one file that
#      may include ggml-backend-impl.h and ggml-version.h, and only inside its
#      #ifdef WM_LLAMA_OWN_BUFFERS (the version-checked own buffers); and src/ includes no ggml or
#      llama.cpp header;
#   6. the library, the CLI and the Python extension parse JSON with src/format/json.c only: none
#      of them names cJSON (whose allocation hooks and error position are process-wide; the
#      built libraries are checked too, by the ctest entry safetensors.no_cjson_symbols).
# Usage: scripts/check-layering.sh   (exit 1 naming each breach)
set -eu
cd "$(dirname "$0")/.."
rc=0
breach() {
  echo "check-layering: $*" >&2
  rc=1
}
files() { git ls-files -co --exclude-standard -- "$@"; }

# 1. format/ -> file.c
for fn in $(grep -oE '^[a-z_][a-z0-9_ *]* \**(wm_[a-z0-9_]+)\(' src/file.c | sed -E 's/.*[ *](wm_[a-z0-9_]+)\($/\1/' | sort -u); do
  hits=$(grep -nE "(^|[^A-Za-z0-9_])$fn[[:space:]]*\(" $(files 'src/format/*.c' 'src/format/*.h') || true)
  [ -z "$hits" ] || breach "src/format/ calls $fn, which src/file.c defines: $hits"
done

bad=$(grep -nE 'wm__os_[a-z_]+[[:space:]]*\(' $(files 'src/format/*.c' 'src/format/*.h') |
  grep -vE 'wm__os_page_size[[:space:]]*\(' || true)
[ -z "$bad" ] || breach "src/format/ does I/O (src/open/ opens and reads files): $bad"

# 1b. the reading engine: nothing above it
bad=$(grep -nE '#[[:space:]]*include[[:space:]]*"(\.\./)*backend/|wm_model\b' $(files 'src/read/*.c' 'src/read/*.h') || true)
[ -z "$bad" ] || breach "the reading engine (src/read/) names a model or a backend: $bad"
for fn in $(grep -ohE '^[a-z_][a-z0-9_ *]* \**(wm_[a-z0-9_]+)\(' src/read.c src/file.c src/model.c | sed -E 's/.*[ *](wm_[a-z0-9_]+)\($/\1/' | sort -u); do
  hits=$(grep -nE "(^|[^A-Za-z0-9_])$fn[[:space:]]*\(" $(files 'src/read/*.c' 'src/read/*.h') || true)
  [ -z "$hits" ] || breach "the reading engine (src/read/) calls up into $fn: $hits"
done

# 2. OS headers outside src/os/
std='assert|complex|ctype|errno|fenv|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype'
toolkit='cuda_runtime_api|cuda_runtime|nccl|cpuid|immintrin|arm_neon'
for f in $(files 'src/*.c' 'src/*.h' | grep -v '^src/os/'); do
  grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<' "$f" |
    grep -vE "<($std|$toolkit)\.h>" | while IFS= read -r line; do
      echo "check-layering: $f:$line: an operating-system header outside src/os/" >&2
      echo x
    done | grep -q x && rc=1
done

# 3. the CLI and the Python extension: the public header only
# (the tracer's command: its files that include cli.h, or tracer.h, its header that does)
cmd_files=$(grep -lE '^#include "(cli|tracer)\.h"' $(files 'cli/*.c' 'tools/*.c' 'tools/trace/*.c' \
  'tools/trace/*.h') || true)
for f in $( (files 'cli/*.c' 'cli/*.h' 'python/*.c'; echo "$cmd_files") | sort -u); do
  bad=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    grep -vE '"(cli\.h|weightmap\.h|trace/wmtrace\.h|wmtrace\.h|tracer\.h|weightmap_ggml\.h|weightmap_llama\.h)"' || true)
  [ -z "$bad" ] || breach "$f includes what is not the public header: $bad"
  bad=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"](\.\./)*(src/|internal\.h|backend/|format/|os/)' "$f" || true)
  [ -z "$bad" ] || breach "$f includes the library's insides: $bad"
done

# 4. the interposer: no library
for f in $(files 'tools/trace/*.c' 'tools/trace/*.h'); do
  case " $(echo $cmd_files) " in *" $f "*) continue ;; esac
  bad=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"](weightmap\.h|cli\.h)' "$f" || true)
  [ -z "$bad" ] || breach "$f (the interposer) uses the library: $bad"
done
# 5. the bridges: the public headers of weightmap, ggml and llama.cpp only (their fault-injection
#    test builds, under #ifdef WM_GGML_FAULTS or WM_LLAMA_FAULTS, also the library's fault table,
#    os/os.h); and the core library never includes a ggml or llama.cpp header
internal_file=bridge/llama_own.c
public_ggml='(ggml|ggml-(alloc|backend|cpu|opt|cpp|blas|cann|cuda|metal|opencl|rpc|sycl|vulkan|webgpu|zdnn|zendnn|hexagon|et|openvino|virtgpu)|gguf|llama|llama-cpp)\.h'
[ -f "$internal_file" ] || breach "$internal_file, the one bridge file allowed ggml's internal headers, is missing (update this check)"
for f in $(files 'bridge/*.c' 'bridge/*.h'); do
  bad=$(awk -v own="$([ "$f" = "$internal_file" ] && echo 1 || echo 0)" -v pub="^$public_ggml\$" '
    /^#[[:space:]]*ifdef[[:space:]]+WM_(GGML|LLAMA)_FAULTS/ { faults = 1 }
    /^#[[:space:]]*ifdef[[:space:]]+WM_LLAMA_OWN_BUFFERS/ { inner = 1 }
    /^#[[:space:]]*(else|endif)/ { faults = 0; inner = 0 }
    /^[[:space:]]*#[[:space:]]*include[[:space:]]*"/ {
      if ($0 ~ /"(weightmap|weightmap_ggml|weightmap_llama|ggml_check|llama_bridge)\.h"/) next
      if (faults && $0 ~ /"os\/os\.h"/) next
      print FILENAME ":" FNR ": " $0; next }
    /^[[:space:]]*#[[:space:]]*include[[:space:]]*</ {
      h = $0; sub(/^[^<]*</, "", h); sub(/>.*$/, "", h)
      if (h !~ /^(ggml|gguf|llama)/ && h !~ /(^|\/)(src|ggml)\// && h !~ /-impl\.h$/) next
      if (h ~ pub) next
      if (own && inner && (h == "ggml-backend-impl.h" || h == "ggml-version.h")) next
      print FILENAME ":" FNR ": " $0 " (an internal header of ggml or llama.cpp)" }' "$f")
  [ -z "$bad" ] || breach "a bridge includes what is not a public header: $bad"
done
bad=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"](ggml|gguf|llama)' $(files 'src/*.c' 'src/*.h') || true)
[ -z "$bad" ] || breach "the library includes a ggml or llama.cpp header: $bad"

# 6. no cJSON in the library, the CLI or the Python extension
bad=$(grep -niE 'cjson' $(files 'src/*.c' 'src/*.h' 'cli/*.c' 'cli/*.h' 'python/*.c') || true)
[ -z "$bad" ] || breach "cJSON named where json.c is the parser: $bad"
exit $rc
