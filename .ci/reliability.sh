#!/usr/bin/env bash
# .ci/reliability.sh — the reliability steps of CI (issue 7; docs/reliability.md), about
# 75 s on this 2-core machine (measured 2026-11-29). Called by .ci/run; runs alone too.
#
#   1. ASan + UBSan   the CPU-only library and every host-side suite built with
#                     FLASHBWD_SANITIZE=ON into build-ci-asan/, and all CTest entries
#                     run: a sanitizer report (leaks included) fails its suite
#   2. TSan           the threaded suites (test_misuse, test_concurrency) built with
#                     -fsanitize=thread into build-ci-tsan/: any data race fails
#   3. fuzzing        the libFuzzer targets (tests/fuzz/build.sh, clang 14) into
#                     build-ci-fuzz/: every committed input replayed, then FUZZ_SECONDS
#                     (default 30) of fuzzing per target, the three at once
# CPU-only builds: CI has no GPU, and the CUDA paths are fault-injection's (test_faults,
# under valgrind in .ci/run) and compute-sanitizer's (the GPU runs in docs/reliability.md).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1}
export CTEST_OUTPUT_ON_FAILURE=1

part_name="" part_started=$SECONDS
part() { # ends the part in progress (printing its time) and starts the next, if named
    [ -z "$part_name" ] || echo "## reliability: done: $part_name ($((SECONDS - part_started)) s)"
    part_name=$* part_started=$SECONDS
    [ -z "$part_name" ] || printf '\n## reliability: %s\n' "$part_name"
}

# --- Packages: clang with its sanitizer and libFuzzer runtimes ------------------------------
missing=()
command -v clang >/dev/null || missing+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    missing+=(libclang-rt-14-dev)
for tool in cmake:cmake ninja:ninja-build pkg-config:pkg-config; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
pkg-config --exists cmocka 2>/dev/null || missing+=(libcmocka-dev)
if [ ${#missing[@]} -gt 0 ]; then
    part "installing ${missing[*]}"
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- 1. ASan + UBSan over every host-side suite ---------------------------------------------
part "ASan+UBSan build and tests (build-ci-asan)"
cmake -S . -B build-ci-asan -G Ninja -DFLASHBWD_CUDA=OFF -DFLASHBWD_SANITIZE=ON >/dev/null
cmake --build build-ci-asan
ctest --test-dir build-ci-asan --parallel 2

# --- 2. ThreadSanitizer over the threaded suites ---------------------------------------------
# gcc 12's TSan cannot map its shadow under the 28-bit mmap randomization of recent kernels:
# the suites run with address-space randomization off (setarch -R).
part "TSan build and threaded suites (build-ci-tsan)"
cmake -S . -B build-ci-tsan -G Ninja -DFLASHBWD_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
    -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build build-ci-tsan --target test_misuse test_concurrency
for suite in test_misuse test_concurrency; do
    setarch "$(uname -m)" -R "build-ci-tsan/tests/$suite" >"build-ci-tsan/$suite.log" 2>&1 ||
        { cat "build-ci-tsan/$suite.log" >&2; echo "TSan: $suite failed" >&2; exit 1; }
    echo "TSan clean: $suite ($(grep -E '^\[  PASSED  \]' "build-ci-tsan/$suite.log"))"
done

# --- 3. Fuzzing ---------------------------------------------------------------------------------
part "fuzz targets: replay the committed inputs, then ${FUZZ_SECONDS} s each (build-ci-fuzz)"
tests/fuzz/build.sh "$PWD/build-ci-fuzz"
tests/fuzz/run.sh "$FUZZ_SECONDS" "$PWD/build-ci-fuzz"
part
echo "## reliability: all parts passed in $SECONDS s"
