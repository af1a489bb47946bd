#!/usr/bin/env bash
# build_types.sh ROOT [COMPILERS]: the build a user makes, with every build type and compiler. Configures
# and builds the whole tree (library, CLI, tests, benchmarks) for Release, Debug, RelWithDebInfo
# and MinSizeRel with each compiler (default: gcc clang) in ROOT/CC-TYPE, with no option but the
# build type and -DWM_WERROR=ON, so that a warning any of them gives fails (users' builds have
# the same warnings, only not as errors). Also checks that -DWM_FUZZ=ON with the tests on builds
# with clang and stops at configure time, naming the fix, with gcc. `make test-builds` runs it.
set -uo pipefail
root=${1:?usage: build_types.sh ROOT [COMPILERS]}
compilers=${2:-gcc clang}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-$(nproc)}
failed=()
for cc in $compilers; do
  for type in Release Debug RelWithDebInfo MinSizeRel; do
    dir=$root/$cc-$type
    log=$dir.log
    mkdir -p "$dir"
    if CC=$cc cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=$type -DWM_WERROR=ON >"$log" 2>&1 &&
       cmake --build "$dir" -j "$jobs" >>"$log" 2>&1; then
      echo "build $cc $type: clean"
    else
      echo "build $cc $type: FAILED (a warning or an error; $log):" >&2
      { grep -E "warning:|error:" "$log" || tail -5 "$log"; } | head -20 >&2
      failed+=("$cc-$type")
    fi
  done
done
# -DWM_FUZZ=ON with the tests on: clang builds it; gcc stops at configure with the fix named.
if [[ " $compilers " == *" clang "* ]]; then
  dir=$root/clang-fuzz
  if CC=clang cmake -S "$src" -B "$dir" -G Ninja -DWM_FUZZ=ON -DWM_FAULT_INJECTION=ON -DWM_WERROR=ON \
       >"$dir.log" 2>&1 && cmake --build "$dir" -j "$jobs" >>"$dir.log" 2>&1; then
    echo "build clang -DWM_FUZZ=ON with the tests: clean"
  else
    echo "build clang -DWM_FUZZ=ON with the tests: FAILED ($dir.log)" >&2
    { grep -E "warning:|error:|undefined" "$dir.log" || tail -5 "$dir.log"; } | head -20 >&2
    failed+=(clang-fuzz)
  fi
fi
if [[ " $compilers " == *" gcc "* ]]; then
  dir=$root/gcc-fuzz
  if CC=gcc cmake -S "$src" -B "$dir" -G Ninja -DWM_FUZZ=ON >"$dir.log" 2>&1; then
    echo "configure gcc -DWM_FUZZ=ON: accepted, want a configure error" >&2
    failed+=(gcc-fuzz)
  elif grep -q "WM_FUZZ=ON needs clang" "$dir.log"; then
    echo "configure gcc -DWM_FUZZ=ON: refused with \"WM_FUZZ=ON needs clang\""
  else
    echo "configure gcc -DWM_FUZZ=ON: failed without the message ($dir.log)" >&2
    failed+=(gcc-fuzz)
  fi
fi
if [ ${#failed[@]} -ne 0 ]; then
  echo "build_types.sh: ${#failed[@]} failed: ${failed[*]}" >&2
  exit 1
fi
