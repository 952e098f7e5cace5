#!/usr/bin/env bash
# The write-audit-publish story, end to end, against the lh server of LH_ENDPOINT:
# a clean day publishes; an upstream change injects null billing ids, the run's
# expectation catches it and main is untouched; the kept branch shows the bad rows;
# the fixed code replays the same run onto the same input data, and it publishes.
# Every step names main: the story is about what reaches it, whatever the active branch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
LH="${LH:-lh}"
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
say() { printf '\n# %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

python3 "$here/generate.py" --out "$data" >/dev/null

say "day 1: payments arrive and the pipeline publishes"
run "$LH" table import billing_raw.payments "$data/day1.csv" --ref main
run "$LH" run "$here/pipeline" --ref main
run "$LH" query "select count(*) AS bills, sum(revenue) AS revenue from billing.daily_revenue" --ref main

say "day 2: an upstream change drops billing ids; the expectation stops the publish"
run "$LH" table import billing_raw.payments "$data/day2.csv" --ref main --mode append
before="$("$LH" branch ls -o csv | awk -F, '$2=="main" {print $3}')"
if "$LH" run "$here/pipeline" --ref main; then echo "the run should have failed"; exit 1; fi
failed="$("$LH" runs ls -o csv | sed -n 2p | cut -d, -f1)"
after="$("$LH" branch ls -o csv | awk -F, '$2=="main" {print $3}')"
[ "$before" = "$after" ] || { echo "main moved"; exit 1; }
echo "main is still at $after: the dashboards never saw the bad rows"

say "inspect the run's kept branch"
branch="$("$LH" runs show "$failed" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_branch"])')"
run "$LH" query "select count(*) AS unbilled from billing.payments_clean where bill_id is null" --ref "$branch"

say "fix the code and replay the same run: same input commit, new code"
run "$LH" rerun "$failed" --code "$here/fixed"
run "$LH" query "select count(*) AS bills, sum(revenue) AS revenue from billing.daily_revenue" --ref main
run "$LH" query "select count(*) AS held_back from billing.unbilled_payments" --ref main
