#!/usr/bin/env bash
# run_gpu_script.sh — bench/run_gpu.sh tests, on a fake build folder: its summary must carry
# each host suite's own exit status (a failing suite once read rc=0 there) and test_gpu's,
# and its logs must end up in one archive.
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

out=$(OUT=$tmp/out RUN_GPU_TAR=1 BUILD=$tmp/build bash "$root/bench/run_gpu.sh" tests 2>&1)
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
# The logs come back as one archive (the device tool returns 8 files at most).
packed=$(tar -tzf "$tmp/out/run_gpu.tgz" 2>/dev/null || true)
if ! grep -qx tests.log <<<"$packed" || [ -e "$tmp/out/tests.log" ]; then
    echo "FAIL (logs): expected run_gpu.tgz holding tests.log and no loose logs; \$OUT has:" >&2
    ls -l "$tmp/out" >&2
    exit 1
fi
echo "PASS: run_gpu.sh reports every suite's exit status and packs its logs"
