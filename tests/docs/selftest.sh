#!/bin/sh
# The docs checker's own test (make test-docs runs it first): tests/docs/page.md matches as
# written; a copy with one output changed must fail naming the command; --write must then
# regenerate the copy so that it matches again, keeping its elisions; a block with a prompt and
# no marker must fail.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
run="$here/scripts/docrun.py --build ${1:-build-test} --python ${PYTHON:-python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$run "$here/tests/docs/page.md" >"$tmp/ok.log" || { cat "$tmp/ok.log"; echo "selftest: page.md does not match" >&2; exit 1; }
sed 's/^    four$/    five/; s/^    42$/    43/' "$here/tests/docs/page.md" >"$tmp/drift.md"
if $run "$tmp/drift.md" >"$tmp/drift.log"; then
  echo "selftest: a drifted page passed the check" >&2; exit 1
fi
grep -q "printf 'one" "$tmp/drift.log" && grep -q "print(x \* 7)" "$tmp/drift.log" \
  || { cat "$tmp/drift.log"; echo "selftest: the failure does not name both commands" >&2; exit 1; }
$run --write "$tmp/drift.md" >/dev/null
cmp -s "$tmp/drift.md" "$here/tests/docs/page.md" \
  || { diff "$here/tests/docs/page.md" "$tmp/drift.md" >&2; echo "selftest: --write did not restore the page" >&2; exit 1; }
printf 'text\n\n    $ echo unmarked\n    unmarked\n' >"$tmp/unmarked.md"
if $run "$tmp/unmarked.md" >"$tmp/unmarked.log"; then
  echo "selftest: a block without a marker passed" >&2; exit 1
fi
echo "selftest: docrun ok (match, drift caught, regenerated, unmarked block refused)"
