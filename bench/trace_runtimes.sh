#!/bin/sh
# trace_runtimes.sh: `weightmap trace` on runtimes as they ship, three load/release cycles each,
# and one markdown row per run (bench/RESULTS.md#trace, docs/TRACE.md "What runtimes showed"):
#   llama.rn's Node twin (@fugood/llama.node, scripts/peer-node.sh; tests/trace/app.mjs), use_mmap
#     on and off, markers llama_model_load_from_file and llama_model's base destructor;
#   node-llama-cpp 3.21.1 (installed into the npm cache outside the clone when missing,
#     scripts/npm-cache.sh: 83 MB, 117 packages, install scripts off), useMmap on and off;
#   llama.cpp's own loader (tests/trace/llama_driver, scripts/peer.sh), read and mmap mode;
#   Python with Debian's torch (torch.load of a 64 MiB state dict) and with weightmap's package
#     (load_file, mmap and heap; build-py/python from `make python-build`), bench/trace_python.py.
# Usage: bench/trace_runtimes.sh BUILD MODEL.gguf MODEL.safetensors   (BUILD: a build folder with
# the tests, e.g. build, which `make build` makes; the figures of each run in
# $TMPDIR/wmtrace-runtimes/)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd) gguf=$2 st=$3
w="$build/weightmap" out="${TMPDIR:-/tmp}/wmtrace-runtimes"
mkdir -p "$out"
# its own set in the cache (not linked into bench/peers: peer.sh's link stays peer.sh's); the app
# is written beside the set's node_modules, where its import finds the package
nlc=$(WM_NPM_NO_LINK=1 "$root/scripts/npm-cache.sh" node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 \
  -- --ignore-scripts --omit=optional)
cat > "$nlc/app.mjs" <<'JS'
import { getLlama } from 'node-llama-cpp';
const [modelPath, mmap = 'on', cycles = '3'] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: 'never', progressLogs: false, logLevel: 'error' });
for (let c = 0; c < Number(cycles); c++) {
  const model = await llama.loadModel({ modelPath, useMmap: mmap !== 'off' });
  await model.dispose();
}
await llama.dispose();
JS
run() { # NAME MARKERS CMD...: one traced run, its JSON kept
  name=$1 markers=$2
  shift 2
  # shellcheck disable=SC2086
  "$w" trace --json --out "$out/$name.json" $markers -- "$@" >/dev/null 2>&1 || true
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
mib = lambda b: f"{b / 1048576:.1f}"
rel = j["releases"]
fps = ", ".join("not read" if r["at"]["footprint"] is None else mib(r["at"]["footprint"])
                for r in rel)
kept = ", ".join(mib(l["kept_at_end"]) for l in j["loads"])
scr = ", ".join(mib(l["scratch"]) for l in j["loads"])
thr = sum(1 for r in rel if r["load"] and j["loads"][r["load"] - 1]["tid"] != r["tid"])
calls = "; ".join(f'{m["spec"]} {m["calls"]}' for m in j["markers"] if m["sites"]) or "signal"
rules = ", ".join(sorted({v["rule"] for v in j["verdicts"]})) or j["outcome"]
print(f"| {sys.argv[2]} | {calls} | {len(j['loads'])} | {len(rel)} ({thr} on another thread) "
      f"| {fps} | {kept} | {scr} | {len(j['mappings'])} | {rules} |")
PY
}
ll="--load-marker llama_model_load_from_file"
echo "| run | marker calls | loads | releases | footprint after each release, MiB | kept past each load (malloc), MiB | scratch per load, MiB | weight mappings | verdicts |"
echo "|---|---|---:|---|---|---|---|---:|---|"
for m in on off; do
  run "llama.node-mmap-$m" "$ll --cycles-marker _ZN11llama_modelD2Ev --cycles-marker llama_model_free" \
    node "$root/tests/trace/app.mjs" "$gguf" $m 3
done
for m in on off; do
  run "node-llama-cpp-mmap-$m" "$ll --cycles-marker llama_model_free" node "$nlc/app.mjs" "$gguf" $m 3
done
for m in 0 1; do
  run "llama_driver-mode-$m" "$ll --cycles-marker llama_model_free" \
    "$build/tests/trace/llama_driver" "$("$root/scripts/peer.sh")" $m 3 "$gguf"
done
pt="$out/state_dict.pt"
[ -f "$pt" ] || /usr/bin/python3 "$root/bench/trace_python.py" torch "$pt" 0
run torch "--file $pt" /usr/bin/python3 "$root/bench/trace_python.py" torch "$pt" 3
export PYTHONPATH="$root/build-py/python"
for m in mmap heap; do
  run "weightmap-py-$m" "" \
    /usr/bin/python3 "$root/bench/trace_python.py" weightmap "$st" 3 $m
done
