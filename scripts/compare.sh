#!/usr/bin/env bash
# Side by side, in one run: tachyon, the reference (python3.15 -m
# profiling.sampling) and py-spy sample the same workload at the same rate
# for the same time. Prints each profiler's failed-sample rate and its own
# CPU time, and the CPU ratios against tachyon. Ratios, not absolute times:
# the machines are shared and noisy.
#
# Usage: sudo scripts/compare.sh [SECONDS] [RATE_HZ]
# Workloads: fib (recursive, call-heavy), and threads (20 threads that
# recurse 1-30 deep and sleep, started and ended all the time: stacks that
# tear under the reader).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
RATE=${2:-1000}
ROOT=$(scripts/provision-sid.sh)
TOOLS=$(scripts/provision-tools.sh)
PYSPY="$TOOLS/py-spy/bin/py-spy"
cargo build --release -q
TACHYON=$PWD/target/release/tachyon
WORK="$ROOT/tmp/tachyon-compare.$$"
mkdir -p "$WORK"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

cat > "$WORK/fib.py" <<'PY'
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    fib(25)
PY

cat > "$WORK/threads.py" <<'PY'
import random, threading, time
def down(n):
    if n:
        return down(n - 1)
    time.sleep(random.random() / 100)
def worker():
    for _ in range(50):
        down(random.randrange(1, 30))
def keep(i):
    while True:
        t = threading.Thread(target=worker, name=f"w{i}")
        t.start()
        t.join()
for i in range(20):
    threading.Thread(target=keep, args=(i,), daemon=True).start()
while True:
    time.sleep(1)
PY

# cpu_of CMD...: run it, print the CPU seconds it and its children used
# (perf's task-clock where perf works, else /usr/bin/time's 10 ms ticks).
if perf stat -e task-clock true >/dev/null 2>&1; then
    cpu_of() {
        perf stat -x, -e task-clock -o "$WORK/time" "$@" > "$WORK/out" 2>&1 || true
        awk -F, '/task-clock/ {printf "%.3f", $1 / 1000}' "$WORK/time"
    }
else
    cpu_of() {
        /usr/bin/time -f "%U %S" -o "$WORK/time" "$@" > "$WORK/out" 2>&1 || true
        awk '{printf "%.3f", $1 + $2}' "$WORK/time"
    }
fi

row() { printf '%-10s %-9s %-12s %10s %12s %10s\n' "$@"; }
for workload in fib threads; do
echo "workload: $workload, ${SECS}s at ${RATE} Hz, all threads"
row python profiler "" "error %" "cpu s" "cpu ratio"
for v in 3.13 3.14 3.15; do
    chroot "$ROOT" "/usr/bin/python$v" "/tmp/$(basename "$WORK")/$workload.py" &
    pid=$!; pids+=("$pid"); sleep 0.5
    t_cpu=$(cpu_of "$TACHYON" attach -a -d "$SECS" -r "$RATE" --collapsed -o /dev/null "$pid")
    t_err=$(sed -n 's/^Error rate: //p' "$WORK/out")
    row "$v" tachyon "" "$t_err" "$t_cpu" "1.00"
    if [ "$v" = 3.15 ]; then
        r_cpu=$(cpu_of chroot "$ROOT" /usr/bin/python3.15 -m profiling.sampling attach -a -d "$SECS" -r "$RATE" --collapsed -o /dev/null "$pid")
        r_err=$(sed -n 's/^Error rate: //p' "$WORK/out")
        row "$v" reference "" "$r_err" "$r_cpu" "$(awk -v a="$r_cpu" -v b="$t_cpu" 'BEGIN{printf "%.2f", a/b}')"
    fi
    if [ -x "$PYSPY" ]; then
        p_cpu=$(cpu_of "$PYSPY" record --nonblocking -p "$pid" -d "$SECS" -r "$RATE" -f raw -o "$WORK/pyspy.txt")
        p_err=$(grep -o 'Errors: [0-9]*' "$WORK/out" | tail -1 | awk '{print $2}')
        p_n=$(grep -o 'Samples: [0-9]*' "$WORK/out" | tail -1 | awk '{print $2}')
        if [ -n "${p_n:-}" ] && [ "${p_n:-0}" -gt 0 ]; then
            p_pct=$(awk -v e="${p_err:-0}" -v n="$p_n" 'BEGIN{printf "%.2f", 100*e/n}')
        else
            p_pct="failed: $(grep -m1 -i error "$WORK/out" | cut -c1-40)"
        fi
        row "$v" py-spy "" "$p_pct" "$p_cpu" "$(awk -v a="$p_cpu" -v b="$t_cpu" 'BEGIN{printf "%.2f", a/b}')"
    fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
done
