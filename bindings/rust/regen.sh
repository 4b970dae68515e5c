#!/bin/sh
# regen.sh — regenerate flashbwd-sys/src/bindings.rs from abi/flashbwd.h with Debian's
# bindgen CLI (0.60), or, with --check, fail if the committed file differs from what the
# header generates now (CI runs the check, so a header change cannot leave the crate behind).
#
#   bindings/rust/regen.sh            rewrite flashbwd-sys/src/bindings.rs
#   bindings/rust/regen.sh --check    compare only; exit 1 on any difference
#
# Needs: bindgen + libclang-dev (apt), rustfmt (rustup; bindgen formats its output with it,
# and rustfmt's output for a given edition is stable, so the check does not churn).
# Both modes also check that every FLASHBWD_ macro of the header has a Rust constant:
# bindgen drops, without a word, any macro its evaluator cannot read (see wrapper.h).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
header="$repo/abi/flashbwd.h"
sys="$here/flashbwd-sys"
committed="$sys/src/bindings.rs"

mode=write
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

command -v bindgen >/dev/null 2>&1 ||
  { echo "regen.sh: bindgen not found (apt-get install bindgen libclang-dev)" >&2; exit 2; }
command -v rustfmt >/dev/null 2>&1 ||
  { echo "regen.sh: rustfmt not found (rustup component add rustfmt)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Flags, and why:
#   allowlists       only the library's own names, not libc's
#   opaque-type      flashbwd_plan is a handle; Rust must never size or read it
#   size_t-is-usize  size_t fields and returns are usize, as the ABI means them
#   signed macros    statuses, ids and dtypes are int32_t in every signature
#   derive-default   a zeroed flashbwd_problem is the ABI's "all defaults"
#   no-doc-comments  the header is the manual; copying it would double every edit
bindgen "$sys/wrapper.h" \
  --allowlist-function 'flashbwd_.*' \
  --allowlist-type 'flashbwd_.*' \
  --allowlist-var 'FLASHBWD_.*' \
  --opaque-type flashbwd_plan \
  --size_t-is-usize \
  --default-macro-constant-type signed \
  --with-derive-default \
  --no-doc-comments \
  -o "$tmp/bindings.rs" \
  -- -I"$repo/abi"

# Every object-like FLASHBWD_ macro of the header, except the include guard and the export
# attribute, must be a constant of the crate (generated, or re-exported by src/lib.rs).
missing=0
for name in $(sed -n 's/^#define \(FLASHBWD_[A-Z0-9_]*\)[ (].*/\1/p' "$header" | sort -u); do
  case "$name" in FLASHBWD_H|FLASHBWD_API) continue ;; esac
  if ! grep -q "pub const $name *:" "$tmp/bindings.rs" "$sys/src/lib.rs"; then
    echo "regen.sh: $name (abi/flashbwd.h) has no Rust constant; restate it in" \
         "flashbwd-sys/wrapper.h and re-export it in flashbwd-sys/src/lib.rs" >&2
    missing=1
  fi
done

if [ "$mode" = check ]; then
  if ! diff -u "$committed" "$tmp/bindings.rs"; then
    echo "regen.sh: flashbwd-sys/src/bindings.rs is stale: run bindings/rust/regen.sh and commit" \
         "($(bindgen --version), $(rustfmt --version))" >&2
    exit 1
  fi
  [ "$missing" = 0 ] || exit 1
  echo "regen.sh: bindings.rs matches abi/flashbwd.h"
else
  cp "$tmp/bindings.rs" "$committed"
  echo "regen.sh: wrote $committed"
  [ "$missing" = 0 ] || exit 1
fi
