#!/bin/sh
# run.sh — replay every committed fuzz input, then fuzz each target for a while.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET] [BUILD]     (defaults: 30, build-fuzz/)
#
# 1. Replay: tests/fuzz/regressions/<target>/ (inputs that once crashed: they must pass
#    now) and tests/fuzz/corpus/<target>/ (the minimized corpus of the long runs), each
#    input once.
# 2. Fuzz: the three targets at the same time, each SECONDS_PER_TARGET seconds, starting
#    from the committed corpus; new inputs go to a scratch folder, never into the tree
#    (FUZZ_KEEP=DIR keeps them in DIR/<target>/, to merge into the corpus after a long run:
#    BUILD/<target> -merge=1 tests/fuzz/corpus/<target> DIR/<target>).
#    A crash leaves its input as BUILD/crash-<target>-*: minimize it, add it to
#    tests/fuzz/regressions/<target>/ (and a cmocka test), then fix the library.
# Prints one line per target: executions, seconds, result. Exit status 0 only if every
# replay and every fuzz run ended without a finding. Build first with tests/fuzz/build.sh.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-30}
bin=${2:-$root/build-fuzz}
targets="fuzz_plan fuzz_tensors fuzz_execute"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
keep=${FUZZ_KEEP:-$scratch}
status=0

for t in $targets; do
    mkdir -p "$scratch/$t"
    dirs=""
    for d in "$here/regressions/$t" "$here/corpus/$t"; do
        [ -d "$d" ] && dirs="$dirs $d"
    done
    [ -n "$dirs" ] || continue
    if "$bin/$t" -runs=0 $dirs > "$scratch/$t.replay.log" 2>&1; then
        echo "$t: replayed $(find $dirs -type f | wc -l) committed inputs: ok"
    else
        echo "$t: REPLAY FAILED"
        tail -n 30 "$scratch/$t.replay.log"
        status=1
    fi
done

[ "$secs" -gt 0 ] || exit $status
for t in $targets; do
    mkdir -p "$keep/$t"
    corpus=""
    [ -d "$here/corpus/$t" ] && corpus="$here/corpus/$t"
    "$bin/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$bin/crash-$t-" "$keep/$t" $corpus \
        > "$scratch/$t.log" 2>&1 &
    echo $! > "$scratch/$t.pid"
done
for t in $targets; do
    if wait "$(cat "$scratch/$t.pid")"; then result=ok; else result=FAILED; status=1; fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$t.log")
    echo "$t: ${runs:-?} executions in $secs s: $result"
    if [ "$result" = FAILED ]; then
        grep -E "fuzz check failed|ERROR|SUMMARY|runtime error|Test unit written" \
            "$scratch/$t.log" | head -n 20
    fi
done
exit $status
