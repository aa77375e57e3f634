#!/usr/bin/env bash
# What profiling costs the profiled program, measured by the program itself.
#
# Each target does fixed work as fast as it can and reports its own
# throughput: iterations per second over a window in the middle of its run
# (it opens WARM seconds after start, when every profiler has attached, and
# closes before any has stopped). No profiler's own numbers are used.
# Targets, all on the sid root's python (3.15 by default):
#   single    one thread calling down a 20-deep chain and doing arithmetic
#   threads8  eight such threads (throughput: all of them together)
#   alloc     one thread allocating and freeing 1 MiB buffers (glibc maps
#             and unmaps each: the target's memory-map lock, which
#             process_vm_readv also takes, is busy) and small objects
# Profilers, each at the same rate (default 1 kHz), every thread:
#   bare                no profiler
#   tachyon             tachyon attach -a -r RATE
#   tachyon-10k         tachyon attach -a -r 10000
#   tachyon-blocking    tachyon attach -a -r RATE --blocking
#   reference           python3.15 -m profiling.sampling attach -a -r RATE
#   py-spy              py-spy record -r RATE (its default: stops the target)
#   py-spy-nonblocking  py-spy record -r RATE --nonblocking
# Runs are interleaved (round 1 of every profiler, then round 2, ...), so a
# machine that gets busier or quieter moves every row alike. Per target and
# profiler it prints the median throughput as a ratio to bare's median
# (1.000: no cost), and the spread of the single runs (lowest..highest,
# also as ratios to bare's median).
#
# Usage: sudo scripts/slowdown.sh [ROUNDS] [RATE_HZ] [VERSION]
#   defaults: 5 rounds, 1000 Hz, 3.15 (the reference reads only 3.15).
# Environment: TARGETS="single alloc" runs only those; PROFILERS="bare
# tachyon" only those.
# Needs root, the sid root (scripts/provision-sid.sh) and py-spy
# (scripts/provision-tools.sh); builds tachyon --release.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
RATE=${2:-1000}
VERSION=${3:-3.15}
TARGETS=${TARGETS:-single threads8 alloc}
PROFILERS=${PROFILERS:-bare tachyon tachyon-10k tachyon-blocking reference py-spy py-spy-nonblocking}
WARM=1.5
WINDOW=3
BENCH=slowdown
. scripts/bench-setup.sh

cat > "$WORK/target.py" <<'PY'
import sys, threading, time
kind, warm, window = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
counts = []

def down(n):
    if n:
        return down(n - 1)
    x = 0
    for i in range(200):
        x += i * i
    return x

def alloc():
    b = bytearray(1 << 20)
    b[-1] = 1
    return [dict(a=i) for i in range(50)]

def worker(slot, step):
    while True:
        step()
        counts[slot] += 1

step = alloc if kind == "alloc" else (lambda: down(20))
n = 8 if kind == "threads8" else 1
counts = [0] * n
for s in range(n):
    threading.Thread(target=worker, args=(s, step), daemon=True).start()
print("READY", flush=True)
time.sleep(warm)
a, t0 = sum(counts), time.perf_counter()
time.sleep(window)
b, t1 = sum(counts), time.perf_counter()
print("ips %.1f" % ((b - a) / (t1 - t0)), flush=True)
PY

# One run of TARGET under PROFILER; prints the target's throughput.
run_one() {
    local target=$1 prof=$2 out="$WORK/run.out" pid
    local secs
    secs=$(awk -v w="$WARM" -v n="$WINDOW" 'BEGIN { print w + n + 2 }')
    : > "$out"
    chroot "$ROOT" "/usr/bin/python$VERSION" "$INSIDE/target.py" "$target" "$WARM" "$WINDOW" > "$out" &
    pid=$!; pids+=("$pid")
    for _ in $(seq 100); do grep -q READY "$out" && break; sleep 0.02; done
    case $prof in
        bare) ;;
        tachyon) "$TACHYON" attach -a -d "$secs" -r "$RATE" --collapsed -o "$WORK/p.txt" "$pid" > /dev/null 2>&1 & ;;
        tachyon-10k) "$TACHYON" attach -a -d "$secs" -r 10000 --collapsed -o "$WORK/p.txt" "$pid" > /dev/null 2>&1 & ;;
        tachyon-blocking) "$TACHYON" attach -a -d "$secs" -r "$RATE" --blocking --collapsed -o "$WORK/p.txt" "$pid" > /dev/null 2>&1 & ;;
        reference) chroot "$ROOT" /usr/bin/python3.15 -m profiling.sampling attach -a -d "$secs" -r "$RATE" --collapsed -o "$INSIDE/p.txt" "$pid" > /dev/null 2>&1 & ;;
        py-spy) "$PYSPY" record -p "$pid" -d "$secs" -r "$RATE" -f raw -o "$WORK/p.txt" > /dev/null 2>&1 & ;;
        py-spy-nonblocking) "$PYSPY" record --nonblocking -p "$pid" -d "$secs" -r "$RATE" -f raw -o "$WORK/p.txt" > /dev/null 2>&1 & ;;
        *) echo "slowdown.sh: unknown profiler '$prof'" >&2; exit 2 ;;
    esac
    wait "$pid" || true
    wait || true
    sed -n 's/^ips //p' "$out"
}

# median and spread of the numbers in FILE, as ratios to BASE.
summary() {
    sort -n "$1" | awk -v base="$2" '
        { v[NR] = $1 }
        END {
            if (NR == 0 || base <= 0) { print "-"; exit }
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.3f  (%.3f..%.3f, %d runs)", m / base, v[1] / base, v[NR] / base, NR
        }'
}
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else print 0 }'; }

echo "what profiling costs the target: tachyon $(git describe --always --dirty 2>/dev/null || echo '?'), python$VERSION, $("$PYSPY" --version 2>/dev/null || echo 'py-spy (missing)')"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$ROUNDS interleaved rounds, ${RATE} Hz, the target's throughput over ${WINDOW}s; ratio to bare (1.000: no cost)"
for target in $TARGETS; do
    for prof in $PROFILERS; do : > "$WORK/$target.$prof"; done
done
for round in $(seq "$ROUNDS"); do
    for target in $TARGETS; do
        for prof in $PROFILERS; do
            run_one "$target" "$prof" >> "$WORK/$target.$prof"
        done
    done
done
for target in $TARGETS; do
    echo
    base=$(median "$WORK/$target.bare" 2>/dev/null || echo 0)
    printf '%-9s bare: %s iterations/s\n' "$target" "$base"
    for prof in $PROFILERS; do
        printf '  %-20s %s\n' "$prof" "$(summary "$WORK/$target.$prof" "$base")"
    done
done
