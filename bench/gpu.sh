#!/usr/bin/env bash
# bench/gpu.sh: the GPU benchmark, one script for one call on a machine with a GPU.
#
# Builds weightmap with the CUDA backend, runs the CUDA tests and the CLI there, makes a model
# of SIZE (default 8G) as GGUF and as safetensors with `weightmap make-model`, warms the page
# cache, measures the ceilings right there (cudaMemcpyAsync of a registered host buffer to the
# device; N-thread pread of the model into memory), then weightmap's staged and registered
# paths (bench/gpu/: time, host footprint sampled during the load, every byte verified once)
# and safetensors.torch.load_file(path, device="cuda:0") (bench/gpu_safetensors.py), and prints
# a table with the targets: >= 0.9 x min(H2D, pread), >= 5 x safetensors, footprint <= 300 MiB
# above its value right after CUDA initialisation.
#
# Usage: bench/gpu.sh [SIZE]
# Environment: OUT (folder for logs and results, default /tmp/wm-gpu-out), BUILD (build folder,
# default build-gpu), MODELS (model folder, default /tmp/wm-gpu-models), DEPS (a folder of .deb
# files unpacked by scripts/gpu_env.sh; the build needs none; default .debs), SKIP_TESTS=1,
# REPEAT (default 5), TUNE=1 (also run the pipeline's tuning matrix), EXPLORE=1 (with TUNE=1:
# also `bench/gpu register`, the no-copy design's figures).
set -u
SIZE=${1:-8G}
OUT=${OUT:-/tmp/wm-gpu-out}
BUILD=${BUILD:-build-gpu}
MODELS=${MODELS:-/tmp/wm-gpu-models}
DEPS=${DEPS:-.debs}
REPEAT=${REPEAT:-5}
NPROC=$(nproc)
mkdir -p "$OUT" "$MODELS"
LOG="$OUT/log.txt"
JSONL="$OUT/bench.jsonl"
: >"$JSONL"
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }

# ---- the machine ----
say "machine"
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
    echo "cpus: $NPROC"
    grep -m1 "model name" /proc/cpuinfo
    free -g
    uname -r
    head -2 /etc/os-release
    cmake --version | head -1
    ninja --version
    command -v pkg-config
    python3 -c 'import torch, safetensors; print("torch", torch.__version__, "safetensors", safetensors.__version__)'
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" | tee -a "$LOG"

# ---- build ----
say "build ($BUILD)"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS" >"$OUT/env.txt"
tee -a "$LOG" <"$OUT/env.txt"
if ! { cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FAULT_INJECTION=ON \
        "${cm[@]}" && cmake --build "$BUILD" -j"$NPROC" --target weightmap_cli bench_gpu test_cuda; } >"$OUT/build.txt" 2>&1; then
    tail -40 "$OUT/build.txt" | tee -a "$LOG"
    exit 1
fi
grep -i "cuda backend" "$OUT/build.txt" | tee -a "$LOG"
# Each step has a time limit, so that one that hangs cannot take the rest with it.
W="timeout 300 $BUILD/weightmap"
G="timeout 120 $BUILD/bench/gpu"

# ---- tests ----
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    say "tests (ctest -L cuda)"
    (cd "$BUILD" && timeout 300 ctest -L cuda -j4 --timeout 240 --output-on-failure -V) >"$OUT/tests.txt" 2>&1
    grep -E "Test +#|tests passed" "$OUT/tests.txt" | tee -a "$LOG"
fi

# ---- models ----
say "models ($SIZE)"
GGUF=$MODELS/model-$SIZE.gguf
ST=$MODELS/model-$SIZE.safetensors
[ -f "$GGUF" ] || $W make-model "$GGUF" --size "$SIZE" >>"$LOG" 2>&1
[ -f "$ST" ] || $W make-model "$ST" --size "$SIZE" --format safetensors >>"$LOG" 2>&1
ls -l "$GGUF" "$ST" | tee -a "$LOG"
cat "$GGUF" "$ST" >/dev/null # warm the page cache
cat "$GGUF" "$ST" >/dev/null

# ---- the CLI ----
say "CLI: weightmap load --backend cuda"
for f in "$GGUF" "$ST"; do
    $W load "$f" --mode heap --backend cuda --cycles 3 2>&1 | tee -a "$LOG"
    $W load "$f" --mode mmap --registered --backend cuda:0 --cycles 3 2>&1 | tee -a "$LOG"
done
$W load "$GGUF" --mode heap --backend cuda:7 >>"$LOG" 2>&1
echo "weightmap load --backend cuda:7 (no such device): exit $?" | tee -a "$LOG"

# ---- where host memory goes over cycles ----
# The footprint left after each of 8 load+release cycles, above its value right after
# wm_backend_init, with wm_backend_init's rehearsal of a load's CUDA calls as built (default),
# none (0,0,0), and a larger registration (ROUNDS,EVENTS,COPIES,MIB); glibc's malloc_info of
# the default staged run goes to malloc-info.txt.
say "cycles: footprint left after each release (bench/gpu cycles)"
C="timeout 120 $BUILD/bench/gpu cycles $GGUF --cycles 8"
$C --threads 16 --malloc-info "$OUT/mi.xml" | tee -a "$JSONL"
$C --threads 1 | tee -a "$JSONL"
$C --registered | tee -a "$JSONL"
$C --threads 16 --rehearse 0,0,0 | tee -a "$JSONL"
$C --registered --rehearse 0,0,0 | tee -a "$JSONL"
$C --registered --rehearse 3,64,1024,64 | tee -a "$JSONL"
MALLOC_ARENA_MAX=1 $C --registered | sed 's/"bench": "cycles"/"bench": "cycles-arena1"/' | tee -a "$JSONL"
[ -f "$OUT/mi.xml" ] && mv "$OUT/mi.xml" "$OUT/malloc-info.txt"

# ---- ceilings ----
say "ceilings"
$G h2d --bytes 1G --repeat 8 | tee -a "$JSONL"
$G pread "$GGUF" --threads "$NPROC" --repeat 3 | tee -a "$JSONL"

# ---- weightmap ----
say "weightmap loads"
for f in "$GGUF" "$ST"; do
    $G load "$f" --repeat "$REPEAT" --verify | tee -a "$JSONL"
    $G load "$f" --registered --repeat "$REPEAT" --verify | tee -a "$JSONL"
done
for b in 32M 128M 512M; do
    $G load "$GGUF" --budget $b --repeat 3 | tee -a "$JSONL"
done
for t in 8 12 24 32; do
    $G load "$GGUF" --threads $t --repeat 3 | tee -a "$JSONL"
done
$G load "$GGUF" --max-buffer 1G --repeat 3 | tee -a "$JSONL"
$G load "$GGUF" --registered --budget 1G --repeat 3 | tee -a "$JSONL"

# The pipeline's knobs (TUNE=1): threads, window and slot sizes, how the ring is pinned, and
# whether finished slots are retired early (bench/gpu load --window/--slots/--serial-ring/
# --no-reap; the first row of each group is the default).
if [ "${TUNE:-0}" = 1 ]; then
    say "tuning matrix"
    $G pread "$GGUF" --threads 8 --repeat 3 | sed 's/"bench": "pread"/"bench": "pread-8"/' | tee -a "$JSONL"
    for t in 8 12; do
        for w in 2M 4M 8M; do
            $G load "$GGUF" --threads $t --window $w --budget 1G --repeat 5 | tee -a "$JSONL"
        done
        $G load "$GGUF" --threads $t --slots 3 --budget 1G --repeat 5 | tee -a "$JSONL"
        $G load "$GGUF" --threads $t --serial-ring --repeat 5 | tee -a "$JSONL"
        $G load "$GGUF" --threads $t --no-reap --repeat 5 | tee -a "$JSONL"
    done
    # Could the page cache go to the device with no CPU copy, if several threads registered it?
    if [ "${EXPLORE:-0}" = 1 ]; then
        for tw in "1 16M" "4 16M" "8 16M" "16 16M" "8 64M" "16 4M"; do
            set -- $tw
            timeout 120 $BUILD/bench/gpu register "$GGUF" --threads $1 --window $2 | tee -a "$JSONL"
        done
    fi
fi

# The page cache's ceiling again, after the loads: how much it moves within one run.
$G pread "$GGUF" --threads "$NPROC" --repeat 3 | sed 's/"bench": "pread"/"bench": "pread-again"/' | tee -a "$JSONL"

# ---- safetensors ----
say "safetensors.torch.load_file"
PYTHONUNBUFFERED=1 python3 bench/gpu_safetensors.py "$ST" 3 | tee -a "$JSONL"

# ---- table ----
say "summary"
python3 - "$JSONL" "$OUT/machine.txt" <<'EOF' | tee "$OUT/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
h2d = next((r for r in rows if r["bench"] == "h2d"), None)
pr = next((r for r in rows if r["bench"] == "pread"), None)
st = next((r for r in rows if r["bench"].startswith("safetensors")), None)
ceiling = min(h2d["best_gbps"], pr["best_gbps"]) if h2d and pr else None
MiB = 1 << 20
print("| what | file | GB/s (best) | GB/s (median) | x ceiling | x safetensors | footprint peak above CUDA init | pinned peak | verified |")
print("|---|---|---|---|---|---|---|---|---|")
if h2d:
    print(f"| ceiling: H2D of a registered buffer (1 stream / 4 streams) | {h2d['bytes'] // MiB} MiB | {h2d['best_gbps']} | {h2d['one_stream_gbps']} / {h2d['four_streams_gbps']} | | | | | |")
for p in (r for r in rows if r["bench"].startswith("pread")):
    print(f"| ceiling: pread, {p['threads']} threads (reused buffers / file-sized buffer){' (again, after the loads)' if p['bench'] != 'pread' else ''} | gguf | {p['best_gbps']} | {p['reused_buffers_gbps']} / {p['file_sized_buffer_gbps']} | | | | | |")
for r in rows:
    if r["bench"] == "load":
        name = f"weightmap {r['path']}, {r['threads']} threads" + (f", budget {r['budget'] // MiB} MiB" if r["budget"] else "") + (f", {r['buffers']} buffers" if r["buffers"] > 1 else "")
        name += (f", {r['window'] // MiB} MiB windows" if r.get("window") else "") + (f", {r['slots']} slots a reader" if r.get("slots") else "") + (", ring pinned first" if r.get("serial_ring") else "") + (", no early retire" if r.get("reap") is False else "")
        x = f"{r['best_gbps'] / ceiling:.2f}" if ceiling else ""
        xs = f"{r['best_gbps'] / st['best_gbps']:.1f}" if st and st["best_gbps"] else ""
        fmt = r["file"].rsplit(".", 1)[-1]
        print(f"| {name} | {fmt} | {r['best_gbps']} | {r['median_gbps']} | {x} | {xs} | {r['footprint_peak_delta'] / MiB:.1f} MiB | {r['pinned_peak'] / MiB:.0f} MiB | {r['verified']} |")
if st:
    print(f"| safetensors.torch.load_file(device='cuda:0') | safetensors | {st['best_gbps']} | {st['median_gbps']} | {st['best_gbps'] / ceiling:.2f} | 1.0 | {st['footprint_peak_delta'] / MiB:.1f} MiB | | |")
for r in (r for r in rows if r["bench"] == "register"):
    print(f"| experiment: {r['threads']} threads register the mapping in {r['window'] // MiB} MiB windows: register / copy from it / unregister / all three pipelined per thread | gguf | {r['pipelined_gbps']} | {r['register_gbps']} / {r['copy_from_registered_gbps']} / {r['unregister_gbps']} | {r['pipelined_gbps'] / ceiling:.2f} | | | | |")
cyc = [r for r in rows if r["bench"].startswith("cycles")]
if cyc:
    print("\n| cycles (footprint left after each release, KiB) | " + " | ".join(str(c) for c in range(1, 9)) + " |")
    print("|---|" + "---:|" * 8)
    keyof = lambda r: (r["bench"], r["path"], r["threads"], r.get("rehearsal", "default"))
    for key in sorted({keyof(r) for r in cyc if r["bench"] != "cycles-map"}):
        left = [r["left"] // 1024 for r in cyc if r["bench"] != "cycles-map" and keyof(r) == key]
        name = f"{key[0]} {key[1]}" + (f", {key[2]} threads" if key[1] == "staged" else "") + f", rehearsal {key[3]}"
        print(f"| {name} | " + " | ".join(str(x) for x in left) + " |")
if ceiling:
    print(f"\nceiling = min(H2D {h2d['best_gbps']}, pread {pr['best_gbps']}) = {ceiling} GB/s; target 0.9 x = {0.9 * ceiling:.2f} GB/s" + (f"; 5 x safetensors = {5 * st['best_gbps']:.2f} GB/s" if st else ""))
EOF
say "done"
