#!/usr/bin/env bash
# Build (once) free-threaded CPython 3.13 ("3.13t", PEP 703) inside the sid
# root, from Debian's source package: Debian ships no free-threaded build.
#   /opt/python3.13t/bin/python3.13t         static libpython
#   /opt/python3.13t-shared/bin/python3.13t  --enable-shared
# (paths inside the root; tests run them through chroot, as they run the
# root's other interpreters, and tachyon reads them through /proc/PID/root.)
#
# The pristine upstream tarball is built (Debian's patches are for its /usr
# layout), out of tree, -g -O3, no PGO or LTO. A build takes 8-22 minutes
# on two cores; each is cached, with a stamp file, and a half-built one is
# thrown away and built again.
#
# Usage: scripts/provision-ft.sh [static|shared|all]   (default all; prints
#        the root's path last)
# Env:   TACHYON_SID_ROOT  the sid root (default /var/cache/tachyon/sid)
set -euo pipefail
cd "$(dirname "$0")/.."
WHICH=${1:-all}
ROOT=$(scripts/provision-sid.sh)
# Bump when the recipe changes so cached builds are rebuilt.
RECIPE="v1 3.13t"
DEPS="gcc make pkg-config dpkg-dev libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev libexpat1-dev libgdbm-dev libgdbm-compat-dev libncurses-dev uuid-dev"

log() { printf 'provision-ft: %s\n' "$*" >&2; }
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 sh -c "$1"; }

# The build dependencies and the source tree, once.
SRC=/var/tmp/tachyon-ft/src
prepare() {
    if [ -f "$ROOT$SRC/.ok" ]; then return; fi
    log "installing the build dependencies into $ROOT"
    echo "deb-src http://deb.debian.org/debian sid main" > "$ROOT/etc/apt/sources.list.d/tachyon-src.list"
    in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $DEPS" >/dev/null
    rm -rf "$ROOT/var/tmp/tachyon-ft/dl" "$ROOT$SRC"
    mkdir -p "$ROOT/var/tmp/tachyon-ft/dl"
    # The mirror's Sources index lists versions whose files it may not
    # serve: try them newest first.
    local versions v got=
    versions=$(in_root "apt-cache showsrc python3.13" | sed -n 's/^Version: //p' | sort -Vr | uniq)
    for v in $versions; do
        if in_root "cd /var/tmp/tachyon-ft/dl && apt-get source -qq --download-only python3.13=$v" >/dev/null 2>&1; then
            got=$v
            break
        fi
        log "python3.13 $v: its source is not served, trying an older one"
    done
    [ -n "$got" ] || { log "ERROR: no python3.13 source package could be downloaded"; exit 1; }
    log "unpacking python3.13 $got"
    in_root "cd /var/tmp/tachyon-ft/dl && dpkg-source -x --skip-patches python3.13_*.dsc $SRC" >/dev/null
    touch "$ROOT$SRC/.ok"
}

# build NAME EXTRA-CONFIGURE-ARGS: configure, make and install into /opt/NAME.
build() {
    local name=$1 extra=$2 prefix="/opt/$1" dir="/var/tmp/tachyon-ft/build-$1"
    local stamp="$ROOT$prefix/.tachyon-ft-ok"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$RECIPE" ]; then return; fi
    prepare
    log "building $name into $ROOT$prefix (8-22 minutes)"
    rm -rf "$ROOT$prefix" "$ROOT$dir"
    mkdir -p "$ROOT$dir" "$ROOT/dev/shm"
    local shm=0
    if ! mountpoint -q "$ROOT/dev/shm"; then mount -t tmpfs shm "$ROOT/dev/shm"; shm=1; fi
    local start=$SECONDS
    in_root "cd $dir && $SRC/configure --prefix=$prefix --disable-gil --with-system-expat --with-ensurepip=no $extra > configure.log 2>&1 && make -j$(nproc) > make.log 2>&1 && make install > install.log 2>&1" || {
        log "ERROR: the $name build failed; its logs are in $ROOT$dir"
        [ $shm = 1 ] && umount "$ROOT/dev/shm"
        exit 1
    }
    [ $shm = 1 ] && umount "$ROOT/dev/shm"
    in_root "$prefix/bin/python3.13t -c 'import sys; assert not sys._is_gil_enabled()'" || {
        log "ERROR: $prefix/bin/python3.13t is not free-threaded"
        exit 1
    }
    # The test suite and the build tree are not needed to run it.
    rm -rf "$ROOT$prefix/lib/python3.13t/test" "$ROOT$dir"
    echo "$RECIPE" > "$stamp"
    log "built $name in $((SECONDS - start)) s"
}

case $WHICH in
    static) build python3.13t "" ;;
    shared) build python3.13t-shared "--enable-shared LDFLAGS=-Wl,-rpath,/opt/python3.13t-shared/lib" ;;
    all)
        build python3.13t ""
        build python3.13t-shared "--enable-shared LDFLAGS=-Wl,-rpath,/opt/python3.13t-shared/lib"
        ;;
    *) echo "usage: scripts/provision-ft.sh [static|shared|all]" >&2; exit 2 ;;
esac
echo "$ROOT"
