-- BFS through AGE: entities within p_depth hops of p_seeds over the mirrored
-- (currently believed) RELATES_TO edges, with their distance. The same answer
-- as pgmemory.bfs_entities() without time arguments; kept for comparison and
-- for users who want Cypher (bench/ measures which is faster). Seeds must be
-- entities of p_groups (refused otherwise), and only entities of p_groups are
-- returned. Each group has vertices of its own (an id another group reuses is
-- another vertex), so the walk starts from the seeds' vertices in p_groups only
-- (the groups are a Cypher parameter, never spliced into the query).

CREATE OR REPLACE FUNCTION pgmemory.bfs_entities_age(p_groups text[], p_seeds uuid[], p_depth integer)
RETURNS TABLE (entity_id uuid, distance integer)
LANGUAGE plpgsql
SET search_path = ag_catalog, pgmemory, public, pg_temp
AS $$
DECLARE
    -- Seeds are typed uuids, so their text form is safe inside the Cypher literal.
    seed_list text := (SELECT coalesce(string_agg(format('''%s''', s), ', '), '')
                         FROM unnest(p_seeds) AS s);
BEGIN
    IF p_depth < 1 OR p_depth > 5 THEN
        RAISE EXCEPTION 'BFS depth must be between 1 and 5, got %', p_depth USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.require_group_entities(p_groups, p_seeds, 'bfs seed');
    LOAD 'age';
    RETURN QUERY EXECUTE format($q$
        SELECT DISTINCT s, 0 FROM unnest($1::uuid[]) s WHERE s IS NOT NULL
        UNION ALL
        SELECT r.id, r.d FROM (
            SELECT btrim(u::text, '"')::uuid AS id, min(d::text::integer)::integer AS d
              FROM ag_catalog.cypher('pgmemory_graph', $c$
                     MATCH p = (s:Entity)-[:RELATES_TO*1..%s]-(t:Entity)
                     WHERE s.uuid IN [%s] AND s.group_id IN $groups AND NOT (t.uuid IN [%s])
                     RETURN t.uuid, length(p) $c$, $3) AS (u ag_catalog.agtype, d ag_catalog.agtype)
             GROUP BY 1) r
         WHERE EXISTS (SELECT 1 FROM pgmemory.entities e WHERE e.id = r.id AND e.group_id = ANY ($2)) $q$,
        p_depth, seed_list, seed_list)
    USING p_seeds, p_groups, jsonb_build_object('groups', to_jsonb(p_groups))::text::ag_catalog.agtype;
END
$$;
