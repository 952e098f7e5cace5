-- The merge checks recorded before 1011 were check runs too: the runs that were not to
-- publish. (A new migration, not an edit of 1011: a database that applied it keeps its
-- checksum.)
UPDATE lh_runs SET is_check = 1 WHERE start LIKE '%"publish":false%';

-- `projects_on` filters by target, not project.
CREATE INDEX lh_runs_by_target ON lh_runs (target, status, project);
