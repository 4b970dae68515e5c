#!/usr/bin/env python3
"""cta_trace.py — where a split-kernel CTA's time goes, from a trace build's output.

    LD_LIBRARY_PATH=variants/trace build/bench/flashbwd_bench --dims 128 --seqlens 512 \\
        --causal 0 --iters 1 --host-costs 0 > run.log
    bench/cta_trace.py run.log

The library must be built with -DFB_TRACE_CTAS (kernels/cta_trace.cuh): each CTA prints
one `CTA ...` line. The last launch's CTAs are taken (the last N lines by start time,
N = the number of distinct CTAs seen). Prints the SM clock the two timers imply, each
phase per CTA (prologue, loop, epilogue; microseconds), the loop's time per step, the
gaps between consecutive CTAs of one SM, and how the SMs go idle at the end.
The phases inside a CTA are what it measures well (medians): the printf that ends each
traced CTA slows the launch, so the gaps and the span are the trace build's, not the
library's (kernels/cta_trace.cuh).
"""
import statistics
import sys


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def summary(name, values, unit="us"):
    if not values:
        print(f"  {name:34s} -")
        return
    print(f"  {name:34s} median {statistics.median(values):8.2f}  p10 {pct(values, 10):8.2f}"
          f"  p90 {pct(values, 90):8.2f}  mean {statistics.mean(values):8.2f} {unit}")


def main():
    rows = []
    for line in open(sys.argv[1], errors="replace"):
        f = line.split()
        if len(f) == 12 and f[0] == "CTA":
            sm, bx, by, bz, steps, g0, g1, cpro, cp, cds, cend = map(int, f[1:])
            rows.append(dict(sm=sm, cta=(bx, by, bz), steps=steps, g0=g0, g1=g1, cpro=cpro,
                             cp=cp, cds=cds, cend=cend))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no CTA lines (was the library built with -DFB_TRACE_CTAS?)")
    n = len({r["cta"] for r in rows})
    rows = sorted(rows, key=lambda r: r["g0"])[-n:]
    ghz = statistics.median(r["cend"] / max(1, r["g1"] - r["g0"]) for r in rows)
    us = lambda cycles: cycles / ghz / 1e3
    span = (max(r["g1"] for r in rows) - min(r["g0"] for r in rows)) / 1e3
    sms = sorted({r["sm"] for r in rows})
    busy = sum(r["g1"] - r["g0"] for r in rows) / 1e3
    print(f"{n} CTAs on {len(sms)} SMs, kernel span {span:.1f} us, SM busy {busy / len(sms) / span:.1%}"
          f" of it, clock {ghz:.3f} GHz (clock64 over globaltimer)")
    steps = [r["steps"] for r in rows]
    print(f"  steps per CTA: min {min(steps)} median {statistics.median(steps)} max {max(steps)}")
    summary("CTA duration", [(r["g1"] - r["g0"]) / 1e3 for r in rows])
    summary("prologue (entry to loop)", [us(r["cpro"]) for r in rows])
    summary("loop (both roles done)", [us(max(r["cp"], r["cds"]) - r["cpro"]) for r in rows])
    summary("loop per step", [us(max(r["cp"], r["cds"]) - r["cpro"]) / r["steps"] for r in rows])
    summary("P loop end - dS loop end", [us(r["cp"] - r["cds"]) for r in rows])
    summary("epilogue (loops to exit)", [us(r["cend"] - max(r["cp"], r["cds"])) for r in rows])
    gaps, last_end = [], []
    for sm in sms:
        mine = sorted((r for r in rows if r["sm"] == sm), key=lambda r: r["g0"])
        gaps += [(b["g0"] - a["g1"]) / 1e3 for a, b in zip(mine, mine[1:])]
        last_end.append(mine[-1]["g1"])
    summary("gap between CTAs of one SM", gaps)
    end = max(last_end)
    summary("SM idle before the kernel's end", [(end - t) / 1e3 for t in last_end])
    by_steps = {}
    for r in rows:
        by_steps.setdefault(r["steps"], []).append((r["g1"] - r["g0"]) / 1e3)
    if len(by_steps) > 1:
        print("  CTA duration by steps: " + ", ".join(
            f"{s}: {statistics.median(v):.1f} us ({len(v)})" for s, v in sorted(by_steps.items())))


if __name__ == "__main__":
    main()
