#!/usr/bin/env bash
# gpu-bundle.sh BUILD_DIR OUT_DIR — build the Go test binary for the GPU machine.
#
# The GPU machine has no Go toolchain, so the tests are compiled here (`go test -c`) and
# copied there. OUT_DIR receives:
#   flashbwd-go.test   the package's tests; rpath $ORIGIN first, so it loads
#   libflashbwd.so.1   the library from BUILD_DIR (build it with CUDA for sm_90)
# libcuda.so.1 is not linked: the tests dlopen it, so the same binary skips its GPU tests on
# a machine with no driver. Run it from bindings/go/flashbwd (the README test reads
# ../README.md and example_test.go); see README.md "GPU tests" for the exact commands.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
if [ ! -e "$build/libflashbwd.so.1" ]; then
    echo "gpu-bundle.sh: $build/libflashbwd.so.1 not found" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=uninstalled-pc.sh
. "$here/uninstalled-pc.sh"
write_uninstalled_pc "$tmp/pkgconfig" "$build" "$repo"
export PKG_CONFIG_PATH="$tmp/pkgconfig" GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath"
export GOFLAGS=-mod=mod GOPROXY=off GOWORK=off CGO_ENABLED=1
# Environment LDFLAGS are not subject to cgo's flag allowlist; '$ORIGIN' reaches the linker
# literally.
export CGO_LDFLAGS='-Wl,-rpath,$ORIGIN'

cd "$here"
go test -c -o "$out/flashbwd-go.test" ./flashbwd
cp -L "$build/libflashbwd.so.1" "$out/libflashbwd.so.1"
readelf -d "$out/flashbwd-go.test" | grep -E 'RUNPATH|RPATH|NEEDED' || true
if ! readelf -S -W "$out/libflashbwd.so.1" | grep -q '\.nv_fatbin'; then
    echo "gpu-bundle.sh: $build/libflashbwd.so.1 has no CUDA kernels (no .nv_fatbin);" \
        "the GPU tests need a CUDA build" >&2
    exit 1
fi
ls -l "$out"
