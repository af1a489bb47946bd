#!/usr/bin/env bash
# run.sh: runs weightmap's libFuzzer harnesses from their corpora, for `make test-fuzz` (bounded,
# in CI) and `make fuzz` (long campaigns). docs/TESTING.md says how to use it.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS [HARNESS...]     (harnesses: gguf safetensors index load)
#
# Each harness build/tests/fuzz/wm_fuzz_NAME runs for SECONDS from a working corpus in
# BUILD_DIR/fuzz-corpus/NAME (new inputs go there, never into the source tree), the committed seeds
# in tests/corpus/NAME and, for gguf, safetensors and load, the fixture folders (inputs over
# FUZZ_MAX_LEN bytes are truncated to it). Crashes, leaks, timeouts and out-of-memory inputs are
# written to BUILD_DIR/fuzz-artifacts/NAME/ and make the script exit 1; the log of each harness is
# BUILD_DIR/fuzz-logs/NAME.log and its last lines are the figures printed in the summary.
#
# Environment: FUZZ_PARALLEL (harnesses run at once, default 1), FUZZ_NICE (niceness, default 0),
# FUZZ_TIMEOUT (seconds one input may take, default 10), FUZZ_MAX_LEN (default 65536),
# FUZZ_ARGS (more libFuzzer flags), WM_FIXTURES (default ../shared/fixtures), FUZZ_TMPDIR (where
# the harnesses that need a named file write it; default /dev/shm when it exists, so no disk).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS [HARNESS...]" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
secs=$2
shift 2
harnesses=${*:-gguf safetensors index load}
src=$(cd "$(dirname "$0")/../.." && pwd)
fixtures=${WM_FIXTURES:-$src/../shared/fixtures}
par=${FUZZ_PARALLEL:-1}
tmp=${FUZZ_TMPDIR:-/tmp}
[ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm

run_one() {
    local h=$1 dict extra=""
    case $h in
    gguf) dict=gguf.dict; extra="$fixtures/gguf $fixtures/malformed" ;;
    load) dict=gguf.dict; extra="$fixtures/gguf $fixtures/safetensors" ;;
    safetensors) dict=json.dict; extra="$fixtures/safetensors" ;;
    index) dict=json.dict ;;
    *) echo "unknown harness $h" >&2; return 2 ;;
    esac
    local exe=$build/tests/fuzz/wm_fuzz_$h work=$build/fuzz-corpus/$h art=$build/fuzz-artifacts/$h
    local log=$build/fuzz-logs/$h.log
    mkdir -p "$work" "$art" "$build/fuzz-logs"
    local dirs="$work $src/tests/corpus/$h" d
    for d in $extra; do [ -d "$d" ] && dirs="$dirs $d"; done
    # shellcheck disable=SC2086
    TMPDIR=$tmp ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} nice -n "${FUZZ_NICE:-0}" "$exe" \
        -dict="$src/tests/fuzz/$dict" -max_total_time="$secs" -timeout="${FUZZ_TIMEOUT:-10}" \
        -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-65536}" -print_final_stats=1 \
        -artifact_prefix="$art/" ${FUZZ_ARGS:-} $dirs >"$log" 2>&1
    local rc=$?
    local execs rate cov found
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]* corp: [^ ]*\).*/\1/p')
    found=$(ls "$art" | wc -l)
    printf 'wm_fuzz_%-12s %6ss  execs %-10s exec/s %-6s %s  artifacts %s  exit %s\n' \
        "$h" "$secs" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$found" "$rc"
    if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
        echo "wm_fuzz_$h FAILED: see $log and $art/" >&2
        grep -E 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -20 >&2
        return 1
    fi
}

fail=0
pids=()
for h in $harnesses; do
    run_one "$h" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$par" ]; then
        wait "${pids[0]}" || fail=1
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do wait "$p" || fail=1; done
exit $fail
