"""targets.py — issue 6's targets over a compare_torch.py table, in one line.

    python3 bench/targets.py LOG [LOG ...]

compare_torch.py prints this line after each table; here it is read again from a saved
log's JSON line (one line per log). It counts the points at or above 1.15x PyTorch's flash
backend (FlashAttention-2), names the lowest, and, where the table has FlexAttention
timings, counts the points behind flex. Ratios are taken before rounding, so a point the
table prints as 1.150 may count as below.
"""
import json
import sys

TARGET = 1.15


def targets_line(rows):
    """The line for a list of compare_torch.py rows (dicts with d, causal, s, flashbwd,
    flash and maybe flex; a backend that did not run has None)."""
    timed = [r for r in rows if r.get("flash")]
    if not timed:
        return "targets: no point has a flash timing"

    def ratio(r, peer):
        return r["flashbwd"] / r[peer]

    low = min(timed, key=lambda r: ratio(r, "flash"))
    line = (f"targets: {sum(ratio(r, 'flash') >= TARGET for r in timed)} of {len(timed)} points "
            f">= {TARGET}x flash, lowest {ratio(low, 'flash'):.3f} "
            f"(d={low['d']} causal={int(low['causal'])} s={low['s']})")
    flexed = [r for r in rows if r.get("flex")]
    if flexed:
        line += f"; behind flex at {sum(ratio(r, 'flex') < 1 for r in flexed)} of {len(flexed)}"
    return line


def main(paths):
    if not paths:
        print("usage: python3 bench/targets.py LOG [LOG ...]", file=sys.stderr)
        return 2
    status = 0
    for path in paths:
        try:
            with open(path) as f:
                rows = [json.loads(l[5:]) for l in f if l.startswith("JSON ")]
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            status = 1
            continue
        if not rows:
            print(f"{path}: no JSON line (not a finished compare_torch.py log)", file=sys.stderr)
            status = 1
            continue
        print(f"{path}: {targets_line(rows[-1])}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
