#!/usr/bin/env bash
# Side by side, in one run: tachyon, the reference (python3.15 -m
# profiling.sampling) and py-spy sample the same targets, one profiler at a
# time, all threads, at the same rate for the same time. Per target and
# profiler it reports:
#   rate/s      samples the profiler says it took per second of the run
#   wall s      how long the profiler ran (asked: SECONDS)
#   failed%     samples it failed to take (its own count)
#   good/s      samples per second that succeeded, and the ratio to
#               tachyon's (x0.50: half of tachyon's)
#   cpu s       the profiler's own CPU time (perf's task-clock when perf
#               is installed, else GNU time's user + system)
#   rss MiB     the profiler's peak resident memory
#   B/sample    bytes of its recording per sample: the .bin of tachyon and
#               the reference (--binary); py-spy's raw collapsed text
# and, beside CPU and RSS, the ratio to tachyon's (x1.00 is tachyon).
#
# A fourth row, "floor", is what no profiler can avoid (scripts/floor.c):
# the process_vm_readv calls of one steady tachyon sample of that target,
# with exactly its ranges (traced with strace, scripts/floor-ranges.py), on
# tachyon's schedule, with no decoding and no output. Under each target, a
# line gives tachyon's ratios to it: achieved rate (1.00 is the floor's)
# and CPU (1.00 is the floor's; above it is what tachyon spends beyond the
# reads themselves).
# Ratios, not absolute numbers, are what carry from machine to machine:
# the machines are shared and noisy.
#
# Targets: leaf10/leaf50/leaf200, a busy loop at the bottom of a stack that
# deep; fib, recursive and call-heavy; churn, four short-lived threads 5-8
# frames deep started over and over; threads30, 30 threads parked 20 frames
# deep in time.sleep.
#
# Usage: sudo scripts/compare.sh [SECONDS] [RATE_HZ] [VERSIONS]
#   defaults: 5 s, 1000 Hz, "3.15" (the reference reads only 3.15; give
#   "3.13 3.14 3.15" for tachyon and py-spy on the older ones too).
# On 3.15 a second tachyon row, "tachyon-fc", runs with --frame-cache
# (the interpreter's frame-cache mark; ratios to the plain tachyon row).
# Environment: TARGETS="leaf200 churn" runs only those targets (default all
# six); PYSPY=0 leaves py-spy out (at high rates it runs long where it
# cannot keep up); FRAME_CACHE=0 leaves the tachyon-fc row out.
# Needs root, the sid root (scripts/provision-sid.sh), py-spy
# (scripts/provision-tools.sh), GNU time, gcc and strace; builds tachyon
# --release and the floor.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
RATE=${2:-1000}
VERSIONS=${3:-3.15}
TARGETS=${TARGETS:-leaf10 leaf50 leaf200 fib churn threads30}
for t in $TARGETS; do
    case $t in
        leaf10|leaf50|leaf200|fib|churn|threads30) ;;
        *) echo "compare.sh: unknown target '$t' in TARGETS (known: leaf10 leaf50 leaf200 fib churn threads30)" >&2; exit 2 ;;
    esac
done
ROOT=$(scripts/provision-sid.sh)
TOOLS=$(scripts/provision-tools.sh)
PYSPY_ON=${PYSPY:-1}
PYSPY="$TOOLS/py-spy/bin/py-spy"
[ -x /usr/bin/time ] || { echo "compare.sh: GNU time is missing (apt-get install time)" >&2; exit 1; }
for tool in gcc strace; do
    command -v "$tool" >/dev/null || { echo "compare.sh: $tool is missing (apt-get install $tool)" >&2; exit 1; }
done
cargo build --release -q
TACHYON="${CARGO_TARGET_DIR:-$PWD/target}/release/tachyon"
WORK="$ROOT/tmp/tachyon-compare.$$"
INSIDE="/tmp/$(basename "$WORK")"
mkdir -p "$WORK"
FLOOR="$WORK/floor"
gcc -O2 -o "$FLOOR" scripts/floor.c
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/leaf.py" <<'PY'
import sys
def leaf():
    x = 0
    while True:
        x += 1
def down(n):
    return leaf() if n == 0 else down(n - 1)
down(int(sys.argv[1]) - 3)
PY

cat > "$WORK/fib.py" <<'PY'
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
while True:
    fib(25)
PY

# The same churn the tests use (it prints READY, sent nowhere below).
cp fixtures/targets/churn.py "$WORK/churn.py"

cat > "$WORK/threads30.py" <<'PY'
import threading, time
def work(n):
    if n:
        return work(n - 1)
    while True:
        time.sleep(0.01)
for i in range(30):
    threading.Thread(target=work, args=(20,), daemon=True).start()
while True:
    time.sleep(1)
PY

# measure NAME CMD...: run CMD, keep its output in $WORK/NAME.out and its
# "elapsed user system maxrss_kb" in $WORK/NAME.time; with perf, its exact
# CPU time (task-clock, children included) in $WORK/NAME.perf. The user
# and system times of GNU time are sampled at the scheduler's tick, which
# misjudges a profiler that wakes a thousand times a second.
PERF=$(command -v perf || true)
measure() {
    local name=$1; shift
    rm -f "$WORK/$name.perf"
    if [ -n "$PERF" ]; then
        "$PERF" stat -x, -e task-clock -o "$WORK/$name.perf" \
            /usr/bin/time -f "%e %U %S %M" -o "$WORK/$name.time" "$@" > "$WORK/$name.out" 2>&1 || true
    else
        /usr/bin/time -f "%e %U %S %M" -o "$WORK/$name.time" "$@" > "$WORK/$name.out" 2>&1 || true
    fi
}
wall() { awk '{printf "%.1f", $1}' "$WORK/$1.time"; }
cpu() {
    if [ -s "$WORK/$1.perf" ] && grep -q task-clock "$WORK/$1.perf"; then
        awk -F, '/task-clock/ {printf "%.3f", $1 / 1000}' "$WORK/$1.perf"
    else
        awk '{printf "%.2f", $2 + $3}' "$WORK/$1.time"
    fi
}
rss() { awk '{printf "%.1f", $4 / 1024}' "$WORK/$1.time"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "x%.2f", a / b; else print "-" }'; }
per_sample() { # FILE SAMPLES
    local n=${2:-0}
    if [ -f "$1" ] && [ "$n" -gt 0 ]; then awk -v s="$(stat -c %s "$1")" -v n="$n" 'BEGIN{printf "%.1f", s / n}'; else echo -; fi
}
row() { printf '%-10s %-6s %-9s %9s %6s %8s %9s %7s %7s %7s %8s %6s %9s\n' "$@"; }
# good RATE FAILED%: samples per second that succeeded.
good() { awk -v r="${1:-0}" -v f="${2:-0}" 'BEGIN { if (r + 0 > 0) printf "%.0f", r * (100 - f) / 100; else print "-" }'; }

echo "tachyon $(git describe --always --dirty 2>/dev/null || echo '?') vs python3.15 -m profiling.sampling vs $("$PYSPY" --version 2>/dev/null || echo 'py-spy (missing)')"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "${SECS}s per run at ${RATE} Hz, all threads, one profiler at a time"
echo
row target python profiler rate/s "wall s" failed% good/s "" "cpu s" "" "rss MiB" "" B/sample
for v in $VERSIONS; do
    for target in $TARGETS; do
        case $target in
            leaf*) script=leaf.py; args=${target#leaf} ;;
            *) script=$target.py; args= ;;
        esac
        # shellcheck disable=SC2086
        chroot "$ROOT" "/usr/bin/python$v" "$INSIDE/$script" $args > /dev/null &
        pid=$!; pids+=("$pid"); sleep 0.5

        rm -f "$WORK/t.bin"
        measure t "$TACHYON" attach -a -d "$SECS" -r "$RATE" --binary -o "$WORK/t.bin" "$pid"
        t_n=$(sed -n 's/^Captured \([0-9]*\) sample.*/\1/p' "$WORK/t.out")
        t_rate=$(sed -n 's/^Sample rate: \([0-9.]*\).*/\1/p' "$WORK/t.out")
        t_err=$(sed -n 's/^Error rate: //p' "$WORK/t.out")
        t_cpu=$(cpu t); t_rss=$(rss t)
        t_good=$(good "${t_rate:-0}" "${t_err:-0}")
        row "$target" "$v" tachyon "${t_rate:--}" "$(wall t)" "${t_err:--}" "$t_good" x1.00 "$t_cpu" x1.00 "$t_rss" x1.00 "$(per_sample "$WORK/t.bin" "${t_n:-0}")"

        if [ "$v" = 3.15 ] && [ "${FRAME_CACHE:-1}" = 1 ]; then
            rm -f "$WORK/c.bin"
            measure c "$TACHYON" attach -a -d "$SECS" -r "$RATE" --frame-cache --binary -o "$WORK/c.bin" "$pid"
            c_n=$(sed -n 's/^Captured \([0-9]*\) sample.*/\1/p' "$WORK/c.out")
            c_rate=$(sed -n 's/^Sample rate: \([0-9.]*\).*/\1/p' "$WORK/c.out")
            c_err=$(sed -n 's/^Error rate: //p' "$WORK/c.out")
            c_cpu=$(cpu c); c_rss=$(rss c)
            c_good=$(good "${c_rate:-0}" "${c_err:-0}")
            row "" "" tachyon-fc "${c_rate:--}" "$(wall c)" "${c_err:--}" "$c_good" "$(ratio "$c_good" "$t_good")" "$c_cpu" "$(ratio "$c_cpu" "$t_cpu")" "$c_rss" "$(ratio "$c_rss" "$t_rss")" "$(per_sample "$WORK/c.bin" "${c_n:-0}")"
        fi

        # The floor: one steady sample's reads, traced at a rate low enough
        # to tell the samples apart, then made on tachyon's schedule.
        strace -f -tt -v -e trace=process_vm_readv -o "$WORK/trace.txt" \
            "$TACHYON" attach -a -d 1 -r 200 --binary -o "$WORK/trace.bin" "$pid" > /dev/null 2>&1 || true
        if python3 scripts/floor-ranges.py "$WORK/trace.txt" > "$WORK/ranges.txt"; then
            measure f "$FLOOR" "$pid" "$RATE" "$SECS" "$WORK/ranges.txt"
            f_rate=$(sed -n 's/^Sample rate: \([0-9.]*\).*/\1/p' "$WORK/f.out")
            f_err=$(sed -n 's/^Error rate: //p' "$WORK/f.out")
            f_cpu=$(cpu f); f_rss=$(rss f)
            f_good=$(good "${f_rate:-0}" "${f_err:-0}")
            row "" "" floor "${f_rate:--}" "$(wall f)" "${f_err:--}" "$f_good" "$(ratio "$f_good" "$t_good")" "$f_cpu" "$(ratio "$f_cpu" "$t_cpu")" "$f_rss" "$(ratio "$f_rss" "$t_rss")" -
            echo "           tachyon/floor: rate $(ratio "$t_good" "$f_good"), cpu $(ratio "$t_cpu" "$f_cpu") ($(awk '{n++} END {print n}' "$WORK/ranges.txt") ranges in $(awk 'END {print $1 + 1}' "$WORK/ranges.txt") calls a sample)"
        else
            row "" "" floor "no trace: $(head -c 50 "$WORK/ranges.txt")" "" "" "" "" "" "" "" "" ""
        fi

        if [ "$v" = 3.15 ]; then
            rm -f "$WORK/r.bin"
            measure r chroot "$ROOT" /usr/bin/python3.15 -m profiling.sampling attach -a -d "$SECS" -r "$RATE" --binary -o "$INSIDE/r.bin" "$pid"
            r_n=$(sed -n 's/^Captured \([0-9]*\) sample.*/\1/p' "$WORK/r.out")
            r_rate=$(sed -n 's/^Sample rate: \([0-9.]*\).*/\1/p' "$WORK/r.out")
            r_err=$(sed -n 's/^Error rate: //p' "$WORK/r.out")
            r_cpu=$(cpu r); r_rss=$(rss r)
            r_good=$(good "${r_rate:-0}" "${r_err:-0}")
            row "" "" reference "${r_rate:--}" "$(wall r)" "${r_err:--}" "$r_good" "$(ratio "$r_good" "$t_good")" "$r_cpu" "$(ratio "$r_cpu" "$t_cpu")" "$r_rss" "$(ratio "$r_rss" "$t_rss")" "$(per_sample "$WORK/r.bin" "${r_n:-0}")"
        fi

        if [ "${PYSPY_ON:-1}" = 1 ] && [ -x "$PYSPY" ]; then
            rm -f "$WORK/p.txt"
            measure p "$PYSPY" record --nonblocking -p "$pid" -d "$SECS" -r "$RATE" -f raw -o "$WORK/p.txt"
            p_n=$(grep -o 'Samples: [0-9]*' "$WORK/p.out" | tail -1 | awk '{print $2}')
            p_e=$(grep -o 'Errors: [0-9]*' "$WORK/p.out" | tail -1 | awk '{print $2}')
            if [ -n "${p_n:-}" ] && [ "${p_n:-0}" -gt 0 ]; then
                p_rate=$(awk -v n="$p_n" -v e="$(awk '{print $1}' "$WORK/p.time")" 'BEGIN{printf "%.2f", n / e}')
                p_err=$(awk -v e="${p_e:-0}" -v n="$p_n" 'BEGIN{printf "%.2f", 100 * e / (n + e)}')
                p_cpu=$(cpu p); p_rss=$(rss p)
                p_good=$(good "$p_rate" "$p_err")
                row "" "" py-spy "$p_rate" "$(wall p)" "$p_err" "$p_good" "$(ratio "$p_good" "$t_good")" "$p_cpu" "$(ratio "$p_cpu" "$t_cpu")" "$p_rss" "$(ratio "$p_rss" "$t_rss")" "$(per_sample "$WORK/p.txt" "$p_n")"
            else
                row "" "" py-spy "failed: $(grep -m1 -i error "$WORK/p.out" | cut -c1-50)" "" "" "" "" "" "" "" "" ""
            fi
        fi
        kill "$pid"; wait "$pid" 2>/dev/null || true
    done
done
