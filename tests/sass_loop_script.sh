#!/usr/bin/env bash
# sass_loop_script.sh — bench/sass_loop.py on a made-up SASS listing: it finds the shortest
# loop holding the HMMA count, counts its instructions and local-memory accesses, and
# prints the opcode difference of two listings.
#
#   sass_loop_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3
make_tmp
listing() { # listing FILE EXTRA_OP: an outer loop 0x00-0x80 around an inner one 0x10-0x60
    cat > "$1" <<SASS
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0020*/                   LDL R2, [R1] ;
        /*0030*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0040*/                   $2 R3, R3, 0x1, RZ ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0060*/               @P0 BRA 0x10 ;
        /*0070*/                   STL [R1], R2 ;
        /*0080*/               @P1 BRA 0x0 ;
SASS
}
listing "$tmp/a.sass" IADD3
listing "$tmp/b.sass" LOP3
out=$(python3 "$root/bench/sass_loop.py" "$tmp/a.sass" "$tmp/b.sass" --hmma 2)
expect 'a\.sass: loop 0x10-0x60, 6 instructions, 1 local-memory accesses$'
expect '^  IADD3 +1 +0 +-1$'
expect '^  LOP3 +0 +1 +\+1$'
if python3 "$root/bench/sass_loop.py" "$tmp/a.sass" --hmma 3 >/dev/null 2>&1; then
    echo "FAIL: a loop with 3 HMMA was found in a listing that has 2" >&2
    exit 1
fi
echo "PASS: sass_loop.py finds the loop, counts it and diffs two listings"
