#!/usr/bin/env bash
# The whole test suite, on a fresh machine or an old one:
#   1. build (once, cached) the Debian sid root with the test interpreters,
#      and free-threaded 3.13 (static and shared) inside it;
#   2. check formatting and lints;
#   3. run every test (unit tests, and integration tests against real
#      CPython 3.13/3.14/3.15 release and debug builds).
# Needs root (chroot, mount, ptrace of the targets).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/provision-sid.sh >/dev/null
scripts/provision-ft.sh >/dev/null
scripts/provision-tools.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test --quiet "$@"
