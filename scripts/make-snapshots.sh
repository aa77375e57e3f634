#!/usr/bin/env bash
# Regenerate the committed snapshots in fixtures/snapshots/: the sid root's
# python3.13, 3.14 and 3.15 run fixtures/snapshots/leaf.py with a stack 10,
# 50 and 200 frames deep, and `tachyon dump --snapshot` saves what its
# samples read. The unit tests (src/process/snapshot.rs) and the benches
# (benches/snapshots.rs) unwind these files without root or a live target.
#
# Usage: sudo scripts/make-snapshots.sh
# Needs root (chroot, reading another process) and the sid root of
# scripts/provision-sid.sh. The script runs inside the root as
# /tmp/tachyon-snapshots/leaf.py: that path is in the files, and the tests
# expect it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(scripts/provision-sid.sh)
cargo build -q
BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/tachyon"
INSIDE=/tmp/tachyon-snapshots
OUT=fixtures/snapshots
WORK=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$WORK" "$ROOT$INSIDE"
}
trap cleanup EXIT
mkdir -p "$ROOT$INSIDE"
cp "$OUT/leaf.py" "$ROOT$INSIDE/leaf.py"

for minor in 13 14 15; do
    for depth in 10 50 200; do
        name="3.$minor-depth$depth.snap"
        PYTHONDONTWRITEBYTECODE=1 chroot "$ROOT" "/usr/bin/python3.$minor" -u \
            "$INSIDE/leaf.py" "$depth" >"$WORK/out" 2>"$WORK/err" &
        pid=$!
        for _ in $(seq 100); do
            grep -q READY "$WORK/out" && break
            sleep 0.1
        done
        if ! grep -q READY "$WORK/out"; then
            echo "make-snapshots: python3.$minor never got ready:" >&2
            cat "$WORK/err" >&2
            exit 1
        fi
        "$BIN" dump --snapshot "$OUT/$name" "$pid" >/dev/null
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        pid=""
        echo "$OUT/$name: python3.$minor $(chroot "$ROOT" "/usr/bin/python3.$minor" -c 'import platform; print(platform.python_version())'), $(stat -c %s "$OUT/$name") bytes"
    done
done
