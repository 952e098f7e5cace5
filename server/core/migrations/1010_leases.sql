-- Several servers on one catalog: the server driving a run holds a lease on it, renewed
-- by heartbeats; another takes a run over once its lease ran out. `start` keeps what
-- the driver needs to resume it (its starter, whether it publishes, reused outputs).
ALTER TABLE lh_runs ADD COLUMN owner TEXT;
ALTER TABLE lh_runs ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE lh_runs ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
ALTER TABLE lh_runs ADD COLUMN cancel_requested BIGINT NOT NULL DEFAULT 0;
ALTER TABLE lh_runs ADD COLUMN start TEXT;

CREATE INDEX lh_runs_by_status ON lh_runs (status, lease_until);

-- Every server of a catalog seals secrets with one key: a value sealed with it, which
-- a server with another key cannot open, so it refuses to start.
CREATE TABLE lh_server_key (
    id    BIGINT PRIMARY KEY,
    check_value TEXT NOT NULL
);
