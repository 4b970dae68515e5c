#!/usr/bin/env python3
"""split_barriers_model.py — the split kernel's hand-off protocol, run under random schedules.

kernels/bwd_split.cuh runs four P warps and four dS warps side by side, ordered only by
named barriers (bar.arrive / bar.sync with a warp count) over one P buffer and one or two
dS buffers in shared memory. This model replays each warp's loop as a list of events
(stores, reads with a start and an end, arrivals, syncs), interleaves the eight warps at
random many times, and reports any read that sees the wrong step's data, any store while
another warp is still reading that block, and any deadlock. Which warp reads which
blocks follows the hd128 layouts (LS: 2 warps along M by 2 along N; the dV/dK GEMMs: each
warp 32 of the 128 keys; dQ: each warp the rows of its LS row block). It checks the
protocol, not the code: a change to the kernel's barriers should change this file too.

Forms (LATE: the P warps' dQ a step late; DS2: two dS buffers; PAIR: P warp w and dS warp
w + 4 meet at a barrier of their own instead of all eight at BAR_P_READY):
  main, no late dQ (hd128/192/256)   LATE 0, DS2 0, PAIR 0   expected clean
  main, late dQ (hd64/96)            LATE 1, DS2 1, PAIR 0   expected clean
  pairs with one dS buffer           LATE 0, DS2 0, PAIR 1   expected to race
  pairs with two (the s45 patch)     LATE 0, DS2 1, PAIR 1   expected clean
  pairs with the late dQ             LATE 1, DS2 1, PAIR 1   expected clean
The third form is the one the forty-fifth session's first build had; the model must find
its race, which is what shows it can fail (docs/performance.md, forty-fifth session).

    python3 tests/split_barriers_model.py [--runs N] [--steps S] [--seed X]
"""
import argparse
import random
import sys

NP = 4  # warps per role


def p_reads_for_dv(w):
    """P blocks P warp w reads for dV = Pᵀ·dO: its 32 keys lie in one LS column block."""
    return [v for v in range(NP) if v // 2 == w // 2]


def ds_reads_for_dq(gw):
    """dS blocks a warp reads for dQ = dS·K: the LS row block of its dQ rows."""
    return [v for v in range(NP) if v % 2 == gw % 2]


def ds_reads_for_dk(gw):
    """dS blocks dS warp gw reads for dK = dSᵀ·Q: its keys' LS column block."""
    return [v for v in range(NP) if v // 2 == gw // 2]


def p_warp(w, steps, late, ds2, pair):
    ev = []
    ready = ("pair", w) if pair else ("ready",)
    for it in range(steps):
        if late and it > 0:
            ev.append(("sync", ("ds_ready",)))  # done with sP, and dS of it - 1 stored
        ev.append(("write", ("P", w), it))
        ev.append(("arrive", ready))
        ev.append(("sync", ("p_group",)))
        ev.append(("read", [("P", v) for v in p_reads_for_dv(w)], it))
        buf = lambda s: ("dS", s % 2 if ds2 else 0)
        if late:
            if it > 0:
                ev.append(("read", [(buf(it - 1), v) for v in ds_reads_for_dq(w)], it - 1))
        else:
            ev.append(("sync", ("ds_ready",)))
            ev.append(("read", [(buf(it), v) for v in ds_reads_for_dq(w)], it))
    if late:
        ev.append(("sync", ("ds_ready",)))
        last = steps - 1
        ev.append(("read", [(("dS", last % 2 if ds2 else 0), v) for v in ds_reads_for_dq(w)], last))
    return ev


def ds_warp(gw, steps, late, ds2, pair):
    ev = []
    ready = ("pair", gw) if pair else ("ready",)
    for it in range(steps):
        buf = ("dS", it % 2 if ds2 else 0)
        ev.append(("sync", ready))
        ev.append(("read", [("P", gw)], it))
        ev.append(("write", (buf, gw), it))
        ev.append(("arrive", ("ds_ready",)))
        ev.append(("sync", ("ds_group",)))
        ev.append(("read", [(buf, v) for v in ds_reads_for_dk(gw)], it))
        ev.append(("read", [(buf, v) for v in ds_reads_for_dq(gw)], it))
    return ev


def warps_at(bar):
    """How many warps a barrier generation takes."""
    kind = bar[0]
    return {"ready": 2 * NP, "ds_ready": 2 * NP, "p_group": NP, "ds_group": NP, "pair": 2}[kind]


def run_once(rng, steps, late, ds2, pair):
    """One random schedule; returns a list of hazard strings (empty when clean)."""
    progs = [p_warp(w, steps, late, ds2, pair) for w in range(NP)] + \
            [ds_warp(gw, steps, late, ds2, pair) for gw in range(NP)]
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


FORMS = [  # (name, late, ds2, pair, expect a race)
    ("main, no late dQ", 0, 0, 0, False),
    ("main, late dQ", 1, 1, 0, False),
    ("pairs, one dS buffer", 0, 0, 1, True),
    ("pairs, two dS buffers", 0, 1, 1, False),
    ("pairs, late dQ", 1, 1, 1, False),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}, {args.runs} schedules of {args.steps} steps per form")
    ok = True
    for name, late, ds2, pair, racy in FORMS:
        found = 0
        first = None
        for _ in range(args.runs):
            h = run_once(rng, args.steps, late, ds2, pair)
            if h:
                found += 1
                first = first or h[0]
        verdict = "as expected" if bool(found) == racy else "UNEXPECTED"
        ok &= bool(found) == racy
        print(f"  {name:24s} LATE {late} DS2 {ds2} PAIR {pair}: {found} of {args.runs} schedules "
              f"with a hazard ({verdict})" + (f"; first: {first}" if first else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
