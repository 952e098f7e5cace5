#!/usr/bin/env bash
# The first `make demo` as a fresh machine runs it: a fresh clone of this repository,
# and empty caches for cargo's registry and build, npm, pip and lh's own (the Python
# virtualenv). Prints the wall time; BENCHMARKS.md ("First build") records it. Run it
# on a quiet machine: it takes one to two cargo builds' time.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
F="${1:-/tmp/lh-first-build}"
rm -rf "$F"
mkdir -p "$F"
git clone -q "$repo" "$F/lh"
cd "$F/lh"
export CARGO_HOME="$F/cargo-home" CARGO_TARGET_DIR="$F/target" LH_CACHE_DIR="$F/cache" \
    npm_config_cache="$F/npm" PIP_NO_CACHE_DIR=1 PATH="$HOME/.cargo/bin:$PATH"
start=$(date +%s)
make demo > "$F/demo.log" 2>&1
end=$(date +%s)
echo "first make demo: $((end - start)) s (log: $F/demo.log)"
