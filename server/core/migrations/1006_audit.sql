-- The audit log: every request that changes something (or tried to), with who, when,
-- from where and what. Times are Unix milliseconds; ids are UUIDv7 (time-ordered).
CREATE TABLE lh_audit (
    id         TEXT PRIMARY KEY,
    at         BIGINT NOT NULL,
    user_name  TEXT NOT NULL,
    role       TEXT NOT NULL,
    token_id   TEXT,
    action     TEXT NOT NULL,
    method     TEXT NOT NULL,
    route      TEXT NOT NULL,
    path       TEXT NOT NULL,
    status     INTEGER NOT NULL,
    remote     TEXT,
    request_id TEXT
);
CREATE INDEX lh_audit_at ON lh_audit (at);
