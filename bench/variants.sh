#!/bin/bash
# variants.sh — compare config-table variants against the current build in one GPU call.
#
# Here, on the build machine, once per variant:
#   bench/variants.sh build NAME [--ref GITREF] [--sed SED-EXPR] [--dims "64;96;128;192;256"]
#                                [--cmake -DVAR=VALUE]
#     copies the working tree (tracked and untracked files git does not ignore), or with
#     --ref the tree of a commit or branch, to a temp folder, applies SED-EXPR to
#     src/config_table.h (it must change something), builds only the library for sm_90
#     and leaves it in variants/NAME/, or $VARIANTS_DIR/NAME/ (ignored by git; name variants
#     in the device call's carry beside build). --cmake passes one more cache entry to the
#     configure step, e.g. --cmake -DFLASHBWD_PTXAS_FLAGS=-regUsageLevel=0 (a ptxas option
#     for the kernels).
#     Examples: bench/variants.sh build st3 --sed 's/X(90, 128,  64, 128, 2,/X(90, 128,  64, 128, 3,/'
#               bench/variants.sh build v2 --ref v2-lag
#     The test binaries in build/ run a variant through the ABI alone, e.g.
#     LD_LIBRARY_PATH=variants/v2 build/tests/test_gpu (and under compute-sanitizer).
#   bench/variants.sh env NAME VAR=VALUE...
#     a variant that is the current build run with these environment settings (e.g.
#     FLASHBWD_FORCE_SPLIT=0): variants/NAME/env holds them, one per line, and no library.
# There, on the GPU machine:
#   bench/variants.sh run [flashbwd_bench arguments]
#     runs build/bench/flashbwd_bench with the current build and with each variant
#     (LD_LIBRARY_PATH; the bench's RUNPATH yields to it), twice in alternating order so
#     clock drift over the run shows up, and prints TFLOP/s per point and variant, the
#     better of the two passes, and each variant's ratio to the current build.
#     FLASHBWD_BENCH names another benchmark binary.
#     VARIANTS_BUDGET_S=N: the first pass runs every variant; the second starts no run
#     after N seconds, and the summary uses what finished. Use it instead of an outer
#     `timeout`, which kills the summary with the runs. VARIANTS_DIR replaces variants/
#     (tests/variants_script.sh runs the script on a fake bench that way). A folder with
#     no variant in it is an error, not a table of the current build alone.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cmd=${1:-}
case "$cmd" in
build)
    [ $# -ge 2 ] || { echo "usage: $0 build NAME [--ref GITREF] [--sed SED-EXPR] [--dims D] [--cmake -DVAR=VALUE]" >&2; exit 2; }
    name=$2 ref="" expr="" dims="64;96;128;192;256" extra=""
    shift 2
    while [ $# -gt 0 ]; do
        case "$1" in
        --ref) ref=$2 ;;
        --sed) expr=$2 ;;
        --dims) dims=$2 ;;
        --cmake) extra=$2 ;;
        *) echo "variants.sh: unknown option $1" >&2; exit 2 ;;
        esac
        shift 2
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if [ -n "$ref" ]; then
        git -C "$repo" archive "$ref" | tar -x -C "$tmp"
    else
        (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
            xargs -0 cp --parents -t "$tmp")
    fi
    if [ -n "$expr" ]; then
        cp "$tmp/src/config_table.h" "$tmp/config_table.orig"
        sed -i "$expr" "$tmp/src/config_table.h"
        if cmp -s "$tmp/config_table.orig" "$tmp/src/config_table.h"; then
            echo "variants.sh: '$expr' changes nothing in src/config_table.h" >&2
            exit 1
        fi
        diff "$tmp/config_table.orig" "$tmp/src/config_table.h" || true
    fi
    cmake -S "$tmp" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DFLASHBWD_HEAD_DIMS="$dims" ${extra:+"$extra"} >/dev/null
    cmake --build "$tmp/build" --target flashbwd
    vdir=${VARIANTS_DIR:-$repo/variants}
    rm -rf "${vdir:?}/$name"
    mkdir -p "$vdir/$name"
    cp -a "$tmp/build"/libflashbwd.so* "$vdir/$name/"
    echo "$vdir/$name: built"
    ;;
env)
    [ $# -ge 3 ] || { echo "usage: $0 env NAME VAR=VALUE..." >&2; exit 2; }
    name=$2
    shift 2
    for kv in "$@"; do
        [[ "$kv" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] ||
            { echo "variants.sh: '$kv' is not VAR=VALUE" >&2; exit 2; }
    done
    vdir=${VARIANTS_DIR:-$repo/variants}
    rm -rf "${vdir:?}/$name"
    mkdir -p "$vdir/$name"
    printf '%s\n' "$@" > "$vdir/$name/env"
    echo "$vdir/$name: the current build with $*"
    ;;
run)
    shift
    bench=${FLASHBWD_BENCH:-$repo/build/bench/flashbwd_bench}
    out=$(mktemp -d)
    names=(current)
    vdir=${VARIANTS_DIR:-$repo/variants}
    for d in "$vdir"/*/; do [ -d "$d" ] && names+=("$(basename "$d")"); done
    if [ ${#names[@]} -lt 2 ]; then # a table of the current build alone looks like a result
        echo "variants.sh: no variant folders in $vdir (build them there, or set VARIANTS_DIR)" >&2
        exit 1
    fi
    order=("${names[@]}")
    budget=${VARIANTS_BUDGET_S:-0} started=$SECONDS
    for pass in 1 2; do
        for n in "${order[@]}"; do
            if [ "$pass" = 2 ] && [ "$budget" -gt 0 ] && [ $((SECONDS - started)) -ge "$budget" ]; then
                echo "variants.sh: ${budget} s budget spent; skipping pass $pass of $n" >&2
                continue
            fi
            if [ "$n" = current ]; then "$bench" --host-costs 0 "$@" > "$out/$n.$pass"
            elif [ -f "$vdir/$n/env" ]; then
                env $(cat "$vdir/$n/env") "$bench" --host-costs 0 "$@" > "$out/$n.$pass"
            else LD_LIBRARY_PATH="$vdir/$n" "$bench" --host-costs 0 "$@" > "$out/$n.$pass"
            fi
        done
        order=(); for ((i = ${#names[@]} - 1; i >= 0; --i)); do order+=("${names[i]}"); done
    done
    python3 - "$out" "${names[@]}" <<'PY'
import sys
out, names = sys.argv[1], sys.argv[2:]
best = {}
for n in names:
    for p in (1, 2):
        try:
            lines = open(f"{out}/{n}.{p}").readlines()
        except FileNotFoundError:  # skipped: the time budget ran out
            continue
        for line in lines:
            f = line.split()
            if len(f) >= 9 and f[0].isdigit():  # window and varlen rows carry a tag
                key = (int(f[0]), int(f[1]), int(f[2]))
                best[n, key] = max(best.get((n, key), 0.0), float(f[8]))
keys = sorted({k for (_, k) in best})
print("   d causal seqlen | " + " ".join(f"{n:>10s}" for n in names) + " | ratio to current")
for k in keys:
    cur = best.get(("current", k), 0.0)
    vals = " ".join(f"{best.get((n, k), 0.0):10.1f}" for n in names)
    ratios = " ".join(f"{best.get((n, k), 0.0) / cur:5.3f}" if cur else "  -  " for n in names[1:])
    print(f"{k[0]:4d} {k[1]:6d} {k[2]:6d} | {vals} | {ratios}")
PY
    rm -rf "$out"
    ;;
*)
    echo "usage: $0 build NAME [--ref GITREF] [--sed SED-EXPR] [--dims D] | env NAME VAR=VALUE... | run [bench arguments]" >&2
    exit 2
    ;;
esac
