#!/usr/bin/env bash
# llama_modes.sh BUILD [MODEL] [ROUNDS] [FLAGS]: the rows of bench/RESULTS.md, llama, "Load modes"
# in one run: every load mode of llama.cpp v0.4.0 through the bridge and by llama.cpp's own
# loader, cold and warm (load ms, the disk's ratio, RssAnon while loaded, the file's regions:
# BUILD/bench/llama_modes), then each under `weightmap trace --cycles-marker llama_model_free`,
# 5 cycles (tests/trace/llama_driver and tests/trace/wm_llama_driver, WM_LLAMA_LOAD_MODE), with
# the CPU variant ggml picks for this machine: the rules broken, the footprint at each release. MODEL
# defaults to bench-llama-1200M.gguf (made with BUILD/weightmap make-model when missing, at the
# size its name ends in, bench-llama-SIZE.gguf: 1200M here; a missing file of another name is an
# error, not a 1200M model under that name: 1.8.5's first host run of "256M" loaded 1.2 GiB);
# BUILD: a build folder with the tests and benchmarks (build-test). FLAGS go to the
# load table: --gpu (n_gpu_layers 999; the tracer's drivers stay on the CPU), --warm-memory GIB
# (the development VM: 1.5). TRACE_COLD=1: the file dropped from the page cache before each
# trace, so that its first cycle loads cold; TRACE_ONLY=1 leaves the load table out, TRACE_MODES
# (default "0 1 2 3 4") names the modes traced.
set -euo pipefail
B=$1
M=${2:-bench-llama-1200M.gguf}
R=${3:-3}
shift; shift || true; shift || true
G="$*"
if [ ! -f "$M" ]; then
  S=$(basename "$M" | sed -n 's/^bench-llama-\([0-9]*[KMG]\)\.gguf$/\1/p')
  [ -n "$S" ] || { echo "llama_modes.sh: $M missing (bench-llama-SIZE.gguf names are made)" >&2; exit 2; }
  "$B/weightmap" make-model "$M" --size "$S" >/dev/null
fi
[ "${TRACE_ONLY:-0}" = 1 ] || "$B/bench/llama_modes" -r "$R" $G "$M"
P=$(cd bench/peers/llama/lib && pwd) # the prebuilt libraries (scripts/llama.sh's links)
J=$(mktemp)
trap 'rm -f "$J"' EXIT
verdict() { # LOADER MODE
python3 - "$1" "$2" "$J" <<'PY'
import json, re, sys
name, mode, f = sys.argv[1:4]
j = json.load(open(f)); M = 2**20
rel, l = j['releases'], j['loads'][0]
fp = ', '.join('%.1f' % (r['at']['footprint'] / M) for r in rel)
live = sum(1 for m in j['mappings'] if m['unmapped'] is None)
v = j['verdicts']
at = [re.match(r'release (\d+)', x['message']) for x in v]
vd = 'clean' if not v else ', '.join(sorted(set(x['rule'] for x in v))) + ' (' + ', '.join(
    'release ' + m.group(1) if m else '?' for m in at) + ')'
print('| %s | %s | %.1f | %s | %.1f (%.1f) | %.1f | %d (%d) | %s |' % (
    mode, name, j['footprint']['peak'] / M, fp, l['scratch'] / M, l['scratch_largest'] / M,
    l['kept_at_end'] / M, len(j['mappings']), live, vd))
PY
}
echo
echo "#### the tracer, 5 cycles each: $M"
echo
echo "| mode | loader | peak footprint MiB | footprint at releases 1-5, MiB | scratch of load 1 (largest), MiB | kept past load 1, MiB | mappings (live at exit) | verdict |"
echo "|---|---|---:|---|---:|---:|---:|---|"
names=(none mmap mlock mmap+mlock dio)
cold() { [ "${TRACE_COLD:-0}" = 1 ] || return 0
  python3 -c "import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$M"; }
for mode in ${TRACE_MODES:-0 1 2 3 4}; do
  cold
  "$B/weightmap" trace --json --out "$J" --cycles-marker llama_model_free -- \
    "$B/tests/trace/llama_driver" "$P" $mode 5 "$M" >/dev/null 2>&1 || true
  verdict "llama.cpp" "${names[$mode]}"
  cold
  WM_LLAMA_LOAD_MODE=$mode "$B/weightmap" trace --json --out "$J" --cycles-marker llama_model_free \
    -- "$B/tests/trace/wm_llama_driver" "$P" 5 "$M" >/dev/null 2>&1 || true
  verdict "wm_llama_load" "${names[$mode]}"
done
