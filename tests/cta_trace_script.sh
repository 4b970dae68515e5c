#!/usr/bin/env bash
# cta_trace_script.sh — bench/cta_trace.py on a made-up trace: two launches of four CTAs on
# two SMs (it must read the last one), with phases whose medians are known; and a log with
# no CTA line, which it must refuse.
#
#   cta_trace_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3
make_tmp
# CTA sm bx by bz steps g_start g_end c_prologue c_p_loop c_ds_loop c_end
cat > "$tmp/run.log" <<'LOG'
a benchmark line the script ignores
CTA 0 0 0 0 99 1000 9000 500 900 900 1000
CTA 1 1 0 0 99 1000 9000 500 900 900 1000
CTA 0 2 0 0 99 9500 9900 500 900 900 1000
CTA 1 3 0 0 99 9500 9900 500 900 900 1000
CTA 0 0 0 0 4 1000000 1010000 2000 17000 18000 20000
CTA 0 1 0 0 4 1011000 1021000 2000 17000 18000 20000
CTA 1 2 0 0 4 1000000 1010000 2000 17000 18000 20000
CTA 1 3 0 0 4 1012000 1022000 2000 17000 18000 20000
LOG
out=$(python3 "$root/bench/cta_trace.py" "$tmp/run.log")
expect '^4 CTAs on 2 SMs, kernel span 22\.0 us, SM busy 90\.9% of it, clock 2\.000 GHz'
expect 'steps per CTA: min 4 median 4(\.0)? max 4$'
expect 'prologue \(entry to loop\) +median +1\.00 '
expect 'loop per step +median +2\.00 '
expect 'P loop end - dS loop end +median +-0\.50 '
expect 'epilogue \(loops to exit\) +median +1\.00 '
expect 'gap between CTAs of one SM +median +1\.50 '
echo "no CTA here" > "$tmp/empty.log"
if python3 "$root/bench/cta_trace.py" "$tmp/empty.log" >/dev/null 2>&1; then
    echo "FAIL: a log without CTA lines was accepted" >&2
    exit 1
fi
echo "PASS: cta_trace.py reads the last launch's phases and refuses a log without CTA lines"
