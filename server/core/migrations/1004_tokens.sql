-- Bearer tokens. The secret is never stored: only its BLAKE3 hash (a token is 256
-- random bits, so a fast hash suffices). Times are Unix milliseconds.
CREATE TABLE lh_tokens (
    id           TEXT PRIMARY KEY,
    secret_hash  TEXT NOT NULL,
    name         TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    role         TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    last_used_at BIGINT
);
