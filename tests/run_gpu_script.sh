#!/usr/bin/env bash
# run_gpu_script.sh — bench/run_gpu.sh tests, on a fake build folder: its summary must carry
# each host suite's own exit status (a failing suite once read rc=0 there) and test_gpu's.
#
#   run_gpu_script.sh REPO_ROOT
set -euo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/build/tests" "$tmp/out"
fake() { # fake NAME EXIT_STATUS
    printf '#!/usr/bin/env bash\necho "%s ran"\nexit %d\n' "$1" "$2" > "$tmp/build/tests/$1"
    chmod +x "$tmp/build/tests/$1"
}
fake test_gpu 0
fake test_passes 0
fake test_fails 1
fake test_crashes 139

out=$(OUT=$tmp/out BUILD=$tmp/build bash "$root/bench/run_gpu.sh" tests 2>&1)
expect() { # expect WHAT PATTERN
    if ! grep -qE "$2" <<<"$out"; then
        echo "FAIL ($1): no line matching '$2' in:" >&2
        echo "$out" >&2
        exit 1
    fi
}
expect "passing suite" '^test_passes rc=0$'
expect "failing suite" '^test_fails rc=1$'
expect "crashing suite" '^test_crashes rc=139$'
expect "test_gpu" '^test_gpu rc=0 '
echo "PASS: run_gpu.sh reports every suite's exit status"
