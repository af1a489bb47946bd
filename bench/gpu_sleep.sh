#!/usr/bin/env bash
# bench/gpu_sleep.sh: an 8 GiB model brought back to cuda:0 after it was let go (issue 45,
# bench/RESULTS.md "reload"), on a machine with a GPU, in one call.
#
# What it measures, each REPEAT times, the file warm in the page cache:
#   pool      `weightmap swap A B --backend cuda:0 --device-budget D`: two 8 GiB models in
#             rotation through the pool with room on the device for one, so every switch
#             evicts one (its device memory proven back by the ledger) and loads the other from
#             the page cache through the staged path. This is what a "sleeping" GPU model costs
#             to wake today: the pool does not yet keep an evicted GPU model's weights in pinned
#             host memory (docs/ARCHITECTURE.md, "Budgets"), so waking is a reload from the
#             page cache.
#   reload    `weightmap load A --mode heap --backend cuda:0 --cycles REPEAT`: the same reload
#             without the pool, for comparison (its per-cycle load seconds).
#   bus       `bench/gpu h2d --bytes 8G`: pinned host-to-device copies of 8 GiB, the ceiling a
#             pinned-memory sleep would wake at (the issue's target: under 0.3 s for 8 GiB).
# Prints a table and writes the raw outputs to OUT.
#
# Usage: bench/gpu_sleep.sh [SIZE]        (SIZE default 8G)
# Environment: OUT (default /tmp/wm-sleep-out), BUILD (default build-gpu), MODELS (default
# /tmp/wm-gpu-models), DEPS (default .debs, as bench/gpu.sh), REPEAT (default 5).
set -u
SIZE=${1:-8G}
OUT=${OUT:-/tmp/wm-sleep-out}
BUILD=${BUILD:-build-gpu}
MODELS=${MODELS:-/tmp/wm-gpu-models}
DEPS=${DEPS:-.debs}
REPEAT=${REPEAT:-5}
NPROC=$(nproc)
mkdir -p "$OUT" "$MODELS"
say() { echo "== $(date +%T) $*" | tee -a "$OUT/log.txt"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee "$OUT/machine.txt"

say "build ($BUILD)"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS" >"$OUT/env.txt"
if ! { cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cm[@]}" &&
        cmake --build "$BUILD" -j"$NPROC" --target weightmap_cli bench_gpu; } >"$OUT/build.txt" 2>&1; then
    tail -40 "$OUT/build.txt"
    exit 1
fi
CLI="$BUILD/weightmap"

say "models ($SIZE x 2)"
for s in 1 2; do
    f="$MODELS/sleep-$SIZE-$s.gguf"
    [ -f "$f" ] || "$CLI" make-model "$f" --size "$SIZE" --seed "$s" >/dev/null || exit 1
    cat "$f" >/dev/null # warm
done
A="$MODELS/sleep-$SIZE-1.gguf"
B="$MODELS/sleep-$SIZE-2.gguf"
BYTES=$(stat -c %s "$A")
# room on the device for one model and a half: each switch evicts the other
DEV=$((BYTES * 3 / 2))

say "fit"
"$CLI" fit "$A" --mode heap --backend cuda:0 | tee "$OUT/fit.txt"

say "pool: swap on cuda:0"
timeout 900 "$CLI" swap "$A" "$B" --cycles "$REPEAT" --budget 4G --device-budget "$DEV" \
    --backend cuda:0 --json >"$OUT/swap.json" 2>"$OUT/swap.err"
echo "exit $?" | tee -a "$OUT/log.txt"
cat "$OUT/swap.err"

say "reload without the pool"
timeout 900 "$CLI" load "$A" --mode heap --backend cuda:0 --cycles "$REPEAT" --json \
    >"$OUT/load.json" 2>"$OUT/load.err"
echo "exit $?" | tee -a "$OUT/log.txt"

say "bus: pinned host-to-device"
timeout 300 "$BUILD/bench/gpu" h2d --bytes "$BYTES" --repeat "$REPEAT" >"$OUT/h2d.txt" 2>&1
cat "$OUT/h2d.txt"

say "table"
python3 - "$OUT" "$BYTES" <<'PY'
import json, statistics, sys
out, size = sys.argv[1], int(sys.argv[2])
gib = size / 2**30
def med(v): return statistics.median(v) if v else float("nan")
try:
    sw = json.load(open(f"{out}/swap.json"))
    woke = [r["seconds"] for r in sw["switches"] if r["evicted"] and not r["resident"]]
    print(f"pool wake (evict one, reload the other on cuda:0): median {med(woke):.3f} s over "
          f"{len(woke)} switches, {gib / med(woke):.1f} GiB/s; verdict ok={sw['ok']} "
          f"unproven={sw['unproven']} peak={sw['peak']} budget={sw['budget']}")
except Exception as e:
    print("pool: no result:", e)
try:
    ld = json.load(open(f"{out}/load.json"))
    secs = [c["load_seconds"] for c in ld["cycles"]]
    print(f"reload without the pool: median {med(secs):.3f} s ({gib / med(secs):.1f} GiB/s)")
except Exception as e:
    print("load: no result:", e)
print("bus (pinned H2D, the ceiling of a pinned sleep): see h2d.txt above; target for 8 GiB: "
      "under 0.3 s")
PY
