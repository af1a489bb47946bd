#!/usr/bin/env bash
# coverage.sh: line coverage of src/format/ (and the rest of src/) reached by the fuzz corpora.
#
#   tests/fuzz/coverage.sh COV_BUILD_DIR [CORPUS_ROOT]
#
# COV_BUILD_DIR is a build configured with -DWM_FUZZ=ON -DWM_FUZZ_COVERAGE=ON (clang source-based
# coverage); CORPUS_ROOT holds one folder per harness, e.g. a campaign's BUILD/fuzz-corpus (the
# committed seeds in tests/corpus/NAME are always added). Each harness runs every input once
# (-runs=0), the raw profiles are merged, and llvm-cov prints the report by file for src/format/
# and a summary line for all of src/. Profiles and reports go to COV_BUILD_DIR/coverage/.
set -eu
build=$(cd "$1" && pwd)
corpus=${2:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$build/coverage
rm -rf "$out"
mkdir -p "$out"
objs=()
for h in gguf safetensors index load; do
    exe=$build/tests/fuzz/wm_fuzz_$h
    dirs="$src/tests/corpus/$h"
    [ -n "$corpus" ] && [ -d "$corpus/$h" ] && dirs="$corpus/$h $dirs"
    # shellcheck disable=SC2086
    LLVM_PROFILE_FILE="$out/$h-%p.profraw" ASAN_OPTIONS=detect_leaks=0 "$exe" -runs=0 \
        -max_len="${FUZZ_MAX_LEN:-65536}" $dirs >"$out/$h.log" 2>&1
    objs+=("-object=$exe")
done
llvm-profdata merge -sparse "$out"/*.profraw -o "$out/all.profdata"
first=${objs[0]#-object=}
llvm-cov report "$first" "${objs[@]:1}" -instr-profile="$out/all.profdata" \
    "$src"/src/format/*.c | tee "$out/format.txt"
llvm-cov report "$first" "${objs[@]:1}" -instr-profile="$out/all.profdata" "$src"/src \
    | tail -1 | sed 's/^TOTAL/all of src\//' | tee "$out/src.txt"
llvm-cov show "$first" "${objs[@]:1}" -instr-profile="$out/all.profdata" -show-line-counts-or-regions \
    "$src"/src/format/*.c >"$out/format-lines.txt"
echo "line by line: $out/format-lines.txt"
