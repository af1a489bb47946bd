#!/bin/bash
# bench/llama_cuda.sh: llama.cpp's GPU load through the bridge against its own (the read mode's
# four 1 MiB pinned staging buffers, and mmap) on the GPU host that `device` lends, with ggml's
# CUDA backend built there for sm_90 from the v0.4.0 source bundle (the same release as the
# prebuilt libraries, which have no CUDA backend). No registry there: the checkout carries a
# dereferenced copy of the peer and the ggml part of the source:
#
#   here:   cp -rL bench/peers/llama .llama
#           tar xzf ~/.cache/weightmap/npm/node-llama-cpp@3.21.1.tgz -C /tmp package/llama/gitRelease.bundle
#           git clone -q /tmp/package/llama/gitRelease.bundle /tmp/src
#           mkdir -p .cudasrc && tar cJf .cudasrc/ggml-v0.4.0.tar.xz -C /tmp/src $(for b in \
#               virtgpu cann openvino webgpu et metal hexagon sycl vulkan opencl musa hip zdnn; do
#               echo --exclude=ggml/src/ggml-$b; done) ggml    (0.8 MB: the other backends'
#           folders left out; .llama and .cudasrc listed in .git/info/exclude)
#   there:  ROUNDS=5 bash bench/llama_cuda.sh      (the checkout, .llama and .cudasrc carried)
#
# Builds libggml-cuda.so (ggml's CMake, GGML_BACKEND_DL, CUDA architecture 90, no CPU backend
# of its own) and puts it beside the prebuilt libraries, where ggml_backend_load_all_from_path
# finds it; builds weightmap with its CUDA backend (the bridge fills llama.cpp's CUDA buffers
# through it), bench_llama, bench_llama_modes and test_llama, makes a model of SIZE (default
# 1200M; the fixtures the tests read carried in .fixtures/) and runs `bench/llama --gpu` (every
# layer offloaded; ONLY: the contenders, default wm,wm-auto,wm-noprefetch,wm-set,read,mmap,disk) with the time that is
# left of LIMIT_S (default 560), then weightmap's own staged load of the same file to cuda:0 (the
# ceiling, warm, median of 5) and test_llama's cuda_staged cases; with MODES=1, `bench/llama_modes
# --gpu` (every load mode, the bridge against llama.cpp). The logs and the report go to $OUT (or
# ./llama-cuda.out). bench/RESULTS.md, "llama", says what it measured.
set -u
cd "$(dirname "$0")/.."
R=$PWD
O=${OUT:-$R/llama-cuda.out}
T0=$(date +%s)
LIMIT=${LIMIT_S:-560}
left() { echo $((LIMIT - ($(date +%s) - T0))); }
mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
    date -u
    nproc
    uname -r
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    command -v nvcc && nvcc --version | tail -2
    cmake --version | head -1
} > "$O/host.txt" 2>&1
cat "$O/host.txt"
[ -d .llama/lib ] || { echo "no .llama/lib: copy the peer first"; exit 2; }
[ -f .cudasrc/ggml-v0.4.0.tar.xz ] || { echo "no .cudasrc/ggml-v0.4.0.tar.xz"; exit 2; }
command -v nvcc > /dev/null || { echo "no nvcc on this machine"; exit 3; }
mkdir -p bench/peers && ln -sfn "$R/.llama" bench/peers/llama
GEN=Ninja; command -v ninja > /dev/null || GEN="Unix Makefiles"
SIZE=${SIZE:-1200M}
MODEL=bench-llama-$SIZE.gguf

# ours (with its CUDA backend: the bridge fills llama.cpp's CUDA buffers through it), beside the CUDA build (a minute of the CPUs; the CUDA build takes the rest)
(
    cmake -S . -B build -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FIXTURES="$R/.fixtures" \
        > "$O/cmake.log" 2>&1 &&
        cmake --build build --target bench_llama bench_llama_modes weightmap_cli test_llama test_llama_pool -j4 \
            > "$O/build.log" 2>&1 &&
        mkdir -p bl && { [ -f "bl/$MODEL" ] ||
            build/weightmap make-model "bl/$MODEL" --size "$SIZE" > /dev/null; }
    echo "ours: $?" > "$O/ours.rc"
) &
OURS=$!

S=/tmp/ggml-cuda-src
if [ -z "$(find "$S/b" -name libggml-cuda.so 2>/dev/null)" ]; then
    rm -rf "$S" && mkdir -p "$S" && tar xJf .cudasrc/ggml-v0.4.0.tar.xz -C "$S" || exit 4
    # ggml as a subproject, as llama.cpp builds it (standalone it wants its own tests/ and ggml.pc.in)
    printf 'cmake_minimum_required(VERSION 3.18)\nproject(ggml_cuda_only C CXX)\nadd_subdirectory(ggml)\n' > "$S/CMakeLists.txt"
    cmake -S "$S" -B "$S/b" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
        -DGGML_NATIVE=OFF > "$O/cuda-cmake.log" 2>&1 || { tail -30 "$O/cuda-cmake.log"; exit 5; }
    B0=$(date +%s)
    timeout $(($(left) - 150)) cmake --build "$S/b" --target ggml-cuda -j"$(nproc)" > "$O/cuda-build.log" 2>&1
    rc=$?
    echo "ggml-cuda build: rc $rc in $(($(date +%s) - B0)) s"
    [ $rc -eq 0 ] || { tail -20 "$O/cuda-build.log"; exit 6; }
fi
L=$(find "$S/b" -name libggml-cuda.so | head -1)
cp "$L" .llama/lib/ || exit 7
ldd .llama/lib/libggml-cuda.so | grep -E "not found|cuda|cublas|ggml" | tee "$O/ldd.txt"
wait $OURS
cat "$O/ours.rc"
grep -q "ours: 0" "$O/ours.rc" || { tail -20 "$O/build.log"; exit 8; }
cd bl
# first the tests (GPU-only cases of test_llama and test_llama_pool), then the bench with the time left
# the bridge's CUDA path checked against llama.cpp's own load (tokens, logits, device memory)
timeout 60 ../build/tests/test_llama cuda_staged_q8_0 > "$O/test-q8_0.txt" 2>&1; echo "test cuda_staged_q8_0: exit $?"
timeout 60 ../build/tests/test_llama cuda_staged_make_model > "$O/test-mm.txt" 2>&1; echo "test cuda_staged_make_model: exit $?"
# the mapped modes with layers on the GPU (1 and all) against llama.cpp's own mmap load
timeout 90 ../build/tests/test_llama cuda_mapped_q8_0 > "$O/test-mapped-q8_0.txt" 2>&1; echo "test cuda_mapped_q8_0: exit $?"
timeout 90 ../build/tests/test_llama cuda_mapped_make_model > "$O/test-mapped-mm.txt" 2>&1; echo "test cuda_mapped_make_model: exit $?"
# a pool of llama models on the GPU: every eviction proven by the device's free memory
timeout 90 ../build/tests/test_llama_pool rotate_on_the_gpu > "$O/test-pool-gpu.txt" 2>&1; echo "test rotate_on_the_gpu: exit $?"
grep -hE "staged in|tensors mapped|FAIL|PASS|SKIP" "$O"/test-*.txt | head -40
B=$(($(left) - 45))
echo "bench: $B s left"
timeout "$B" ../build/bench/llama -r "${ROUNDS:-5}" --load-only --gpu --warm-memory 3 \
    --only "${ONLY:-wm,wm-auto,wm-noprefetch,wm-set,read,mmap,disk}" --disk "$MODEL" > "$O/bench.txt" 2> "$O/bench.err"
echo "bench exit $?"
cat "$O/bench.txt"
grep -E "device|tokens|windowed|staged" "$O/bench.err" | sort | uniq -c | head -20
# weightmap's own staged load of the same file to cuda:0, warm, in the same run: the ceiling the
# bridge's GPU rows are held against (median of the cycles). Warm: the file read into the page
# cache first (the bench's last round was cold, and the staged path's direct reads of cold bytes
# leave the page cache as it was)
cat "$MODEL" > /dev/null
timeout 40 ../build/weightmap load "$MODEL" --mode heap --backend cuda:0 --cycles 5 --json \
    > "$O/ceiling.json" 2> "$O/ceiling.err"
python3 - "$O/ceiling.json" << 'PY'
import json, statistics, sys
try:
    d = json.load(open(sys.argv[1]))
    t = sorted(c["load_seconds"] for c in d["cycles"])
    m = statistics.median(t)
    print("ceiling: weightmap load --backend cuda:0, warm: median %.1f ms (%s), %.2f GB/s"
          % (m * 1e3, " ".join("%.1f" % (x * 1e3) for x in t), d["tensor_bytes"] / m / 1e9))
except Exception as e:
    print("ceiling: not measured (%s)" % e)
PY
# MODES=1: then every load mode with every layer on the GPU, the bridge against llama.cpp's same
# mode (bench/llama_modes.c --gpu: AUTO as llama.cpp resolves it there, MMAP for CUDA; the bridge
# maps the input layer's tensors, as llama.cpp's mmap mode, and stages the rest)
if [ -n "${MODES:-}" ]; then
    timeout $(($(left) - 5)) ../build/bench/llama_modes -r "${ROUNDS:-5}" --gpu --warm-memory 3 \
        "$MODEL" > "$O/modes.txt" 2> "$O/modes.err"
    echo "modes exit $?"
    cat "$O/modes.txt"
fi
