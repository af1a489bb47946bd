#!/usr/bin/env bash
# bench/gpu_ab.sh: one GPU, two trees, one run: the staged load of a base tree against this
# working tree on the same model, alternating, the ceilings and tensor-parallel ranks, old against
# new as well (bench/RESULTS.md, multigpu), then this tree's CUDA and multi tests.
#
# Usage (on this machine, then in one device call):
#   mkdir .ab-base && git archive BASE CMakeLists.txt cmake include src tools bench THIRD_PARTY.md \
#       | tar -x -C .ab-base
#   bash bench/gpu_ab.sh .ab-base [SIZE]          (device call: carry .ab-base and .debs-py)
# RANKS=0 leaves the tensor-parallel ranks out (the whole load's A/B, the tests and the ceilings
# only: a shorter call).
set -u
RANKS=${RANKS:-1}
BASE=${1:?base tree}
SIZE=${2:-16G}
. scripts/gpu_env.sh
wm_gpu_env .debs-py >/dev/null
build() { # SRC DIR TARGETS... (the base without its tests: only its bench is used)
    local src=$1 dir=$2
    shift 2
    cmake -S "$src" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cm[@]}" \
        $([ "$src" = . ] && echo -DWM_FAULT_INJECTION=ON || echo -DWM_BUILD_TESTS=OFF) \
        >"$dir.txt" 2>&1 && cmake --build "$dir" -j"$(nproc)" --target "$@" >>"$dir.txt" 2>&1 ||
        { tail -20 "$dir.txt"; exit 1; }
}
build "$BASE" /tmp/ab-old bench_gpu
build . build-multigpu bench_gpu weightmap_cli test_cuda test_multi
mkdir -p /tmp/wm-gpu-models
M=/tmp/wm-gpu-models/ab-$SIZE.gguf
[ -f "$M" ] || build-multigpu/weightmap make-model "$M" --size "$SIZE" >/dev/null
cat "$M" >/dev/null
cat "$M" >/dev/null
# Alternating, three rounds, old first in odd rounds and new first in even ones (so neither is
# always second): the whole load, and two TP-2 ranks at once (each its slices, wm_split_llama).
ab() { # ROUND ARGS...: old and new, in this round's order, each line marked
    local r=$1 t
    shift
    for t in $([ $((r % 2)) = 1 ] && echo old new || echo new old); do
        timeout 120 "$([ $t = old ] && echo /tmp/ab-old || echo build-multigpu)/bench/gpu" "$@" |
            sed "s/^/$t /; s/\"file\": \"[^\"]*\", //"
    done
}
for r in 1 2 3; do ab $r load "$M" --repeat 5; done |
    grep -o '^[a-z]* {"bench": "load".*"median_gbps": [0-9.]*' | sed 's/"path.*"best_s"/best_s/'
[ "$RANKS" = 0 ] || for r in 1 2 3 4; do ab $r ranks "$M" --ranks 2 --tp --repeat 5; done
timeout 120 build-multigpu/bench/gpu h2d --bytes 1G --repeat 5
timeout 120 build-multigpu/bench/gpu pread "$M" --threads "$(nproc)" --repeat 3
if [ "$RANKS" != 0 ]; then
    timeout 200 build-multigpu/bench/gpu ranks "$M" --ranks 2 --tp --repeat 5
    timeout 200 build-multigpu/bench/gpu ranks "$M" --ranks 2 --repeat 5
fi
timeout 100 build-multigpu/weightmap load "$M" --mode heap --backend cuda --cycles 3 | tail -2
# The tests last, so that the measurements above run on a quiet machine.
(cd build-multigpu && timeout 200 ctest -L '^(cuda|multi)$' -j4 --timeout 150 --output-on-failure 2>&1 |
    grep -E "tests passed|Failed|FAIL" | head -20)
