#!/usr/bin/env bash
# bench/python_gpu.sh: the Python package on a machine with a GPU, in one call.
#
# Builds the extension (and the CLI) with the CUDA backend for that machine's python3, runs the
# package's tests on the CPU and then with WM_TEST_DEVICE=cuda:0 (fixtures from ../shared are
# skipped where they are not beside the checkout; the tests that make their own models run),
# makes a SIZE safetensors model with `weightmap make-model`, warms the page cache and runs
# bench/python_gpu.py (weightmap.load_file vs safetensors.torch.load_file vs the C CLI's staged
# path, alternating, REPEAT rounds).
#
# Usage: bench/python_gpu.sh [SIZE]          (default 8G)
# Environment: OUT (logs, default /tmp/wm-pygpu-out), BUILD (default build-gpu-py), MODELS
# (default /tmp/wm-gpu-models), REPEAT (default 5), DEPS (a folder of .deb files unpacked when
# the machine lacks them: libdlpack-dev;
# default .debs-py, git-ignored; fill it with `apt-get download` of those names).
set -u
SIZE=${1:-8G}
OUT=${OUT:-/tmp/wm-pygpu-out}
BUILD=${BUILD:-build-gpu-py}
MODELS=${MODELS:-/tmp/wm-gpu-models}
DEPS=${DEPS:-.debs-py}
REPEAT=${REPEAT:-5}
PY=$(command -v python3)
mkdir -p "$OUT" "$MODELS"
say() { echo "== $(date +%T) $*"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$PY" -c 'import sys, torch, numpy, safetensors; print(sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__, "safetensors", safetensors.__version__)'

say "build ($BUILD)"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS"
cm+=(-DWM_DLPACK_DIR=/tmp/wm-deps/usr/include)
if ! { cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_PYTHON=ON \
        -DWM_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$PY" "${cm[@]}" &&
       cmake --build "$BUILD" -j"$(nproc)" --target wm_python weightmap_cli; } >"$OUT/build.txt" 2>&1; then
    tail -30 "$OUT/build.txt"
    exit 1
fi
grep -E "CUDA backend|Python extension" "$OUT/build.txt"
export PYTHONPATH=$PWD/$BUILD/python WM_CLI=$PWD/$BUILD/weightmap PYTHONDONTWRITEBYTECODE=1

for dev in cpu cuda:0; do
    say "tests (WM_TEST_DEVICE=$dev)"
    (cd python/tests && WM_TEST_DEVICE=$dev timeout 300 "$PY" -m pytest -q -p no:cacheprovider -rs) \
        >"$OUT/tests-${dev%%:*}.txt" 2>&1
    echo "exit $?"
    tail -15 "$OUT/tests-${dev%%:*}.txt"
done

say "model ($SIZE)"
ST=$MODELS/py-$SIZE.safetensors
[ -f "$ST" ] || timeout 300 "$BUILD/weightmap" make-model "$ST" --size "$SIZE" --format safetensors >/dev/null
ls -l "$ST"
cat "$ST" >/dev/null
cat "$ST" >/dev/null

say "bench/python_gpu.py"
PYTHONUNBUFFERED=1 timeout 400 "$PY" bench/python_gpu.py "$ST" --repeat "$REPEAT" --cli "$BUILD/weightmap" \
    2>&1 | tee "$OUT/bench.txt"
say "done"
