#!/usr/bin/env bash
# Builds and installs Citus 13.2.2 for the Debian PostgreSQL 15 server (postgresql-server-dev-15),
# for scripts/test-citus and the Citus benchmarks (docs/citus.md, "The test cluster").
#
#   scripts/citus/build.sh [/path/to/citus-13.2.2.tar.gz]      (run as root)
#
# The tarball beside this script is the default: `git archive --format=tar.gz
# --prefix=citus-13.2.2/ v13.2.2` of https://github.com/citusdata/citus (AGPL-3.0, unchanged;
# it only builds the test cluster and is never linked into channel-bridge); its SHA-256 is
# checked. The patch beside it renames Citus's static compat have_createdb_privilege(), which
# clashes with the function PostgreSQL 15.20 exports.
# Idempotent: does nothing when the installed citus.so already is 13.2.2 (FORCE=1 rebuilds).
# Build directory: $WORK (default /tmp/citus-build); log in $WORK/build.log.
set -euo pipefail

VERSION=13.2.2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SHA256=dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430
TARBALL=${1:-$HERE/citus-$VERSION.tar.gz}
PATCH=$HERE/citus-13.2.2-pg15-have_createdb_privilege.patch
WORK=${WORK:-/tmp/citus-build}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
TARBALL=$(readlink -f "$TARBALL")

installed() {
    local so
    so="$("$PG_CONFIG" --pkglibdir 2>/dev/null)/citus.so" || return 1
    [ -f "$so" ] && grep -a -q "Citus $VERSION on" "$so"
}

if [ -z "${FORCE:-}" ] && [ -x "$PG_CONFIG" ] && installed; then
    echo "citus $VERSION already installed in $("$PG_CONFIG" --pkglibdir): nothing to do"
    exit 0
fi

[ "$(id -u)" = 0 ] || { echo "run as root (apt-get and make install)" >&2; exit 1; }
[ -f "$TARBALL" ] || { echo "no tarball at $TARBALL" >&2; exit 1; }
[ -f "$PATCH" ] || { echo "no patch at $PATCH" >&2; exit 1; }
echo "$SHA256  $TARBALL" | sha256sum --check --quiet - ||
    { echo "$TARBALL is not the v$VERSION tarball (SHA-256 differs)" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
deps=(postgresql-server-dev-15 libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev
      autoconf flex bison make gcc patch)
missing=()
for p in "${deps[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

start=$(date +%s)
rm -rf "$WORK"; mkdir -p "$WORK"
tar -xzf "$TARBALL" -C "$WORK"
src="$WORK/citus-$VERSION"
[ -d "$src" ] || { echo "the tarball has no citus-$VERSION/ directory" >&2; exit 1; }
cd "$src"
patch -p1 --forward < "$PATCH"
{
    ./configure --without-libcurl PG_CONFIG="$PG_CONFIG"
    make -j"$(nproc)"
    make install
} > "$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; echo "build failed: $WORK/build.log" >&2; exit 1; }

installed || { echo "installed citus.so does not report $VERSION" >&2; exit 1; }
echo "citus $VERSION installed in $("$PG_CONFIG" --pkglibdir) in $(( $(date +%s) - start )) s (log: $WORK/build.log)"
