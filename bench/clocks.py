"""clocks.py — the SM clock and board power while one backward runs back to back.

    python3 bench/clocks.py [--lib build/libflashbwd.so] [--dim 128] [--seqlen 16384]
        [--causal 0] [--dtype bf16] [--seconds 4] [--backends flashbwd,flash,cudnn]
    python3 bench/clocks.py --command "build-dev/bench/gemm_probe 100000 step+red"

For each backend (flashbwd through ctypes, PyTorch's flash and cuDNN backward) it runs the
backward of one grid point (batch*seqlen = 16k tokens, heads = 2048/dim, as
compare_torch.py) back to back for --seconds, while `nvidia-smi` samples the SM clock and
the board's power every 100 ms, and prints the throughput, the median clock and power over
the run, TFLOP/s per GHz and joules per TFLOP. Where this nvidia-smi reports them it also
prints the share of samples in which the driver held the clock back for power ("SW power
cap") and for heat (SW or HW thermal slowdown), and the highest GPU and HBM temperatures.
Whether a kernel runs below the boost clock because the board sits at its power or heat
limit decides whether energy per step (shared-memory bytes, instructions) is worth as
much as cycles per step: at such a limit the time is the energy divided by the power the
board allows (docs/performance.md, thirty-eighth and fifty-first sessions).
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
SMI_BIN = os.environ.get("CLOCKS_NVIDIA_SMI", "nvidia-smi")
BASE_FIELDS = "clocks.sm,power.draw"
# The clock-limit reasons as NVML's bit mask, then the GPU and HBM temperatures.
LIMIT_FIELDS = ",clocks_throttle_reasons.active,temperature.gpu,temperature.memory"
POWER_CAP = 0x4                 # NVML's SW power cap
HEAT_CAPS = 0x20 | 0x40         # NVML's SW and HW thermal slowdown


def smi_fields():
    """The fields to sample: the clock and power, and the limit fields where one query of
    this nvidia-smi answers them (older drivers and other tools may not)."""
    try:
        r = subprocess.run([SMI_BIN, "--query-gpu=" + BASE_FIELDS + LIMIT_FIELDS,
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        first = r.stdout.splitlines()[0] if r.stdout else ""
        if r.returncode == 0 and first.count(",") == 4:
            return BASE_FIELDS + LIMIT_FIELDS
    except (OSError, subprocess.TimeoutExpired):
        pass
    return BASE_FIELDS


def number(text, base=10):
    """A sampled field as a number, or None where nvidia-smi printed N/A or the like."""
    try:
        return int(text, 16) if base == 16 else float(text)
    except ValueError:
        return None


def sample(proc):
    """The samples nvidia-smi printed since the load started (all but the first three,
    taken during start_smi's wait), stopping it: (MHz, W, reasons, GPU C, HBM C) each,
    the last three None where not sampled."""
    proc.terminate()
    out, _ = proc.communicate()
    rows = []
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 2:
            continue
        mhz, watts = number(parts[0]), number(parts[1])
        if mhz is None or watts is None:
            continue
        extra = parts[2:5] if len(parts) >= 5 else [""] * 3
        rows.append((mhz, watts, number(extra[0], 16), number(extra[1]), number(extra[2])))
    return rows[3:]


def start_smi(fields):
    """nvidia-smi sampling every 100 ms until sample() stops it, started 0.3 s before the
    load (its first sample is taken at once); exits if there is none."""
    cmd = [SMI_BIN, "--query-gpu=" + fields, "--format=csv,noheader,nounits", "-lms", "100"]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
    except OSError as e:
        sys.exit(f"clocks.py: cannot run {SMI_BIN} ({e.strerror}): it samples the clock and "
                 "power, so run this on the GPU machine")
    time.sleep(0.3)
    return proc


def median_line(rows):
    """(MHz, W): the samples' medians, or None when there are none."""
    if not rows:
        return None
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def limits(rows):
    """What held the clock back over the samples, as text: the share of samples under the
    power cap and under a thermal slowdown, and the highest GPU / HBM temperature; empty
    where the limit fields were not sampled."""
    reasons = [r[2] for r in rows if r[2] is not None]
    if not reasons:
        return ""
    power = 100.0 * sum(1 for x in reasons if x & POWER_CAP) / len(reasons)
    heat = 100.0 * sum(1 for x in reasons if x & HEAT_CAPS) / len(reasons)
    temps = ["-" if not t else f"{max(t):.0f}"
             for t in ([r[3] for r in rows if r[3] is not None],
                       [r[4] for r in rows if r[4] is not None])]
    return f"power-capped {power:.0f}%, heat-capped {heat:.0f}%, max {temps[0]}/{temps[1]} C"


def run_command(cmd):
    """Run one shell command while nvidia-smi samples; print its output and the medians."""
    smi = start_smi(smi_fields())
    t0 = time.time()
    res = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    secs = time.time() - t0
    rows = sample(smi)
    med = median_line(rows)
    sys.stdout.write(res.stdout)
    if med:
        lim = limits(rows)
        print(f"clocks: {cmd}: {secs:.1f} s, median {med[0]:.0f} MHz, {med[1]:.0f} W"
              + (f"; {lim}" if lim else ""))
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
    print(f"{'backend':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'TFLOP/s/GHz':>12} "
          f"{'J/TFLOP':>8} {'samples':>7}")
    fields = smi_fields()
    for name in args.backends.split(","):
        fn = runs[name]
        for _ in range(20):  # warm-up
            fn()
        torch.cuda.synchronize()
        smi = start_smi(fields)
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
            lim = limits(rows)
            print(f"{name:>9} {tflops:8.1f} {mhz:6.0f} {watts:6.0f} {tflops / mhz * 1e3:12.1f} "
                  f"{watts / tflops:8.3f} {len(rows):7d}" + (f"  {lim}" if lim else ""),
                  flush=True)
        else:
            print(f"{name:>9} {tflops:8.1f} (no nvidia-smi samples)", flush=True)
    fb.lib.flashbwd_plan_destroy(plan)
    fb.check(fb.lib.flashbwd_workspace_free(ws_ptr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
