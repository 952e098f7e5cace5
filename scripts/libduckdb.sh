#!/usr/bin/env bash
# Puts DuckDB's official shared library, the release lh's `duckdb` crate binds (1.5.6,
# built with the parquet, json, ICU and core-functions extensions), into `.libduckdb/`,
# where the build links it (`.cargo/config.toml` sets DUCKDB_LIB_DIR) and where lh's
# binaries find it at run time (their rpath, set by `duckdb-link/`). The library comes
# from the npm registry's `@duckdb/node-bindings-linux-x64`, checked against the
# integrity pinned here. Idempotent: a library already in place is kept.
#
# Platforms without that package build DuckDB from source instead:
#     cargo build --features lh-control-plane/bundled-duckdb
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="@duckdb/node-bindings-linux-x64@1.5.6-r.1"
INTEGRITY="sha512-IXcrZJE6kEqM0Z4wwdVnGBHX/frOS33VPNAwDXQ/Q+Fs84b058Qe94chrCCIcNJlG8Y3UHIUU4eBeCQxW5mN1Q=="
DEST=.libduckdb

log() { echo "libduckdb: $*" >&2; }

if [ -f "$DEST/libduckdb.so" ] && [ "$(cat "$DEST/PACKAGE" 2>/dev/null)" = "$PACKAGE" ]; then
    exit 0
fi
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) log "no official library for $(uname -s)-$(uname -m) here"
       log "hint: build DuckDB from source with \`cargo build --features lh-control-plane/bundled-duckdb\`"
       exit 1 ;;
esac
if ! command -v npm >/dev/null; then
    log "installing npm from Debian's packages"
    sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log "fetching $PACKAGE"
(cd "$tmp" && npm pack --silent "$PACKAGE" >/dev/null)
tarball=$(ls "$tmp"/*.tgz)
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$actual" != "$INTEGRITY" ]; then
    log "$PACKAGE does not match its pinned integrity (got $actual); nothing was installed"
    exit 1
fi
tar -xzf "$tarball" -C "$tmp" package/libduckdb.so package/LICENSE
mkdir -p "$DEST"
mv "$tmp/package/LICENSE" "$DEST/LICENSE"
# Rename into place so that a build never sees half a library.
mv "$tmp/package/libduckdb.so" "$DEST/libduckdb.so.tmp"
mv "$DEST/libduckdb.so.tmp" "$DEST/libduckdb.so"
echo "$PACKAGE" > "$DEST/PACKAGE"
log "installed DuckDB 1.5.6 into $DEST/"
