#!/usr/bin/env bash
# abi_exports.sh — the .so exports exactly the functions of the public header, each in the
# version node its "Since:" tag names, and nothing else.
#
#   abi_exports.sh HEADER LIBRARY.so
#
# The header is the list: every `FLASHBWD_API ... flashbwd_name(` declaration, with the
# "Since: X.Y" of the doc block above it, must be exported as flashbwd_name@@FLASHBWD_X.Y.
# Any other dynamic symbol (cuda*, fb_*, C++ runtime, ...) fails, and so does a NEEDED entry
# on libcudart or libcuda: the CUDA runtime is linked statically and the driver is reached
# at run time only (design.md). Exits 77 (skipped) only if nm or readelf is missing.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 HEADER LIBRARY.so" >&2
    exit 2
fi
header=$1 lib=$2
for tool in nm readelf; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIPPED: $tool not found (binutils)"
        exit 77
    fi
done

# name node, one per line, from the header.
expected=$(awk '
    /Since: [0-9]+\.[0-9]+/ { match($0, /Since: [0-9]+\.[0-9]+/); since = substr($0, RSTART + 7, RLENGTH - 7) }
    /^FLASHBWD_API / {
        if (!match($0, /flashbwd_[a-z0-9_]+\(/)) { print "UNPARSED " $0; next }
        name = substr($0, RSTART, RLENGTH - 1)
        print name, (since == "" ? "NO-SINCE-TAG" : "FLASHBWD_" since)
        since = ""
    }' "$header" | sort)

fail=0
if [ -z "$expected" ]; then
    echo "FAIL: no FLASHBWD_API declarations found in $header" >&2
    exit 1
fi
if grep -q -e '^UNPARSED' -e 'NO-SINCE-TAG' <<<"$expected"; then
    echo "FAIL: header declarations this script cannot read (each needs a Since: tag):" >&2
    grep -e '^UNPARSED' -e 'NO-SINCE-TAG' <<<"$expected" >&2
    fail=1
fi

# Defined dynamic symbols: "name@@NODE" for functions, "NODE" (type A) for version nodes.
actual=$(nm -D --defined-only "$lib" | awk '
    $2 == "A" { next }                                   # version node definitions
    { n = $3; split(n, parts, "@@"); if (parts[2] == "") { print n, "UNVERSIONED"; next }
      print parts[1], parts[2] }' | sort)
nodes=$(nm -D --defined-only "$lib" | awk '$2 == "A" { print $3 }' | sort)

missing=$(comm -23 <(echo "$expected") <(echo "$actual"))
extra=$(comm -13 <(echo "$expected") <(echo "$actual"))
if [ -n "$missing" ]; then
    echo "FAIL: header functions not exported (name expected-node):" >&2
    echo "$missing" >&2
    fail=1
fi
if [ -n "$extra" ]; then
    echo "FAIL: exported but not in the header, or in the wrong node (name node):" >&2
    echo "$extra" >&2
    fail=1
fi
expected_nodes=$(awk '{ print $2 }' <<<"$expected" | sort -u)
if [ "$nodes" != "$expected_nodes" ]; then
    echo "FAIL: version nodes defined by the .so:" $nodes "; the header's Since tags name:" \
         $expected_nodes >&2
    fail=1
fi
needed=$(readelf -d -W "$lib" | awk '/\(NEEDED\)/ { gsub(/[][]/, "", $5); print $5 }')
if grep -E -q '^libcuda(rt)?\.so' <<<"$needed"; then
    echo "FAIL: $lib needs" $(grep -E '^libcuda(rt)?\.so' <<<"$needed") \
         "; the CUDA runtime must be static and the driver loaded at run time" >&2
    fail=1
fi

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "PASS: $(wc -l <<<"$expected") functions exported as the header declares, nodes:" $nodes
