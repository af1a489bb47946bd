#!/usr/bin/env bash
# bench/gpu_sleep.sh: an 8 GiB model brought back to cuda:0 after it was let go (issue 45,
# bench/RESULTS.md "reload"), on a machine with a GPU, in one call.
#
# What it measures, each REPEAT times, the file warm in the page cache:
#   sleep     `weightmap swap A B --backend cuda:0 --device-budget D --sleep`: two 8 GiB models
#             in rotation through the pool with room on the device for one; every switch puts
#             the idle one to sleep (its weights copied to a pageable host copy through a small
#             pinned bounce ring, its device memory proven back by the ledger) and wakes the
#             other (its weights copied back the same way: the bus's speed, if the load's threads
#             keep the ring filled). The issue's target: a wake under 0.3 s for 8 GiB. The
#             table gives each wake and sleep part by part (swap --json's "wake" and "sleep":
#             device buffers made, copies and their GiB/s, the ring unregistered, the ring's and
#             the host copy's pages freed; host pages mapped, the ring registered, copies, device
#             buffers freed).
#   evict     the same without --sleep: every switch evicts one and reloads the other from the
#             page cache through the staged path.
#   reload    `weightmap load A --mode heap --backend cuda:0 --cycles REPEAT`: the same reload
#             without the pool, for comparison (its per-cycle load seconds).
#   parts     `bench/gpu sleep A --repeat REPEAT` with the default copies (a bounce ring of four
#             64 MiB slots, 64 MiB pieces over two streams, huge pages advised; bytes verified
#             after the last wake), then with one choice changed at a time (--pinned-whole: no
#             ring, the host copy registered whole at the sleep and unregistered after the wake's
#             copies, as in 1.8; 1 or 4 streams; 16 MiB or 256 MiB pieces and slots; no huge
#             pages; no prefaulting threads before the host copy is used: the ring's workers
#             fault it as they copy into it, beside the device's copies): the sleep and wake of
#             one model without a pool, part by part, and how much of the host copy the kernel
#             backed with huge pages.
#   bus       `bench/gpu h2d --bytes 8G`: pinned host-to-device copies of 8 GiB, the ceiling a
#             pinned-memory sleep would wake at (the issue's target: under 0.3 s for 8 GiB).
# Prints a table and writes the raw outputs to OUT.
#
# Usage: bench/gpu_sleep.sh [SIZE]        (SIZE default 8G)
# Environment: OUT (default /tmp/wm-sleep-out), BUILD (default build-gpu), MODELS (default
# /tmp/wm-gpu-models), DEPS (default .debs, as bench/gpu.sh), REPEAT (default 5), CHOICES (the
# parts' choices, comma-separated; default all of the above).
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

say "pool: swap on cuda:0, sleeping"
timeout 900 "$CLI" swap "$A" "$B" --cycles "$REPEAT" --budget $((BYTES * 3)) --device-budget "$DEV" \
    --backend cuda:0 --sleep --json >"$OUT/sleep.json" 2>"$OUT/sleep.err"
echo "exit $?" | tee -a "$OUT/log.txt"
cat "$OUT/sleep.err"

say "pool: swap on cuda:0, evicting"
timeout 900 "$CLI" swap "$A" "$B" --cycles "$REPEAT" --budget 4G --device-budget "$DEV" \
    --backend cuda:0 --json >"$OUT/swap.json" 2>"$OUT/swap.err"
echo "exit $?" | tee -a "$OUT/log.txt"
cat "$OUT/swap.err"

say "reload without the pool"
timeout 900 "$CLI" load "$A" --mode heap --backend cuda:0 --cycles "$REPEAT" --json \
    >"$OUT/load.json" 2>"$OUT/load.err"
echo "exit $?" | tee -a "$OUT/log.txt"

say "sleep and wake alone, part by part, and the copies' choices (bench/gpu sleep)"
# the default (the bounce ring; 64 MiB pieces over 2 streams, huge pages advised; its bytes
# verified after), then one choice changed at a time
: >"$OUT/parts.jsonl"
# CHOICES: a shorter list, comma-separated (e.g. "--verify,--pinned-whole --verify")
IFS=, read -r -a choices <<<"${CHOICES:---verify,--pinned-whole --verify,--streams 1,--streams 4,--piece 16M,--piece 256M,--no-huge,--no-prefault}"
for v in "${choices[@]}"; do
    # shellcheck disable=SC2086 # $v is one or two words on purpose
    timeout 300 "$BUILD/bench/gpu" sleep "$A" --repeat "$REPEAT" $v >>"$OUT/parts.jsonl" \
        2>>"$OUT/parts.err"
    echo "gpu sleep $v: exit $?" | tee -a "$OUT/log.txt"
done
cat "$OUT/parts.err"
for k in enabled defrag; do
    echo "THP $k: $(cat /sys/kernel/mm/transparent_hugepage/$k 2>/dev/null)" | tee -a "$OUT/log.txt"
done

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
    sw = json.load(open(f"{out}/sleep.json"))
    woke = [r["wake_seconds"] for r in sw["switches"] if r.get("woke")]
    switch = [r["seconds"] for r in sw["switches"] if r.get("woke")]
    print(f"wake from host memory alone: median {med(woke):.3f} s over {len(woke)} wakes, "
          f"{gib / med(woke):.1f} GiB/s (target: under 0.3 s for 8 GiB); the whole switch (the "
          f"other put to sleep first, then the wake): median {med(switch):.3f} s; "
          f"sleeps={sw['sleeps']} unproven={sw['unproven']} ok={sw['ok']}")
    def parts(kind, names):
        rows = [r[kind] for r in sw["switches"] if kind in r]
        if not rows:
            print(f"  {kind}: no part-by-part figures (a build before the breakdown?)")
            return
        b = med([r["bytes"] for r in rows]) / 2**30
        cp = med([r["copy_seconds"] for r in rows])
        line = ", ".join(f"{n} {med([r[k] for r in rows]):.3f} s" for k, n in names)
        print(f"  {kind} (median of {len(rows)}): whole {med([r['seconds'] for r in rows]):.3f} s"
              f" = {line}; the copies {b / cp if cp else float('nan'):.1f} GiB/s of {b:.2f} GiB")
    parts("wake", [("alloc_seconds", "device buffers"), ("copy_seconds", "copies"),
                   ("unregister_seconds", "ring unregistered"),
                   ("free_seconds", "ring and host copy freed")])
    parts("sleep", [("alloc_seconds", "host copy and ring pages"),
                    ("register_seconds", "ring registered (pinned)"),
                    ("copy_seconds", "copies"), ("free_seconds", "device buffers freed")])
except Exception as e:
    print("sleep: no result:", e)
try:
    sw = json.load(open(f"{out}/swap.json"))
    re = [r["seconds"] for r in sw["switches"] if r["evicted"] and not r["resident"]]
    print(f"pool reload after an eviction (page cache, staged path): median {med(re):.3f} s over "
          f"{len(re)} switches, {gib / med(re):.1f} GiB/s; unproven={sw['unproven']} "
          f"ok={sw['ok']}")
except Exception as e:
    print("evict: no result:", e)
try:
    ld = json.load(open(f"{out}/load.json"))
    secs = [c["load_seconds"] for c in ld["cycles"]]
    print(f"reload without the pool: median {med(secs):.3f} s ({gib / med(secs):.1f} GiB/s)")
except Exception as e:
    print("load: no result:", e)
print("bus (pinned H2D, the ceiling of a wake): see h2d.txt above")
print("bench/gpu sleep (one model, no pool; medians; s = seconds):")
print(f"  {'choice':<30} {'wake':>6} {'alloc':>6} {'ring':>6} {'copy':>6} {'GiB/s':>6} "
      f"{'unreg':>6} {'free':>6} | {'sleep':>6} {'pages':>6} {'reg':>6} {'copy':>6} {'GiB/s':>6} "
      f"{'unreg':>6} {'free':>6} {'huge':>5}")
try:
    for line in open(f"{out}/parts.jsonl").read().replace(",\n", ",").splitlines():
        r = json.loads(line)
        w, sl = r["wake"], r["sleep"]
        name = f"{r['piece'] >> 20}M x{r['streams']}" + ("" if r["huge_advised"] else " no-huge")
        name += "" if r.get("prefault", True) else " no-prefault"
        name += " pinned whole" if r.get("pinned_whole", r.get("parts") == 1) else ""
        if r["verified"] is not None:
            name += " verified" if r["verified"] else " DIFFERS"
        huge = r["anon_huge_asleep"] / r["bytes"] if r["bytes"] else 0
        ring = w.get("host_alloc", 0) + w.get("host_register", 0)
        print(f"  {name:<30} {w['seconds']:6.3f} {w['device_alloc']:6.3f} {ring:6.3f} "
              f"{w['copy']:6.3f} {w['copy_gibps']:6.1f} {w['host_unregister']:6.3f} "
              f"{w['host_free']:6.3f} | {sl['seconds']:6.3f} {sl['host_alloc']:6.3f} "
              f"{sl['host_register']:6.3f} {sl['copy']:6.3f} {sl['copy_gibps']:6.1f} "
              f"{sl.get('host_unregister', 0):6.3f} {sl['device_free']:6.3f} {huge:5.0%}")
except Exception as e:
    print("  no result:", e)
print("  ring: the wake's bounce ring made (pages, faulting) and registered; unreg: the ring's "
      "unregistration (pinned whole: the host copy's); free: pages freed (wake: the ring's and the "
      "host copy's; sleep: the device buffers); huge: the share of the host copy the kernel "
      "backed with huge pages while asleep (AnonHugePages)")
PY
