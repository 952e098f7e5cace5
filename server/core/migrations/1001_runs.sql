-- Pipeline runs (the server's own tables, next to the catalog's; the same SQL runs on
-- SQLite and PostgreSQL). Versions from 1001 keep clear of the catalog's migrations.
CREATE TABLE lh_runs (
    id           TEXT PRIMARY KEY,
    project      TEXT NOT NULL,
    author       TEXT NOT NULL,
    target       TEXT NOT NULL,
    run_branch   TEXT NOT NULL,
    code_hash    TEXT NOT NULL,
    input_commit TEXT NOT NULL,
    params       TEXT NOT NULL,
    plan         TEXT NOT NULL,
    no_cache     BIGINT NOT NULL,
    strict       BIGINT NOT NULL,
    status       TEXT NOT NULL,
    error        TEXT,
    merge_commit TEXT,
    environments TEXT NOT NULL,
    rerun_of     TEXT,
    created_at   BIGINT NOT NULL,
    finished_at  BIGINT
);

CREATE INDEX lh_runs_by_time ON lh_runs (created_at);

CREATE TABLE lh_run_nodes (
    run_id      TEXT NOT NULL,
    node        TEXT NOT NULL,
    position    BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    language    TEXT NOT NULL,
    location    TEXT NOT NULL,
    inputs      TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  BIGINT,
    finished_at BIGINT,
    rows_written BIGINT,
    cached      BIGINT NOT NULL,
    fingerprint TEXT,
    output      TEXT,
    error       TEXT,
    traceback   TEXT,
    detail      TEXT,
    log         TEXT NOT NULL,
    PRIMARY KEY (run_id, node)
);

-- Memoization: a node's fingerprint to the output snapshot it made.
CREATE TABLE lh_memo (
    fingerprint TEXT PRIMARY KEY,
    table_name  TEXT NOT NULL,
    pointer     TEXT NOT NULL,
    run_id      TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
