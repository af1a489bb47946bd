#!/usr/bin/env bash
# bench/gpu_loaders.sh: weightmap against the GPU loaders users pick (safetensors,
# fastsafetensors, InstantTensor) on the same files, in one call on a GPU machine, with the
# disk's own limit measured in the same run; then transformers' from_pretrained plain and inside
# weightmap.loading(), cold and warm; and, first, the tests on the real runtime.
#
#   OUT=$OUT bash bench/gpu_loaders.sh [GIB]      (default 8; from the repository root)
#
# Stages, in order of what matters most (each with its own time limit; a stage is skipped when
# the time left, BUDGET seconds from the start, would not hold it):
#   build      the CLI and test_cuda/test_multi (build-gpu, fault injection on, for the tests),
#              the Python extension (build-gpu-py), the peers from .peers/gpu-loaders (a copy of
#              ../shared/peers/gpu-loaders: its build.sh installs them into /tmp/peers), and a
#              llama-shaped bf16 checkpoint of >= GIB GiB in 3 shards with its index
#              (bench/python_transformers.py write-llama; values random, made on the GPU), at the
#              same time
#   tests      ctest -L '^(cuda|multi)$' on the real runtime; python3 -m pytest python/tests -q,
#              then again with WM_TEST_DEVICE=cuda:0 (the device cases)
#   disk       the disk's limit: parallel O_DIRECT preads of every byte of the shards
#              (bench/gpu_loaders.py disk), T x B-byte reads, best of the grid; again at the end
#   probe      (not in the default list) the grid over every byte at more depths and blocks;
#              cold loads of the set in one call against one load per shard side by side
#              (weightmap-parallel), alternating; the CLI's cold load of the set
#   profile    (not in the default list) warm from_pretrained with every function of
#              transformers' loading modules timed per thread, and under cProfile
#              (bench/gpu_loaders.py profile; $OUT/profile.jsonl)
#   cold       each loader in its own process, ROUNDS rounds, the shards' pages dropped before
#              each (POSIX_FADV_DONTNEED), after an untimed load of a small checkpoint; then the
#              CLI's staged load of the set cold with its default readers (0: one per CPU when
#              most of the file is cold), 8 and 32, and with --direct-io off (every read
#              buffered: what the staged path did before)
#   pretrained cold from_pretrained plain and inside loading(), ROUNDS rounds each
#   warm-tf    warm from_pretrained plain / loading() / loading(ahead=False) / the files alone
#              (weightmap.load_file of the index), alternating, ROUNDS + 2 rounds, every state
#              dict compared with the plain one's
#   disk-warm  each loader again, the page cache warm; the CLI's staged load with
#              --direct-io auto against off (buffered, the old default), alternating
#   tmpfs      the checkpoint copied to /dev/shm, each loader again
# Every tensor of every loader is checked against safetensors' own load (per-tensor checksums on
# the device: bench/gpu_loaders.py sums). Results: $OUT/summary.md (the tables), $OUT/all.jsonl
# (every measurement), $OUT/log.txt, $OUT/tests.txt, $OUT/pytest.txt, $OUT/build.txt.
# Environment: OUT (default /tmp/wm-loaders-out), ROUNDS (3), BUDGET (seconds, 560), STAGES (the
# stages to run, default all: tests disk cold cli-cold warm-tf cold-tf disk-warm
# disk-warm-loaders tmpfs; disk-warm alone runs only the CLI's warm A/B; ahead-test, without
# tests: python/tests/test_ahead.py alone on cuda:0), AB_ROUNDS
# (the warm A/B's rounds, 2), DISK_THREADS (64,128) and DISK_BLOCKS (16, MiB: the best of the
# probe stage's grid on the H200 host, 2026-12-02), SKIP_TESTS=1
# (no tests: a try-out of the measurements), DEPS (.deb
# folder for scripts/gpu_env.sh: libdlpack-dev; default .debs-py), PEERS_SRC (.peers/gpu-loaders).
set -u
GIB=${1:-8}
OUT=${OUT:-/tmp/wm-loaders-out}
ROUNDS=${ROUNDS:-3}
BUDGET=${BUDGET:-560}
DEPS=${DEPS:-.debs-py}
PEERS_SRC=${PEERS_SRC:-.peers/gpu-loaders}
W=/tmp/wm-loaders
CK=$W/ckpt
SMALL=$W/small
mkdir -p "$OUT" "$W"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PY=$(command -v python3)
LOG=$OUT/log.txt
say() { echo "== $(date +%T) (${SECONDS}s) $*" | tee -a "$LOG"; }
left() { echo $((BUDGET - SECONDS)); }
# room NEED: whether NEED seconds are left
room() { [ "$(left)" -ge "$1" ] || { say "skipped: $2 (needs ${1}s, $(left)s left)"; return 1; }; }
collect() { cat "$W"/*.jsonl >"$OUT/all.jsonl" 2>/dev/null; }
STAGES=${STAGES:-tests disk cold cli-cold warm-tf cold-tf disk-warm disk-warm-loaders tmpfs}
want() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }

say "machine"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "cpus $(nproc)"; free -g | head -2; uname -r; df -hT /tmp /dev/shm | tail -2
  lsblk -d -o NAME,SIZE,ROTA,MODEL 2>/dev/null | head -5
  "$PY" -m pip show torch safetensors transformers 2>/dev/null | grep -E "^(Name|Version):" | paste -sd ' '
} 2>&1 | tee -a "$LOG"

# ---- build, peers and the checkpoint, at once ----
say "build, peers, checkpoint"
. scripts/gpu_env.sh
wm_gpu_env "$DEPS"
# ../shared is not on the GPU machine: the tests read the fixtures from a copy carried beside
# the checkout (FIXTURES, default .fixtures, a copy of ../shared/fixtures), when there is one
FIXTURES=${FIXTURES:-.fixtures}
if [ -d "$FIXTURES" ]; then
    export WM_FIXTURES=$(cd "$FIXTURES" && pwd)
    cm+=(-DWM_FIXTURES="$WM_FIXTURES")
fi
NP=$(nproc)
( { cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FAULT_INJECTION=ON \
      "${cm[@]}" && cmake --build build-gpu -j"$NP" --target weightmap_cli test_cuda test_multi
  } >$W/build-c.txt 2>&1; echo "exit $?" >>$W/build-c.txt ) &
# the checkpoint's writer imports weightmap: after the extension
( { cmake -S . -B build-gpu-py "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_PYTHON=ON \
      -DWM_BUILD_TESTS=OFF -DPython3_EXECUTABLE="$PY" -DWM_DLPACK_DIR=/tmp/wm-deps/usr/include \
      "${cm[@]}" && cmake --build build-gpu-py -j"$NP" --target wm_python weightmap_cli
  } >$W/build-py.txt 2>&1; echo "exit $?" >>$W/build-py.txt
  export PYTHONPATH=$PWD/build-gpu-py/python
  # a second call of this script on the same machine keeps the checkpoint and the peers
  if [ -f "$CK/.done-$GIB" ] && [ -f "$SMALL/.done" ]; then echo "kept: $CK" >$W/write.txt; else
  rm -rf "$CK" "$SMALL"
  timeout 240 "$PY" bench/python_transformers.py write-llama "$CK" "$GIB" --shards 3 >$W/write.txt 2>&1 &&
  timeout 60 "$PY" bench/python_transformers.py write-llama "$SMALL" 0.05 --small --shards 3 >>$W/write.txt 2>&1 &&
  touch "$CK/.done-$GIB" "$SMALL/.done"; fi
  echo "exit $?" >>$W/write.txt ) &
( if [ -f /tmp/peers/.done ]; then echo "kept: /tmp/peers" >$W/peers.txt; else
  PEERS=/tmp/peers timeout 240 bash "$PEERS_SRC/build.sh" >$W/peers.txt 2>&1 && touch /tmp/peers/.done; fi
  echo "exit $?" >>$W/peers.txt ) &
wait
for f in build-c build-py peers write; do echo "-- $f: $(tail -1 $W/$f.txt)"; done | tee -a "$LOG"
grep -E "^(fastsafetensors|instanttensor):" $W/peers.txt | tee -a "$LOG"
grep -E "CUDA backend|Python extension" $W/build-c.txt $W/build-py.txt | tee -a "$LOG"
{ for f in build-c build-py peers write; do echo "#### $f"; tail -60 $W/$f.txt; done; } >"$OUT/build.txt"
ls -l "$CK" | tee -a "$LOG"
[ -f "$CK/model.safetensors.index.json" ] && [ -x build-gpu-py/weightmap ] || { say "nothing to measure"; exit 1; }
INDEX=$CK/model.safetensors.index.json
WARM=$SMALL/model.safetensors.index.json

export PYTHONPATH=$PWD/build-gpu-py/python:/tmp/peers WM_CLI=$PWD/build-gpu-py/weightmap
# fastsafetensors dlopens libcudart.so (unversioned): the toolkit's, or torch's own
mkdir -p /tmp/wm-cudart
rt=$(ls /usr/local/cuda/lib64/libcudart.so 2>/dev/null || "$PY" -c "import glob, os, torch; d=os.path.dirname(os.path.dirname(torch.__file__)); print((sorted(glob.glob(d+'/nvidia/**/libcudart.so*', recursive=True)) or [''])[0])")
[ -n "$rt" ] && ln -sf "$rt" /tmp/wm-cudart/libcudart.so
export LD_LIBRARY_PATH=/tmp/wm-cudart:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
L="$PY bench/gpu_loaders.py"
LOADERS="safetensors fastsafetensors instanttensor weightmap"

# ---- tests on the real runtime ----
if want tests && [ "${SKIP_TESTS:-0}" != 1 ] && room 150 "tests"; then
    say "tests: ctest -L '^(cuda|multi)\$', pytest python/tests on the CPU and on cuda:0"
    (cd build-gpu && timeout 300 ctest -L '^(cuda|multi)$' -j4 --timeout 240 --output-on-failure) >$W/ctest.txt 2>&1 &
    (timeout 300 "$PY" -m pytest python/tests -q -p no:cacheprovider -rs >$W/pytest.txt 2>&1
     echo "exit $?" >>$W/pytest.txt
     WM_TEST_DEVICE=cuda:0 timeout 240 "$PY" -m pytest python/tests -q -p no:cacheprovider -rs \
        >>$W/pytest.txt 2>&1; echo "exit $? (python/tests on cuda:0)" >>$W/pytest.txt) &
    wait
    cp $W/ctest.txt "$OUT/tests.txt"; cp $W/pytest.txt "$OUT/pytest.txt"
    grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" $W/ctest.txt | head -12 | tee -a "$LOG"
    grep -E "passed|failed|error|^exit" $W/pytest.txt | tail -6 | tee -a "$LOG"
    grep -E "^(SKIPPED|FAILED|ERROR)" $W/pytest.txt | cut -c1-240 | tee -a "$LOG"
fi

if want ahead-test && ! want tests; then
    say "python/tests/test_ahead.py on cuda:0"
    (cd python/tests && WM_TEST_DEVICE=cuda:0 timeout 120 "$PY" -m pytest -q -p no:cacheprovider \
        test_ahead.py >$W/pytest.txt 2>&1; echo "exit $? (test_ahead.py on cuda:0)" >>$W/pytest.txt)
    cp $W/pytest.txt "$OUT/pytest.txt"; tail -3 $W/pytest.txt | tee -a "$LOG"
fi

# ---- the disk's limit ----
sync
if want disk && room 40 "disk limit"; then
    say "disk limit"
    timeout 90 $L disk "$INDEX" --threads ${DISK_THREADS:-64,128} --block ${DISK_BLOCKS:-16} --when before >$W/disk1.jsonl 2>>$LOG
    grep disk-best $W/disk1.jsonl | tee -a "$LOG"
fi

# ---- cold ----
if want cold && room $((60 + 40 * ROUNDS)) "cold loaders"; then
    say "cold: $LOADERS, $ROUNDS rounds each"
    for ld in $LOADERS; do
        timeout $((30 + 30 * ROUNDS)) $L load $ld "$INDEX" --cold --scenario cold --rounds "$ROUNDS" \
            --warmup "$WARM" >$W/cold-$ld.jsonl 2>$W/cold-$ld.err
        echo "$ld: $(grep -o '"gbps": [0-9.]*' $W/cold-$ld.jsonl | paste -sd ' ') $(tail -1 $W/cold-$ld.err)" | tee -a "$LOG"
    done
    collect
fi

# ---- cold, the CLI's staged load: readers, and auto against off (buffered, the old default) ----
cli_json() { "$PY" -c "import json,sys; d=json.load(sys.stdin); c=d['cycles'][0]; print(json.dumps(dict(stage='$1', io='$2', threads=$3, round=${4:-0}, cycle=c['cycle'], seconds=c['load_seconds'], gbps=d['tensor_bytes']/c['load_seconds']/1e9, read_direct=c['read_direct'], read_buffered=c['read_buffered'], ok=d['ok'])))"; }
if want cli-cold && room 60 "cold CLI"; then
    say "cold, the CLI's staged load of the set: the default readers (one per CPU when cold), 8, 32, and --direct-io off"
    for cfg in "0 auto" "8 auto" "32 auto" "0 off"; do
        set -- $cfg
        $L drop "$INDEX"
        timeout 60 build-gpu-py/weightmap load "$INDEX" --mode heap --backend cuda:0 --threads $1 \
            --direct-io $2 --json 2>/dev/null | cli_json cli-cold $2 $1 >>$W/cli-cold.jsonl
    done
    grep -o '"io": "[a-z]*", "threads": [0-9]*, .*"gbps": [0-9.]*' $W/cli-cold.jsonl | tee -a "$LOG"
    collect
fi

# ---- the disk's limit, probed: which queue depth and block size, and whether loads side by
# side (one per shard) go past one load of the set ----
if want probe && room 120 "disk probe"; then
    say "disk probe: O_DIRECT grid over every byte; the CLI's cold load of the set; one per shard side by side"
    timeout 200 $L disk "$INDEX" --threads ${PROBE_THREADS:-4,16,64,128} --block ${PROBE_BLOCKS:-1,4,16} \
        --when probe >$W/probe-disk.jsonl 2>>$LOG
    grep -o '"threads": [0-9]*, "block_mib": [0-9]*, .*"gbps": [0-9.]*' $W/probe-disk.jsonl | tee -a "$LOG"
    for r in 1 2; do
        for ld in weightmap weightmap-parallel; do
            timeout 60 $L load $ld "$INDEX" --cold --scenario probe --rounds 1 --warmup "$WARM" \
                >>$W/probe.jsonl 2>>$W/probe.err
        done
    done
    $L drop "$INDEX"
    timeout 60 build-gpu-py/weightmap load "$INDEX" --mode heap --backend cuda:0 --json 2>/dev/null |
        cli_json probe-cli auto 0 >>$W/probe.jsonl
    grep -o '"loader": "[a-z-]*", "scenario": "probe", "round": [0-9]*, "seconds": [0-9.]*, "gbps": [0-9.]*' $W/probe.jsonl | tee -a "$LOG"
    grep probe-cli $W/probe.jsonl | tee -a "$LOG"; tail -2 $W/probe.err 2>/dev/null | tee -a "$LOG"
    collect
fi

# ---- where a warm from_pretrained's time goes ----
if want profile && room 90 "profile"; then
    say "profile: warm from_pretrained, every function of transformers' loading timed"
    cat "$CK"/*.safetensors >/dev/null
    timeout 200 $L profile "$CK" --rounds 2 >$W/profile.jsonl 2>$W/profile.err
    cp $W/profile.jsonl "$OUT/profile.jsonl"
    grep -o '"kind": "[a-z-]*", "round": [0-9]*, "seconds": [0-9.]*' $W/profile.jsonl | tee -a "$LOG"
    tail -3 $W/profile.err | tee -a "$LOG"
fi

# ---- warm from_pretrained (the overlap) ----
if want warm-tf && room 70 "warm from_pretrained"; then
    say "warm from_pretrained: plain, loading() (the set ahead), the shards ahead two and one at a time, loading(ahead=False), the files alone"
    cat "$CK"/*.safetensors >/dev/null
    timeout 150 $L warm "$CK" --rounds $((ROUNDS + 2)) >$W/warm-tf.jsonl 2>$W/warm-tf.err
    grep -o '"kind": "[a-z-]*", "round": [0-9]*, "seconds": [0-9.]*' $W/warm-tf.jsonl | tee -a "$LOG"
    grep '"warm-trace"' $W/warm-tf.jsonl | tee -a "$LOG"
    tail -2 $W/warm-tf.err | tee -a "$LOG"
    collect
fi

# ---- cold from_pretrained ----
# Rounds alternate the kinds (CTF_KINDS), each round after the disk's limit measured again
# (128 x 16 MiB over every byte): the disk's rate moves within one run (run F: 1.81 GB/s before,
# 1.59 after), so every cold round is also set against the limit of its own round.
CTF_KINDS=${CTF_KINDS:-plain loading loading-shards-ahead}
if want cold-tf && room $((40 + 40 * ROUNDS)) "cold from_pretrained"; then
    say "cold from_pretrained: $CTF_KINDS alternating, $ROUNDS rounds, the disk's limit before each"
    for r in $(seq 1 "$ROUNDS"); do
        room 35 "cold from_pretrained round $r" || break
        timeout 60 $L disk "$INDEX" --threads 128 --block 16 --when "cold-tf-$r" >>$W/disk-tf.jsonl 2>>$LOG
        grep disk-best $W/disk-tf.jsonl | tail -1 | tee -a "$LOG"
        for kind in $CTF_KINDS; do
            timeout 90 $L pretrained "$CK" $kind --cold --rounds 1 --tag "cold-tf-$r" \
                --warmup "$SMALL" >>$W/cold-tf-$kind.jsonl 2>$W/cold-tf-$kind.err
            echo "$kind round $r: $(grep -o '"seconds": [0-9.]*' $W/cold-tf-$kind.jsonl | tail -1) $(tail -1 $W/cold-tf-$kind.err)" | tee -a "$LOG"
        done
    done
    collect
fi

# ---- warm on the disk ----
if want disk-warm && room 60 "warm disk loaders"; then
    say "warm on the disk: $LOADERS; the CLI's --direct-io auto against off"
    cat "$CK"/*.safetensors >/dev/null
    want disk-warm-loaders || LD_WARM=
    for ld in ${LD_WARM-$LOADERS}; do
        [ "$(left)" -ge 20 ] || break
        timeout $((20 + 15 * ROUNDS)) $L load $ld "$INDEX" --scenario disk-warm --rounds "$ROUNDS" \
            --warmup "$WARM" >$W/warm-$ld.jsonl 2>$W/warm-$ld.err
        echo "$ld: $(grep -o '"gbps": [0-9.]*' $W/warm-$ld.jsonl | paste -sd ' ') $(tail -1 $W/warm-$ld.err)" | tee -a "$LOG"
    done
    for r in $(seq 1 "${AB_ROUNDS:-2}"); do
        for io in off auto; do
            build-gpu-py/weightmap load "$INDEX" --mode heap --backend cuda:0 --direct-io $io \
                --cycles 5 --json 2>/dev/null |
                "$PY" -c "import json,sys; d=json.load(sys.stdin); [print(json.dumps(dict(stage='cli-warm', io='$io', round=$r, cycle=c['cycle'], seconds=c['load_seconds'], gbps=d['tensor_bytes']/c['load_seconds']/1e9, read_direct=c['read_direct'], ok=d['ok']))) for c in d['cycles']]" >>$W/cli.jsonl
        done
    done
    grep -o '"io": "[a-z]*", "round": [0-9], "cycle": [0-9], "seconds": [0-9.]*' $W/cli.jsonl | paste -sd ' ' | tee -a "$LOG"
    collect
fi

# ---- warm on tmpfs ----
if want tmpfs && room 50 "tmpfs loaders"; then
    say "warm on tmpfs (/dev/shm): $LOADERS"
    rm -rf /dev/shm/wm-ckpt && cp -r "$CK" /dev/shm/wm-ckpt
    for ld in $LOADERS; do
        [ "$(left)" -ge 15 ] || break
        timeout $((15 + 10 * ROUNDS)) $L load $ld /dev/shm/wm-ckpt/model.safetensors.index.json \
            --scenario tmpfs --rounds "$ROUNDS" --warmup "$WARM" \
            >$W/tmpfs-$ld.jsonl 2>$W/tmpfs-$ld.err
        echo "$ld: $(grep -o '"gbps": [0-9.]*' $W/tmpfs-$ld.jsonl | paste -sd ' ') $(tail -1 $W/tmpfs-$ld.err)" | tee -a "$LOG"
    done
    rm -rf /dev/shm/wm-ckpt
    collect
fi

if want disk && room 30 "disk limit (after)"; then
    timeout 60 $L disk "$INDEX" --threads ${DISK_THREADS:-64,128} --block ${DISK_BLOCKS:-16} --when after >$W/disk2.jsonl 2>>$LOG
    grep disk-best $W/disk2.jsonl | tee -a "$LOG"
fi
collect
$L summary "$W" >"$OUT/summary.md" 2>>$LOG
cat "$OUT/summary.md" | tee -a "$LOG"
{ for f in $W/*.err; do echo "#### $f"; tail -5 "$f"; done; } >>"$LOG"
say "done"
