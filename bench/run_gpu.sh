#!/bin/bash
# run_gpu.sh — everything that needs the GPU, in one call on the device machine:
#   bench/run_gpu.sh [steps]   steps: any of sass tests sanitize demo bench ab torch table
#                              (default: all but ab, which needs variants/ built and carried,
#                              and table)
# Runs from the repository root with the build/ folder carried from the build machine
# (tests and tools find libflashbwd.so and libcmocka.so.0 through $ORIGIN rpaths). Logs go
# to $OUT (or /tmp/flashbwd-out), packed at the end into $OUT/run_gpu.tgz (the device tool
# brings back at most 8 files; RUN_GPU_TAR=0 leaves them loose); a summary is printed last.
set -u
OUT=${OUT:-/tmp/flashbwd-out}
mkdir -p "$OUT"
B=${BUILD:-build}
here=$(dirname "$0")  # bench/, for the Python scripts beside this one
STEPS=${*:-sass tests sanitize demo bench torch}
summary=()
note() { summary+=("$1"); echo "== $1"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader \
  > "$OUT/gpu.txt" 2>&1
note "gpu: $(cat "$OUT/gpu.txt")"

if has sass; then
  # Registers, spills and SASS of the main kernels (no disassembler on the build machine).
  cuobjdump -res-usage "$B/libflashbwd.so" 2>&1 | grep -B1 -A1 "bwd_main" > "$OUT/sass.txt"
  for f in $(cuobjdump -sass "$B/libflashbwd.so" 2>/dev/null | grep -o "Function : .*bwd_main_kernel.*Li90ELi128.*" | sed 's/Function : //' | head -1); do
    cuobjdump -sass -fun "$f" "$B/libflashbwd.so" >> "$OUT/sass.txt" 2>&1
  done
  note "sass: $(grep -c "HMMA" "$OUT/sass.txt") HMMA, $(grep -c "LDL\|STL" "$OUT/sass.txt") local-memory instrs in the dumped main kernel"
fi

# The largest relative error vs fp64 per dtype over the matrix lines of a test_gpu log.
worst() {
  for t in bf16 fp16; do
    grep " gpu dQ" "$1" | grep "^ *$t" | grep -oE "d[QKV] [0-9.e+-]+" |
      awk -v t=$t '{ if ($2 + 0 > m) m = $2 + 0 } END { printf "%s <= %.2e  ", t, m }'
  done
  echo "over $(grep -c ' gpu dQ' "$1") cases"
}

if has tests; then
  "$B/tests/test_gpu" > "$OUT/tests.log" 2>&1; rc=$?
  note "test_gpu rc=$rc ($(grep -c '\[       OK \]' "$OUT/tests.log") ok, $(grep -c '\[  FAILED  \]' "$OUT/tests.log") failed lines): $(worst "$OUT/tests.log")"
  # The sm_86 rows (compiled for every GPU) on this GPU.
  FLASHBWD_FORCE_CONFIG_CLASS=86 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_sm86.log" 2>&1
  note "test_gpu on the sm_86 rows rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_sm86.log") ok): $(worst "$OUT/tests_sm86.log")"
  # The sm_90 rows' split kernel serves most plans: run the main kernel in its place too.
  FLASHBWD_FORCE_SPLIT=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_nosplit.log" 2>&1
  note "test_gpu without the split kernel rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_nosplit.log") ok): $(worst "$OUT/tests_nosplit.log")"
  # The suite's sequences are short, where plans fold the dQ conversion into the main
  # kernel: run the unfolded kernels (and the convert pass) too.
  FLASHBWD_FORCE_SPLIT=0 FLASHBWD_FORCE_DQ_FOLD=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_nofold.log" 2>&1
  note "test_gpu with the dQ conversion unfolded rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_nofold.log") ok): $(worst "$OUT/tests_nofold.log")"
  # ... and the other way round: the hd64 row converts in its own pass up to 1024 keys (FMIN).
  FLASHBWD_FORCE_SPLIT=0 FLASHBWD_FORCE_DQ_FOLD=1 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_fold.log" 2>&1
  note "test_gpu with the dQ conversion folded rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_fold.log") ok): $(worst "$OUT/tests_fold.log")"
  # The main grid's other order: heads on x without a mask, key blocks on x with one.
  for x in 0 1; do
    FLASHBWD_FORCE_HEADS_ON_X=$x FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_x$x.log" 2>&1
    note "test_gpu with FORCE_HEADS_ON_X=$x rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_x$x.log") ok): $(worst "$OUT/tests_x$x.log")"
  done
  # Heads in groups of one (the order long masked plans come close to): every mapping.
  FLASHBWD_HEAD_GROUP=1 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_g1.log" 2>&1
  note "test_gpu with FLASHBWD_HEAD_GROUP=1 rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_g1.log") ok): $(worst "$OUT/tests_g1.log")"
  # The split kernel refills its ring through TMA where the tensors allow: cp.async too.
  FLASHBWD_SPLIT_TMA=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_notma.log" 2>&1
  note "test_gpu with the cp.async refill rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_notma.log") ok): $(worst "$OUT/tests_notma.log")"
  # hd64 plans with whole key blocks and no mask take the split kernel's full-tile
  # instance: run them through the plain one too.
  FLASHBWD_SPLIT_FULL=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_nofull.log" 2>&1
  note "test_gpu with the full-tile instance off rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_nofull.log") ok): $(worst "$OUT/tests_nofull.log")"
  # Short split plans zero their dQ sums in the main kernel (kernels/dq_zero.cuh): run
  # every split plan with the preprocess's zeroing, and every one with the kernel's.
  for z in 0 1; do
    FLASHBWD_SPLIT_DQ_ZERO=$z FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_zero$z.log" 2>&1
    note "test_gpu with FLASHBWD_SPLIT_DQ_ZERO=$z rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_zero$z.log") ok): $(worst "$OUT/tests_zero$z.log")"
  done
  # Split plans of hd > 64 run the convert pass beside the split kernel's tail, waiting for
  # each head's count (FB_SPLIT_DQ_OVERLAP): run them without it, and with its blocks taken
  # backwards (the order that waits most).
  FLASHBWD_DQ_OVERLAP=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_nooverlap.log" 2>&1
  note "test_gpu without the overlapped convert pass rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_nooverlap.log") ok): $(worst "$OUT/tests_nooverlap.log")"
  FLASHBWD_DQ_TAIL_PAIRS=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_overlap_rev.log" 2>&1
  note "test_gpu with the overlapped pass backwards rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_overlap_rev.log") ok): $(worst "$OUT/tests_overlap_rev.log")"
  # Plans replay their launches as a CUDA graph by default: run the direct launches too.
  FLASHBWD_LAUNCH_GRAPH=0 FLASHBWD_GPU_QUICK=1 "$B/tests/test_gpu" > "$OUT/tests_direct.log" 2>&1
  note "test_gpu with direct launches rc=$? ($(grep -c '\[       OK \]' "$OUT/tests_direct.log") ok): $(worst "$OUT/tests_direct.log")"
  for t in "$B"/tests/test_*; do
    case "$t" in *test_gpu|*.so*) continue;; esac
    [ -x "$t" ] || continue
    # rc first: a $(...) in the same word would reset $? before it expands
    "$t" >> "$OUT/tests.log" 2>&1; rc=$?; note "$(basename "$t") rc=$rc"
  done
fi

if has sanitize; then
  # racecheck instruments every shared-memory access: it gets the one-case-per-kernel set
  for tool in memcheck racecheck synccheck initcheck; do
    level=1; [ $tool = racecheck ] && level=2
    FLASHBWD_GPU_QUICK=$level timeout ${SANITIZE_TIMEOUT:-400} compute-sanitizer --tool $tool \
      --error-exitcode 3 "$B/tests/test_gpu" > "$OUT/sanitize_$tool.log" 2>&1
    note "compute-sanitizer $tool rc=$? ($(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log"))"
  done
  cat "$OUT"/sanitize_*.log > "$OUT/sanitize.log"; rm -f "$OUT"/sanitize_*.log
fi

if has demo; then
  "$B/bench/flashbwd_demo" > "$OUT/demo.log" 2>&1
  note "demo rc=$?: $(grep -E 'TFLOP|PASS|FAIL' "$OUT/demo.log" | tr '\n' ' ')"
fi

if has bench; then
  "$B/bench/flashbwd_bench" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  note "bench rc=$?"
  cat "$OUT/bench.log"
fi

if has ab; then
  # Same-run A/B of the current build against each built variant (bench/variants.sh).
  VARIANTS_BUDGET_S=${AB_BUDGET:-150} bench/variants.sh run ${AB_ARGS:---dims 64,128,256 --seqlens 512,4096,16384} \
    > "$OUT/ab.log" 2>&1
  note "variants A/B rc=$?"
  cat "$OUT/ab.log"
fi

if has torch; then
  PYTHONUNBUFFERED=1 python3 "$here/compare_torch.py" --lib "$B/libflashbwd.so" ${TORCH_ARGS:-} \
    > "$OUT/torch.log" 2>&1
  note "compare_torch rc=$?"
  grep -v '^JSON' "$OUT/torch.log" | tail -40
fi

if has table; then
  # Issue 6's reading (docs/performance.md, "Where issue 6 stands"): the whole grid beside
  # PyTorch's backends in both dtypes, FlexAttention at hd128, then the SM clock and power of
  # flashbwd, FA2 and cuDNN at hd128 non-causal 16k. About 250 s on an H200.
  grid="--seqlens 512,1024,2048,4096,8192,16384 --causal 0,1"
  for dt in bf16 fp16; do
    PYTHONUNBUFFERED=1 timeout 200 python3 "$here/compare_torch.py" --lib "$B/libflashbwd.so" \
      --dims 64,128,256 $grid --dtype $dt > "$OUT/table_$dt.log" 2>&1
    note "table $dt rc=$?: $(grep '^targets:' "$OUT/table_$dt.log")"
  done
  PYTHONUNBUFFERED=1 timeout 200 python3 "$here/compare_torch.py" --lib "$B/libflashbwd.so" \
    --dims 128 $grid --dtype bf16 --flex > "$OUT/flex.log" 2>&1
  note "flex hd128 bf16 rc=$?: $(grep '^targets:' "$OUT/flex.log")"
  timeout 120 python3 "$here/clocks.py" --lib "$B/libflashbwd.so" --dim 128 --seqlen 16384 --causal 0 \
    --seconds 4 --backends flashbwd,flash,cudnn > "$OUT/clocks.log" 2>&1
  note "clocks hd128 16k rc=$?"
  grep -hv '^JSON' "$OUT"/table_*.log "$OUT/flex.log"  # the summary below ends the output
  cat "$OUT/clocks.log"
fi

if [ "${RUN_GPU_TAR:-1}" = 1 ]; then
  logs=$(cd "$OUT" && ls gpu.txt sass.txt tests*.log sanitize.log demo.log bench.log ab.log \
    torch.log table_*.log flex.log clocks.log 2>/dev/null)
  [ -n "$logs" ] && (cd "$OUT" && tar -czf run_gpu.tgz $logs && rm -f $logs)
fi
echo; echo "===== summary"; printf '%s\n' "${summary[@]}"
