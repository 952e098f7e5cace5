-- Branches that change only by a merge (`lh branch protect`). Times are Unix ms.
CREATE TABLE lh_protected_branches (
    name         TEXT PRIMARY KEY,
    protected_by TEXT NOT NULL,
    protected_at BIGINT NOT NULL
);
