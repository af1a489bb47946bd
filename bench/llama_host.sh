#!/bin/bash
# bench/llama_host.sh: bench/llama's load rows on a bare machine with no registry (the GPU host
# that `device` lends), from a checkout that carries a dereferenced copy of the llama.cpp peer:
#
#   here:   cp -rL bench/peers/llama .llama        (git-ignored: list it in .git/info/exclude)
#   there:  ROUNDS=5 bash bench/llama_host.sh      (the checkout and .llama carried)
#           ONLY=wm,wm-whole,disk ROUNDS=10 ...   (bench/llama --only: those rows alone)
#           ARGS="--disk --curve" ...             (more of bench/llama's options)
#
# Builds bench_llama and the CLI (RelWithDebInfo, no CUDA), makes the 1.2 GB model and runs
# `bench/llama -r ROUNDS --load-only --warm-memory 3`; the report and the bridge's own figures go
# to $OUT (or ./llama-host.out). bench/RESULTS.md, "llama", says what it measured.
set -u
cd "$(dirname "$0")/.."
R=$PWD
O=${OUT:-$R/llama-host.out}
mkdir -p "$O"
{ date -u; nproc; lscpu | grep -E "Model name"; uname -r; df -h "$R" | tail -1
  cat /sys/kernel/mm/transparent_hugepage/enabled
  for q in /sys/block/*/queue; do
    case $q in */loop*|*/ram*) continue;; esac
    echo "$q: max_sectors_kb $(cat $q/max_sectors_kb) max_segments $(cat $q/max_segments) nr_requests $(cat $q/nr_requests) read_ahead_kb $(cat $q/read_ahead_kb)"
  done; } > "$O/host.txt" 2>&1
cat "$O/host.txt"
[ -d .llama/lib ] || { echo "no .llama/lib: copy the peer first (cp -rL bench/peers/llama .llama)"; exit 2; }
mkdir -p bench/peers && ln -sfn "$R/.llama" bench/peers/llama
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
cmake -S . -B build -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_CUDA=OFF > "$O/cmake.log" 2>&1 || { tail -30 "$O/cmake.log"; exit 3; }
cmake --build build --target bench_llama weightmap_cli -j"$(nproc)" > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 4; }
mkdir -p bl && cd bl
[ -f bench-llama-1200M.gguf ] || ../build/weightmap make-model bench-llama-1200M.gguf --size 1200M > /dev/null || exit 5
timeout "${BENCH_S:-330}" ../build/bench/llama -r "${ROUNDS:-3}" --load-only --warm-memory 3 ${ONLY:+--only "$ONLY"} ${ARGS:-} > "$O/bench.txt" 2> "$O/bench.err"
echo "bench exit $?"
tail -22 "$O/bench.txt"
grep "wm_llama_load" "$O/bench.err" | head -12
grep -A2 "    disk (" "$O/bench.err" | head -60
