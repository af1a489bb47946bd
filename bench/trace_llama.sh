#!/usr/bin/env bash
# trace_llama.sh BUILD MODEL...: the rows of bench/RESULTS.md "Under the tracer, the scratch
# followed page by page": llama.cpp's read and mmap modes (tests/trace/llama_driver) and the
# bridge (tests/trace/wm_llama_driver, in its read mode NONE: bench/llama_modes.sh traces every
# mode) with and without its trim and own buffers, 5 cycles each
# under `weightmap trace --cycles-marker llama_model_free`, with the peer's CPU variant for this
# machine. BUILD: a build folder with the tests (build-test).
set -euo pipefail
B=$1; shift
P=$(scripts/peer.sh)
J=$(mktemp)
trap 'rm -f "$J"' EXIT
row() { # LOADER MODEL
python3 - "$1" "$2" "$J" <<'PY'
import json, re, sys
name, model, f = sys.argv[1:4]
j = json.load(open(f)); M = 2**20
rel, l = j['releases'], j['loads'][0]
fig = lambda b: 'not read' if b is None else '%.1f' % (b / M)
fp = ', '.join(fig(r['at']['footprint']) for r in rel)
mf = ', '.join(fig(r['at']['malloc_free']) for r in rel)
sr = ', '.join('-' if r['scratch_resident'] is None else '%.2f' % (r['scratch_resident'] / M) for r in rel)
live = sum(1 for m in j['mappings'] if m['unmapped'] is None)
v = j['verdicts']
at = [re.match(r'release (\d+)', x['message']) for x in v]
vd = j['outcome'] if not v else ', '.join(sorted(set(x['rule'] for x in v))) + ' (' + ', '.join(
    'release ' + m.group(1) if m else '?' for m in at) + ')'
print('| %s | %s | %.1f | %s | %s | %.1f (%.1f) | %.1f (%.1f) | %s | %d (%d) | %s |' % (
    model, name, j['footprint']['first'] / M, fp, mf, l['kept_at_end'] / M, l['kept_largest'] / M,
    l['scratch'] / M, l['scratch_largest'] / M, sr, len(j['mappings']), live, vd))
PY
}
for m in "$@"; do
  mn=$(basename "$m" .gguf)
  for mode in 0 1; do
    "$B/weightmap" trace --json --out "$J" --cycles-marker llama_model_free -- \
      "$B/tests/trace/llama_driver" "$P" $mode 5 "$m" >/dev/null 2>&1 || true
    row "llama.cpp $([ $mode = 0 ] && echo read || echo mmap)" "$mn"
  done
  for e in X=1 WM_LLAMA_TRIM=off WM_LLAMA_BUFFERS=llama; do
    env WM_LLAMA_LOAD_MODE=0 $e "$B/weightmap" trace --json --out "$J" --cycles-marker llama_model_free -- \
      "$B/tests/trace/wm_llama_driver" "$P" 5 "$m" >/dev/null 2>&1 || true
    n="wm_llama_load"; [ "$e" != X=1 ] && n="wm_llama_load, \`${e#WM_LLAMA_}\`"
    row "$n" "$mn"
  done
done
