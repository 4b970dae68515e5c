#!/bin/sh
# ci.sh — everything CI checks for the Rust bindings, given a flashbwd build directory.
#
#   bindings/rust/ci.sh <build dir>      e.g. bindings/rust/ci.sh build
#
# 1. regen.sh --check: the committed bindings are what abi/flashbwd.h generates now;
# 2. cargo test --offline, warnings as errors: the sys layout tests, the safe API, the
#    README example against the C library, and the doc-tests, all on the CPU backend;
# 3. the examples: backward_cpu runs; gpu_backward runs on a GPU machine, and reports
#    SKIPPED (exit 77) on one without a driver, which is all CI can show;
# 4. cargo doc, warnings as errors.
# Needs: cargo/rustc/rustfmt (rustup), and bindgen + libclang-dev (apt) for step 1.
set -eu

[ $# -eq 1 ] || { echo "usage: $0 <flashbwd build dir>" >&2; exit 2; }
[ -f "$1/libflashbwd.so" ] || { echo "ci.sh: $1 holds no libflashbwd.so; build the library first" >&2; exit 2; }
FLASHBWD_LIB_DIR=$(cd "$1" && pwd)
export FLASHBWD_LIB_DIR
cd "$(dirname "$0")"

export RUSTFLAGS="-D warnings" RUSTDOCFLAGS="-D warnings" CARGO_TERM_COLOR=never

echo "== rust: regen.sh --check"
./regen.sh --check

echo "== rust: cargo test --offline (FLASHBWD_LIB_DIR=$FLASHBWD_LIB_DIR)"
cargo test --offline --workspace --all-targets
cargo test --offline --workspace --doc

echo "== rust: examples"
cargo run --offline --quiet --example backward_cpu
rc=0
cargo run --offline --release --quiet --example gpu_backward || rc=$?
case $rc in
  0) echo "gpu_backward: passed" ;;
  77) echo "gpu_backward: SKIPPED (no CUDA driver or device here)" ;;
  *) echo "gpu_backward: FAILED (exit $rc)" >&2; exit 1 ;;
esac

echo "== rust: cargo doc"
cargo doc --offline --workspace --no-deps --quiet

echo "rust: all checks passed"
