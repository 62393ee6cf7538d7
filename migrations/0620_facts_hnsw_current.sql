-- The facts' HNSW index held every version. A correction (the usual write after the first:
-- an extended start, an ended interval) closes the believed version, which writes a new tuple of
-- it with the same vector, and inserts the next version with that vector again: two HNSW inserts
-- per correction, each a graph search that grows with the index, into a graph filling with
-- copies of the same vectors. The search's cosine list reads current versions (past beliefs:
-- closed versions are ranked exactly, sql/70_search.sql), so the index now holds the current
-- versions only. (A new database builds it so in set_embedding_dim, sql/10_settings.sql.)
DO $$
BEGIN
    IF to_regclass('pgmemory.facts_embedding_hnsw') IS NOT NULL THEN
        DROP INDEX pgmemory.facts_embedding_hnsw;
        CREATE INDEX facts_embedding_hnsw ON pgmemory.facts USING hnsw (embedding vector_cosine_ops)
            WHERE upper_inf(recorded);
    END IF;
END
$$;
