#!/bin/sh
# readme_sync.sh ROOT — the C example in README.md must be tests/readme_example.c verbatim,
# so the code a reader copies is the code CI runs.
root=$1
awk '/^```c$/{f=1; next} /^```$/{if (f) exit} f' "$root/README.md" > "${TMPDIR:-/tmp}/readme_example.$$.c"
if ! diff -u "$root/tests/readme_example.c" "${TMPDIR:-/tmp}/readme_example.$$.c"; then
    echo "README.md's first C block differs from tests/readme_example.c" >&2
    rm -f "${TMPDIR:-/tmp}/readme_example.$$.c"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/readme_example.$$.c"
