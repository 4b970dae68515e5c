#!/usr/bin/env python3
"""sass_loop.py — the main loop of a kernel's SASS, counted: instructions, local-memory
accesses (spill loads and stores) and the opcode mix; with two files, the difference.

    cuobjdump -sass -fun KERNEL libflashbwd.so > a.sass      (on the GPU machine)
    bench/sass_loop.py a.sass [b.sass] [--hmma N]

The loop is the shortest backward branch whose range holds at least N HMMA instructions
(default 320: the five GEMMs of one hd128 step; use the kernel's own count per step).
Static counts: every path of the body counts once, taken or not. docs/performance.md
(eighth session) used it to compare ptxas's allocation of two builds of one loop.
"""
import argparse
import collections
import re
import sys

INSTR = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"BRA (?:!?U?P\d+, )?0x([0-9a-f]+)")


def loop_body(path, hmma):
    ins = []
    with open(path) as f:
        for line in f:
            m = INSTR.match(line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
    mma = [a for a, t in ins if "HMMA" in t]
    best = None
    for addr, text in ins:
        m = BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < addr and sum(target <= a <= addr for a in mma) >= hmma:
            if best is None or addr - target < best[1] - best[0]:
                best = (target, addr)
    if best is None:
        sys.exit(f"{path}: no loop holds {hmma} HMMA instructions")
    return best, [t for a, t in ins if best[0] <= a <= best[1]]


def opcode(text):
    words = text.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--hmma", type=int, default=320)
    args = ap.parse_args()
    mixes = []
    for path in args.files[:2]:
        (lo, hi), body = loop_body(path, args.hmma)
        local = sum(opcode(t) in ("LDL", "STL") for t in body)
        print(f"{path}: loop 0x{lo:x}-0x{hi:x}, {len(body)} instructions, "
              f"{local} local-memory accesses")
        mixes.append(collections.Counter(opcode(t) for t in body))
    if len(mixes) == 2:
        a, b = mixes
        diff = sorted(set(a) | set(b), key=lambda k: -abs(a[k] - b[k]))
        for k in diff:
            if a[k] != b[k]:
                print(f"  {k:10s} {a[k]:6d} {b[k]:6d} {b[k] - a[k]:+6d}")


if __name__ == "__main__":
    main()
