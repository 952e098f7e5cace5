#!/usr/bin/env bash
# Build times of lh's own code at two commits (BENCHMARKS.md, "Build times of lh's own
# code"): for each, a build of every lh crate from scratch (the dependencies already
# built: they are the same at both commits) and an incremental build after touching one
# file of the query engine (a function added to its `sql.rs`). Each commit is checked out into a worktree;
# all builds share one target folder, so the dependencies are built once.
#
#     bench/build-times.sh [BEFORE] [AFTER]     # commits; default 8e34c92 and HEAD
#
# Run it on a quiet machine: each commit costs two builds of lh's code.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
before="${1:-8e34c92}"
after="${2:-HEAD}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lh/target}"
# One DuckDB library for both worktrees (a path that differs would rebuild duckdb-rs).
export DUCKDB_LIB_DIR="$repo/.libduckdb"
"$repo/scripts/libduckdb.sh" > /dev/null
for commit in "$before" "$after"; do
    dir="$(mktemp -d /tmp/lh-build-times.XXXXXX)"
    git -C "$repo" worktree add -q --detach "$dir" "$commit"
    cd "$dir"
    # A worktree at a new path: every lh crate builds from scratch, the dependencies
    # are the target folder's.
    start=$(date +%s.%N)
    cargo build -q --workspace --all-targets
    scratch=$(python3 -c "print(round($(date +%s.%N) - $start))")
    sql=$(ls server/query/src/sql.rs control-plane/src/query/sql.rs 2>/dev/null | head -1)
    printf '\n#[allow(dead_code)]\nfn bench_touch() {}\n' >> "$sql"
    start=$(date +%s.%N)
    cargo build -q --workspace --all-targets
    incremental=$(python3 -c "print(round($(date +%s.%N) - $start))")
    echo "$commit: lh's crates from scratch ${scratch} s; after touching $sql ${incremental} s"
    cd "$repo"
    git worktree remove --force "$dir"
done
