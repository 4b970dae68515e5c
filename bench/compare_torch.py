"""compare_torch.py — flashbwd beside PyTorch's SDPA backward backends, same process, same tensors.

For each point of FlashAttention's grid (batch*seqlen = 16k tokens, heads = 2048/head_dim) it
runs PyTorch's flash forward (FlashAttention-2) to get O and the logsumexp, checks flashbwd's
dQ/dK/dV against PyTorch's flash backward on those tensors, then times
  flashbwd   flashbwd_execute through ctypes on torch's current stream
  flash      torch.autograd.grad through SDPBackend.FLASH_ATTENTION (FlashAttention-2)
  cudnn      the same through SDPBackend.CUDNN_ATTENTION
  flex       torch.compile(flex_attention) (only with --flex)
with triton.testing.do_bench (median), and prints TFLOP/s (bwd = 2.5 x fwd, causal halved)
and the ratio of flashbwd to each peer.

--layout: how Q, K, V, dO (and so O, dQ, dK, dV) sit in memory. bshd (the default):
(batch, seq, head, dim) storage, FlashAttention's own layout, handed to SDPA as its
(batch, head, seq, dim) views, so no backend copies a tensor. bhsd: (batch, head, seq, dim)
contiguous, the fifth session's tables; there PyTorch's flash backward copies tensors
into its layout (about 90 us per copy at 16k tokens x 2048 channels), which inflates
flashbwd's ratio at short sequences. flashbwd reads either through strides.

    python3 bench/compare_torch.py [--lib build/libflashbwd.so] [--dims 64,128]
        [--seqlens 512,...] [--causal 0,1] [--dtype bf16|fp16] [--gqa 1] [--flex]
        [--layout bshd|bhsd] [--workspace library|torch]

--workspace: flashbwd's workspace from flashbwd_workspace_alloc (the default; compressible
memory on Hopper, where the zero fill of the dQ sums costs little DRAM traffic), or a torch
uint8 tensor from PyTorch's caching allocator (plain device memory, the tables of sessions
before the thirty-fifth). The peers allocate their own scratch through PyTorch.

Each row ends with the board's temperature when its timings start (nvidia-smi; "-" where
none answers). flashbwd runs at the board's power cap. Points late in a long table have read
lower than the same points run alone (docs/performance.md, forty-fifth section). On the
forty-sixth session's H200 they did not, and 39-67 C made no difference, so the cause is
still open.
"""
import argparse
import ctypes
import json
import math
import subprocess
import sys

import torch
import torch._dynamo
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from targets import targets_line


class Problem(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t), ("backend", ctypes.c_int32), ("device", ctypes.c_int32),
        ("dtype", ctypes.c_int32), ("head_dim", ctypes.c_int32), ("batch", ctypes.c_int64),
        ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64), ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float), ("softcap", ctypes.c_float), ("causal", ctypes.c_int32),
        ("use_window", ctypes.c_int32), ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32), ("varlen", ctypes.c_int32),
        ("deterministic", ctypes.c_int32), ("sm_count", ctypes.c_int32), ("arch", ctypes.c_int32),
        ("smem_per_block", ctypes.c_int32), ("reserved0", ctypes.c_int32),
    ]


TENSOR = dict(Q=1, K=2, V=3, O=4, DO=5, LSE=6, DQ=7, DK=8, DV=9)


class FlashBwd:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        L.flashbwd_plan_create.argtypes = [ctypes.POINTER(Problem), ctypes.POINTER(ctypes.c_void_p)]
        L.flashbwd_plan_set_tensor.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p,
                                               ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
        L.flashbwd_plan_workspace_size.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        L.flashbwd_plan_set_workspace.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        L.flashbwd_execute.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        L.flashbwd_plan_destroy.argtypes = [ctypes.c_void_p]
        L.flashbwd_workspace_alloc.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                               ctypes.POINTER(ctypes.c_size_t),
                                               ctypes.POINTER(ctypes.c_int32)]
        L.flashbwd_workspace_free.argtypes = [ctypes.c_void_p]
        L.flashbwd_plan_last_error.argtypes = [ctypes.c_void_p]
        L.flashbwd_plan_last_error.restype = ctypes.c_char_p
        L.flashbwd_last_error.restype = ctypes.c_char_p
        assert ctypes.sizeof(Problem) == 128

    def check(self, status, plan=None):
        if status != 0:
            msg = (self.lib.flashbwd_plan_last_error(plan) if plan else self.lib.flashbwd_last_error())
            raise RuntimeError(msg.decode())

    def plan(self, b, hq, hkv, s, d, causal, dtype):
        p = Problem()
        p.struct_size = 128
        p.backend = 1
        p.dtype = 1 if dtype == torch.bfloat16 else 2
        p.head_dim, p.batch, p.heads_q, p.heads_kv = d, b, hq, hkv
        p.seqlen_q = p.seqlen_k = s
        p.causal = int(causal)
        p.device = torch.cuda.current_device()
        handle = ctypes.c_void_p()
        self.check(self.lib.flashbwd_plan_create(ctypes.byref(p), ctypes.byref(handle)))
        return handle

    def bind(self, plan, name, t, bshd=True):
        """t is a (b, h, s, d) view (SDPA layout) or a (b, h, s) LSE; flashbwd wants
        (b, s, h, d) strides, which any memory layout can provide."""
        if t.dim() == 4:
            st = (t.stride(0), t.stride(2), t.stride(1), t.stride(3))
        else:
            st = tuple(t.stride())
        arr = (ctypes.c_int64 * len(st))(*st)
        self.check(self.lib.flashbwd_plan_set_tensor(plan, TENSOR[name], ctypes.c_void_p(t.data_ptr()),
                                                     arr, len(st)), plan)


def board_temperature():
    """The GPU's temperature in degrees C from nvidia-smi, or None where it does not answer."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=temperature.gpu", "--format=csv,noheader,nounits",
                              "--id=0"], capture_output=True, text=True, timeout=5).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashbwd.so")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--gqa", type=int, default=1, help="query heads per kv head")
    ap.add_argument("--flex", action="store_true")
    ap.add_argument("--layout", default="bshd", choices=("bshd", "bhsd"))
    ap.add_argument("--workspace", default="library", choices=("library", "torch"))
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fb = FlashBwd(args.lib)
    dev = "cuda"
    torch.manual_seed(0)
    flex = None
    if args.flex:
        from torch.nn.attention.flex_attention import flex_attention
        torch._dynamo.config.cache_size_limit = 64  # one compile per shape of the grid
        flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    hdr = f"{'d':>4} {'causal':>6} {'seqlen':>6} {'b':>3} {'h':>3} {'hkv':>3} | {'flashbwd':>8} {'flash':>7} {'cudnn':>7}" + (f" {'flex':>7}" if flex else "") + f" | {'x flash':>7} {'x cudnn':>7}" + (f" {'x flex':>6}" if flex else "") + " | max rel err dq/dk/dv vs torch-flash | board"
    print(f"layout {args.layout}, {args.dtype}", flush=True)
    print(hdr, flush=True)
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in [bool(int(x)) for x in args.causal.split(",")]:
            for s in [int(x) for x in args.seqlens.split(",")]:
                b, h = max(1, 16384 // s), 2048 // d
                hkv = max(1, h // args.gqa)
                def tensor(heads, grad):  # a (b, heads, s, d) view in the chosen layout
                    if args.layout == "bhsd":
                        return torch.randn(b, heads, s, d, device=dev, dtype=dtype, requires_grad=grad)
                    base = torch.randn(b, s, heads, d, device=dev, dtype=dtype, requires_grad=grad)
                    return base.transpose(1, 2)  # autograd.grad differentiates w.r.t. the view

                q, k, v, do = tensor(h, True), tensor(hkv, True), tensor(hkv, True), tensor(h, False)
                flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
                row = dict(d=d, causal=causal, s=s, b=b, h=h, hkv=hkv, layout=args.layout)
                gqa = hkv != h
                # FlashAttention-2 forward for O and LSE (natural log), as a user's forward would give.
                if not gqa:
                    out = torch.ops.aten._scaled_dot_product_flash_attention(q.detach(), k.detach(), v.detach(), 0.0, causal, False)
                    o, lse = out[0], out[1]
                else:
                    kr = k.detach().repeat_interleave(args.gqa, dim=1)
                    vr = v.detach().repeat_interleave(args.gqa, dim=1)
                    out = torch.ops.aten._scaled_dot_product_flash_attention(q.detach(), kr, vr, 0.0, causal, False)
                    o, lse = out[0], out[1]
                dq = torch.empty_like(q); dk = torch.empty_like(k); dv = torch.empty_like(v)
                for t in (dq, dk, dv):
                    t.fill_(float("nan"))
                plan = fb.plan(b, h, hkv, s, d, causal, dtype)
                for name, t in (("Q", q), ("K", k), ("V", v), ("O", o), ("DO", do), ("LSE", lse),
                                ("DQ", dq), ("DK", dk), ("DV", dv)):
                    fb.bind(plan, name, t)
                ws_bytes = ctypes.c_size_t()
                fb.check(fb.lib.flashbwd_plan_workspace_size(plan, ctypes.byref(ws_bytes)))
                ws_lib, ws = ctypes.c_void_p(), None
                if args.workspace == "library":
                    compressed = ctypes.c_int32()
                    fb.check(fb.lib.flashbwd_workspace_alloc(plan, ctypes.byref(ws_lib), ctypes.byref(ws_bytes),
                                                             ctypes.byref(compressed)), plan)
                    row["ws_compressed"] = compressed.value
                    ws_ptr = ws_lib
                else:
                    ws = torch.empty(max(ws_bytes.value, 256), dtype=torch.uint8, device=dev)
                    ws_ptr = ctypes.c_void_p(ws.data_ptr())
                fb.check(fb.lib.flashbwd_plan_set_workspace(plan, ws_ptr, ws_bytes.value), plan)
                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

                def run_fb():
                    st = fb.lib.flashbwd_execute(plan, stream)
                    if st != 0:
                        fb.check(st, plan)

                run_fb(); torch.cuda.synchronize()
                # Reference gradients: PyTorch's flash backward (GQA: expanded K/V, then summed).
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    if gqa:
                        kr = k.repeat_interleave(args.gqa, dim=1); vr = v.repeat_interleave(args.gqa, dim=1)
                        ref = F.scaled_dot_product_attention(q, kr, vr, is_causal=causal)
                    else:
                        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    rq, rk, rv = torch.autograd.grad(ref, (q, k, v), do)
                errs = []
                for got, want in ((dq, rq), (dk, rk), (dv, rv)):
                    g, w = got.float(), want.float()
                    errs.append(((g - w).norm() / w.norm()).item() if torch.isfinite(g).all() else float("inf"))
                row["err"] = errs
                row["temp_c"] = board_temperature()
                row["flashbwd"] = flops / do_bench(run_fb, warmup=50, rep=300, return_mode="median") / 1e9
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        with sdpa_kernel([be]):
                            o2 = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
                            fn = lambda: torch.autograd.grad(o2, (q, k, v), do, retain_graph=True)
                            fn(); torch.cuda.synchronize()
                            row[name] = flops / do_bench(fn, warmup=50, rep=300, return_mode="median") / 1e9
                    except Exception as e:  # a backend that refuses the shape
                        row[name] = None
                        row[name + "_err"] = str(e)[:100]
                if flex:
                    try:
                        from torch.nn.attention.flex_attention import create_block_mask
                        bm = None
                        if causal:
                            bm = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device=dev)
                        o3 = flex(q, k, v, block_mask=bm, enable_gqa=gqa)
                        fn = lambda: torch.autograd.grad(o3, (q, k, v), do, retain_graph=True)
                        fn(); torch.cuda.synchronize()
                        row["flex"] = flops / do_bench(fn, warmup=50, rep=300, return_mode="median") / 1e9
                    except Exception as e:
                        row["flex"] = None
                        row["flex_err"] = str(e)[:300]
                        print(f"flex failed at d={d} causal={causal} s={s}: {row['flex_err']}", flush=True)
                fb.lib.flashbwd_plan_destroy(plan)
                if ws_lib.value:
                    fb.check(fb.lib.flashbwd_workspace_free(ws_lib))
                rows.append(row)

                def f(x):
                    return f"{x:7.1f}" if x else "      -"

                def r(x):
                    return f"{row['flashbwd'] / x:7.3f}" if x else "      -"
                line = (f"{d:4d} {int(causal):6d} {s:6d} {b:3d} {h:3d} {hkv:3d} | {row['flashbwd']:8.1f} {f(row['flash'])} {f(row['cudnn'])}"
                        + (f" {f(row.get('flex'))}" if flex else "")
                        + f" | {r(row['flash'])} {r(row['cudnn'])}" + (f" {r(row.get('flex'))}" if flex else "")
                        + " | " + " ".join(f"{e:.1e}" for e in errs)
                        + (f" | {row['temp_c']} C" if row["temp_c"] is not None else " | -"))
                print(line, flush=True)
                del q, k, v, do, o, lse, dq, dk, dv, ws
                torch.cuda.empty_cache()
    print("JSON " + json.dumps(rows))
    print(targets_line(rows), flush=True)
    bad = [r_ for r_ in rows if max(r_["err"]) > (1e-2 if dtype == torch.bfloat16 else 3e-3) * 2]
    if bad:
        print(f"GRADIENT MISMATCH vs torch flash in {len(bad)} rows", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
