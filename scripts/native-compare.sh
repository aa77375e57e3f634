#!/usr/bin/env bash
# Native frames side by side: tachyon --native-frames and py-spy --native on
# the same numpy program, in the same run.
#
# The target, one thread, multiplies two 200x200 matrices (BLAS) and sorts
# 200,000 doubles (numpy's SIMD sort) in a loop, and reports its own
# throughput over a window in the middle of its run. (Both profilers stop
# every thread for each sample: a target with more threads pays more.) For each profiler it prints:
#   the target's throughput as a ratio to the bare run's (1.000: no cost),
#   the profiler's CPU time over the whole attach (user + system),
#   the samples taken and the share that failed (as the profiler says).
# Profilers, at RATE and at 100 Hz (py-spy's default):
#   bare, tachyon-native (attach --native-frames), py-spy-native (record
#   --native; py-spy stops the target for it).
# Runs are interleaved, round by round.
#
# Usage: sudo scripts/native-compare.sh [ROUNDS] [RATE_HZ] [VERSION]
#   defaults: 3 rounds, 1000 Hz, 3.14 (the sid root's numpy: 3.14, 3.15).
# Needs root, the sid root (scripts/provision-sid.sh) and py-spy
# (scripts/provision-tools.sh); builds tachyon --release.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
RATE=${2:-1000}
VERSION=${3:-3.14}
WARM=1.5
WINDOW=4
BENCH=native-compare
. scripts/bench-setup.sh

cat > "$WORK/target.py" <<'PY'
import sys, time
import numpy as np
warm, window = float(sys.argv[1]), float(sys.argv[2])
a = np.random.rand(200, 200)
x = np.random.rand(200_000)
print("READY", flush=True)
start = time.perf_counter()
opens, closes = start + warm, start + warm + window
count, c0, t0 = 0, None, None
while True:
    a @ a
    np.sort(x)
    count += 1
    now = time.perf_counter()
    if c0 is None and now >= opens:
        c0, t0 = count, now
    elif c0 is not None and now >= closes:
        break
print("ips %.2f" % ((count - c0) / (now - t0)), flush=True)
PY

PROFILERS="bare tachyon-native py-spy-native tachyon-native-100 py-spy-native-100"

# One run under PROFILER: "throughput cpu_seconds samples failed%".
run_one() {
    local prof=$1 out="$WORK/run.out" log="$WORK/prof.log" pid secs
    secs=$(awk -v w="$WARM" -v n="$WINDOW" 'BEGIN { print int(w + n + 1.5) }')
    : > "$out"; : > "$log"; : > "$WORK/cpu"
    chroot "$ROOT" "/usr/bin/python$VERSION" "$INSIDE/target.py" "$WARM" "$WINDOW" > "$out" &
    pid=$!; pids+=("$pid")
    for _ in $(seq 200); do grep -q READY "$out" && break; sleep 0.02; done
    local cmd=()
    case $prof in
        bare) ;;
        tachyon-native) cmd=("$TACHYON" attach --native-frames -a -d "$secs" -r "$RATE" --collapsed -o "$WORK/p.txt" "$pid") ;;
        tachyon-native-100) cmd=("$TACHYON" attach --native-frames -a -d "$secs" -r 100 --collapsed -o "$WORK/p.txt" "$pid") ;;
        py-spy-native) cmd=("$PYSPY" record --native -p "$pid" -d "$secs" -r "$RATE" -f raw -o "$WORK/p.txt") ;;
        py-spy-native-100) cmd=("$PYSPY" record --native -p "$pid" -d "$secs" -r 100 -f raw -o "$WORK/p.txt") ;;
        *) echo "native-compare.sh: unknown profiler '$prof'" >&2; exit 2 ;;
    esac
    if [ ${#cmd[@]} -gt 0 ]; then
        ( TIMEFORMAT='%U %S'; { time "${cmd[@]}" > "$log" 2>&1; } 2> "$WORK/cpu" ) &
    fi
    wait "$pid" || true
    wait || true
    local ips cpu samples failed
    ips=$(sed -n 's/^ips //p' "$out")
    cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$WORK/cpu")
    # tachyon: "Captured N samples", "Error rate: X"; py-spy: "Samples: N Errors: M".
    samples=$(sed -n -e 's/^Captured \([0-9]*\) samples.*/\1/p' -e 's/.*Samples: \([0-9]*\).*/\1/p' "$log" | head -1)
    failed=$(sed -n -e 's/^Error rate: \([0-9.]*\).*/\1/p' "$log" | head -1)
    if [ -z "$failed" ]; then
        failed=$(sed -n 's/.*Samples: \([0-9]*\) Errors: \([0-9]*\).*/\1 \2/p' "$log" | awk '$1 { printf "%.2f", 100 * $2 / ($1 + $2) }')
    fi
    echo "${ips:-0} ${cpu:-0} ${samples:--} ${failed:--}"
}

echo "native frames side by side: tachyon $(git describe --always --dirty 2>/dev/null || echo '?'), python$VERSION + numpy, $("$PYSPY" --version 2>/dev/null || echo 'py-spy (missing)')"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS interleaved rounds"
for prof in $PROFILERS; do : > "$WORK/$prof"; done
for round in $(seq "$ROUNDS"); do
    for prof in $PROFILERS; do
        run_one "$prof" >> "$WORK/$prof"
    done
done
base=$(awk '{ s += $1 } END { if (NR) print s / NR; else print 0 }' "$WORK/bare")
printf '%-20s %10s %9s %9s %9s\n' profiler throughput cpu_s samples failed%
for prof in $PROFILERS; do
    awk -v p="$prof" -v base="$base" '
        { t += $1; c += $2; s += $3; f += $4; n++ }
        END { if (n && base > 0) printf "%-20s %10.3f %9.2f %9d %9.2f\n", p, t / n / base, c / n, s / n, f / n }' "$WORK/$prof"
done
echo "(throughput: the target's own, as a ratio to bare; cpu_s: the profiler's user+system seconds per run; means over the rounds)"
