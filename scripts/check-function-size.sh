#!/bin/sh
# check-function-size.sh: no function over 100 lines in src/ (the generated src/convert/iq_grids.c
# aside), cli/, bridge/, tools/, bench/, examples/ or python/ (C, and Python in python/, bench/
# and tools/). A step of
# `make test` (docs/TESTING.md); it reads the files only, in well under a second.
#
# C (as clang-format lays it out): a definition starts at a line in column 0 that begins with a
# letter, its body at the first line after it that ends with "{" and ends at the next line that
# is exactly "}"; its length is the lines of the body between the braces. Python: a def runs
# until the next non-blank line indented no deeper than it.
# Usage: scripts/check-function-size.sh [MAX]   (from anywhere; exit 1 naming each function over)
set -eu
cd "$(dirname "$0")/.."
max=${1:-100}
c_files=$(git ls-files -co --exclude-standard -- src cli bridge tools bench python examples |
  grep -E '\.c$' | grep -v '^src/convert/iq_grids\.c$' || true)
py_files=$(git ls-files -co --exclude-standard -- python bench tools | grep -E '\.py$' || true)
rc=0
if [ -n "$c_files" ]; then
  # shellcheck disable=SC2086
  awk -v max="$max" '
    FNR == 1 { head = ""; open = 0 }
    /^[A-Za-z_]/ && !/^(typedef|struct|enum|union)[^(]*$/ { head = $0; headline = FNR; open = 0 }
    head != "" && !open && /\{[ \t]*$/ { open = FNR; next }
    open && /^}$/ {
      n = FNR - open - 1
      if (n > max) {
        name = head; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
        printf "%s:%d: %s is %d lines (at most %d)\n", FILENAME, headline, name, n, max
        bad = 1
      }
      head = ""; open = 0
    }
    END { exit bad }' $c_files || rc=1
fi
if [ -n "$py_files" ]; then
  # shellcheck disable=SC2086
  awk -v max="$max" '
    function done_def(last) {
      if (def != "" && last - defline + 1 > max) {
        printf "%s:%d: %s is %d lines (at most %d)\n", FILENAME, defline, def, last - defline + 1, max
        bad = 1
      }
      def = ""
    }
    FNR == 1 { if (def != "") done_def(lastline); def = "" }
    /^[ \t]*$/ { next }
    {
      match($0, /^[ \t]*/); ind = RLENGTH
      if (def != "" && ind <= defind) done_def(lastline)
      if ($0 ~ /^[ \t]*(async[ \t]+)?def[ \t]/ && def == "") {
        def = $0; sub(/^[ \t]*(async[ \t]+)?def[ \t]+/, "", def); sub(/\(.*/, "", def)
        defline = FNR; defind = ind
      }
      lastline = FNR
    }
    END { if (def != "") done_def(lastline); exit bad }' $py_files || rc=1
fi
exit $rc
