#!/usr/bin/env bash
# Regenerate fixtures/offsets/<version>[d].bin: the raw _Py_DebugOffsets
# tables of the test interpreters (the sid root's python3.13/3.14/3.15 and
# their debug builds, plus pyenv 3.13.0 when present), read out of freshly
# started processes by tachyon's own runtime::locate and table_bytes.
# Needs root (or CAP_SYS_PTRACE) and the sid root (scripts/provision-sid.sh).
# `cargo test --test offsets` then checks each fixture against the live
# interpreter, so a stale fixture fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --test offsets -- --ignored --exact regenerate_fixtures --nocapture
