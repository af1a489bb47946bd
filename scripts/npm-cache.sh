#!/bin/sh
# npm-cache.sh: the one place the project installs npm packages (peer.sh, peer-node.sh, ggml.sh,
# bench/trace_runtimes.sh and any later peer script call it). Each package set goes into a folder
# of its own OUTSIDE the clone, named by its first package and that package's exact version:
#
#   $WM_NPM_CACHE/<package>@<version>/node_modules/...
#   WM_NPM_CACHE defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/weightmap/npm
#   (no HOME: ${TMPDIR:-/tmp}/weightmap-cache-UID/npm, as the CLI's demo cache)
#
# so every clone and worktree of the machine, and every CI run of a kept home, shares one copy,
# and a version bump is a new folder (the old one is left for older checkouts). A set is
# installed once (npm i -E into a temporary folder beside its final one, renamed into place
# when complete, under a lock, so concurrent lanes neither race nor see half an install); later
# calls only check its stamp (the exact specs) and print the folder.
#
# bench/peers/ keeps working for paths compiled into the build (the oracle's default folder, the
# trace tests): each top-level package is linked as bench/peers/node_modules/<package> into the
# cache, unless WM_NPM_NO_LINK=1.
#
# Usage:
#   D=$(scripts/npm-cache.sh PKG@VERSION [PKG@VERSION ...] [-- NPM-OPTION ...])
#       the folder holding node_modules/ (messages go to stderr; only the folder to stdout)
#   T=$(scripts/npm-cache.sh --pack PKG@VERSION)   the package's tarball (npm pack), cached
#   R=$(scripts/npm-cache.sh --root)               the cache root, WM_NPM_CACHE
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${WM_NPM_CACHE:-}" ]; then
  root=$WM_NPM_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  root=$XDG_CACHE_HOME/weightmap/npm
elif [ -n "${HOME:-}" ]; then
  root=$HOME/.cache/weightmap/npm
else
  root=${TMPDIR:-/tmp}/weightmap-cache-$(id -u)/npm
fi

die() { echo "npm-cache.sh: $*" >&2; exit 1; }
need_npm() {
  command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"
}
# A spec must pin an exact version: the folder is keyed by it.
check_spec() {
  case "$1" in
    @*/*@[0-9]*|[!@]*@[0-9]*) ;;
    *) die "'$1' is not PACKAGE@VERSION with an exact version" ;;
  esac
}
name_of() { echo "${1%@*}"; }
# Runs "$@" holding the cache's lock (flock where util-linux has it; a mkdir lock otherwise).
locked() {
  mkdir -p "$root"
  if command -v flock >/dev/null 2>&1; then
    (flock 9; "$@") 9>"$root/.lock"
  else
    while ! mkdir "$root/.lock.d" 2>/dev/null; do sleep 1; done
    rc=0; "$@" || rc=$?
    rmdir "$root/.lock.d"
    return $rc
  fi
}

if [ "${1:-}" = "--root" ]; then
  echo "$root"
  exit 0
fi

if [ "${1:-}" = "--pack" ]; then
  [ $# -eq 2 ] || die "usage: npm-cache.sh --pack PACKAGE@VERSION"
  spec=$2
  check_spec "$spec"
  tgz="$root/$spec.tgz"
  pack() {
    [ -s "$tgz" ] && return 0
    need_npm
    echo "npm-cache.sh: npm pack $spec into $root" >&2
    mkdir -p "$(dirname "$tgz")"
    tmp=$(mktemp -d "$root/.pack.XXXXXX")
    (cd "$tmp" && npm pack --silent "$spec" >/dev/null) || { rm -rf "$tmp"; die "npm pack $spec failed"; }
    mv "$tmp"/*.tgz "$tgz"
    rm -rf "$tmp"
  }
  locked pack
  echo "$tgz"
  exit 0
fi

specs=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  check_spec "$1"
  specs="$specs $1"
  shift
done
[ "${1:-}" = "--" ] && shift
[ -n "$specs" ] || die "usage: npm-cache.sh PACKAGE@VERSION [PACKAGE@VERSION ...] [-- NPM-OPTION ...]"
set -- $specs -- "$@"
first=$1
dir="$root/$first"
stamp_ok() { [ -f "$dir/.weightmap-stamp" ] && [ "$(cat "$dir/.weightmap-stamp")" = "$*" ]; }

install_set() {
  stamp_ok "$@" && return 0
  need_npm
  echo "npm-cache.sh: installing$specs into $dir" >&2
  mkdir -p "$(dirname "$dir")"
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  pkgs="" opts="" seen=0
  for a in "$@"; do
    if [ "$a" = "--" ]; then seen=1; elif [ $seen -eq 0 ]; then pkgs="$pkgs $a"; else opts="$opts $a"; fi
  done
  # shellcheck disable=SC2086 # word splitting of the specs and options is wanted
  printf '{"name": "weightmap-npm-cache", "private": true}\n' > "$tmp/package.json"
  if ! (cd "$tmp" && npm i -E --no-audit --no-fund $opts $pkgs >&2); then
    rm -rf "$tmp"
    die "npm i$pkgs failed"
  fi
  for p in $pkgs; do
    [ -f "$tmp/node_modules/$(name_of "$p")/package.json" ] || { rm -rf "$tmp"; die "$p is missing after the install"; }
  done
  echo "$*" > "$tmp/.weightmap-stamp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
}
locked install_set "$@"

# bench/peers/node_modules/<package> -> the cache (a real folder left by an older peer script,
# which installed into bench/peers itself, is replaced by the link).
if [ "${WM_NPM_NO_LINK:-0}" != 1 ]; then
  for p in $specs; do
    n=$(name_of "$p")
    link="$here/bench/peers/node_modules/$n"
    target="$dir/node_modules/$n"
    [ -L "$link" ] && [ "$(readlink "$link")" = "$target" ] && continue
    mkdir -p "$(dirname "$link")"
    rm -rf "$link"
    ln -s "$target" "$link"
  done
fi
echo "$dir"
