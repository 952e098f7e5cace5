# lh's entry points. `make test` and `make demo` do all of their own set-up on a fresh
# Debian machine (packages, services); `.ci/run` calls `make test`.

CARGO ?= cargo
# Services the tests need, started (and installed) on demand; prints `export` lines.
SERVICES = eval "$$(scripts/services.sh postgres python pyiceberg-suite java bubblewrap chromium docker docker-remote docker-spare sshd s3 garage)"

.PHONY: libduckdb build install install-built test check fmt bench bench-diff bench-client bench-s3 bench-auth bench-team bench-catalog bench-tpch bench-pipeline bench-backfill bench-runtime bench-rest openapi demo images

## DuckDB's official shared library, which the build links (see scripts/libduckdb.sh).
libduckdb:
	scripts/libduckdb.sh

build: libduckdb
	$(CARGO) build --workspace

## `lh` and `lh-server` on PATH: PREFIX/bin (~/.local/bin unless PREFIX= says otherwise),
## DuckDB's library in PREFIX/lib/lh, where the binaries look for it.
PREFIX ?= $(HOME)/.local
install: libduckdb
	$(CARGO) build -p lh-cli -p lh-control-plane --bins
	@$(MAKE) --no-print-directory install-built

## What `make install` copies, once built (a test installs with it).
install-built:
	@dir="$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug" && \
	install -d "$(PREFIX)/bin" "$(PREFIX)/lib/lh" && \
	install -m 755 "$$dir/lh" "$$dir/lh-server" "$(PREFIX)/bin/" && \
	install -m 644 .libduckdb/libduckdb.so "$(PREFIX)/lib/lh/" && \
	echo "installed lh and lh-server in $(PREFIX)/bin, DuckDB's library in $(PREFIX)/lib/lh" && \
	case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "hint: $(PREFIX)/bin is not on your PATH: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

## The demo: a server on the embedded default, TPC-H data, branch, change, query,
## diff, merge, time travel, the REST catalog and a write-audit-publish pipeline (on
## the process runtime: bubblewrap is installed first).
demo: libduckdb
	eval "$$(scripts/services.sh python bubblewrap)" && $(CARGO) build -p lh-cli -p lh-control-plane --bins && \
	PATH="$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug:$$PATH" scripts/demo.sh

## The whole suite: unit, property, concurrency, crash and end-to-end tests, on SQLite
## and PostgreSQL; then the end-to-end suite again on an S3 warehouse (a real S3 server
## on loopback); then the tests of tables, queries, runs, refs and the REST catalog
## with two servers on one PostgreSQL database and one bucket, each CLI call sent to
## the next server. The `lh` binary the end-to-end tests run is built with the same
## targets (so the same dependency features) as the tests, so nothing compiles twice.
test: libduckdb
	$(SERVICES) && $(CARGO) build --workspace --all-targets && INSTA_UPDATE=no $(CARGO) test --workspace --no-fail-fast && \
	LH_TEST_WAREHOUSE=s3 INSTA_UPDATE=no $(CARGO) test --workspace --test e2e --no-fail-fast && \
	LH_TEST_WAREHOUSE=s3 LH_TEST_SERVERS=2 INSTA_UPDATE=no $(CARGO) test --workspace --test e2e --no-fail-fast -- \
	  basics:: tables:: query:: runs:: refs:: rest::

## Formatting and lints, as CI wants them.
check: libduckdb
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Every benchmark of BENCHMARKS.md (long: the catalog runs alone take about an hour).
bench: bench-catalog bench-tpch bench-pipeline bench-backfill bench-runtime bench-rest bench-s3 bench-auth bench-team bench-tables bench-client bench-diff

## Partitioned tables and maintenance: pruning, small appends before and after compaction,
## eight concurrent appends against one writer.
## Row diffs against DuckDB's full EXCEPT ALL of two versions of TPC-H lineitem, and
## bisect over 1,000 commits.
bench-diff: libduckdb
	$(SERVICES) && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin diff-bench -- $(DIFF_BENCH_ARGS)

bench-tables: libduckdb
	$(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin table-bench -- $(or $(TABLE_BENCH_ARGS),--appends 1000 --auto-compact 8 --auto-appends 10000 --expire-every 250)

## Two servers on one PostgreSQL: commits/s with one and two, and the take-over of a run.
bench-team: libduckdb
	eval "$$(scripts/services.sh postgres python bubblewrap)" && \
	$(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin team-bench -- $(TEAM_BENCH_ARGS)

## The cost of authentication per request: tokens against --no-auth, in one run.
bench-auth: libduckdb
	$(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin auth-bench -- $(AUTH_BENCH_ARGS)

## Local folder against S3 (Garage on loopback): TPC-H import and queries, the jaffle shop.
bench-s3: libduckdb
	$(SERVICES) && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin s3-bench -- $(S3_BENCH_ARGS)

## The Python client: lh.Client.query of lineitem columns against DuckDB's Python package.
bench-client: libduckdb
	eval "$$(scripts/services.sh python)" && \
	$(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin client-bench -- $(CLIENT_BENCH_ARGS)

bench-rest: libduckdb
	$(SERVICES) && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin rest-bench -- $(REST_BENCH_ARGS)

bench-runtime: libduckdb
	$(SERVICES) && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin runtime-bench

bench-pipeline: libduckdb
	$(SERVICES) && eval "$$(scripts/services.sh dbt)" && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin pipeline-bench -- $(PIPELINE_BENCH_ARGS)

## A 30-day backfill of examples/daily_shop against dbt microbatch models, then one day changed.
bench-backfill: libduckdb
	$(SERVICES) && eval "$$(scripts/services.sh dbt)" && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin backfill-bench -- $(BACKFILL_BENCH_ARGS)

bench-tpch: libduckdb
	$(SERVICES) && $(CARGO) build -q -p lh-cli -p lh-control-plane -p lh-bench --bins && \
	$(CARGO) run -q -p lh-bench --bin tpch-bench -- $(TPCH_BENCH_ARGS)

bench-catalog: libduckdb
	$(SERVICES) && $(CARGO) run -q -p lh-bench --bin catalog-bench -- $(CATALOG_BENCH_ARGS)

## The runtime image of pipeline functions, built without a registry (cached).
images:
	scripts/services.sh docker

## Regenerate control-plane/openapi.json from the code (a test fails when it drifts).
openapi: libduckdb
	LH_UPDATE_OPENAPI=1 $(CARGO) test -q -p lh-control-plane --lib committed_openapi_document_is_current
