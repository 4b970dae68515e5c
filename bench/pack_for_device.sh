#!/bin/bash
# pack_for_device.sh — the part of a build folder the GPU machine runs, in a folder small
# enough for the device tool's carry (64 MB in all; build/ with every head dim is ~70 MB):
#
#   bench/pack_for_device.sh [BUILD_DIR [PACK_DIR]]     (defaults: build, build-dev)
#
# then, on the device: BUILD=build-dev bench/run_gpu.sh ... with carry ["build-dev"]
# (beside "variants" for an A/B). It copies libflashbwd.so*, the test programs with
# libcmocka.so.0, and the benchmark and demo; they find the library and cmocka through
# their $ORIGIN-relative RUNPATH, so the folder works under any name. Left out:
# test_faults and test_plan_sizing, which link the kernels statically (10 MB each) and
# test fake devices only (CI runs them).
set -euo pipefail
build=${1:-build} pack=${2:-build-dev}
[ -f "$build/libflashbwd.so" ] || { echo "pack_for_device.sh: no $build/libflashbwd.so (build first)" >&2; exit 1; }
rm -rf "$pack"
mkdir -p "$pack/tests" "$pack/bench"
cp -a "$build"/libflashbwd.so* "$pack/"
for t in "$build"/tests/test_*; do
    case "$(basename "$t")" in test_faults | test_plan_sizing) continue ;; esac
    [ -f "$t" ] && [ -x "$t" ] && cp -a "$t" "$pack/tests/"
done
cp -a "$build/tests/libcmocka.so.0" "$pack/tests/" 2>/dev/null || true
cp -a "$build/bench/flashbwd_bench" "$build/bench/flashbwd_demo" "$pack/bench/"
for probe in barrier_probe tma_probe gemm_probe; do
    [ -x "$build/bench/$probe" ] && cp -a "$build/bench/$probe" "$pack/bench/"
done
du -sh "$pack"
