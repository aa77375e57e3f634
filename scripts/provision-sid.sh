#!/usr/bin/env bash
# Build (once) the Debian sid root that holds the test interpreters:
# python3.13/3.14/3.15 and their -dbg builds. They need a newer glibc than
# the host has, so they live in their own root and tachyon, running outside,
# profiles them through /proc/PID/root exactly as it would a container.
#
# Cached and idempotent: a finished root carries a stamp file and is reused;
# a half-built one (interrupted run) is thrown away and built again.
# /proc is mounted inside the root on every call (mounts do not survive a
# reboot, the root does).
#
# Tools the tests run inside the root (gdb: a core of a sid process must be
# made by sid's gdb) are installed into a finished root when missing, so
# that adding one does not rebuild the root.
#
# Usage: scripts/provision-sid.sh            (prints the root's path last)
# Env:   TACHYON_SID_ROOT  where the root lives (default /var/cache/tachyon/sid)
set -euo pipefail

ROOT=${TACHYON_SID_ROOT:-/var/cache/tachyon/sid}
PKGS=python3.13,python3.14,python3.15,python3.13-dbg,python3.14-dbg,python3.15-dbg
STAMP="$ROOT/.tachyon-root-ok"
# Bump when PKGS or the recipe changes so cached roots are rebuilt.
RECIPE="v1 $PKGS"

# gdb for gcore (core files); the -dev headers to build test C extensions
# against each interpreter, and numpy (for 3.14 and 3.15), for native frames.
EXTRA="gdb python3.13-dev python3.14-dev python3.15-dev python3-numpy"

log() { printf 'provision-sid: %s\n' "$*" >&2; }

ensure_extra() {
    if [ ! -x "$ROOT/usr/bin/gcore" ] || [ ! -e "$ROOT/usr/include/python3.13/Python.h" ] \
        || [ ! -e "$ROOT/usr/include/python3.15/Python.h" ] \
        || [ ! -d "$ROOT/usr/lib/python3/dist-packages/numpy" ]; then
        log "installing $EXTRA into $ROOT"
        chroot "$ROOT" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $EXTRA" >/dev/null
    fi
}

need_root_tools() {
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        log "installing mmdebstrap"
        if [ "$(id -u)" -ne 0 ]; then
            log "ERROR: mmdebstrap is missing and we are not root; install it (apt-get install mmdebstrap)"
            exit 1
        fi
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
    fi
}

mount_proc() {
    if ! mountpoint -q "$ROOT/proc"; then
        mkdir -p "$ROOT/proc"
        mount -t proc proc "$ROOT/proc"
    fi
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ]; then
    mount_proc
    ensure_extra
    echo "$ROOT"
    exit 0
fi

need_root_tools
if [ -e "$ROOT" ]; then
    log "removing incomplete or outdated root $ROOT"
    if mountpoint -q "$ROOT/proc"; then umount "$ROOT/proc" || umount -l "$ROOT/proc"; fi
    rm -rf --one-file-system "$ROOT"
fi
mkdir -p "$(dirname "$ROOT")"
TMP="$ROOT.tmp.$$"
trap 'rm -rf --one-file-system "$TMP"' EXIT
log "building $ROOT (about a minute)"
mmdebstrap --quiet --variant=apt \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --include="$PKGS" sid "$TMP" >&2
mv "$TMP" "$ROOT"
trap - EXIT
for v in 3.13 3.14 3.15; do
    for exe in "python$v" "python$v-dbg"; do
        [ -x "$ROOT/usr/bin/$exe" ] || { log "ERROR: $exe missing from the root"; exit 1; }
    done
done
echo "$RECIPE" > "$STAMP"
mount_proc
ensure_extra
echo "$ROOT"
