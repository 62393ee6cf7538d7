-- Tenancy in the database (issue 10.5): which groups each database role may see. Row-level
-- security on every table (sql/catalog/tenancy.sql) shows a restricted role only the rows of
-- its granted groups ('*' = every group), narrowed per transaction by the setting
-- pgmemory.groups, which can narrow but never widen. Rows are keyed by the role's name and
-- managed by the owner (`pgmemory grant`); a role sees only its own rows.
CREATE TABLE pgmemory.role_groups (
    role_name  name NOT NULL,
    group_id   text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, group_id)
);
