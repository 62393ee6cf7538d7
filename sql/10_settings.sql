-- Per-database settings: the embedding dimension is fixed once and enforced.

CREATE OR REPLACE FUNCTION pgmemory_internal.setting(p_key text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT value FROM pgmemory.settings WHERE key = p_key
$$;

-- Fix the embedding dimension of this database: types every embedding column
-- as vector(p_dim) and builds the HNSW (cosine) indexes (the facts' over current versions only:
-- a correction closes a version and writes the next with the same vector). Idempotent for the
-- same dimension; a different one is an error naming both.
CREATE OR REPLACE FUNCTION pgmemory_internal.set_embedding_dim(p_dim integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    current_dim integer := (pgmemory_internal.setting('embedding_dim'))::integer;
    col record;
BEGIN
    IF p_dim IS NULL OR p_dim < 1 OR p_dim > 16000 THEN
        RAISE EXCEPTION 'embedding dimension must be between 1 and 16000, got %', p_dim
            USING ERRCODE = '22023';
    END IF;
    IF current_dim IS NOT NULL AND current_dim <> p_dim THEN
        RAISE EXCEPTION 'embedding dimension mismatch: this database stores %-d embeddings, the embedder produces %-d',
            current_dim, p_dim
            USING ERRCODE = '22023',
                  HINT = 'use the embedder this database was initialised with, or re-embed into a new database';
    END IF;
    -- Every embedding column, typed; the searched ones indexed. Columns added by later
    -- migrations are typed on the next init; what is already typed and indexed is not touched
    -- (no lock taken: init runs while writers ingest).
    FOR col IN
        SELECT c.*, format_type(a.atttypid, a.atttypmod) AS typed FROM (VALUES
            ('episodes', 'embedding', true, ''), ('entity_name_vectors', 'name_embedding', true, ''),
            ('facts', 'embedding', true, 'WHERE upper_inf(recorded)'), ('communities', 'name_embedding', true, ''),
            ('fact_claims', 'embedding', false, '')) AS c(tbl, colname, searched, predicate)
        JOIN pg_attribute a ON a.attrelid = to_regclass('pgmemory.' || c.tbl) AND a.attname = c.colname
    LOOP
        IF col.typed <> format('vector(%s)', p_dim) THEN
            EXECUTE format('ALTER TABLE pgmemory.%I ALTER COLUMN %I TYPE vector(%s)',
                           col.tbl, col.colname, p_dim);
        END IF;
        IF col.searched AND to_regclass(format('pgmemory.%I', col.tbl || '_' || col.colname || '_hnsw')) IS NULL THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON pgmemory.%I USING hnsw (%I vector_cosine_ops) %s',
                           col.tbl || '_' || col.colname || '_hnsw', col.tbl, col.colname, col.predicate);
        END IF;
    END LOOP;
    IF current_dim IS NULL THEN
        INSERT INTO pgmemory.settings (key, value) VALUES ('embedding_dim', to_jsonb(p_dim));
    END IF;
    RETURN p_dim;
END
$$;
