#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds programs against it: with pkg-config
# (shared, and static from a prefix without the shared library), with find_package(weightmap),
# and as C++; then against the build tree itself (its weightmap.pc, -Dweightmap_DIR=BUILD).
# Each must run on a fixture. Last, a configure must say whether it found the CUDA toolkit.
set -euo pipefail
bin=$1 src=$2 fixture=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$bin" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -1)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
test -f "$tmp/prefix/include/weightmap.h"
test -x "$tmp/prefix/bin/weightmap"
ls "$libdir" | grep -q '^libweightmap\.a$'
ls "$libdir" | grep -q '^libweightmap\.so'
# the installed CLI finds its trace interposer (LIBDIR/weightmap/libwmtrace.so) and traces
"$tmp/prefix/bin/weightmap" trace --out /dev/null -- true
# pkg-config, shared
cc -o "$tmp/pc" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs weightmap) -Wl,-rpath,"$libdir"
"$tmp/pc" "$fixture"
# pkg-config, static: a prefix holding only libweightmap.a, linked with exactly what
# `pkg-config --static --libs` gives (the CUDA runtime too, in a CUDA build)
cp -a "$tmp/prefix" "$tmp/static"
rm -f "$tmp"/static/lib*/libweightmap.so*
PKG_CONFIG_PATH=$(ls -d "$tmp"/static/lib*/ | head -1)pkgconfig
cc -o "$tmp/pcs" "$src/tests/install/consumer.c" \
   $(PKG_CONFIG_PATH=$PKG_CONFIG_PATH pkg-config --cflags --libs --static weightmap)
"$tmp/pcs" "$fixture"
if ldd "$tmp/pcs" | grep -q libweightmap; then echo "static consumer uses libweightmap.so" >&2; exit 1; fi
# find_package, shared and static
cmake -S "$src/tests/install" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/fp" >/dev/null
"$tmp/fp/consumer" "$fixture"
"$tmp/fp/consumer_static" "$fixture"
# C++
c++ -std=c++11 -Wall -Wextra -Werror -o "$tmp/cxx" "$src/tests/install/consumer.cpp" -I"$tmp/prefix/include" -L"$libdir" -lweightmap -Wl,-rpath,"$libdir"
"$tmp/cxx"
# the build tree as a package: its weightmap.pc and -Dweightmap_DIR=BUILD
cc -o "$tmp/bt" "$src/tests/install/consumer.c" \
   $(PKG_CONFIG_PATH="$bin" pkg-config --cflags --libs weightmap) -Wl,-rpath,"$bin"
"$tmp/bt" "$fixture"
cmake -S "$src/tests/install" -B "$tmp/btfp" -Dweightmap_DIR="$bin" -DCMAKE_BUILD_RPATH="$bin" >/dev/null
cmake --build "$tmp/btfp" >/dev/null
"$tmp/btfp/consumer" "$fixture"
"$tmp/btfp/consumer_static" "$fixture"
# configuring says whether it found the CUDA toolkit (on stderr, which the Makefile's quiet
# configures leave visible)
cmake -S "$src" -B "$tmp/conf" -DWM_BUILD_TESTS=OFF -DWM_BUILD_CLI=OFF >/dev/null 2>"$tmp/conf.err"
if ! grep -qE '^weightmap: CUDA (toolkit .* found|toolkit not found|backend)' "$tmp/conf.err"; then
  echo "configure does not say whether it found CUDA:" >&2
  cat "$tmp/conf.err" >&2
  exit 1
fi
echo "install ok"
