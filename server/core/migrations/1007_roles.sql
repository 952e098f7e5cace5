-- Roles an admin defines (`lh role set`): each grants actions on ref and namespace
-- patterns. `grants` is the JSON list of grant texts ("write,run on team-a.* in sales").
-- The built-in roles (reader, writer, maintainer, admin) are not stored. Times are Unix ms.
CREATE TABLE lh_roles (
    name       TEXT PRIMARY KEY,
    grants     TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
