#!/bin/bash
# bench/gpu_round.sh: one call of the `device` tool for issues 42 and 45 (a GPU machine starts in
# minutes and goes back 30 s after a call, so the two benches share one call's 600 s):
#   1. the sleep and wake of an 8 GiB model, part by part (`bench/gpu sleep`: the bounce ring,
#      then --pinned-whole, then the ring again, REPEAT each, bytes verified), and the bus
#      (`bench/gpu h2d`): first, as the shorter (a call cut short by the device time left still
#      brings back what $OUT holds), and before the CUDA build, so that no compile shares the
#      CPUs with them;
#   2. bench/llama_cuda.sh (its ggml-cuda build, the GPU tests, `bench/llama --gpu` on a SIZE
#      model with WM_BENCH_TIMELINE=1, the staged ceiling), LIMIT_S (default 400).
# Only a few files come back from the device tool: $OUT gets llama_cuda.sh's bench.txt,
# bench.err, ceiling.json and the test summaries, and parts.jsonl and h2d.txt; the rest stays in
# /tmp/wm-round. Run there with the checkout, .llama, .cudasrc and .fixtures carried:
#   OUT=$OUT SIZE=4500M ROUNDS=3 bash bench/gpu_round.sh
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/wm-round-out}
W=/tmp/wm-round
mkdir -p "$O" "$W"
# the build bench/llama_cuda.sh makes (the same folder and configuration), its first targets now
export PATH=/usr/local/cuda/bin:$PATH
GEN=Ninja; command -v ninja > /dev/null || GEN="Unix Makefiles"
{ cmake -S . -B build -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FIXTURES="$PWD/.fixtures" &&
    cmake --build build --target weightmap_cli bench_gpu -j"$(nproc)"; } > "$W/gpu-build.log" 2>&1 || {
    tail -20 "$W/gpu-build.log"
    exit 1
}
M=/tmp/wm-sleep-8G.gguf
[ -f $M ] || build/weightmap make-model $M --size 8G --seed 1 > /dev/null || exit 1
cat $M > /dev/null
: > "$O/parts.jsonl"
for v in "--verify" "--pinned-whole --verify" "--verify"; do
    # shellcheck disable=SC2086 # $v is one or two words on purpose
    timeout 90 build/bench/gpu sleep $M --repeat "${REPEAT:-3}" $v >> "$O/parts.jsonl" 2>> "$O/parts.err"
    echo "gpu sleep $v: exit $?"
done
cat "$O/parts.err"
timeout 60 build/bench/gpu h2d --bytes 8G --repeat 3 > "$O/h2d.txt" 2>&1
cat "$O/h2d.txt"
rm -f $M
OUT=$W SIZE=${SIZE:-4500M} ROUNDS=${ROUNDS:-3} LIMIT_S=${LIMIT_S:-400} \
    ONLY=${ONLY:-wm,wm-auto,wm-noprefetch,read,mmap,disk} WM_BENCH_TIMELINE=1 \
    bash bench/llama_cuda.sh > "$W/llama_cuda.txt" 2>&1
echo "llama_cuda.sh: exit $?"
cp "$W/llama_cuda.txt" "$W/bench.err" "$W/ceiling.json" "$O/" 2>/dev/null
grep -hE "FAIL|PASS|SKIP|passed|failed" "$W"/test-*.txt > "$O/tests.txt" 2>/dev/null
tail -30 "$W/llama_cuda.txt"
