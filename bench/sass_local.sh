#!/bin/bash
# sass_local.sh — the SASS of one kernel, on the build machine (no GPU, and CUDA 13 here has
# no cuobjdump or nvdisasm), so a kernel change can be read before any device time:
#
#   bench/sass_local.sh BUILD_DIR KERNEL_SUBSTRING [INST_FILE] > kernel.sass
#   e.g. bench/sass_local.sh build 'bwd_split_kernelINS_9BwdConfigI13__nv_bfloat16Li90ELi128' \
#        kernels/inst/hd128.cu > split128.sass; bench/sass_loop.py split128.sass
#
# 1. compiles INST_FILE (default kernels/inst/hd128.cu) to a cubin with the exact nvcc
#    command of BUILD_DIR (ninja -t commands), for the first sm_9x target of that build;
# 2. disassembles it with nvdisasm 11.8 from Debian's non-free nvidia-cuda-toolkit package,
#    downloaded once (84 MB) into $SASS_TOOLS (default ~/.cache/flashbwd-sass); that
#    nvdisasm reads CUDA 13's cubins once their ELF header is rewritten to the older layout
#    (OS/ABI 0x41 and ABI version 8, the SM in flag bits 8-15, become 0x33, 7 and flags
#    SM | SM << 16 | 0x500); the instruction encoding is the same (seen for sm_90: the
#    spill counts and HMMA counts match ptxas -v);
# 3. prints the function whose name contains KERNEL_SUBSTRING, with branch targets as
#    addresses (BRA 0x...), as cuobjdump prints them, so bench/sass_loop.py reads it.
# A tool for reading code, not for measuring it: the GPU machine's cuobjdump stays the
# reference for what runs there.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0" >&2; exit 2; }
build=$1 want=$2 inst=${3:-kernels/inst/hd128.cu}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${SASS_TOOLS:-$HOME/.cache/flashbwd-sass}
nvdisasm=$tools/usr/bin/nvdisasm
if [ ! -x "$nvdisasm" ]; then
    deb=nvidia-cuda-toolkit_11.8.89~11.8.0-5~deb12u1_amd64.deb
    mkdir -p "$tools"
    curl -sSfL -o "$tools/$deb" "http://deb.debian.org/debian/pool/non-free/n/nvidia-cuda-toolkit/$deb"
    dpkg-deb -x "$tools/$deb" "$tools/x"
    mkdir -p "$tools/usr/bin"
    mv "$tools/x/usr/bin/nvdisasm" "$nvdisasm"
    rm -rf "$tools/x" "$tools/$deb"
fi
src=$(cd "$repo" && realpath "$inst")
cmd=$(cd "$build" && ninja -t commands | grep -F -- "$src" | head -1)
[ -n "$cmd" ] || { echo "sass_local.sh: no compile command for $src in $build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
arch=$(grep -oE 'arch=compute_9[0-9]a?' <<<"$cmd" | head -1 | cut -d_ -f2)
[ -n "$arch" ] || { echo "sass_local.sh: $build builds no sm_9x code" >&2; exit 1; }
# The same command for a cubin: no object, dependency file or ptxas report; one target.
cmd=$(python3 - "$cmd" "$tmp/k.cubin" "$arch" <<'PY'
import shlex, sys
args, out, arch = shlex.split(sys.argv[1]), sys.argv[2], sys.argv[3]
keep, skip = [], False
for a in args:
    if skip:
        skip = False
        continue
    if a in ("-o", "-MT", "-MF"):
        skip = True
        continue
    if a in ("-MD", "-c", "-Xptxas=-v") or a.startswith("--generate-code="):
        continue
    keep.append(a)
print(shlex.join(keep[:-1] + ["-cubin", f"-arch=sm_{arch}", "-o", out, keep[-1]]))
PY
)
(cd "$build" && eval "$cmd") >&2
python3 - "$tmp/k.cubin" "$tmp/old.cubin" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
if d[7] == 0x41:  # CUDA 13's header; older ones pass unchanged
    sm = (struct.unpack_from("<I", d, 0x30)[0] >> 8) & 0xFF
    d[7], d[8] = 0x33, 7
    struct.pack_into("<I", d, 0x30, (sm << 16) | 0x500 | sm)
open(sys.argv[2], "wb").write(d)
PY
"$nvdisasm" -c "$tmp/old.cubin" > "$tmp/all.sass"
python3 - "$tmp/all.sass" "$want" <<'PY'
import re, sys
text, want = open(sys.argv[1]).read().split("\n"), sys.argv[2]
out, keep = [], False
for line in text:
    if line.startswith("//---") and ".text." in line:
        keep = want in line
    if keep:
        out.append(line)
if not out:
    sys.exit(f"sass_local.sh: no function matching {want!r}")
labels, pending = {}, []
for line in out:
    m = re.match(r"^(\.L_x_\d+):", line)
    if m:
        pending.append(m.group(1))
        continue
    a = re.match(r"\s*/\*([0-9a-f]{4,})\*/", line)
    if a:
        for p in pending:
            labels[p] = a.group(1)
        pending = []
for line in out:
    print(re.sub(r"`\((\.L_x_\d+)\)", lambda m: "0x" + labels.get(m.group(1), "0"), line))
PY
