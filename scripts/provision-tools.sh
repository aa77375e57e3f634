#!/usr/bin/env bash
# Install (once, cached) the third-party tools the tests and comparisons
# use, from PyPI into /var/cache/tachyon/tools:
#   uv      - `tachyon run -- uv run app.py` is tested against the real thing
#   py-spy  - the peer in scripts/compare.sh
# Fails loudly when an install fails: a test must not skip quietly.
set -euo pipefail
TOOLS=${TACHYON_TOOLS:-/var/cache/tachyon/tools}
install() { # name version
    local dir="$TOOLS/$1"
    if [ -x "$dir/bin/$1" ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$2" ]; then
        return
    fi
    echo "provision-tools: installing $1 $2 into $dir" >&2
    rm -rf "$dir"
    python3 -m pip install -q --disable-pip-version-check --target "$dir" "$1==$2" >&2
    [ -x "$dir/bin/$1" ] || { echo "provision-tools: ERROR: $1 did not install" >&2; exit 1; }
    echo "$2" > "$dir/.version"
}
install uv 0.13.9
install py-spy 0.4.3
echo "$TOOLS"
