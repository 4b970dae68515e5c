# uninstalled-pc.sh — sourced by ci.sh and gpu-bundle.sh: write a flashbwd.pc for an
# uninstalled cmake build, so cgo's `#cgo pkg-config: flashbwd` finds it.
#   write_uninstalled_pc PC_DIR BUILD_DIR REPO_DIR [EXTRA_LIBS]
# EXTRA_LIBS goes into Libs after -L (ci.sh adds an rpath to the build folder; the GPU
# bundle does not, its binary finds the library next to itself).
write_uninstalled_pc() {
    mkdir -p "$1"
    cat >"$1/flashbwd.pc" <<PC
libdir=$2
includedir=$3/abi

Name: flashbwd
Description: FlashAttention backward (uninstalled build in $2)
Version: 1.1.0
Libs: -L\${libdir} ${4:-}-lflashbwd
Cflags: -I\${includedir}
PC
}
