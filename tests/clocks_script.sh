#!/usr/bin/env bash
# clocks_script.sh — bench/clocks.py --command, on a fake nvidia-smi: the command's output
# comes first, then one line with the medians of the samples taken while it ran (the
# first three, from before the load, left out); the command's exit status is the
# script's; without a sampler it says so and fails.
#
#   clocks_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3 "clocks.py is a Python script"
make_tmp

# The fake samples every 100 ms as nvidia-smi -lms 100 does: 300 W, 1000 MHz until the
# load starts (its marker file), then 1700-1704 MHz and 690-699 W.
cat > "$tmp/smi" <<FAKE
#!/usr/bin/env bash
i=0
while true; do
    if [ -e "$tmp/load" ]; then echo "\$((1700 + i % 5)), 69\$((i % 10)).5"; i=\$((i + 1))
    else echo "1000, 300.0"; fi
    sleep 0.1
done
FAKE
chmod +x "$tmp/smi"
export CLOCKS_NVIDIA_SMI=$tmp/smi

out=$(python3 "$root/bench/clocks.py" --command "touch $tmp/load; sleep 1.2; echo probe says hi")
expect '^probe says hi$'
expect '^clocks: touch .*: 1\.[0-9] s, median 170[0-4] MHz, 69[0-9] W$'
[ "$(sed -n 1p <<<"$out")" = "probe says hi" ] || { echo "FAIL: output not first" >&2; exit 1; }

rc=0
out=$(python3 "$root/bench/clocks.py" --command "echo failing; exit 3") || rc=$?
[ "$rc" = 3 ] || { echo "FAIL: exit status $rc, expected the command's 3" >&2; exit 1; }
expect '^failing$'

rc=0
out=$(CLOCKS_NVIDIA_SMI=$tmp/none python3 "$root/bench/clocks.py" --command true 2>&1) || rc=$?
[ "$rc" != 0 ] || { echo "FAIL: no sampler, yet exit status 0" >&2; exit 1; }
expect 'cannot run .*/none .*run this on the GPU machine'
echo "clocks_script: ok"
