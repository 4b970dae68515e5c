#!/usr/bin/env python3
"""ncu_roles.py — the split kernel's warp-stall samples per role, from ncu's source page.

    SOURCE=1 KERNEL=bwd_split TAG=64 bench/profile.sh 64 4096 0     (on the GPU machine)
    bench/ncu_roles.py ncu64_sass.csv

bwd_split.cuh compiles the dS warps' program first and the P warps' second; the P role
is the one with the exponentials, so its code starts after the last EXIT before the
first MUFU.EX2. Per role: its share of the samples, the stall reasons, the opcodes the
samples sit on, the share at named barriers and on HMMA / MUFU, and instructions
executed per HMMA; then the hottest instructions. docs/performance.md (twelfth session)
has the table this printed for hd64 and hd128.
"""
import collections
import csv
import sys


def opcode(sass):
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main(path, top=15):
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    base = int(data[0][0], 16)
    addr = lambda r: int(r[0], 16) - base
    sass = col["Source"]
    samples = col["Warp Stall Sampling (All Samples)"]
    executed = col["Instructions Executed"]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    mufu = [addr(r) for r in data if "MUFU.EX2" in r[sass]]
    if not mufu:
        sys.exit("ncu_roles.py: no MUFU.EX2 in %s: not the split kernel's source page" % path)
    exits = [i for i, r in enumerate(data) if opcode(r[sass]) == "EXIT" and addr(r) < mufu[0]]
    split = addr(data[exits[-1] + 1]) if exits else 0  # the P role's first instruction
    num = lambda r, c: int(r[c] or 0)
    total = sum(num(r, samples) for r in data)
    print("%s: %d samples; P role from +0x%x" % (path, total, split))
    for role in ("dS", "P"):
        part = [r for r in data if (addr(r) >= split) == (role == "P")]
        n = sum(num(r, samples) for r in part)
        why, ops = collections.Counter(), collections.Counter()
        for r in part:
            for h in reasons:
                why[h] += num(r, col[h])
            ops[opcode(r[sass])] += num(r, samples)
        hmma = sum(num(r, executed) for r in part if "HMMA" in r[sass])
        insts = sum(num(r, executed) for r in part)
        print("role %s: %.1f%% of samples; within it: barrier %.1f%%, on HMMA %.1f%%, on MUFU "
              "%.1f%%; %.2f instructions per HMMA" % (
                  role, 100 * n / total, 100 * why["stall_barrier"] / n, 100 * ops["HMMA"] / n,
                  100 * ops["MUFU"] / n, insts / max(hmma, 1)))
        print("   reasons: " + ", ".join("%s %.1f%%" % (h[6:], 100 * v / n) for h, v in why.most_common(8)))
        print("   opcodes: " + ", ".join("%s %.1f%%" % (o, 100 * v / n) for o, v in ops.most_common(10)))
    print("hottest instructions (share of all samples, top reasons):")
    for r in sorted(data, key=lambda r: -num(r, samples))[:top]:
        why = sorted(((num(r, col[h]), h[6:]) for h in reasons), reverse=True)[:2]
        print("  %s +0x%05x %5.1f%%  %-48s %s" % ("P " if addr(r) >= split else "dS", addr(r),
              100 * num(r, samples) / total, r[sass].strip()[:48],
              " ".join("%s %d" % (h, v) for v, h in why)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
