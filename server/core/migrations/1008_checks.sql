-- Checks a protected branch can require before a merge moves it (`lh check`), the
-- branches requiring each, and webhooks told of merges after the fact (`lh hook`).
-- Signing secrets are sealed with the server key (auth/key.rs). Times are Unix ms.
CREATE TABLE lh_checks (
    name       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    target     TEXT NOT NULL,
    secret     TEXT,
    timeout_ms BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE TABLE lh_branch_checks (
    branch     TEXT NOT NULL,
    check_name TEXT NOT NULL,
    PRIMARY KEY (branch, check_name)
);
CREATE TABLE lh_hooks (
    name       TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    refs       TEXT NOT NULL,
    secret     TEXT,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
