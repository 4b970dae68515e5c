#!/bin/bash
# kernels_vs_fa2.sh — each kernel of one backward, flashbwd's beside FlashAttention-2's
# (PyTorch's flash backend), under Nsight Compute on the H200 machine:
#   bench/kernels_vs_fa2.sh [d] [causal] [seqlen] [dtype]
# FlashAttention's grid point (batch x seqlen = 16k tokens, heads = 2048 / d, its bshd
# layout). Prints, per kernel, its time and DRAM bytes: FA2's dot_do_o (the preprocess,
# which also zeroes the fp32 dQ sums), its main kernel and its dQ conversion, then
# flashbwd's preprocess, main (split) kernel and convert pass. Which kernel differs says
# where a ratio comes from: at hd64 causal 512 keys (twenty-seventh session) the main
# kernels were level and the passes made the whole of flashbwd's lead.
# --clock-control none leaves the clocks as found (METHOD.md); each side skips its warm-up
# backwards and profiles the next one.
set -u
d=${1:-64} causal=${2:-1} s=${3:-512} dtype=${4:-bf16}
B=${BUILD:-build}
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
show() { grep -E "Context|gpu__time|dram__bytes" | sed -E 's/  +/ /g; s/\(fb_bwd_params\).*|<.*//' | cut -c1-90; }
echo "== FlashAttention-2 (torch flash backend): d=$d causal=$causal seqlen=$s $dtype"
ncu --clock-control none --kernel-name regex:flash_bwd --launch-skip 3 --launch-count 3 $M \
    python3 - "$d" "$causal" "$s" "$dtype" <<'PY' 2>&1 | show
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
d, causal, s = int(sys.argv[1]), bool(int(sys.argv[2])), int(sys.argv[3])
dt = torch.float16 if sys.argv[4] == "fp16" else torch.bfloat16
b, h = max(1, 16384 // s), 2048 // d
def t(grad):
    return torch.randn(b, s, h, d, device="cuda", dtype=dt, requires_grad=grad).transpose(1, 2)
q, k, v, do = t(True), t(True), t(True), t(False)
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(3):  # one warm-up backward (3 kernels), then the profiled one
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()
PY
echo "== flashbwd ($B)"
ncu --clock-control none --kernel-name regex:bwd_ --launch-skip 6 --launch-count 3 $M \
    "$B/bench/flashbwd_bench" --dims "$d" --seqlens "$s" --causal "$causal" --dtype "$dtype" \
    --iters 3 --host-costs 0 2>&1 | show
