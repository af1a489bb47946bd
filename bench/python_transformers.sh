#!/usr/bin/env bash
# bench/python_transformers.sh: transformers' from_pretrained through weightmap on a GPU machine,
# in one call: correctness for small llama, qwen2, gpt2, bert and t5 models (single and sharded,
# cpu and cuda:0, every mode), the package's tests with WM_TEST_DEVICE=cuda:0 (the 32 threads x
# 200 rounds stress among them), then the benchmark: from_pretrained of a >= GIB GiB bf16
# llama-shaped checkpoint to cuda:0, plain against inside weightmap.loading(), median of REPEAT
# alternating rounds, host footprint during each load, every tensor verified.
#
# Usage: bench/python_transformers.sh [GIB]             (default 8)
# Environment: OUT (results, default /tmp/wm-tf-out), BUILD (default build-gpu-py), MODELS
# (default /tmp/wm-tf-models), REPEAT (default 5), DEPS (a folder of .deb files unpacked when the
# machine lacks them: libdlpack-dev;
# default .debs-py, git-ignored; fill it with `apt-get download` of those names).
# SKIP_BENCH=1 stops after the checks and tests. Each stage has its own time limit and writes
# its log to $OUT; the summary is $OUT/summary.txt.
set -u
GIB=${1:-8}
OUT=${OUT:-/tmp/wm-tf-out}
BUILD=${BUILD:-build-gpu-py}
MODELS=${MODELS:-/tmp/wm-tf-models}
DEPS=${DEPS:-.debs-py}
REPEAT=${REPEAT:-5}
PY=$(command -v python3)
mkdir -p "$OUT" "$MODELS"
SUM=$OUT/summary.txt
say() { echo "== $(date +%T) $*" | tee -a "$SUM"; }

say "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; free -g | head -2
  "$PY" -m pip show transformers safetensors torch accelerate 2>/dev/null | grep -E "^(Name|Version):"
} 2>&1 | tee -a "$SUM"

say "build ($BUILD)"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS"
cm+=(-DWM_DLPACK_DIR=/tmp/wm-deps/usr/include)
if ! { timeout 240 cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_PYTHON=ON \
        -DWM_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$PY" "${cm[@]}" &&
       timeout 240 cmake --build "$BUILD" -j"$(nproc)" --target wm_python weightmap_cli; } >"$OUT/build.txt" 2>&1; then
    tail -30 "$OUT/build.txt" | tee -a "$SUM"
    exit 1
fi
grep -E "CUDA backend|Python extension" "$OUT/build.txt" | tee -a "$SUM"
export PYTHONPATH=$PWD/$BUILD/python WM_CLI=$PWD/$BUILD/weightmap PYTHONDONTWRITEBYTECODE=1
TF="$PY bench/python_transformers.py"

say "small models (transformers save_pretrained)"
timeout 120 $TF models "$MODELS/small" >"$OUT/models.txt" 2>&1
echo "exit $?" | tee -a "$SUM"
tail -3 "$OUT/models.txt" | tee -a "$SUM"

say "in parallel: from_pretrained checks (2 devices x 3 modes), package tests on cuda:0, the ${GIB} GiB checkpoint"
pids=()
for dev in cpu cuda:0; do
    for mode in mmap-private mmap heap; do
        log=$OUT/check-${dev%%:*}-$mode.txt
        (timeout 240 $TF check "$MODELS/small" "$dev" "$mode" >"$log" 2>&1; echo "exit $?" >>"$log") &
        pids+=($!)
    done
done
# each test file alone, so that one failure does not hold tensors into the next file's cases
for t in test_threads test_safetensors_api test_weightmap; do
    (cd python/tests && WM_TEST_DEVICE=cuda:0 timeout 400 "$PY" -m pytest -q -p no:cacheprovider \
        -rs --tb=short $t.py >"$OUT/tests-cuda-$t.txt" 2>&1; echo "exit $?" >>"$OUT/tests-cuda-$t.txt") &
    pids+=($!)
done
LLAMA=$MODELS/llama-${GIB}g
[ "${SKIP_BENCH:-0}" = 1 ] || [ -f "$LLAMA/model.safetensors.index.json" ] ||
    (timeout 240 $TF write-llama "$LLAMA" "$GIB" >"$OUT/write-llama.txt" 2>&1; echo "exit $?" >>"$OUT/write-llama.txt") &
pids+=($!)
wait "${pids[@]}"
for f in "$OUT"/check-*.txt; do
    echo "$(basename "$f"): $(grep -c '"ok": true' "$f") ok, $(grep -c '"ok": false' "$f") not ok, $(tail -1 "$f")" | tee -a "$SUM"
    grep '"ok": false' "$f" | head -3 | tee -a "$SUM"
    grep -E "Error|Traceback|Segmentation" "$f" | head -3 | tee -a "$SUM"
done
for f in "$OUT"/tests-cuda-*.txt; do
    echo "$(basename "$f"):" | tee -a "$SUM"
    grep -E "^(FAILED|ERROR)|passed|failed" "$f" | head -8 | tee -a "$SUM"
done
tail -2 "$OUT/write-llama.txt" 2>/dev/null | tee -a "$SUM"
# at most 8 files come back from the GPU machine: the logs of a kind go into one
for kind in check tests-cuda; do
    for f in "$OUT/$kind"-*.txt; do echo "#### $(basename "$f")"; cat "$f"; done >"$OUT/$kind.log"
    rm -f "$OUT/$kind"-*.txt
done
if [ "${SKIP_BENCH:-0}" = 1 ]; then say "benchmark skipped (SKIP_BENCH=1)"; exit 0; fi

say "benchmark: from_pretrained of $LLAMA to cuda:0"
du -sh "$LLAMA" | tee -a "$SUM"
cat "$LLAMA"/*.safetensors >/dev/null
cat "$LLAMA"/*.safetensors >/dev/null
PYTHONUNBUFFERED=1 timeout 300 $TF bench "$LLAMA" --repeat "$REPEAT" >"$OUT/bench.txt" 2>&1
echo "exit $?" | tee -a "$SUM"
grep -v '^{"stage": "bench", ' "$OUT/bench.txt" | tail -12 | tee -a "$SUM"
say "done"
