#!/usr/bin/env bash
# Regenerate fixtures/reference/ (except scenarios.json, the input) by running
# the reference's collectors in python3.15 from the sid root on the stacks of
# fixtures/reference/scenarios.json. Needs root (chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
root="${TACHYON_SID_ROOT:-/var/cache/tachyon/sid}"
work="$(mktemp -d "$root/tmp/tachyon-ref.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/out"
cp scripts/reference-collectors.py fixtures/reference/scenarios.json "$work/"
inside="/${work#"$root"/}"
chroot "$root" /usr/bin/python3.15 -s "$inside/reference-collectors.py" \
    "$inside/scenarios.json" "$inside/out"
cp "$work"/out/* fixtures/reference/
ls fixtures/reference/
