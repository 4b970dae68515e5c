#!/usr/bin/env bash
# run.sh — install flashbwd into a fresh prefix and build a consumer against it, three ways.
#
#   run.sh CMAKE BUILD_DIR TESTS_DIR WORK_DIR
#
# 1. `cmake --install BUILD_DIR` into WORK_DIR/prefix; check the installed tree (the one
#    public header and nothing private, the .so with its SONAME links, flashbwd.pc, the
#    CMake package files).
# 2. Build tests/consumer with find_package(flashbwd 1.0), with pkg_check_modules, and with
#    a bare `cc $(pkg-config --cflags --libs flashbwd)`; each must load the installed
#    library and pass its CPU backward check. find_package(flashbwd 2.0) must fail.
set -euo pipefail

if [ $# -ne 4 ]; then
    echo "usage: $0 CMAKE BUILD_DIR TESTS_DIR WORK_DIR" >&2
    exit 2
fi
cmake=$1 build=$2 tests=$3 work=$4
consumer=$tests/consumer
prefix=$work/prefix

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

rm -rf "$work"
mkdir -p "$work"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

# --- 1. Install ---------------------------------------------------------------------------
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" ||
    fail "cmake --install: $(cat "$work/install.log")"

[ -f "$prefix/include/flashbwd.h" ] || fail "include/flashbwd.h is not installed"
headers=$(cd "$prefix/include" && find . -type f | sort)
[ "$headers" = "./flashbwd.h" ] || fail "include/ holds more than flashbwd.h: $headers"

real=$(find "$prefix" -name 'libflashbwd.so.*.*.*' -type f)
[ -n "$real" ] || fail "no libflashbwd.so.X.Y.Z installed"
libdir=$(dirname "$real")
[ -L "$libdir/libflashbwd.so.1" ] || fail "libflashbwd.so.1 is not a symlink in $libdir"
[ -L "$libdir/libflashbwd.so" ] || fail "libflashbwd.so (the link-time name) is missing"
[ "$(readlink -f "$libdir/libflashbwd.so")" = "$(readlink -f "$real")" ] ||
    fail "libflashbwd.so does not resolve to $real"
soname=$(readelf -d "$real" | awk '/\(SONAME\)/ { gsub(/[][]/, "", $5); print $5 }')
[ "$soname" = "libflashbwd.so.1" ] || fail "SONAME is '$soname', not libflashbwd.so.1"
[ -f "$libdir/pkgconfig/flashbwd.pc" ] || fail "$libdir/pkgconfig/flashbwd.pc is missing"
for f in flashbwdConfig.cmake flashbwdConfigVersion.cmake flashbwdTargets.cmake; do
    [ -f "$libdir/cmake/flashbwd/$f" ] || fail "$libdir/cmake/flashbwd/$f is missing"
done
echo "installed: $real (SONAME $soname), pkg-config and CMake package files"

# The consumer must run on the installed library, never the build tree's.
check_loads_installed() { # binary
    local loaded
    loaded=$(env -u LD_LIBRARY_PATH ldd "$1" | awk '/libflashbwd\.so/ { print $3 }')
    [ -n "$loaded" ] || fail "$1 does not link libflashbwd"
    case "$(readlink -f "$loaded")" in
    "$(readlink -f "$prefix")"/*) ;;
    *) fail "$1 loads $loaded, not the library installed under $prefix" ;;
    esac
}

# --- 2. Consumers ------------------------------------------------------------------------
build_consumer() { # name, extra cmake args...
    local name=$1
    shift
    "$cmake" -S "$consumer" -B "$work/$name" "${generator[@]}" -DFB_TESTS_DIR="$tests" "$@" \
        >"$work/$name.configure.log" 2>&1 || { cat "$work/$name.configure.log" >&2; return 1; }
    "$cmake" --build "$work/$name" >"$work/$name.build.log" 2>&1 ||
        { cat "$work/$name.build.log" >&2; return 1; }
}

build_consumer find_package -DCONSUMER_USE=find_package -DCMAKE_PREFIX_PATH="$prefix" ||
    fail "the find_package(flashbwd 1.0) consumer does not build"
check_loads_installed "$work/find_package/consumer"
env -u LD_LIBRARY_PATH "$work/find_package/consumer" find_package ||
    fail "the find_package consumer's backward check failed"

if build_consumer find_package_2 -DCONSUMER_USE=find_package -DCONSUMER_VERSION=2.0 \
        -DCMAKE_PREFIX_PATH="$prefix" 2>/dev/null; then
    fail "find_package(flashbwd 2.0) accepted version 1 (SameMajorVersion is the rule)"
fi
echo "find_package(flashbwd 2.0) refused, as it must"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
version=$(pkg-config --modversion flashbwd) || fail "pkg-config does not find flashbwd"
echo "pkg-config: flashbwd $version"
build_consumer pkg_config -DCONSUMER_USE=pkg-config ||
    fail "the pkg_check_modules(flashbwd) consumer does not build"
check_loads_installed "$work/pkg_config/consumer"
env -u LD_LIBRARY_PATH "$work/pkg_config/consumer" pkg-config ||
    fail "the pkg-config consumer's backward check failed"

# shellcheck disable=SC2046 # pkg-config output is a list of flags
${CC:-cc} -std=c11 -Wall -Wextra -I"$tests" "$consumer/consumer.c" "$tests/common.c" \
    $(pkg-config --cflags --libs flashbwd) -lm -o "$work/consumer_cc" ||
    fail "cc \$(pkg-config --cflags --libs flashbwd) does not build the consumer"
check_loads_installed "$work/consumer_cc"
env -u LD_LIBRARY_PATH "$work/consumer_cc" "cc + pkg-config" ||
    fail "the cc + pkg-config consumer's backward check failed"

echo "PASS: installed tree, find_package, pkg_check_modules and cc + pkg-config consumers"
