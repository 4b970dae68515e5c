#!/bin/bash
# reliability_gpu.sh — the GPU half of the reliability checks (issue 7, docs/reliability.md),
# for the H200 machine: run from the repository root with the build folder carried from the
# build machine (test binaries find libflashbwd.so and libcmocka.so.0 through $ORIGIN).
#
#   tests/reliability_gpu.sh            BUILD=build by default; logs and a summary in $OUT
#
#   1. test_concurrency --gpu   16 racing first creates query the device once; 16 threads ×
#                               1000 create/execute/destroy cycles, one stream per thread,
#                               fp64 checks every 25th cycle
#   2. test_misuse --gpu        the wrong current device (needs 2 GPUs, else SKIPPED)
#   3. compute-sanitizer        memcheck (with --leak-check full), racecheck, synccheck and
#                               initcheck over test_gpu (the feature matrix, odd sizes
#                               included: seqlen 1, 99, 129, 333, 515x1000, head dims 8..256),
#                               and memcheck and initcheck over 16 threads × 10 GPU cycles of
#                               test_concurrency (workspace fresh from cudaMalloc, never
#                               memset: initcheck sees any read of it before a write)
# A tool passes on exit status 0 and "ERROR SUMMARY: 0 errors". Set QUICK=1 to run the
# sanitizers over FLASHBWD_GPU_QUICK's reduced matrix when device time is short.
set -u
B=${BUILD:-build}
OUT=${OUT:-/tmp/flashbwd-reliability}
TIMEOUT=${SANITIZE_TIMEOUT:-900}
mkdir -p "$OUT"
summary=()
failed=0
note() { summary+=("$1"); echo "== $1"; }

run() { # name, then the command; records rc and the last SKIPPED/PASSED/ERROR SUMMARY lines
    local name=$1
    shift
    local started=$SECONDS
    "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || failed=1
    note "$name rc=$rc ($((SECONDS - started)) s): $(grep -hE 'ERROR SUMMARY|PASSED|SKIPPED \]|FAILED \]|threads:' "$OUT/$name.log" | tr '\n' ' ')"
}

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
note "gpus: $(tr '\n' ';' < "$OUT/gpu.txt")"

run concurrency_gpu "$B/tests/test_concurrency" --gpu
run misuse_gpu "$B/tests/test_misuse" --gpu

quick=()
[ -n "${QUICK:-}" ] && quick=(env FLASHBWD_GPU_QUICK=1)
cs=(timeout "$TIMEOUT" compute-sanitizer --error-exitcode 3)
run memcheck_test_gpu "${quick[@]}" "${cs[@]}" --tool memcheck --leak-check full "$B/tests/test_gpu"
# racecheck instruments every shared-memory access (slowest): the reduced matrix always
run racecheck_test_gpu env FLASHBWD_GPU_QUICK=2 "${cs[@]}" --tool racecheck \
    --racecheck-report all "$B/tests/test_gpu"
run synccheck_test_gpu "${quick[@]}" "${cs[@]}" --tool synccheck "$B/tests/test_gpu"
run initcheck_test_gpu "${quick[@]}" "${cs[@]}" --tool initcheck "$B/tests/test_gpu"
run memcheck_concurrency env FLASHBWD_CYCLES=10 "${cs[@]}" --tool memcheck --leak-check full \
    "$B/tests/test_concurrency" --gpu
run initcheck_concurrency env FLASHBWD_CYCLES=10 "${cs[@]}" --tool initcheck \
    "$B/tests/test_concurrency" --gpu

echo
echo "===== reliability on the GPU: $([ $failed -eq 0 ] && echo passed || echo FAILED)"
printf '%s\n' "${summary[@]}"
exit $failed
