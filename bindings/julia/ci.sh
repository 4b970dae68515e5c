#!/usr/bin/env bash
# ci.sh — check the Julia package FlashBwd on a machine without Julia.
#
#   bindings/julia/ci.sh <build-dir>        # <build-dir> holds the built libflashbwd.so.1
#
# 1. tree-sitter-julia parses every .jl file of the package and the README's Julia code
#    (check/check.mjs syntax);
# 2. every @ccall names a symbol the library exports, with the header's argument count and
#    C types, in the version node of the header's "Since" and no newer than the header
#    version the package mirrors, and every function of abi/flashbwd.h is wrapped
#    (check.mjs ccalls + check/check_ccalls.py);
# 3. Project.toml, the extensions and the includes hang together (check/test_project.py);
# 4. the Julia structs, constants, loading scheme, the README examples and the library
#    allocated workspace of ABI 1.1, through ctypes (check/test_ctypes.py).
# Negative controls feed each checker a deliberately broken input and require the failure
# it must report, so a checker that stopped checking fails CI too.
#
# Needs node >= 18 with npm (the packages pinned by check/package-lock.json are installed
# with `npm ci --ignore-scripts`, so no install script runs), python3 (standard library
# only) and binutils (nm, readelf). Exit status 0 only if everything passed.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 <build-dir>" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=$(cd "$1" && pwd)/libflashbwd.so.1
if [ ! -e "$lib" ]; then
    echo "ci.sh: $lib not found; build the library first (cmake --build $1)" >&2
    exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step() { printf '\n== julia: %s\n' "$*"; }
fail() { echo "ci.sh: FAILED: $*" >&2; exit 1; }

# Expect "$@" to fail and to print every pattern given in $tmp/expect, one per line.
expect_failure() {
    local what=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        cat "$tmp/out"
        fail "negative control '$what' passed; the checker no longer detects it"
    fi
    while IFS= read -r pattern; do
        grep -qF -- "$pattern" "$tmp/out" || {
            cat "$tmp/out"
            fail "negative control '$what' did not report: $pattern"
        }
    done <"$tmp/expect"
    echo "negative control '$what': rejected as expected"
}

cd "$here/check"

step "npm ci --ignore-scripts (web-tree-sitter, tree-sitter-julia)"
npm ci --ignore-scripts --no-audit --no-fund

mapfile -t sources < <(find "$here/FlashBwd" -name '*.jl' | sort)
[ "${#sources[@]}" -gt 0 ] || fail "no .jl files under $here/FlashBwd"

# The README's Julia code blocks (not its REPL transcripts) must parse too.
python3 - "$here/README.md" "$tmp" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = [b for b in re.findall(r"```julia\n(.*?)```", text, flags=re.S)
          if not b.lstrip().startswith("julia>")]
for i, block in enumerate(blocks, start=1):
    open(f"{sys.argv[2]}/README-block-{i}.jl", "w").write(block)
PY
mapfile -t readme_blocks < <(find "$tmp" -name 'README-block-*.jl' | sort)
[ "${#readme_blocks[@]}" -ge 3 ] || fail "README.md lost its Julia examples"

step "syntax of ${#sources[@]} .jl files and ${#readme_blocks[@]} README code blocks"
node check.mjs syntax "${sources[@]}" "${readme_blocks[@]}"
printf 'function f(x\n    x +\nend\n' >"$tmp/broken.jl"
printf '%s\n' "broken.jl:" "syntax error" >"$tmp/expect"
expect_failure "unbalanced function" node check.mjs syntax "$tmp/broken.jl"

step "ccalls against $(basename "$lib") and abi/flashbwd.h"
node check.mjs ccalls "${sources[@]}" >"$tmp/ccalls.json"
python3 check_ccalls.py --library "$lib" --header "$root/abi/flashbwd.h" "$tmp/ccalls.json"

cat >"$tmp/wrong.jl" <<'EOF'
const libflashbwd = "libflashbwd.so.1"
arity(plan) = @ccall libflashbwd.flashbwd_execute(plan::Ptr{Cvoid})::Int32
missing_symbol() = @ccall libflashbwd.flashbwd_not_exported()::Int32
wrong_type(id) = @ccall libflashbwd.flashbwd_struct_size(id::Int64)::Csize_t
wrong_return() = @ccall libflashbwd.flashbwd_version()::Int64
ws_bytes(plan, ptr, bytes, compressed) =
    @ccall libflashbwd.flashbwd_workspace_alloc(plan::Ptr{Cvoid}, ptr::Ref{Ptr{Cvoid}},
                                                bytes::Ref{Int32}, compressed::Ptr{Int32})::Int32
ws_free(ptr) = @ccall libflashbwd.flashbwd_workspace_free(ptr::Ref{Ptr{Cvoid}})::Int32
EOF
node check.mjs ccalls "$tmp/wrong.jl" >"$tmp/wrong.json"
cat >"$tmp/expect" <<'EOF'
flashbwd_execute: 1 arguments, but the header declares 2
flashbwd_not_exported: not exported by
flashbwd_struct_size: argument 1 (id) is Int64, but the header's parameter is int32_t
flashbwd_version: returns Int64, but the header returns uint32_t
flashbwd_workspace_alloc: argument 3 (bytes) is Ref{Int32}, but the header's parameter is size_t *
flashbwd_workspace_free: argument 1 (ptr) is Ref{Ptr{Cvoid}}, but the header's parameter is void *
EOF
expect_failure "wrong ccalls" python3 check_ccalls.py --partial --library "$lib" \
    --header "$root/abi/flashbwd.h" "$tmp/wrong.json"

node check.mjs ccalls "$here/FlashBwd/ext/FlashBwdCUDAExt.jl" >"$tmp/ext.json"
printf '%s\n' "flashbwd_plan_create: declared in" "never called from Julia" >"$tmp/expect"
expect_failure "header functions left unwrapped" python3 check_ccalls.py --library "$lib" \
    --header "$root/abi/flashbwd.h" "$tmp/ext.json"

# ABI 1.1 functions: a package that still mirrors a 1.0 header would load a 1.0 library and
# find them missing; a header whose "Since" disagrees with the library's version node is
# caught too.
printf 'ws_free(ptr) = @ccall libflashbwd.flashbwd_workspace_free(ptr::Ptr{Cvoid})::Int32\n' \
    >"$tmp/newer.jl"
node check.mjs ccalls "$tmp/newer.jl" >"$tmp/newer.json"
printf '%s\n' "flashbwd_workspace_free: since 1.1, but the package mirrors header 1.0" >"$tmp/expect"
expect_failure "1.1 function in a package mirroring 1.0" python3 check_ccalls.py --partial \
    --package-version 1.0 --library "$lib" --header "$root/abi/flashbwd.h" "$tmp/newer.json"

sed 's/Since: 1\.1/Since: 1.0/' "$root/abi/flashbwd.h" >"$tmp/flashbwd-since.h"
cat >"$tmp/expect" <<'EOF'
flashbwd_workspace_free: exported in version node FLASHBWD_1.1, but the header says Since: 1.0
EOF
expect_failure "Since disagreeing with the version node" python3 check_ccalls.py --partial \
    --library "$lib" --header "$tmp/flashbwd-since.h" "$tmp/newer.json"

printf 'f() = ccall(:flashbwd_version, UInt32, ())\n' >"$tmp/unread.jl"
printf '%s\n' "ccall in a form this check does not read" >"$tmp/expect"
expect_failure "ccall form the extraction cannot read" node check.mjs ccalls "$tmp/unread.jl"

step "Project.toml, extensions and includes"
python3 test_project.py -v

step "ctypes: struct layouts, constants, loading, README examples and library workspace (CPU backend)"
FLASHBWD_LIB="$lib" python3 test_ctypes.py -v

echo
echo "julia: all checks passed"
