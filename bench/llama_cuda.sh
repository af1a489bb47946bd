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
# finds it; builds bench_llama (and bench_llama_modes), makes the 1.2 GB model and runs
# `bench/llama --gpu` (every layer offloaded) with the time that is left of LIMIT_S (default 560),
# then, with MODES=1, `bench/llama_modes --gpu` (every load mode, the bridge against llama.cpp). The logs and the report go to
# $OUT (or ./llama-cuda.out). bench/RESULTS.md, "llama", says what it measured.
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

# ours, beside the CUDA build (a minute of the CPUs; the CUDA build takes the rest)
(
    cmake -S . -B build -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_CUDA=OFF > "$O/cmake.log" 2>&1 &&
        cmake --build build --target bench_llama bench_llama_modes weightmap_cli -j4 > "$O/build.log" 2>&1 &&
        mkdir -p bl && { [ -f bl/bench-llama-1200M.gguf ] ||
            build/weightmap make-model bl/bench-llama-1200M.gguf --size 1200M > /dev/null; }
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
B=$(($(left) - 15))
echo "bench: $B s left"
timeout "$B" ../build/bench/llama -r "${ROUNDS:-5}" --load-only --gpu --warm-memory 3 \
    --only "${ONLY:-wm,read,mmap,disk}" > "$O/bench.txt" 2> "$O/bench.err"
echo "bench exit $?"
cat "$O/bench.txt"
grep -E "device|tokens|windowed" "$O/bench.err" | sort | uniq -c | head -20
# MODES=1: then every load mode with every layer on the GPU, the bridge against llama.cpp's same
# mode (bench/llama_modes.c --gpu: AUTO as llama.cpp resolves it there; the bridge maps nothing
# with layers on a GPU, and its explicit MMAP is refused, which its row says)
if [ -n "${MODES:-}" ]; then
    timeout $(($(left) - 5)) ../build/bench/llama_modes -r "${ROUNDS:-5}" --gpu --warm-memory 3 \
        bench-llama-1200M.gguf > "$O/modes.txt" 2> "$O/modes.err"
    echo "modes exit $?"
    cat "$O/modes.txt"
fi
