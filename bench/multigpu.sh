#!/usr/bin/env bash
# bench/multigpu.sh: one model over several GPUs, one script for one call on a
# machine with GPUs (device kinds nvidia-h200, -x2, -x4).
#
# Builds weightmap with the CUDA backend (and NCCL where the toolkit has it), runs the CUDA and
# multi-device tests there (label cuda, multi), makes a GGUF model of SIZE (default 16G per GPU),
# warms the page cache, measures the ceilings in the same run (each device's host-to-device
# copy alone and all devices at once; N-thread pread of the model), then:
#   - the model placed over 1, 2 (and 4) devices, balanced by bytes (bench/gpu load --devices):
#     aggregate GB/s, host footprint sampled during the load, every byte verified once;
#   - `weightmap load --backend cuda:0,1 --cycles 3` (the verdict "all memory returned");
#   - tensor parallelism, 2 ranks in 2 processes at once (bench/gpu ranks): each loading whole
#     tensors, each its slice (--tp), and with 2 devices reading once with NCCL (--nccl, and
#     --tp --nccl): the slowest rank's time, and the bytes read against the file;
# and prints a table with the targets: >= 1.8x the single-device rate on 2 devices (>= 3.5x
# on 4), footprint <= 300 MiB per device.
#
# Usage: bench/multigpu.sh [SIZE]
# Environment: OUT (default /tmp/wm-multigpu-out), BUILD (default build-multigpu), MODELS
# (default /tmp/wm-gpu-models), DEPS (.deb files for wm_gpu_env, default .debs-py), REPEAT
# (default 5), SKIP_TESTS=1. NCCL_NVLS_ENABLE=0 is set (NVLink multicast stays off there).
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/wm-multigpu-out}
BUILD=${BUILD:-build-multigpu}
MODELS=${MODELS:-/tmp/wm-gpu-models}
DEPS=${DEPS:-.debs-py}
REPEAT=${REPEAT:-5}
NPROC=$(nproc)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
SIZE=${1:-$((16 * (NGPU > 0 ? NGPU : 1)))G}
mkdir -p "$OUT" "$MODELS"
JSONL="$OUT/bench.jsonl"
: >"$JSONL"
say() { echo "== $(date +%T) $*"; }

say "machine: $NGPU GPU(s), $NPROC CPUs"
nvidia-smi --query-gpu=index,name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -12

say "build ($BUILD)"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS"
if ! { cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FAULT_INJECTION=ON \
        "${cm[@]}" && cmake --build "$BUILD" -j"$NPROC" --target weightmap_cli bench_gpu test_cuda test_multi; } \
        >"$OUT/build.txt" 2>&1; then
    tail -40 "$OUT/build.txt"
    exit 1
fi
grep -iE "cuda backend|nccl" "$OUT/build.txt"
W="timeout 300 $BUILD/weightmap"
G="timeout 300 $BUILD/bench/gpu"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    say "tests (ctest -L 'cuda|multi')"
    (cd "$BUILD" && timeout 400 ctest -L '^(cuda|multi)$' -j4 --timeout 300 --output-on-failure) >"$OUT/tests.txt" 2>&1
    grep -E "tests passed|\*\*\*|Failed" "$OUT/tests.txt"
fi

say "model ($SIZE)"
M=$MODELS/multi-$SIZE.gguf
[ -f "$M" ] || $W make-model "$M" --size "$SIZE" >/dev/null
ls -l "$M"
cat "$M" >/dev/null
cat "$M" >/dev/null

all=$(seq -s, 0 $((NGPU - 1)))
say "ceilings"
$G h2d --bytes 1G --repeat 5 --devices "$all" | tee -a "$JSONL"
$G pread "$M" --threads "$NPROC" --repeat 3 | tee -a "$JSONL"

say "placement over 1..$NGPU devices"
for n in 1 2 4; do
    [ "$n" -le "$NGPU" ] || continue
    devs=$(seq -s, 0 $((n - 1)))
    $G load "$M" --devices "$devs" --repeat "$REPEAT" --verify | tee -a "$JSONL"
done
[ "$NGPU" -ge 2 ] && $G load "$M" --devices 0,1 --placement layers --repeat 3 | tee -a "$JSONL"

if [ "$NGPU" -ge 2 ]; then
    say "CLI: weightmap load --backend cuda:0,1 --cycles 3"
    $W load "$M" --mode heap --backend cuda:0,1 --cycles 3 2>&1 | tail -5
    $W load "$M" --mode heap --backend cuda:0,1 --placement layers --cycles 3 2>&1 | tail -2
fi

say "tensor parallelism: 2 ranks at once"
$G ranks "$M" --ranks 2 --repeat "$REPEAT" | tee -a "$JSONL"
$G ranks "$M" --ranks 2 --tp --repeat "$REPEAT" | tee -a "$JSONL"
if [ "$NGPU" -ge 2 ]; then
    $G ranks "$M" --ranks 2 --nccl --repeat "$REPEAT" | tee -a "$JSONL"
    $G ranks "$M" --ranks 2 --tp --nccl --repeat "$REPEAT" | tee -a "$JSONL"
fi

say "summary"
python3 - "$JSONL" <<'PY' | tee "$OUT/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
GiB, MiB = 1 << 30, 1 << 20
h2d = {r["device"]: r["best_gbps"] for r in rows if r["bench"] == "h2d-device"}
tog = next((r for r in rows if r["bench"] == "h2d-together"), None)
pr = next((r for r in rows if r["bench"] == "pread"), None)
print("| what | GB/s median | GB/s best | x 1 device | x ceiling | footprint peak above CUDA init | verified |")
print("|---|---:|---:|---:|---:|---:|---|")
for d, g in sorted(h2d.items()):
    print(f"| ceiling: H2D device {d} alone | | {g} | | | | |")
if tog:
    print(f"| ceiling: H2D all {tog['devices']} devices at once | | {tog['best_gbps']} | | | | |")
if pr:
    print(f"| ceiling: pread {pr['threads']} threads | | {pr['best_gbps']} | | | | |")
loads = [r for r in rows if r["bench"] == "load"]
one = next((r for r in loads if r["devices"] == 1), None)
for r in loads:
    n = r["devices"]
    ceil = min(sum(list(h2d.values())[:n]) if h2d else 0, pr["best_gbps"] if pr else 0) or None
    x1 = f"{r['median_gbps'] / one['median_gbps']:.2f}" if one else ""
    xc = f"{r['median_gbps'] / ceil:.2f}" if ceil else ""
    print(f"| {n} device(s), {r['placement']} | {r['median_gbps']} | {r['best_gbps']} | {x1} | {xc} | {r['footprint_peak_delta'] / MiB:.1f} MiB | {r['verified']} |")
print()
print("| ranks (2 processes at once) | slowest rank, median s | delivered GB/s (median) | bytes read / file |")
print("|---|---:|---:|---:|")
for r in (r for r in rows if r["bench"] == "ranks"):
    print(f"| {r['mode']} on {r['devices']} device(s) | {r['median_s']} | {r['delivered_gbps_median']} | {r['read_x_file']} |")
PY
say "done"
