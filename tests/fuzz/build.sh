#!/bin/sh
# build.sh — build the libFuzzer targets of tests/fuzz/ with clang, ASan and UBSan.
#
#   tests/fuzz/build.sh [OUT]        (default OUT: build-fuzz/ at the repository root)
#
# The targets link the library's C sources directly, CPU-only (no FB_WITH_CUDA), so the
# sanitizers and libFuzzer's coverage see the host code; src/*.c is listed here by glob, so
# a new source file is picked up without editing this script. Needs clang with compiler-rt
# (Debian: clang, libclang-rt-14-dev). Binaries: OUT/fuzz_plan, OUT/fuzz_tensors,
# OUT/fuzz_execute. Run them with tests/fuzz/run.sh.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build-fuzz}
CC=${CC:-clang}
mkdir -p "$out/obj"

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cflags="-std=c11 -g -O1 $san -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes"
incs="-I$root/abi -I$root/src -I$here"
cov="-fsanitize-coverage-allowlist=$here/coverage.allow"

# Library and helpers: coverage instrumentation without libFuzzer's main.
objs=""
for src in "$root"/src/*.c "$here/fuzz_common.c"; do
    obj="$out/obj/$(basename "$src" .c).o"
    "$CC" $cflags -fsanitize=fuzzer-no-link $cov $incs -c "$src" -o "$obj"
    objs="$objs $obj"
done

for target in fuzz_plan fuzz_tensors fuzz_execute; do
    "$CC" $cflags -fsanitize=fuzzer $cov $incs "$here/$target.c" $objs -lm -lpthread \
        -o "$out/$target"
done
echo "built $out/fuzz_plan $out/fuzz_tensors $out/fuzz_execute"
