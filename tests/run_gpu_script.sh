#!/usr/bin/env bash
# run_gpu_script.sh — bench/run_gpu.sh tests, on a fake build folder: its summary must carry
# each host suite's own exit status (a failing suite once read rc=0 there) and test_gpu's,
# and each table run's status and targets line; its logs must end up in one archive.
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

# The table step (issue 6's reading) on a fake python3: each compare_torch run's targets
# line and exit status reach the summary, each run gets its arguments, and its logs are
# packed with the rest.
mkdir -p "$tmp/bin" "$tmp/out2"
cat > "$tmp/bin/python3" <<'FAKE'
#!/usr/bin/env bash
echo "python3 $*"
case "$*" in *compare_torch.py*) echo "targets: from $*" ;; esac
case "$*" in *"--dtype fp16"*) exit 1 ;; esac
exit 0
FAKE
chmod +x "$tmp/bin/python3"
out=$(PATH=$tmp/bin:$PATH OUT=$tmp/out2 RUN_GPU_TAR=1 BUILD=$tmp/build bash "$root/bench/run_gpu.sh" table 2>&1)
expect "bf16 table" '^table bf16 rc=0: targets: from .*/compare_torch\.py .*--dims 64,128,256 .*--causal 0,1 --dtype bf16$'
expect "fp16 table" '^table fp16 rc=1: targets: from .*--dtype fp16$'
expect "flex" '^flex hd128 bf16 rc=0: targets: from .*--dims 128 .*--dtype bf16 --flex$'
expect "clocks" '^clocks hd128 16k rc=0$'
packed=$(tar -tzf "$tmp/out2/run_gpu.tgz" 2>/dev/null || true)
for log in table_bf16.log table_fp16.log flex.log clocks.log; do
    if ! grep -qx "$log" <<<"$packed" || [ -e "$tmp/out2/$log" ]; then
        echo "FAIL (table logs): expected run_gpu.tgz holding $log and no loose logs" >&2
        exit 1
    fi
done
echo "PASS: run_gpu.sh reports every suite's exit status and packs its logs"
