#!/usr/bin/env bash
# fault_coverage.sh — test_faults wraps every CUDA runtime call the library's objects make.
#
#   fault_coverage.sh "WRAPPED SYMBOLS" OBJECT...
#
# Lists the undefined cuda* symbols of the objects (nm) and fails if one is neither wrapped
# nor known not to fail: cudaGetErrorName/cudaGetErrorString (table lookups) and the
# __cuda* registration and launch stubs nvcc generates (launches are checked through
# cudaGetLastError). A new runtime call in src/ or kernels/ must be added to the WRAP list
# of test_faults in tests/CMakeLists.txt and given a row in tests/test_faults.c.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 \"WRAPPED SYMBOLS\" OBJECT..." >&2
    exit 2
fi
wrapped=$1
shift
if ! command -v nm >/dev/null 2>&1; then
    echo "SKIPPED: nm not found (binutils)"
    exit 77
fi

used=$(nm -u "$@" | awk '$1 == "U" && $2 ~ /^cuda/ { print $2 }' | sort -u)
allowed="cudaGetErrorName cudaGetErrorString"
missing=()
for sym in $used; do
    case " $wrapped $allowed " in
    *" $sym "*) ;;
    *) missing+=("$sym") ;;
    esac
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: the library calls CUDA runtime functions test_faults does not wrap:" \
         "${missing[*]}" >&2
    exit 1
fi
echo "PASS: every CUDA runtime call of the library is wrapped:" $used
