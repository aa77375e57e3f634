#!/usr/bin/env bash
# Write fixtures/offsets-ft/3.MINORt-headers.bin: the debug offsets table
# of free-threaded 3.14 and 3.15 as their -dev headers define it
# (scripts/ft-table-probe.c, compiled inside the sid root with gcc). These
# interpreters cannot be built here (Debian serves no source for them), so
# the tables are what tachyon's tests know of their layouts.
# Needs root and the sid root with gcc (scripts/provision-sid.sh,
# scripts/provision-ft.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(scripts/provision-sid.sh)
WORK="$ROOT/tmp/tachyon-ft-probe.$$"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK" fixtures/offsets-ft
cp scripts/ft-table-probe.c "$WORK/"
inside="/tmp/$(basename "$WORK")"
for v in 3.14 3.15; do
    chroot "$ROOT" sh -c "dpkg -s python$v-dev >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python$v-dev >/dev/null"
    chroot "$ROOT" sh -c "cd $inside && gcc -I/usr/include/python$v -o probe ft-table-probe.c && ./probe > t.bin"
    cp "$WORK/t.bin" "fixtures/offsets-ft/${v}t-headers.bin"
    echo "fixtures/offsets-ft/${v}t-headers.bin: $(stat -c %s "$WORK/t.bin") bytes"
done
