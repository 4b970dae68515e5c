# script_helpers.sh — what the tests of the bench scripts share; each sources it after
# `set -euo pipefail`:
#   need_python3 [WHY]   exit 77 (ctest's SKIPPED) where python3 is missing
#   make_tmp             set $tmp to a new folder that is removed when the test exits
#   expect PATTERN       fail, printing $out, unless $out has a line matching PATTERN
need_python3() {
    if ! command -v python3 >/dev/null 2>&1; then
        echo "SKIPPED: python3 not found${1:+ ($1)}"
        exit 77
    fi
}
make_tmp() {
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
}
expect() {
    grep -qE "$1" <<<"$out" || { echo "FAIL: no line matching '$1' in:" >&2; echo "$out" >&2; exit 1; }
}
