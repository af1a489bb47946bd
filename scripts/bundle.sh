# bundle.sh: sourced by scripts/ggml.sh and scripts/llama.sh, not run. What both do to put a part
# of llama.cpp v0.4.0's source (npm node-llama-cpp@3.21.1, llama/gitRelease.bundle: a git bundle
# of one squashed commit) beside the peer's prebuilt libraries in the npm cache outside the clone
# (scripts/npm-cache.sh), linked into the clone as bench/peers/NAME:
#
#   bundle_setup NAME FOLDER STAMP   the link bench/peers/NAME, the cache folder FOLDER (under
#                                    npm-cache.sh --root) and the stamp that says it is complete
#   bundle_ready FILE...             exits 0 printing the link when the stamp and FILEs are there
#   bundle_lock                      one builder at a time (other clones share the cache); after
#                                    it, bundle_ready again: the winner's folder serves the rest
#   bundle_extract PATH...           $tmp/tree: those paths of the bundle's commit, checked to be
#                                    ggml 0.23.0; $commit and $info (llama.cpp.info.json) set
#   bundle_link_libs LIB...          $out/lib/: a link to each of the peer's libraries named
#   bundle_finish                    SOURCE and stamp written, $out moved into place, link made,
#                                    the link printed
#
# The caller sets `who` (its name, for messages), `here` (the repository) and `lib` (the peer's
# library folder, scripts/peer.sh) first, and fills $out between bundle_extract and bundle_finish.
bundle_setup() {
  link="$here/bench/peers/$1"
  dir="$("$here/scripts/npm-cache.sh" --root)/$2"
  want=$3
}
bundle_link() {
  [ -L "$link" ] && [ "$(readlink "$link")" = "$dir" ] && return 0
  mkdir -p "$(dirname "$link")"
  rm -rf "$link"
  ln -s "$dir" "$link"
}
bundle_ready() {
  [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$want" ] || return 0
  for f in "$@"; do
    [ -e "$dir/$f" ] || return 0
  done
  bundle_link
  echo "$link"
  exit 0
}
bundle_lock() {
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$dir.lock"
    flock 9
  fi
}
bundle_extract() {
  command -v git >/dev/null 2>&1 || { echo "$who: git is not installed" >&2; exit 1; }
  tgz=$("$here/scripts/npm-cache.sh" --pack node-llama-cpp@3.21.1)
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  cd "$tmp"
  tar -xzf "$tgz" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
  git clone -q --bare package/llama/gitRelease.bundle src.git
  mkdir tree
  git -C src.git archive HEAD ggml/CMakeLists.txt "$@" | tar -x -C tree
  ver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' tree/ggml/CMakeLists.txt | paste -sd.)
  if [ "$ver" != "0.23.0" ]; then
    echo "$who: the bundle's ggml is $ver, not 0.23.0 (the peer's libraries)" >&2
    exit 1
  fi
  commit=$(git -C src.git rev-parse HEAD)
  info=$(tr -d ' \n' < package/llama/llama.cpp.info.json)
  out="$tmp/out"
  mkdir -p "$out/lib"
}
bundle_link_libs() {
  for f in "$@"; do
    ln -s "$f" "$out/lib/$(basename "$f")"
  done
}
bundle_finish() {
  printf 'llama.cpp source: node-llama-cpp@3.21.1 llama/gitRelease.bundle, commit %s (%s)\n' \
    "$commit" "$info" > "$out/SOURCE"
  echo "$want" > "$out/stamp"
  cd "$here"
  rm -rf "$dir"
  mv "$out" "$dir"
  rm -rf "$tmp"
  bundle_link
  echo "$link"
}
