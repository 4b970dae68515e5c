#!/usr/bin/env bash
# ci.sh BUILD_DIR — vet and test the Go bindings against the libflashbwd in BUILD_DIR.
#
# What it sets, and why:
#   PKG_CONFIG_PATH  a directory holding a flashbwd.pc written for BUILD_DIR (libdir = the
#                    build dir, with an rpath to it; includedir = abi/), found by the
#                    package's `#cgo pkg-config: flashbwd`. Nothing else is on the path,
#                    so an installed flashbwd.pc cannot be picked up by accident.
#   GOCACHE, GOPATH  fresh and temporary: a warm build cache can hide a missing or wrong
#                    PKG_CONFIG_PATH (cgo results are cached), so CI never reuses one.
#   GOFLAGS=-mod=mod GOPROXY=off GOWORK=off   offline; the module has no dependencies.
#   CGO_ENABLED=1
# Then: gofmt (no diffs), go vet, go test -count=1 -v (summary of passed / skipped /
# failed tests printed at the end; a skipped test is never counted as passed), and the
# tests again under GODEBUG=cgocheck=2, which checks every pointer write for cgo rule
# violations.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR   (a cmake build directory holding libflashbwd.so.1)" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
if [ ! -e "$build/libflashbwd.so.1" ]; then
    echo "ci.sh: $build/libflashbwd.so.1 not found; build the library first" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=uninstalled-pc.sh
. "$here/uninstalled-pc.sh"
write_uninstalled_pc "$tmp/pkgconfig" "$build" "$repo" '-Wl,-rpath,${libdir} '

export PKG_CONFIG_PATH="$tmp/pkgconfig"
export GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath"
export GOFLAGS=-mod=mod GOPROXY=off GOWORK=off CGO_ENABLED=1
cd "$here"

echo "== go: $(go version); flashbwd $(pkg-config --modversion flashbwd) from $build"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "gofmt: these files need formatting:" >&2
    echo "$unformatted" >&2
    exit 1
fi

echo "== go vet ./..."
go vet ./...

echo "== go test -count=1 -v ./..."
rc=0
go test -count=1 -v ./... >"$tmp/test.log" 2>&1 || rc=$?
cat "$tmp/test.log"
# Counts cover tests and subtests alike (a parent of subtests counts once more).
pass=$(grep -c -- '--- PASS' "$tmp/test.log" || true)
skip=$(grep -c -- '--- SKIP' "$tmp/test.log" || true)
fail=$(grep -c -- '--- FAIL' "$tmp/test.log" || true)
echo "== go test: $pass passed, $skip skipped, $fail failed (tests and subtests; rc $rc)"
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi

echo "== GODEBUG=cgocheck=2 go test -count=1 ./..."
GODEBUG=cgocheck=2 go test -count=1 ./...
echo "== go bindings: OK"
