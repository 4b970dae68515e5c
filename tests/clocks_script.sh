#!/usr/bin/env bash
# clocks_script.sh — bench/clocks.py --command, on a fake nvidia-smi: the command's output
# comes first, then one line with the medians of the samples taken while it ran (the
# first three, from before the load, left out) and, where the sampler reports them, the
# shares of samples under the power cap and a thermal slowdown; the command's exit status
# is the script's; without a sampler it says so and fails.
#
#   clocks_script.sh REPO_ROOT
set -euo pipefail
root=$1
. "$(dirname "$0")/script_helpers.sh"
need_python3 "clocks.py is a Python script"
make_tmp

# The fake samples every 100 ms as nvidia-smi -lms 100 does: 300 W, 1000 MHz until the
# load starts (its marker file), then 1700-1704 MHz and 690-699 W, with the limit fields
# where they are asked for: NVML's reasons mask (every other sample the SW power cap, one
# in five a SW thermal slowdown; the expected shares leave room for a slow machine's
# extra idle samples), the GPU's 60-64 C and N/A for the HBM. Without -lms it
# answers one line and exits, as the real one does. OLD_SMI=1 makes it an older driver
# that rejects the limit fields.
cat > "$tmp/smi" <<FAKE
#!/usr/bin/env bash
case "\$*" in *clocks_throttle*) [ -n "\${OLD_SMI:-}" ] && { echo "not a valid field" >&2; exit 2; }; limit=1 ;; *) limit= ;; esac
case "\$*" in *-lms*) loop=1 ;; *) loop= ;; esac
i=0
while true; do
    if [ -e "$tmp/load" ]; then line="\$((1700 + i % 5)), 69\$((i % 10)).5"; mask=\$(( (i % 2 ? 4 : 0) | (i % 5 ? 0 : 32) ))
    else line="1000, 300.0"; mask=1; fi
    [ -n "\$limit" ] && line="\$line, \$(printf '0x%016x' \$mask), \$((60 + i % 5)), N/A"
    echo "\$line"; i=\$((i + 1))
    [ -n "\$loop" ] || exit 0
    sleep 0.1
done
FAKE
chmod +x "$tmp/smi"
export CLOCKS_NVIDIA_SMI=$tmp/smi

out=$(python3 "$root/bench/clocks.py" --command "touch $tmp/load; sleep 1.2; echo probe says hi")
expect '^probe says hi$'
expect '^clocks: touch .*: 1\.[0-9] s, median 170[0-4] MHz, 69[0-9] W; power-capped [3-6][0-9]%, heat-capped ([5-9]|[1-3][0-9])%, max 6[0-4]/- C$'
[ "$(sed -n 1p <<<"$out")" = "probe says hi" ] || { echo "FAIL: output not first" >&2; exit 1; }

# An nvidia-smi without the limit fields: the clock and power alone, as before.
rm -f "$tmp/load"
out=$(OLD_SMI=1 python3 "$root/bench/clocks.py" --command "touch $tmp/load; sleep 1.2; echo old")
expect '^clocks: touch .*: 1\.[0-9] s, median 170[0-4] MHz, 69[0-9] W$'

rc=0
out=$(python3 "$root/bench/clocks.py" --command "echo failing; exit 3") || rc=$?
[ "$rc" = 3 ] || { echo "FAIL: exit status $rc, expected the command's 3" >&2; exit 1; }
expect '^failing$'

rc=0
out=$(CLOCKS_NVIDIA_SMI=$tmp/none python3 "$root/bench/clocks.py" --command true 2>&1) || rc=$?
[ "$rc" != 0 ] || { echo "FAIL: no sampler, yet exit status 0" >&2; exit 1; }
expect 'cannot run .*/none .*run this on the GPU machine'
echo "clocks_script: ok"
