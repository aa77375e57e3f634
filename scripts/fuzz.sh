#!/usr/bin/env bash
# Fuzz each decoder of untrusted input for a fixed time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60); TARGETs default to all of fuzz/fuzz_targets.
# Needs cargo-fuzz (`cargo install cargo-fuzz`). It runs on stable Rust:
# RUSTC_BOOTSTRAP=1 lets stable rustc take the sanitizer flags cargo-fuzz
# passes (-Zsanitizer=address etc.). The build goes to $CARGO_TARGET_DIR
# (default fuzz/target).
#
# Each target runs single-process, starting from its committed seeds
# (fuzz/seeds/<target>) plus the corpus it grew before (fuzz/corpus/<target>,
# not committed). It prints the CPU time used, libFuzzer's final stats and
# any finding (crash, timeout, out-of-memory) left in
# fuzz/artifacts/<target>. Findings become tests in tests/fuzz_regressions.rs.
# Exit status: 1 if any target left a finding, else 0.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in fuzz/fuzz_targets/*.rs; do
        n=$(basename "$f" .rs)
        [ "$n" = tables ] || targets+=("$n")
    done
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "scripts/fuzz.sh needs cargo-fuzz: cargo install cargo-fuzz" >&2
    exit 2
fi
export RUSTC_BOOTSTRAP=1
target_dir=${CARGO_TARGET_DIR:-$PWD/fuzz/target}
triple=$(rustc -vV | sed -n 's/^host: //p')

# Release builds with debug assertions and AddressSanitizer.
for t in "${targets[@]}"; do
    if ! out=$(cargo fuzz build --fuzz-dir fuzz --target-dir "$target_dir" "$t" 2>&1); then
        printf '%s\nbuild of %s failed\n' "$out" "$t" >&2
        exit 2
    fi
done

found=0
mkdir -p fuzz/logs
printf '%-18s %8s %12s %8s %8s  %s\n' target cpu_s execs cov ft findings
for t in "${targets[@]}"; do
    bin=$target_dir/$triple/release/$t
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log=fuzz/logs/$t.log
    start=$(date +%s)
    # -timeout: one input taking over 10 s is a hang finding;
    # -rss_limit_mb / -malloc_limit_mb: over 2 GiB is an out-of-memory finding.
    /usr/bin/time -f '%U %S' -o "fuzz/logs/$t.time" \
        "$bin" "fuzz/corpus/$t" "fuzz/seeds/$t" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || true
    cpu=$(tail -n 1 "fuzz/logs/$t.time" | awk '{printf "%.1f", $1 + $2}')
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    arts=$(find "fuzz/artifacts/$t" -type f -newermt "@$start" -printf '%f ' 2>/dev/null)
    printf '%-18s %8s %12s %8s %8s  %s\n' "$t" "$cpu" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${arts:-none}"
    if [ -n "$arts" ]; then
        found=1
        grep -m1 -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" | sed 's/^/    /' || true
    fi
done
echo "logs in fuzz/logs, findings in fuzz/artifacts"
exit $found
