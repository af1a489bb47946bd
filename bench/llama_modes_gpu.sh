#!/usr/bin/env bash
# bench/llama_modes_gpu.sh [MODEL] [ROUNDS]: bench/llama_modes.sh (every load mode through the
# bridge and by llama.cpp, cold and warm, then the tracer over 5 cycles of each) on the CPU of the
# GPU host that `device` lends, which lacks the Debian packages the tracer's interposer needs
# (Zydis) and reaches no registry. The checkout carries them as .deb files, unpacked here into
# /tmp/wm-deps (scripts/gpu_env.sh) and found through CMAKE_PREFIX_PATH and LD_LIBRARY_PATH:
#
#   here:   mkdir -p .debs-trace && (cd .debs-trace && apt-get download libzydis-dev
#               libzycore-dev libzydis4.0 libzycore1.4)        (.debs-trace is git-ignored)
#           cp -rL bench/peers/llama .llama                    (as bench/llama_cuda.sh says)
#   there:  bash bench/llama_modes_gpu.sh > $OUT/modes.txt     (.llama, .fixtures, .debs-trace carried)
#
# MODEL defaults to bl/bench-llama-1200M.gguf (made when missing), ROUNDS to 3; the build goes
# to build-test (CUDA off: the CPU rows), its log to /tmp/wm-modes-build.log. FIRST_TOUCH=1 adds,
# after the tracer: bench/first_touch (836 MiB, huge pages advised or not, with and without a
# pause: whether a freed huge page costs a fault on the host here) and the NONE and MMAP rows
# without --warm-memory (bench/RESULTS.md, llama, "First touch of fresh memory").
set -euo pipefail
cd "$(dirname "$0")/.."
M=${1:-bl/bench-llama-1200M.gguf}
R=${2:-3}
. scripts/gpu_env.sh
wm_gpu_env .debs-trace
mkdir -p bench/peers bl
[ -e bench/peers/llama ] || ln -sfn "$PWD/.llama" bench/peers/llama
D=/tmp/wm-deps/usr
{ cmake -S . -B build-test "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_CUDA=OFF \
    -DWM_FAULT_INJECTION=ON -DWM_FIXTURES="$PWD/.fixtures" -DCMAKE_PREFIX_PATH="$D" &&
    cmake --build build-test -j"$(nproc)" --target bench_llama_modes bench_first_touch \
        weightmap_cli wmtrace wmt_llama_driver wmt_wm_llama_driver; } > /tmp/wm-modes-build.log 2>&1 ||
    { tail -20 /tmp/wm-modes-build.log >&2; exit 1; }
export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bash bench/llama_modes.sh build-test "$M" "$R" --warm-memory 3
[ "${FIRST_TOUCH:-0}" = 1 ] || exit 0
echo; echo '#### first touch of fresh memory (bench/first_touch)'; echo
for a in "836 3" "836 3 --small-pages" "836 2 --pause 5" "836 2 --pause 5 --small-pages"; do
    build-test/bench/first_touch $a | sed 's/^/    /'
done
echo; echo '#### NONE and MMAP without --warm-memory'; echo
build-test/bench/llama_modes -r "$R" --modes none,mmap "$M"
