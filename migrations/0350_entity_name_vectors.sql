-- Entity name vectors in a table of their own (issue 9). An entity row is rewritten on every
-- summary change (its full-text vector is GIN-indexed, so the update is never HOT), and each
-- rewrite re-inserted the unchanged name vector into the entities' HNSW index: about 1.3 useless
-- HNSW inserts per ingested episode. A row here is written only when a name is embedded.
-- The column is typed and its HNSW index built by pgmemory_internal.set_embedding_dim (init).
CREATE TABLE pgmemory.entity_name_vectors (
    group_id       text NOT NULL,
    entity_id      uuid NOT NULL,
    name_embedding vector NOT NULL,
    PRIMARY KEY (group_id, entity_id),
    FOREIGN KEY (group_id, entity_id) REFERENCES pgmemory.entities (group_id, id) ON DELETE CASCADE
);

-- On a Citus cluster the entities are distributed: the new table joins their co-location group
-- before it is filled (a local table cannot reference a distributed one).
DO $$
DECLARE
    distributed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition'
                ' WHERE logicalrelid = ''pgmemory.entities''::regclass)' INTO distributed;
    END IF;
    IF distributed THEN
        ALTER TABLE pgmemory.entity_name_vectors
            DROP CONSTRAINT entity_name_vectors_group_id_entity_id_fkey;
        EXECUTE 'SELECT create_distributed_table(''pgmemory.entity_name_vectors'', ''group_id'','
                ' colocate_with => ''pgmemory.episodes'')';
        ALTER TABLE pgmemory.entity_name_vectors
            ADD FOREIGN KEY (group_id, entity_id) REFERENCES pgmemory.entities (group_id, id) ON DELETE CASCADE;
    END IF;
END $$;

INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)
SELECT group_id, id, name_embedding FROM pgmemory.entities WHERE name_embedding IS NOT NULL;

DROP INDEX IF EXISTS pgmemory.entities_name_embedding_hnsw;
ALTER TABLE pgmemory.entities DROP COLUMN name_embedding;
