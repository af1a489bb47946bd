#!/usr/bin/env bash
# The installed package as users get it (ctest install.consumers; docs/TESTING.md):
#  1. `make install PREFIX=DIR DESTDIR=STAGE` passes both to `cmake --install`; `make demo`
#     builds the CLI alone, with JOBS (the CPU count) jobs;
#  2. a staged install (DESTDIR) is moved elsewhere: every RUNPATH in it is relative to $ORIGIN,
#     no file in it names the source or the build tree (debug info aside), and the moved CLI
#     runs: --version, info, check --ggml and check --llama where the bridges are built (their
#     libggml-base.so, libllama, libggml and ggml's CPU backends installed with them), trace
#     (its interposer found relative to the binary);
#  3. consumers of the moved prefix: README.md's consumer lines, exactly as written, for every
#     module (weightmap, weightmap-static, weightmap-llama[-static], weightmap-ggml[-static]) on a
#     copy of the prefix at $HOME/.local (outside the loader's path: the .pc files' RUNPATH makes
#     them run); the bridges' ggml_backend_dir and their one-call backend loaders (the folder,
#     and the error where a folder has no backend); the bridges' CMake targets, shared and
#     static; pkg-config shared (ldd: libweightmap.so.1 from the prefix)
#     and static (weightmap-static.pc, the .so beside the archive: ldd shows no libweightmap),
#     --static weightmap from a prefix that holds only the archive, find_package with both
#     targets, find_package of the shared target with the CUDA toolkit hidden (and, in a CUDA
#     build, COMPONENTS static refused naming the toolkit), C++; each runs on a fixture;
#  4. the build tree as a package (its weightmap.pc, -Dweightmap_DIR=BUILD);
#  5. configuring says whether it found the CUDA toolkit.
# Usage: check.sh BUILD SOURCE FIXTURE.gguf
set -euo pipefail
bin=$(cd "$1" && pwd) src=$(cd "$2" && pwd) fixture=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install: $*" >&2; exit 1; }
libs() { ldd "$1" 2>&1 || true; } # all of ldd's output (a grep -q on its pipe would race pipefail)

# 1. the Makefile's install target
plan=$(make -n -C "$src" install PREFIX=/opt/wm-prefix DESTDIR=/wm-stage 2>/dev/null)
grep -qF 'DESTDIR="/wm-stage" cmake --install build --prefix "/opt/wm-prefix"' <<<"$plan" \
  || fail "make install does not pass PREFIX and DESTDIR to cmake --install: $plan"
# make demo builds the CLI alone, with JOBS jobs (the CPU count by default)
plan=$(make -n -C "$src" demo JOBS=3 2>/dev/null)
grep -qF 'cmake --build build --target weightmap_cli -j 3' <<<"$plan" \
  || fail "make demo does not build only the CLI with JOBS jobs: $plan"
grep -q "^cmake --build build *$\|^cmake --build build -j" <<<"$plan" && fail "make demo builds everything: $plan"

# 2. stage, move, inspect, run
DESTDIR="$tmp/stage" cmake --install "$bin" --prefix /opt/weightmap >/dev/null
test -x "$tmp/stage/opt/weightmap/bin/weightmap" || fail "DESTDIR was not honoured"
mkdir -p "$tmp/moved"
mv "$tmp/stage/opt/weightmap" "$tmp/moved/wm"
p="$tmp/moved/wm"
libdir=$(ls -d "$p"/lib*/ | head -1)
libdir=${libdir%/}
test -f "$p/include/weightmap.h"
ls "$libdir" | grep -q '^libweightmap\.a$' || fail "no libweightmap.a"
ls "$libdir" | grep -q '^libweightmap\.so' || fail "no libweightmap.so"
while IFS= read -r f; do
  file -b "$f" | grep -q '^ELF' || continue
  rp=$(readelf -d "$f" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  for d in ${rp//:/ }; do
    case "$d" in '$ORIGIN'*) ;; *) fail "$f: RUNPATH $d is not relative to \$ORIGIN" ;; esac
  done
  objcopy --strip-debug "$f" "$tmp/nodebug"
  if grep -qaF -e "$src/" -e "$bin/" "$tmp/nodebug"; then
    fail "$f names the source or build tree: $(strings "$tmp/nodebug" | grep -F -e "$src/" -e "$bin/" | head -3)"
  fi
done < <(find "$p" -type f)
if grep -rlF -e "$src/" -e "$bin/" "$p/lib"*/pkgconfig "$p/lib"*/cmake; then
  fail "a .pc or CMake file names the source or build tree"
fi
"$p/bin/weightmap" --version | grep -q '^weightmap [0-9]' || fail "the moved CLI does not start"
"$p/bin/weightmap" info "$fixture" >/dev/null
if ls "$libdir" | grep -q '^libweightmap_ggml\.so'; then
  test -f "$libdir/weightmap/libggml-base.so" || fail "the bridge is installed without libggml-base.so"
  "$p/bin/weightmap" check "$fixture" --ggml --cycles 1 | grep -q 'all memory returned' \
    || fail "the moved CLI's check --ggml"
  l=$(libs "$libdir/libweightmap_ggml.so")
  grep -qF "libggml-base.so => $libdir/weightmap/" <<<"$l" && grep -qF "libweightmap.so.1 => $libdir/" <<<"$l" \
    || fail "the moved libweightmap_ggml.so does not find its libraries: $l"
fi
if ls "$libdir" | grep -q '^libweightmap_llama\.so'; then
  l=$(libs "$libdir/libweightmap_llama.so")
  grep -q "not found" <<<"$l" && fail "the moved libweightmap_llama.so does not find its libraries: $l"
  for n in libweightmap.so.1 libllama libggml-base.so; do
    grep -qF "$n" <<<"$l" || fail "libweightmap_llama.so does not link $n: $l"
  done
  # the CLI's check --llama: libllama and ggml's CPU backends from LIB/weightmap/
  ls "$libdir"/weightmap/libggml-cpu-*.so >/dev/null 2>&1 || fail "no ggml CPU backend installed"
  "$p/bin/weightmap" check "$fixture" --llama --cycles 1 >"$tmp/llama.txt" 2>&1 \
    || { cat "$tmp/llama.txt" >&2; fail "the moved CLI's check --llama"; }
fi
"$p/bin/weightmap" trace --out /dev/null -- true || fail "the moved CLI's trace"

# 3. consumers of the moved prefix
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc -o "$tmp/pc" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs weightmap) -Wl,-rpath,"$libdir"
"$tmp/pc" "$fixture" >/dev/null
grep -qF "libweightmap.so.1 => $libdir/" <<<"$(libs "$tmp/pc")" || fail "pkg-config shared: $(libs "$tmp/pc")"
for flags in "" "--static"; do
  cc -o "$tmp/pcs" "$src/tests/install/consumer.c" $(pkg-config $flags --cflags --libs weightmap-static)
  "$tmp/pcs" "$fixture" >/dev/null
  if grep -q libweightmap <<<"$(libs "$tmp/pcs")"; then
    fail "pkg-config $flags weightmap-static linked libweightmap.so: $(libs "$tmp/pcs")"
  fi
done
# a prefix holding only the archive: weightmap.pc's --static (Libs.private) is enough there
cp -a "$p" "$tmp/static"
rm -f "$tmp"/static/lib*/libweightmap.so*
cc -o "$tmp/pcs2" "$src/tests/install/consumer.c" \
  $(PKG_CONFIG_PATH=$(ls -d "$tmp"/static/lib*/ | head -1)pkgconfig pkg-config --static --cflags --libs weightmap)
"$tmp/pcs2" "$fixture" >/dev/null
grep -q libweightmap <<<"$(libs "$tmp/pcs2")" && fail "the archive-only prefix linked a libweightmap.so"
# find_package, both targets
cmake -S "$src/tests/install" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/fp" >/dev/null
"$tmp/fp/consumer" "$fixture" >/dev/null
"$tmp/fp/consumer_static" "$fixture" >/dev/null
grep -q libweightmap <<<"$(libs "$tmp/fp/consumer_static")" && fail "weightmap::weightmap_static linked libweightmap.so"
# find_package with no CUDA toolkit to be found: the shared target needs none
nocuda=(env -u CUDA_PATH -u CUDAToolkit_ROOT -u CUDACXX PATH="$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)"
        cmake -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_RPATH="$libdir")
"${nocuda[@]}" -S "$src/tests/install" -B "$tmp/fpn" -DWM_CONSUMER_STATIC=OFF >/dev/null \
  || fail "find_package(weightmap COMPONENTS shared) needs more than the shared library"
cmake --build "$tmp/fpn" >/dev/null
"$tmp/fpn/consumer" "$fixture" >/dev/null
if grep -q cudart_static "$libdir/pkgconfig/weightmap-static.pc"; then
  if "${nocuda[@]}" -S "$src/tests/install" -B "$tmp/fps" >"$tmp/fps.log" 2>&1; then
    fail "COMPONENTS static configured in a CUDA build with the toolkit hidden"
  fi
  grep -q 'CUDA::cudart_static' "$tmp/fps.log" || { cat "$tmp/fps.log" >&2; fail "the refusal does not name the CUDA runtime"; }
else
  "${nocuda[@]}" -S "$src/tests/install" -B "$tmp/fps" >/dev/null
  cmake --build "$tmp/fps" >/dev/null
  "$tmp/fps/consumer_static" "$fixture" >/dev/null
fi
# the bridges' CMake targets (tests/install/CMakeLists.txt builds a consumer of each built here)
for b in llama ggml; do
  [ -f "$libdir/cmake/weightmap/weightmap${b^}Targets.cmake" ] || continue
  for e in consumer_$b consumer_${b}_static; do
    [ -x "$tmp/fp/$e" ] || fail "find_package did not define weightmap::${e#consumer_} (no $e built)"
    "$tmp/fp/$e" "$fixture" >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt" >&2; fail "$e (CMake) failed"; }
  done
  grep -q "libweightmap_$b.so" <<<"$(libs "$tmp/fp/consumer_${b}_static")" \
    && fail "weightmap::${b}_static linked libweightmap_$b.so"
done
# C++
c++ -std=c++11 -Wall -Wextra -Werror -o "$tmp/cxx" "$src/tests/install/consumer.cpp" -I"$p/include" \
  -L"$libdir" -lweightmap -Wl,-rpath,"$libdir"
"$tmp/cxx"

# 3b. README.md's consumer lines, as they stand there, on the prefix they name ($HOME/.local,
# outside the loader's path): the prefix copied there, each line run in a folder holding an
# app.c (the consumer of that line's module) and model.gguf; every module the prefix has
# must have its line, and each program must run (the .pc files' RUNPATH), not only link.
home="$tmp/home"
mkdir -p "$home/.local"
cp -a "$p/." "$home/.local/"
mapfile -t lines < <(sed -n 's/^    \(export PKG_CONFIG_PATH=.*\|cc app\.c .*\)$/\1/p' "$src/README.md")
[ "${#lines[@]}" -ge 7 ] || fail "README.md's consumer lines not found (${#lines[@]} lines)"
ran=""
for line in "${lines[@]:1}"; do
  mod=$(sed -n 's/.*pkg-config --cflags --libs \([a-z-]*\)).*/\1/p' <<<"$line")
  [ -f "$libdir/pkgconfig/$mod.pc" ] || continue
  case "$mod" in weightmap-llama*) app=consumer_llama.c ;; weightmap-ggml*) app=consumer_ggml.c ;; *) app=consumer.c ;; esac
  rm -rf "$tmp/readme" && mkdir "$tmp/readme"
  cp "$src/tests/install/$app" "$tmp/readme/app.c"
  ln -s "$fixture" "$tmp/readme/model.gguf"
  (cd "$tmp/readme" && env -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH HOME="$home" bash -ec "${lines[0]}"$'\n'"$line") \
    >"$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt" >&2; fail "README.md's line did not run: $line"; }
  ran="$ran $mod"
done
for pc in "$libdir"/pkgconfig/*.pc; do
  grep -qw -- "$(basename "$pc" .pc)" <<<"$ran" || fail "README.md has no consumer line for $(basename "$pc")"
done
# the bridges' ggml_backend_dir holds ggml's CPU backends, and the one-call helper says why
# where a folder holds none
for b in llama ggml; do
  [ -f "$libdir/pkgconfig/weightmap-$b.pc" ] || continue
  d=$(pkg-config --variable=ggml_backend_dir "weightmap-$b")
  ls "$d"/libggml-cpu-*.so >/dev/null 2>&1 || fail "weightmap-$b.pc's ggml_backend_dir ($d) holds no CPU backend"
  printf '%s\n' '#include <stdio.h>' "#include <weightmap_$b.h>" \
    'int main(int argc, char **argv) {' '    wm_error err;' '    (void)argc;' \
    "    if (wm_${b}_backends_load(argv[1], &err) == WM_OK) return 0;" '    puts(err.msg);' \
    '    return err.code == WM_ENOENT ? 3 : 1;' '}' >"$tmp/bk.c"
  cc -o "$tmp/bk" -Wall -Werror "$tmp/bk.c" $(pkg-config --cflags --libs "weightmap-$b")
  rc=0; "$tmp/bk" "$tmp" >"$tmp/bk.txt" 2>&1 || rc=$?
  [ $rc -eq 3 ] && grep -qF "$tmp: no ggml CPU backend there" "$tmp/bk.txt" \
    || fail "wm_${b}_backends_load on a folder without backends: rc $rc, $(cat "$tmp/bk.txt")"
  "$tmp/bk" "$d" >/dev/null 2>&1 || fail "wm_${b}_backends_load($d) failed"
done

# 4. the build tree as a package: its weightmap.pc and -Dweightmap_DIR=BUILD
cc -o "$tmp/bt" "$src/tests/install/consumer.c" \
   $(PKG_CONFIG_PATH="$bin" pkg-config --cflags --libs weightmap) -Wl,-rpath,"$bin"
"$tmp/bt" "$fixture" >/dev/null
cc -o "$tmp/bts" "$src/tests/install/consumer.c" $(PKG_CONFIG_PATH="$bin" pkg-config --cflags --libs weightmap-static)
grep -q libweightmap <<<"$(libs "$tmp/bts")" && fail "the build tree's weightmap-static.pc linked libweightmap.so"
cmake -S "$src/tests/install" -B "$tmp/btfp" -Dweightmap_DIR="$bin" -DCMAKE_BUILD_RPATH="$bin" >/dev/null
cmake --build "$tmp/btfp" >/dev/null
"$tmp/btfp/consumer" "$fixture" >/dev/null
"$tmp/btfp/consumer_static" "$fixture" >/dev/null

# 5. configuring says whether it found the CUDA toolkit (on stderr, which the Makefile's quiet
# configures leave visible)
cmake -S "$src" -B "$tmp/conf" -DWM_BUILD_TESTS=OFF -DWM_BUILD_CLI=OFF >/dev/null 2>"$tmp/conf.err"
if ! grep -qE '^weightmap: CUDA (toolkit .* found|toolkit not found|backend)' "$tmp/conf.err"; then
  cat "$tmp/conf.err" >&2
  fail "configure does not say whether it found CUDA"
fi
echo "install ok"
