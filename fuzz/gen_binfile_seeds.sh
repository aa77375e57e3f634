#!/usr/bin/env bash
# Write real .bin profiles as seeds for the `binfile` fuzz target: a short,
# threaded workload (fuzz/binfile_seed_workload.py) profiled at 200 Hz by
# the reference (python3.15 -m profiling.sampling) and by tachyon, with and
# without zstd and over several modes and capture options. Small on purpose
# (1-3 KiB each). Needs the sid root (scripts/provision-sid.sh) and
# `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
sid=/var/cache/tachyon/sid
out=${OUT:-fuzz/seeds/binfile}
tachyon=${TACHYON:-target/release/tachyon}
work=$(mktemp -d "$sid/tmp/binseed.XXXX")
trap 'rm -rf "$work"' EXIT
cp fuzz/binfile_seed_workload.py "$work/work.py"
in_sid=${work#"$sid"}

ref() {
    local name=$1
    shift
    chroot "$sid" python3.15 -m profiling.sampling run --binary -r 200 \
        -o "$in_sid/$name" "$@" "$in_sid/work.py" >/dev/null
    cp "$work/$name" "$out/$name"
}
ours() {
    local name=$1
    shift
    "$tachyon" run --binary -r 200 -o "$out/$name" "$@" -- \
        chroot "$sid" python3.15 "$in_sid/work.py" >/dev/null
}

mkdir -p "$out"
ref ref-zstd.bin
ref ref-none-all.bin --compression none -a
ref ref-cpu-native.bin --mode cpu --native --compression none
ref ref-opcodes.bin --opcodes --mode wall --compression none
ours tachyon-zstd.bin
ours tachyon-none-all.bin --compression none -a
ours tachyon-gil-gc.bin --mode gil --compression none -a
ls -l "$out"
