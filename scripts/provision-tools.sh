#!/usr/bin/env bash
# Install (once, cached) the third-party tools the tests and comparisons
# use, into /var/cache/tachyon/tools:
#   uv          (PyPI)   - `tachyon run -- uv run app.py` is tested against the real thing
#   py-spy      (PyPI)   - the peer in scripts/compare.sh
#   maturin     (PyPI)   - builds the wheel that carries the binary (tests/install.rs)
#   gunicorn    (PyPI)   - a real pre-fork server whose workers `dump -s` reads
#   speedscope  (npm)    - ships the speedscope file format's JSON schema
#   ajv         (npm)    - the JSON-schema validator --speedscope output is checked with
#   golang-go   (Debian) - `go tool pprof`, the reader --pprof output is checked with
#   man-db, groff-base (Debian) - `man -l` and groff, which render `tachyon man`
#   chromium   (Debian) - headless, loads (and screenshots) every HTML page
#   tmux       (Debian) - the terminal `--live` is driven and read in
#   gdb        (Debian) - gcore makes the core files tests/corefile.rs reads
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
install maturin 1.16.0
install gunicorn 23.0.0

apt_install() { # package...
    export DEBIAN_FRONTEND=noninteractive
    echo "provision-tools: installing $* from Debian" >&2
    apt-get install -y -qq "$@" >&2 ||
        { apt-get update -qq >&2 && apt-get install -y -qq "$@" >&2; } ||
        { echo "provision-tools: ERROR: $* did not install" >&2; exit 1; }
}

# npm packages, pinned, into $TOOLS/node/node_modules.
NODE_PKGS="speedscope@1.25.0 ajv@8.20.0"
node_dir="$TOOLS/node"
if [ "$(cat "$node_dir/.version" 2>/dev/null)" != "$NODE_PKGS" ] ||
    [ ! -f "$node_dir/node_modules/speedscope/dist/release/file-format-schema.json" ] ||
    [ ! -f "$node_dir/node_modules/ajv/package.json" ]; then
    command -v npm >/dev/null || apt_install nodejs npm
    echo "provision-tools: installing $NODE_PKGS into $node_dir" >&2
    rm -rf "$node_dir"
    mkdir -p "$node_dir"
    # shellcheck disable=SC2086
    npm install --prefix "$node_dir" --no-audit --no-fund --no-save --loglevel=error $NODE_PKGS >&2
    [ -f "$node_dir/node_modules/speedscope/dist/release/file-format-schema.json" ] ||
        { echo "provision-tools: ERROR: speedscope did not install its schema" >&2; exit 1; }
    [ -f "$node_dir/node_modules/ajv/package.json" ] ||
        { echo "provision-tools: ERROR: ajv did not install" >&2; exit 1; }
    echo "$NODE_PKGS" > "$node_dir/.version"
fi

# go tool pprof, from Debian.
if ! go tool pprof -h >/dev/null 2>&1; then
    apt_install golang-go
    go tool pprof -h >/dev/null 2>&1 ||
        { echo "provision-tools: ERROR: go tool pprof does not run" >&2; exit 1; }
fi
# man and groff, from Debian (most images have them).
if ! command -v man >/dev/null || ! command -v groff >/dev/null; then
    apt_install man-db groff-base
    command -v man >/dev/null && command -v groff >/dev/null ||
        { echo "provision-tools: ERROR: man or groff did not install" >&2; exit 1; }
fi
# Headless Chromium, from Debian: the HTML outputs are loaded in it.
if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium
    /usr/bin/chromium --headless --no-sandbox --version >/dev/null 2>&1 ||
        { echo "provision-tools: ERROR: chromium does not run" >&2; exit 1; }
fi
# tmux, from Debian: --live is tested in a real terminal.
if ! command -v tmux >/dev/null; then
    apt_install tmux
    command -v tmux >/dev/null || { echo "provision-tools: ERROR: tmux did not install" >&2; exit 1; }
fi
# strace, from Debian: run --subprocesses is tested where ptrace is refused
# (tachyon already traced by strace -f).
if ! command -v strace >/dev/null; then
    apt_install strace
    command -v strace >/dev/null || { echo "provision-tools: ERROR: strace did not install" >&2; exit 1; }
fi
# gdb's gcore, from Debian: real core files of real interpreters.
if ! command -v gcore >/dev/null; then
    apt_install gdb
    command -v gcore >/dev/null || { echo "provision-tools: ERROR: gdb (gcore) did not install" >&2; exit 1; }
fi
echo "$TOOLS"
