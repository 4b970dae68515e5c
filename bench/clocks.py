"""clocks.py — the SM clock and board power while one backward runs back to back.

    python3 bench/clocks.py [--lib build/libflashbwd.so] [--dim 128] [--seqlen 16384]
        [--causal 0] [--dtype bf16] [--seconds 4] [--backends flashbwd,flash,cudnn]
    python3 bench/clocks.py --command "build-dev/bench/gemm_probe 100000 step+red"

For each backend (flashbwd through ctypes, PyTorch's flash and cuDNN backward) it runs the
backward of one grid point (batch*seqlen = 16k tokens, heads = 2048/dim, as
compare_torch.py) back to back for --seconds, while `nvidia-smi` samples the SM clock and
the board's power every 100 ms, and prints the throughput, the median clock and power over
the run, and TFLOP/s per GHz. Whether a kernel runs below the boost clock because the
board sits at its power limit decides whether energy per step (shared-memory bytes,
instructions) is worth as much as cycles per step (docs/performance.md, thirty-eighth
session).
With --command it samples the same way while a shell command runs instead (a probe, a
benchmark), prints the command's output and then the median clock and power over it,
and exits with the command's status; that mode needs no PyTorch.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

# CLOCKS_NVIDIA_SMI names another sampler (tests/clocks_script.sh runs a fake one).
SMI = [os.environ.get("CLOCKS_NVIDIA_SMI", "nvidia-smi"), "--query-gpu=clocks.sm,power.draw",
       "--format=csv,noheader,nounits", "-lms", "100"]


def sample(proc):
    """The (clock MHz, power W) samples nvidia-smi printed since the load started (all but
    the first three, taken during start_smi's wait), stopping it."""
    proc.terminate()
    out, _ = proc.communicate()
    rows = []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        try:
            rows.append((float(parts[0]), float(parts[1])))
        except (ValueError, IndexError):
            continue
    return rows[3:]


def start_smi():
    """nvidia-smi sampling every 100 ms until sample() stops it, started 0.3 s before the
    load (its first sample is taken at once); exits if there is none."""
    try:
        proc = subprocess.Popen(SMI, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
    except OSError as e:
        sys.exit(f"clocks.py: cannot run {SMI[0]} ({e.strerror}): it samples the clock and "
                 "power, so run this on the GPU machine")
    time.sleep(0.3)
    return proc


def median_line(rows):
    """(MHz, W): the samples' medians, or None when there are none."""
    if not rows:
        return None
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def run_command(cmd):
    """Run one shell command while nvidia-smi samples; print its output and the medians."""
    smi = start_smi()
    t0 = time.time()
    res = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    secs = time.time() - t0
    med = median_line(sample(smi))
    sys.stdout.write(res.stdout)
    if med:
        print(f"clocks: {cmd}: {secs:.1f} s, median {med[0]:.0f} MHz, {med[1]:.0f} W")
    else:
        print(f"clocks: {cmd}: {secs:.1f} s (no nvidia-smi samples)")
    return res.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libflashbwd.so")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--backends", default="flashbwd,flash,cudnn")
    ap.add_argument("--command", help="sample while this shell command runs instead")
    args = ap.parse_args()
    if args.command:
        return run_command(args.command)
    import torch  # the backends' mode only
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_torch import FlashBwd
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    d, s, causal = args.dim, args.seqlen, bool(args.causal)
    b, h = max(1, 16384 // s), 2048 // d
    flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
                   for _ in range(4))
    q.requires_grad_(); k.requires_grad_(); v.requires_grad_()
    out = torch.ops.aten._scaled_dot_product_flash_attention(q.detach(), k.detach(), v.detach(),
                                                             0.0, causal, False)
    o, lse = out[0], out[1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    fb = FlashBwd(args.lib)
    plan = fb.plan(b, h, h, s, d, causal, dtype)
    for name, t in (("Q", q), ("K", k), ("V", v), ("O", o), ("DO", do), ("LSE", lse),
                    ("DQ", dq), ("DK", dk), ("DV", dv)):
        fb.bind(plan, name, t)
    ws_ptr, ws_bytes, compressed = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_int32()
    fb.check(fb.lib.flashbwd_workspace_alloc(plan, ctypes.byref(ws_ptr), ctypes.byref(ws_bytes),
                                             ctypes.byref(compressed)), plan)
    fb.check(fb.lib.flashbwd_plan_set_workspace(plan, ws_ptr, ws_bytes.value), plan)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def run_flashbwd():
        fb.check(fb.lib.flashbwd_execute(plan, stream), plan)

    def sdpa(backend):
        with sdpa_kernel([backend]):
            o2 = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return lambda: torch.autograd.grad(o2, (q, k, v), do, retain_graph=True)

    runs = {"flashbwd": run_flashbwd, "flash": sdpa(SDPBackend.FLASH_ATTENTION),
            "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    print(f"{torch.cuda.get_device_name()}: d={d} causal={int(causal)} seqlen={s} {args.dtype}, "
          f"{args.seconds:.0f} s each")
    print(f"{'backend':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'TFLOP/s/GHz':>12} {'samples':>7}")
    for name in args.backends.split(","):
        fn = runs[name]
        for _ in range(20):  # warm-up
            fn()
        torch.cuda.synchronize()
        smi = start_smi()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        n, t_end = 0, time.time() + args.seconds
        e0.record()
        while time.time() < t_end:
            for _ in range(10):
                fn()
            n += 10
            torch.cuda.synchronize()
        e1.record()
        torch.cuda.synchronize()
        rows = sample(smi)
        ms = e0.elapsed_time(e1)
        tflops = flops * n / (ms * 1e-3) / 1e12
        med = median_line(rows)
        if med:
            mhz, watts = med
            print(f"{name:>9} {tflops:8.1f} {mhz:6.0f} {watts:6.0f} {tflops / mhz * 1e3:12.1f} "
                  f"{len(rows):7d}", flush=True)
        else:
            print(f"{name:>9} {tflops:8.1f} (no nvidia-smi samples)", flush=True)
    fb.lib.flashbwd_plan_destroy(plan)
    fb.check(fb.lib.flashbwd_workspace_free(ws_ptr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
