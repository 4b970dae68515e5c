#!/bin/bash
# profile.sh — Nsight Compute on one kernel of one benchmark point (H200 machine):
#   bench/profile.sh [d] [seqlen] [causal] [dtype]    writes $OUT/ncu${TAG}.txt
# KERNEL=regex picks the kernel (default bwd_main; bwd_split for the split kernel, which
# serves the sm_90 plans past its SPLIT column). SOURCE=1 adds the SourceCounters section
# and writes $OUT/ncu${TAG}_sass.csv: per SASS instruction its executions and warp-stall
# samples by reason (ncu --page source). --clock-control none leaves the GPU's clocks as
# found (METHOD.md).
set -u
OUT=${OUT:-/tmp/flashbwd-out}; mkdir -p "$OUT"
B=${BUILD:-build}
tag=${TAG:-}
extra=()
[ "${SOURCE:-0}" = 1 ] && extra=(--section SourceCounters --import-source no -o "/tmp/ncu$tag" -f)
ncu --clock-control none --kernel-name "regex:${KERNEL:-bwd_main}" --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy "${extra[@]}" \
    --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,lts__t_sectors_op_red.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
    "$B/bench/flashbwd_bench" --dims "${1:-128}" --seqlens "${2:-8192}" --causal "${3:-0}" \
    --dtype "${4:-bf16}" --iters 1 --host-costs 0 > "$OUT/ncu$tag.txt" 2>&1
echo "ncu rc=$?"
if [ "${SOURCE:-0}" = 1 ]; then
    # -o writes the report instead of printing it: print the sections from it
    ncu -i "/tmp/ncu$tag.ncu-rep" --page details >> "$OUT/ncu$tag.txt" 2>&1
    ncu -i "/tmp/ncu$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu${tag}_sass.csv" 2>&1
    echo "source page: $(wc -l < "$OUT/ncu${tag}_sass.csv") lines"
fi
grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|bank_conflicts|inst_executed|wavefronts|sectors_op_red|Registers|Achieved" "$OUT/ncu$tag.txt" | head -60
