#!/bin/bash
# profile.sh — Nsight Compute on the main kernel of one benchmark point (H200 machine):
#   bench/profile.sh [d] [seqlen] [causal]    writes $OUT/ncu.txt
# --clock-control none leaves the GPU's clocks as found (METHOD.md).
set -u
OUT=${OUT:-/tmp/flashbwd-out}; mkdir -p "$OUT"
B=${BUILD:-build}
ncu --clock-control none --kernel-name regex:bwd_main --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    --metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,lts__t_sectors_op_red.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
    "$B/bench/flashbwd_bench" --dims "${1:-128}" --seqlens "${2:-8192}" --causal "${3:-0}" --iters 1 --host-costs 0 \
    > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|bank_conflicts|inst_executed|wavefronts|sectors_op_red|Registers|Achieved" "$OUT/ncu.txt" | head -60
