# Sourced by the benchmark scripts that run targets in the sid root
# (slowdown.sh, native-compare.sh), from the repository's root, with
# BENCH naming the script. Sets:
#   ROOT     the sid root (scripts/provision-sid.sh)
#   PYSPY    py-spy (scripts/provision-tools.sh)
#   TACHYON  tachyon, built --release
#   WORK     a directory of this run inside the root, INSIDE its path there
#   pids     the targets started (append to it): killed, and WORK
#            removed, when the script exits.
ROOT=$(scripts/provision-sid.sh)
TOOLS=$(scripts/provision-tools.sh)
PYSPY="$TOOLS/py-spy/bin/py-spy"
cargo build --release -q
TACHYON="${CARGO_TARGET_DIR:-$PWD/target}/release/tachyon"
WORK="$ROOT/tmp/tachyon-$BENCH.$$"
INSIDE="/tmp/$(basename "$WORK")"
mkdir -p "$WORK"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
