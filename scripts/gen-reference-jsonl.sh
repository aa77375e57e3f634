#!/usr/bin/env bash
# Regenerate fixtures/reference/jsonl/*.jsonl by running the reference's
# JsonlCollector in python3.15 from the sid root on the stacks of
# fixtures/reference/scenarios.json and fixtures/reference/jsonl/scenarios.json
# (the inputs). Needs root (chroot).
set -euo pipefail
cd "$(dirname "$0")/.."
root="${TACHYON_SID_ROOT:-/var/cache/tachyon/sid}"
work="$(mktemp -d "$root/tmp/tachyon-ref.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/out"
cp scripts/reference-jsonl.py "$work/"
cp fixtures/reference/scenarios.json "$work/main.json"
cp fixtures/reference/jsonl/scenarios.json "$work/extra.json"
inside="/${work#"$root"/}"
chroot "$root" /usr/bin/python3.15 -s "$inside/reference-jsonl.py" "$inside/out" \
    "$inside/main.json" "$inside/extra.json"
cp "$work"/out/*.jsonl fixtures/reference/jsonl/
ls fixtures/reference/jsonl/
