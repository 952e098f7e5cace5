#!/usr/bin/env bash
# The demo: a fresh lh server on the embedded default (SQLite catalog, local folder
# warehouse) in a temporary directory, TPC-H data, a branch, a change, queries of both
# refs, a diff, a merge, time travel to main before the merge, DuckDB reading main
# through lh's Iceberg REST catalog, and a pipeline whose expectation stops a bad day
# from publishing, then publishes the fixed code's replay (examples/wap/story.sh). The
# server makes an admin token at its first start
# and writes it into the profile in $LH_HOME, which `lh` then uses. Every command is printed as a user would type it.
#
#     make demo            (builds lh and installs tpchgen-cli first)
#     LH_DEMO_SCALE=1 make demo
set -euo pipefail

cd "$(dirname "$0")/.."
LH="${LH:-lh}"
SCALE="${LH_DEMO_SCALE:-0.1}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/lh-demo.XXXXXX")"
export LH_HOME="$WORK/home"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export LH_ENDPOINT="http://127.0.0.1:$PORT"
export LH_USER="${LH_USER:-${USER:-demo}}"

# Bold headings and cyan commands on a terminal; plain text in a log.
if [ -t 1 ]; then BOLD=$'\033[1m' CYAN=$'\033[36m' PLAIN=$'\033[0m'; else BOLD="" CYAN="" PLAIN=""; fi
say() { printf '\n%s# %s%s\n' "$BOLD" "$*" "$PLAIN"; }
# Prints a command as one would type it (arguments with spaces in quotes), then runs it.
run() {
    local shown="" a
    for a in "$@"; do
        if [[ "$a" =~ [[:space:]\'\*\(\)\;\<\>\|\&\$] ]]; then shown+=" \"${a//\"/\\\"}\""; else shown+=" $a"; fi
    done
    printf '%s$%s%s\n' "$CYAN" "$shown" "$PLAIN"
    "$@"
}

say "generating TPC-H at scale $SCALE with tpchgen-cli"
tpchgen-cli parquet -s "$SCALE" --output-dir "$WORK/tpch" >/dev/null
ls -1 "$WORK/tpch"

say "starting the lh server on the embedded default, in $WORK/data"
"$LH" server --data-dir "$WORK/data" --bind "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do "$LH" info >/dev/null 2>&1 && break; sleep 0.1; done
run lh info

say "loading the eight TPC-H tables into main"
for t in region nation supplier customer part partsupp orders lineitem; do
    run lh table import "tpch.$t" "$WORK/tpch/$t.parquet"
done
run lh table ls

REVENUE="select l_returnflag, count(*) AS orders, round(sum(l_extendedprice * (1 - l_discount)), 2) AS revenue from tpch.lineitem group by l_returnflag order by l_returnflag"

say "a branch to try a change on, without touching main (zero-copy: no file is copied)"
run lh branch create alice.discounts --from main
MAIN_BEFORE="$("$LH" branch ls -o csv | awk -F, '$2=="main" {print $3}')"

say "on the branch: every AIR shipment gets 5 more points of discount"
run lh query "select * replace (case when l_shipmode = 'AIR' then least(l_discount + 0.05, 0.10) else l_discount end::decimal(15,2) AS l_discount) from tpch.lineitem" \
    --ref alice.discounts --out "$WORK/lineitem_v2.parquet"
run lh table import tpch.lineitem "$WORK/lineitem_v2.parquet" --ref alice.discounts --mode replace

say "the same query on both refs"
run lh query "$REVENUE" --ref main
run lh query "$REVENUE" --ref alice.discounts

say "what differs, and the branch's history"
run lh diff main alice.discounts
run lh log alice.discounts -n 2

say "publish: merge the branch into main, atomically"
run lh merge alice.discounts --into main -m "5 more points of discount on AIR shipments"
run lh query "$REVENUE" --ref main

say "time travel: main before the merge, by its commit"
run lh query "$REVENUE" --ref "main@$MAIN_BEFORE"
run lh table show tpch.lineitem

say "any engine on any ref: DuckDB attaches main through lh's Iceberg REST catalog, with a read-only token"
printf '%s$ export LH_TOKEN="$(lh token create --user duckdb --role reader)"%s\n' "$CYAN" "$PLAIN"
READER="$("$LH" token create --user duckdb --role reader)"
# (The reader's token for DuckDB alone: the pipeline below runs as the demo's admin.)
LH_TOKEN="$READER" run python3 scripts/demo_engine.py "$LH_ENDPOINT/iceberg" main "$REVENUE"

say "a pipeline, write-audit-publish: its outputs reach main only when every expectation passes"
LH="$LH" bash examples/wap/story.sh

say "done; the data is in $WORK (remove it with: rm -rf $WORK)"
cat <<EOF
To keep exploring it, start the server again on the demo's data:
    export LH_HOME=$LH_HOME LH_ENDPOINT=$LH_ENDPOINT
    lh server --data-dir $WORK/data --bind 127.0.0.1:$PORT &
    lh log --graph
EOF
