#!/usr/bin/env python3
"""split_barriers_model.py — the split kernel's hand-off protocol, run under random schedules.

kernels/bwd_split.cuh runs four P warps and four dS warps side by side, ordered only by
named barriers (bar.arrive / bar.sync with a warp count) over one P buffer and one or two
dS buffers in shared memory. This model replays each warp's loop as a list of events
(stores, reads with a start and an end, arrivals, syncs), interleaves the eight warps at
random many times, and reports any read that sees the wrong step's data, any store while
another warp is still reading that block, and any deadlock. Which warp reads which
blocks follows each head dim's layouts (below). It checks the protocol, not the code: a
change to the kernel's barriers should change this file too.

Forms, per head dim (LATE: the P warps' dQ a step late, hd64/hd96; DS2: two dS buffers;
PAIR: P warp w and dS warp w + 4 meet at a barrier of their own instead of all eight at
BAR_P_READY; the forty-fifth session's patch, measured and removed in the forty-sixth:
`git show 5ad0beb:docs/unlanded/s45-pair-ready.patch`):
  main                    LATE as configured, DS2 = LATE, PAIR 0    expected clean
  pairs, one dS buffer    LATE 0 (hd128/192/256), DS2 0, PAIR 1     expected to race
  pairs, two dS buffers   LATE as configured, DS2 1, PAIR 1         expected clean
The second form is what the forty-fifth session's first build of the pairs had; the model
must find its race, which shows it can fail (docs/performance.md, forty-fifth session).

    python3 tests/split_barriers_model.py [--runs N] [--steps S] [--seed X]
"""
import argparse
import random
import sys

NP = 4  # warps per role


# Which blocks each GEMM reads, per head dim, from the sm_90 rows of src/config_table.h:
# the S/dP layout LS is 2 warps along M by 2 along N at every head dim (WS 2); the dV/dK
# layout puts WK warps along the keys (4 at hd64-128 with 128 keys, 2 at hd192/256 with
# 64); dQ's layout over all 8 warps puts WQ along M (hd64/96 4, hd128/192 2, hd256 1).
WK = {64: 4, 96: 4, 128: 4, 192: 2, 256: 2}
WQ = {64: 4, 96: 4, 128: 2, 192: 2, 256: 1}


def kv_reads(hd, w):
    """LS blocks (P or dS) warp w of its role reads for dV = Pᵀ·dO or dK = dSᵀ·Q: its
    keys (a WK-th of the block) lie in one LS column block (a half)."""
    wm = w % WK[hd]
    half = wm * 2 // WK[hd]
    return [v for v in range(NP) if v // 2 == half]


def dq_reads(hd, warp):
    """dS blocks CTA warp `warp` (0-7) reads for dQ = dS·K: the LS row blocks under its
    rows (a WQ-th of the block's rows, or all of them)."""
    wq = WQ[hd]
    if wq == 1:
        return list(range(NP))
    half = (warp % wq) * 2 // wq
    return [v for v in range(NP) if v % 2 == half]


def ds_buffer(step, ds2):
    """The dS buffer step `step` writes: it % 2 with two buffers, else the one."""
    return ("dS", step % 2 if ds2 else 0)


def p_warp(hd, w, steps, late, ds2, pair):
    ev = []
    ready = ("pair", w) if pair else ("ready",)
    for it in range(steps):
        if late and it > 0:
            ev.append(("sync", ("ds_ready",)))  # done with sP, and dS of it - 1 stored
        ev.append(("write", ("P", w), it))
        ev.append(("arrive", ready))
        ev.append(("sync", ("p_group",)))
        ev.append(("read", [("P", v) for v in kv_reads(hd, w)], it))
        if late:
            if it > 0:
                ev.append(("read", [(ds_buffer(it - 1, ds2), v) for v in dq_reads(hd, w)], it - 1))
        else:
            ev.append(("sync", ("ds_ready",)))
            ev.append(("read", [(ds_buffer(it, ds2), v) for v in dq_reads(hd, w)], it))
    if late:
        ev.append(("sync", ("ds_ready",)))
        last = steps - 1
        ev.append(("read", [(ds_buffer(last, ds2), v) for v in dq_reads(hd, w)], last))
    return ev


def ds_warp(hd, gw, steps, late, ds2, pair):
    ev = []
    ready = ("pair", gw) if pair else ("ready",)
    for it in range(steps):
        buf = ds_buffer(it, ds2)
        ev.append(("sync", ready))
        ev.append(("read", [("P", gw)], it))
        ev.append(("write", (buf, gw), it))
        ev.append(("arrive", ("ds_ready",)))
        ev.append(("sync", ("ds_group",)))
        ev.append(("read", [(buf, v) for v in kv_reads(hd, gw)], it))
        ev.append(("read", [(buf, v) for v in dq_reads(hd, NP + gw)], it))
    return ev


def warps_at(bar):
    """How many warps a barrier generation takes."""
    kind = bar[0]
    return {"ready": 2 * NP, "ds_ready": 2 * NP, "p_group": NP, "ds_group": NP, "pair": 2}[kind]


def run_once(rng, hd, steps, late, ds2, pair):
    """One random schedule; returns a list of hazard strings (empty when clean)."""
    progs = [p_warp(hd, w, steps, late, ds2, pair) for w in range(NP)] + \
            [ds_warp(hd, gw, steps, late, ds2, pair) for gw in range(NP)]
    pc = [0] * len(progs)
    reading = [None] * len(progs)  # (blocks, step) of a read in progress
    blocked = [None] * len(progs)  # the barrier a warp waits at
    count, waiting = {}, {}
    data = {}  # block -> step it holds
    hazards = []
    while True:
        runnable = [i for i in range(len(progs)) if blocked[i] is None and
                    (pc[i] < len(progs[i]) or reading[i] is not None)]
        if not runnable:
            if all(pc[i] == len(progs[i]) and reading[i] is None for i in range(len(progs))):
                return hazards
            return hazards + [f"deadlock: blocked at {blocked}"]
        i = rng.choice(runnable)
        if reading[i] is not None:  # a read ends at a random later point
            blocks, step = reading[i]
            for b in blocks:
                if data.get(b) != step:
                    hazards.append(f"warp {i} read {b} of step {step} and ended with step {data.get(b)} there")
            reading[i] = None
            continue
        ev = progs[i][pc[i]]
        pc[i] += 1
        if ev[0] == "write":
            blk, step = ev[1], ev[2]
            for j in range(len(progs)):
                if j != i and reading[j] is not None and blk in reading[j][0]:
                    hazards.append(f"warp {i} stored {blk} (step {step}) while warp {j} read it (step {reading[j][1]})")
            data[blk] = step
        elif ev[0] == "read":
            blocks, step = ev[1], ev[2]
            for b in blocks:
                if data.get(b) != step:
                    hazards.append(f"warp {i} read {b} for step {step} and found step {data.get(b)}")
            reading[i] = (blocks, step)
        else:
            bar = ev[1]
            count[bar] = count.get(bar, 0) + 1
            if ev[0] == "sync":
                blocked[i] = bar
                waiting.setdefault(bar, []).append(i)
            if count[bar] == warps_at(bar):
                count[bar] = 0
                for j in waiting.pop(bar, []):
                    blocked[j] = None


LATE = {64: 1, 96: 1, 128: 0, 192: 0, 256: 0}  # FB_SPLIT_DQ_LATE


def forms(hd):
    """(name, late, ds2, pair, expect a race) for one head dim: main as it is, the pairs
    with one dS buffer (a race unless the late dQ adds the second), and the pairs as the
    s45 patch builds them (two buffers)."""
    late = LATE[hd]
    return [("main", late, late, 0, False),
            ("pairs, one dS buffer", late, late, 1, not late),
            ("pairs, two dS buffers", late, 1, 1, False)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}, {args.runs} schedules of {args.steps} steps per form")
    ok = True
    for hd in sorted(LATE):
        for name, late, ds2, pair, racy in forms(hd):
            if name.startswith("pairs, one") and late:
                continue  # the late dQ has two buffers already: the same form as the next
            found, first = 0, None
            for _ in range(args.runs):
                h = run_once(rng, hd, args.steps, late, ds2, pair)
                if h:
                    found += 1
                    first = first or h[0]
            verdict = "as expected" if bool(found) == racy else "UNEXPECTED"
            ok &= bool(found) == racy
            print(f"  hd{hd:<3d} {name:22s} LATE {late} DS2 {ds2} PAIR {pair}: {found} of {args.runs} "
                  f"schedules with a hazard ({verdict})" + (f"; first: {first}" if first else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
