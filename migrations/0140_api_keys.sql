-- API keys of the REST and MCP servers: only a SHA-256 of each secret is stored.
-- A key may read the groups in read_groups and read and write those in
-- write_groups; '*' stands for every group.
CREATE TABLE pgmemory.api_keys (
    id           uuid PRIMARY KEY,
    name         text NOT NULL,
    secret_hash  bytea NOT NULL UNIQUE,
    read_groups  text[] NOT NULL DEFAULT '{}',
    write_groups text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
