-- The versioned catalog on SQLite. Objects (tree nodes, commits) are immutable and
-- stored under the BLAKE3 hash of their bytes; only `refs` rows change, by
-- compare-and-swap, and every change of a ref is appended to `ref_log`.
CREATE TABLE nodes (
    id   BLOB PRIMARY KEY,
    data BLOB NOT NULL
);

CREATE TABLE commits (
    id   BLOB PRIMARY KEY,
    data BLOB NOT NULL
);

CREATE TABLE refs (
    name       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('branch', 'tag')),
    head       BLOB NOT NULL,
    updated_at INTEGER NOT NULL
);

-- One row per ref change; `head` is NULL when the ref was deleted. Time travel
-- (`main@<time>`) reads the last row at or before the time.
CREATE TABLE ref_log (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    head BLOB,
    at   INTEGER NOT NULL
);

CREATE INDEX ref_log_by_name_time ON ref_log (name, at, seq);
