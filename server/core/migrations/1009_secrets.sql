-- Pipeline secrets (`lh secret set`): each value sealed with the server key, never
-- stored in the clear; `version` grows with each set (a run's cache key holds it, never
-- the value); `refs` is the pattern of the branches whose runs get it. Times are Unix ms.
CREATE TABLE lh_secrets (
    name       TEXT PRIMARY KEY,
    version    BIGINT NOT NULL,
    sealed     TEXT NOT NULL,
    refs       TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
