#!/usr/bin/env bash
# Builds lh's runtime image without a registry: a Debian root made with debootstrap
# (from Debian's package mirror), imported with `docker import`, then the Dockerfile's
# remaining steps on top of it, with no network. The build is skipped when the image
# exists and was built from the same files (a hash of images/ in a label).
#
#     images/build.sh            (make images)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${LH_CACHE_DIR:-$HOME/.cache/lh}"
image="${LH_RUNTIME_IMAGE:-lh-runtime:3.11}"
base="lh-base:bookworm"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
log() { echo "images: $*" >&2; }

hash="$(cd "$here" && find runtime build.sh -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
current="$(docker image inspect -f '{{ index .Config.Labels "lh.images.hash" }}' "$image" 2>/dev/null || true)"
if [ "$current" = "$hash" ]; then
    log "$image is up to date"
    exit 0
fi

if ! docker image inspect "$base" >/dev/null 2>&1; then
    root="$cache/debootstrap-bookworm"
    if [ ! -x "$root/usr/bin/python3" ]; then
        command -v debootstrap >/dev/null || { log "debootstrap is needed (apt-get install debootstrap)"; exit 1; }
        log "making a Debian bookworm root with debootstrap (about a minute)"
        rm -rf "$root.tmp"
        debootstrap --variant=minbase --include=python3,passwd bookworm "$root.tmp" "$mirror" >&2
        rm -rf "$root.tmp/var/cache/apt/archives/"*.deb "$root.tmp/var/lib/apt/lists/"*
        mv "$root.tmp" "$root"
    fi
    log "importing it as $base"
    tar -C "$root" -c . | docker import - "$base" >/dev/null
fi

log "building $image"
docker build --quiet --network none --build-arg "BASE=$base" --label "lh.images.hash=$hash" \
    -t "$image" "$here/runtime" >/dev/null
log "built $image"
