#!/bin/bash
# bench/llama_ab.sh: two builds of weightmap against each other on the same machine, in
# alternating passes of bench/llama's cold and warm loads (the GPU host that `device` lends,
# whose disk's pace moves by several percent from one read of a file to the next: one pass
# alone cannot tell two builds apart, alternating passes can). From a checkout that carries a
# dereferenced copy of the llama.cpp peer and the other tree (both git-ignored):
#
#   here:   cp -rL bench/peers/llama .llama
#           mkdir -p .ab/old && git archive REV | tar -x -C .ab/old && rm -rf .ab/old/tests/corpus
#   there:  OLD=.ab/old PASSES=3 ROUNDS=3 bash bench/llama_ab.sh   (.llama and .ab carried)
#           ONLY=wm,wm-norepack,disk ...                           (bench/llama --only)
#
# Builds bench_llama in both trees, makes the 1.2 GB model once, then PASSES times: the old
# build's `bench/llama -r ROUNDS --load-only --warm-memory 3 --only ONLY --disk`, then this
# tree's. Prints a line per pass: warm and cold medians, the paired ratio (the median of the
# rounds' own ratios, the disk's time over the load's) and each cold load's ms|requests; the
# reports go to $OUT (or ./llama-ab.out). bench/RESULTS.md, llama "1.6.1", is such a run.
set -u
cd "$(dirname "$0")/.."
R=$PWD
O=${OUT:-$R/llama-ab.out}
OLD=${OLD:-.ab/old}
mkdir -p "$O"
[ -d .llama/lib ] || { echo "no .llama/lib: copy the peer first (cp -rL bench/peers/llama .llama)"; exit 2; }
[ -f "$OLD/CMakeLists.txt" ] || { echo "no tree in $OLD: see the header"; exit 2; }
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
for d in "$R" "$R/$OLD"; do
  mkdir -p "$d/bench/peers" && ln -sfn "$R/.llama" "$d/bench/peers/llama"
  n=$(basename "$d")
  ( cd "$d" && cmake -S . -B build -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_CUDA=OFF > "$O/cmake-$n.log" 2>&1 &&
    cmake --build build --target bench_llama weightmap_cli -j"$(( $(nproc) / 2 ))" > "$O/build-$n.log" 2>&1 ) &
done
wait
[ -x build/bench/llama ] && [ -x "$OLD/build/bench/llama" ] || { tail -20 "$O"/build-*.log; exit 4; }
mkdir -p bl && cd bl
[ -f bench-llama-1200M.gguf ] || ../build/weightmap make-model bench-llama-1200M.gguf --size 1200M > /dev/null || exit 5
for pass in $(seq 1 "${PASSES:-3}"); do
  for v in old new; do
    B=../build/bench/llama
    [ $v = old ] && B=$R/$OLD/build/bench/llama
    timeout 150 "$B" -r "${ROUNDS:-3}" --load-only --warm-memory 3 --only "${ONLY:-wm,disk}" --disk \
      > "$O/$v-$pass.txt" 2> "$O/$v-$pass.err"
    printf "%-4s pass %s: " $v "$pass"
    grep -E '^\| wm_llama_load \|' "$O/$v-$pass.txt" |
      awk -F'|' '{printf "warm %s| cold %s| paired %s| ", $3, $5, $7}'
    grep -E 'disk-summary\|wm_llama_load\|' "$O/$v-$pass.err" | cut -d'|' -f3,7 | tr '\n' ' '
    echo
  done
done
