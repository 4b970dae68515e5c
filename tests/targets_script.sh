#!/usr/bin/env bash
# targets_script.sh — bench/targets.py on made-up compare_torch.py logs: it counts the
# points at >= 1.15x flash before rounding (1.1498 prints as 1.150 and is below), names the
# lowest, counts the points behind flex only where flex ran, skips points without a flash
# timing, and fails on a log without a JSON line.
#
#   targets_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3 "targets.py is a Python script"
make_tmp

cat > "$tmp/table.log" <<'LOG'
layout bshd, bf16
   64      1    512 ...
JSON [{"d": 64, "causal": true, "s": 512, "flashbwd": 114.98, "flash": 100.0, "flex": null}, {"d": 128, "causal": false, "s": 16384, "flashbwd": 372.4, "flash": 310.0, "flex": 400.0}, {"d": 256, "causal": false, "s": 1024, "flashbwd": 300.0, "flash": 200.0, "flex": 250.0}, {"d": 256, "causal": true, "s": 512, "flashbwd": 90.0, "flash": null}]
LOG
printf 'layout bshd, fp16\ncrashed before the end\n' > "$tmp/unfinished.log"

rc=0
out=$(python3 "$root/bench/targets.py" "$tmp/table.log" "$tmp/unfinished.log" 2>&1) || rc=$?
expect '/table\.log: targets: 2 of 3 points >= 1\.15x flash, lowest 1\.150 \(d=64 causal=1 s=512\); behind flex at 1 of 2$'
expect '/unfinished\.log: no JSON line'
[ "$rc" = 1 ] || { echo "FAIL: exit status $rc with an unfinished log, expected 1" >&2; exit 1; }

# Without flex timings the line stops after the lowest point.
sed -i 's/"flex": [0-9][0-9.]*/"flex": null/g' "$tmp/table.log"
out=$(python3 "$root/bench/targets.py" "$tmp/table.log")
expect 'lowest 1\.150 \(d=64 causal=1 s=512\)$'
echo "targets_script: ok"
