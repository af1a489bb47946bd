#!/bin/bash
# tests/llama_host.sh: tests/test_llama on a bare machine with no registry (the GPU host that
# `device` lends: its Xeon has AMX, so ggml's CPU backend there repacks into the AMX buffer type,
# which the 2-CPU development VM's CPU lacks), from a checkout that carries a dereferenced copy of
# the llama.cpp peer and the fixtures test_llama reads:
#
#   here:   cp -rL bench/peers/llama .llama; mkdir -p .fixtures/gguf .fixtures/safetensors and
#           copy in the files tests/test_llama.c names (wmt_fixture) from ../shared/fixtures
#           (both folders git-ignored: list them in .git/info/exclude)
#   there:  bash tests/llama_host.sh                (the checkout, .llama and .fixtures carried)
#
# Builds test_llama and test_read with fault injection (as build-test/ is) and runs every case
# of both (the reading engine's on 16 CPUs, where its window pool's cap binds differently); the
# output goes to $OUT (or ./llama-tests.out).
set -u
cd "$(dirname "$0")/.."
R=$PWD
O=${OUT:-$R/llama-tests.out}
mkdir -p "$O"
[ -d .llama/lib ] || { echo "no .llama/lib: copy the peer first (cp -rL bench/peers/llama .llama)"; exit 2; }
[ -d .fixtures/gguf ] || { echo "no .fixtures/gguf: copy the fixtures first"; exit 2; }
mkdir -p bench/peers && ln -sfn "$R/.llama" bench/peers/llama
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
cmake -S . -B build-host-test -G "$GEN" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_CUDA=OFF \
  -DWM_FAULT_INJECTION=ON -DWM_FIXTURES="$R/.fixtures" > "$O/cmake.log" 2>&1 || { tail -30 "$O/cmake.log"; exit 3; }
cmake --build build-host-test --target test_llama test_read weightmap_cli -j"$(nproc)" > "$O/build.log" 2>&1 || { tail -30 "$O/build.log"; exit 4; }
cd build-host-test && ctest -R '^(llama|read)\.' -j4 --timeout 300 --output-on-failure > "$O/ctest.txt" 2>&1
rc=$?
grep -E "tests passed|Failed|\*\*\*" "$O/ctest.txt" | head -20
./tests/test_llama tokens_equal_make_model 2>&1 | grep -E "tensors \(|buffer|AMX|REPACK|PASS|FAIL" | head -20
./tests/test_llama repack_in_row_groups_equals_whole 2>&1 | grep -E "repacked|PASS|FAIL" | head -5
exit $rc
