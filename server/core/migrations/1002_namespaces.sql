-- Namespaces created through the Iceberg REST catalog, with their properties. They are
-- not versioned: a created namespace is visible on every ref (and a namespace also
-- exists wherever it holds tables).
CREATE TABLE lh_namespaces (
    name       TEXT PRIMARY KEY,
    properties TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
