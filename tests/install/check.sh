#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds programs against it three ways: with
# pkg-config, with find_package(weightmap), and as C++. Each must run on a fixture.
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
# pkg-config, static
cc -static-libgcc -o "$tmp/pcs" "$src/tests/install/consumer.c" $(pkg-config --cflags weightmap) \
   -Wl,-Bstatic -lweightmap -Wl,-Bdynamic -L"$libdir" $(pkg-config --libs-only-other --libs-only-L --static weightmap) \
   $(pkg-config --libs-only-l --static weightmap | sed 's/-lweightmap//')
"$tmp/pcs" "$fixture"
# find_package, shared and static
cmake -S "$src/tests/install" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/fp" >/dev/null
"$tmp/fp/consumer" "$fixture"
"$tmp/fp/consumer_static" "$fixture"
# C++
c++ -std=c++11 -Wall -Wextra -Werror -o "$tmp/cxx" "$src/tests/install/consumer.cpp" -I"$tmp/prefix/include" -L"$libdir" -lweightmap -Wl,-rpath,"$libdir"
"$tmp/cxx"
echo "install ok"
