#!/usr/bin/env bash
# abi_baseline.sh — write abi/flashbwd.abi, the libabigail baseline the abi_gate test uses.
#
#   tests/abi_baseline.sh [BUILD_DIR]     (default: build-abi-baseline; run from anywhere)
#
# Only when docs/abi-policy.md says the baseline moves (a release that adds to the ABI);
# never to silence the gate. The baseline comes from a CPU-only RelWithDebInfo build: the
# public ABI is the C objects' alone, and a CUDA build would add nvcc's per-build temporary
# file names (tmpxft_*) and C++ kernel types to the file. The gate then compares this
# baseline with whichever library was built (CUDA or not); both give the same public types.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-abi-baseline}

cmake -S "$root" -B "$build" -G Ninja -DFLASHBWD_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" --target flashbwd >/dev/null
# --headers-dir + --drop-private-types: keep only types the public header defines (the
# opaque flashbwd_plan stays a declaration); --drop-undefined-syms: no declarations of
# functions the library merely calls; no paths or long locations, so the file does not
# depend on where the tree was built.
abidw --headers-dir "$root/abi" --drop-private-types --drop-undefined-syms \
      --no-corpus-path --no-comp-dir-path --short-locs \
      --out-file "$root/abi/flashbwd.abi" "$build/libflashbwd.so"
echo "wrote $root/abi/flashbwd.abi ($(wc -l <"$root/abi/flashbwd.abi") lines) from $build"
