-- A check's run (a protected branch's merge check, `lh bisect --expectation`): only
-- expectations, on the tables at a commit, publishing nothing. It is no project's last
-- run: plans, lineage and merge warnings look past it, and it is never replayed.
ALTER TABLE lh_runs ADD COLUMN is_check BIGINT NOT NULL DEFAULT 0;

CREATE INDEX lh_runs_by_project ON lh_runs (project, target, status);
