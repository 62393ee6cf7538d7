-- Per-database settings: the embedding dimension is fixed once and enforced.

CREATE OR REPLACE FUNCTION pgmemory.setting(p_key text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT value FROM pgmemory.settings WHERE key = p_key
$$;

-- Fix the embedding dimension of this database: types every embedding column
-- as vector(p_dim) and builds the HNSW (cosine) indexes. Idempotent for the
-- same dimension; a different one is an error naming both.
CREATE OR REPLACE FUNCTION pgmemory.set_embedding_dim(p_dim integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    current_dim integer := (pgmemory.setting('embedding_dim'))::integer;
    col record;
BEGIN
    IF p_dim IS NULL OR p_dim < 1 OR p_dim > 16000 THEN
        RAISE EXCEPTION 'embedding dimension must be between 1 and 16000, got %', p_dim
            USING ERRCODE = '22023';
    END IF;
    IF current_dim IS NOT NULL THEN
        IF current_dim <> p_dim THEN
            RAISE EXCEPTION 'embedding dimension mismatch: this database stores %-d embeddings, the embedder produces %-d',
                current_dim, p_dim
                USING ERRCODE = '22023',
                      HINT = 'use the embedder this database was initialised with, or re-embed into a new database';
        END IF;
        RETURN current_dim;
    END IF;
    FOR col IN
        SELECT * FROM (VALUES
            ('episodes', 'embedding'), ('entities', 'name_embedding'),
            ('facts', 'embedding'), ('communities', 'name_embedding')) AS c(tbl, colname)
    LOOP
        EXECUTE format('ALTER TABLE pgmemory.%I ALTER COLUMN %I TYPE vector(%s)',
                       col.tbl, col.colname, p_dim);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmemory.%I USING hnsw (%I vector_cosine_ops)',
                       col.tbl || '_' || col.colname || '_hnsw', col.tbl, col.colname);
    END LOOP;
    -- Claims keep the embedding of the fact they may open (not searched: no index).
    EXECUTE format('ALTER TABLE pgmemory.fact_claims ALTER COLUMN embedding TYPE vector(%s)', p_dim);
    INSERT INTO pgmemory.settings (key, value) VALUES ('embedding_dim', to_jsonb(p_dim));
    RETURN p_dim;
END
$$;
