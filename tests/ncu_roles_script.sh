#!/usr/bin/env bash
# ncu_roles_script.sh — bench/ncu_roles.py on a made-up ncu source page: it puts the role
# boundary after the last EXIT before the first MUFU.EX2, splits the stall samples by
# role, and refuses a page without exponentials (not the split kernel).
#
#   ncu_roles_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3
make_tmp
page() { # page FILE OPCODE_AT_0x40: dS role 0x00-0x20 (EXIT at 0x20), P role from 0x30
    cat > "$1" <<CSV
"Kernel Name","fake"
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier","stall_wait","stall_barrier (Not Issued)"
"0x1000","      HMMA.16816.F32.BF16 R4, R8, R12, R4","30","10","0","30","0"
"0x1010","      BAR.SYNC 0x1","20","10","20","0","5"
"0x1020","      EXIT","0","1","0","0","0"
"0x1030","      HMMA.16816.F32.BF16 R4, R8, R12, R4","10","20","0","10","0"
"0x1040","      $2 R0, R1","40","20","0","40","0"
CSV
}
page "$tmp/split.csv" MUFU.EX2
out=$(python3 "$root/bench/ncu_roles.py" "$tmp/split.csv")
expect '100 samples; P role from \+0x30$'
expect '^role dS: 50\.0% of samples; within it: barrier 40\.0%, on HMMA 60\.0%, on MUFU 0\.0%; 2\.10 instructions per HMMA$'
expect '^role P: 50\.0% of samples; within it: barrier 0\.0%, on HMMA 20\.0%, on MUFU 80\.0%; 2\.00 instructions per HMMA$'
expect '^  P  \+0x00040  40\.0%  MUFU\.EX2 R0, R1 +wait 40'
page "$tmp/main.csv" FMUL
if python3 "$root/bench/ncu_roles.py" "$tmp/main.csv" >/dev/null 2>&1; then
    echo "FAIL: a page without MUFU.EX2 was read as the split kernel's" >&2
    exit 1
fi
echo "PASS: ncu_roles.py splits the samples at the role boundary and rejects other kernels"
