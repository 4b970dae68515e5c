#!/usr/bin/env bash
# variants_script.sh — bench/variants.sh run, on a fake flashbwd_bench: the summary reads the
# bench's rows (plain and tagged window rows), keeps the better of two passes per variant,
# divides by the current build; with VARIANTS_BUDGET_S the second pass is cut and the
# summary still comes out, from the first pass; a folder without variants is an error; an
# env variant (variants.sh env) runs the current build with its settings.
#
#   variants_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3 "variants.sh summarizes with it"
make_tmp
mkdir -p "$tmp/variants/fast" "$tmp/variants/slow"

# The fake prints flashbwd_bench's header and rows; TFLOP/s depend on the variant (its
# LD_LIBRARY_PATH) and on the pass (the current build is 100 in its first run, 102 after).
cat > "$tmp/bench" <<'FAKE'
#!/usr/bin/env bash
sleep "${FAKE_SLEEP:-0}"
case "${LD_LIBRARY_PATH:-}" in
*/fast) t=110.0 ;;
*/slow) t=90.0 ;;
*) if [ "${FAKE_KNOB:-}" = on ]; then t=120.0
   elif [ -e "$FAKE_STATE/ran" ]; then t=102.0; else t=100.0; touch "$FAKE_STATE/ran"; fi ;;
esac
printf "%4s %6s %6s %5s %5s %4s %3s %10s %9s\n" d causal seqlen batch heads hkv det ms TFLOP/s
printf "%4d %6d %6d %5d %5d %4d %3d %10.3f %9.1f\n" 128 0 4096 4 16 16 0 1.0 "$t"
printf "%4d %6d %6d %5d %5d %4d %3d %10.3f %9.1f%s\n" 128 1 4096 4 16 16 0 1.0 "$t" "  window"
FAKE
chmod +x "$tmp/bench"

run() {
    rm -f "$tmp/ran"
    FAKE_STATE=$tmp FLASHBWD_BENCH=$tmp/bench VARIANTS_DIR=$tmp/variants \
        bash "$root/bench/variants.sh" run "$@" 2>"$tmp/stderr"
}
expect_named() { # expect_named NAME OUTPUT PATTERN
    if ! grep -qE "$3" <<<"$2"; then
        echo "FAIL ($1): no line matching '$3' in:" >&2
        echo "$2" >&2
        exit 1
    fi
}

out=$(run)
expect_named "both passes, plain row" "$out" '^ 128      0   4096 \|      102\.0      110\.0       90\.0 \| 1\.078 0\.882$'
expect_named "both passes, window row" "$out" '^ 128      1   4096 \|      102\.0      110\.0       90\.0 \| 1\.078 0\.882$'

out=$(FAKE_SLEEP=1 VARIANTS_BUDGET_S=1 run)
expect_named "budget: first pass only" "$out" '^ 128      0   4096 \|      100\.0      110\.0       90\.0 \| 1\.100 0\.900$'
grep -q "skipping pass 2" "$tmp/stderr" || { echo "FAIL: the budget skipped nothing" >&2; exit 1; }
empty=$tmp/empty; mkdir -p "$empty"
if FAKE_STATE=$tmp FLASHBWD_BENCH=$tmp/bench VARIANTS_DIR=$empty \
    bash "$root/bench/variants.sh" run >"$tmp/out" 2>"$tmp/stderr"; then
    echo "FAIL: a folder without variants gave exit 0:" >&2; cat "$tmp/out" >&2; exit 1
fi
grep -q "no variant folders in $empty" "$tmp/stderr" ||
    { echo "FAIL: no message naming the empty folder:" >&2; cat "$tmp/stderr" >&2; exit 1; }
envdir=$tmp/envvariants
VARIANTS_DIR=$envdir bash "$root/bench/variants.sh" env knob FAKE_KNOB=on >/dev/null
[ "$(cat "$envdir/knob/env")" = FAKE_KNOB=on ] || { echo "FAIL: env file" >&2; exit 1; }
if VARIANTS_DIR=$envdir bash "$root/bench/variants.sh" env bad NOT-AN-ASSIGNMENT 2>/dev/null; then
    echo "FAIL: env accepted a word that is not VAR=VALUE" >&2; exit 1
fi
rm -f "$tmp/ran"
out=$(FAKE_STATE=$tmp FLASHBWD_BENCH=$tmp/bench VARIANTS_DIR=$envdir \
    bash "$root/bench/variants.sh" run 2>"$tmp/stderr")
expect_named "env variant" "$out" '^ 128      0   4096 \|      102\.0      120\.0 \| 1\.176$'
echo "PASS: variants.sh summarizes both passes, tagged rows, a budget-cut run and an env variant, and refuses an empty folder"
