-- φ search: candidates from cosine (pgvector HNSW), full text (BM25 via
-- pg_textsearch, or tsvector ranking) and BFS over facts, entities,
-- communities and episodes, with every filter applied, in one call.
-- Returns one row per (kind, item) with its rank in each method and the
-- details the caller needs, so a search is one round trip.

-- An OR query of the query's lexemes (plainto_tsquery would AND them).
CREATE OR REPLACE FUNCTION pgmemory.or_tsquery(p_query text)
RETURNS tsquery LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery
      FROM unnest(tsvector_to_array(to_tsvector('english', p_query))) AS lexeme
$$;

-- Refuse ids that are not entities of the caller's groups (SQLSTATE 22023), so
-- no id of another group can enter a query. The message is the same for an id
-- of another group and for one that does not exist: it reveals nothing.
CREATE OR REPLACE FUNCTION pgmemory.require_group_entities(p_groups text[], p_ids uuid[], p_what text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    bad uuid;
BEGIN
    SELECT s INTO bad FROM unnest(p_ids) AS s
     WHERE s IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgmemory.entities e WHERE e.id = s AND e.group_id = ANY (p_groups))
     LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '% % is not an entity of the searched groups', p_what, bad USING ERRCODE = '22023';
    END IF;
END
$$;

-- Entities within p_depth hops of p_seeds over believed facts visible at the
-- given time point(s), with their distance (no AGE needed). Seeds must be
-- entities of p_groups (refused otherwise). Expands one
-- frontier per hop, never revisiting an entity; p_max_entities (NULL: no
-- limit) stops the walk once that many entities are reached, which keeps the
-- nearest ones because BFS visits them in distance order.
CREATE OR REPLACE FUNCTION pgmemory.bfs_entities(
    p_groups text[], p_seeds uuid[], p_depth integer,
    p_as_of timestamptz DEFAULT NULL, p_known_at timestamptz DEFAULT NULL,
    p_max_entities integer DEFAULT NULL)
RETURNS TABLE (entity_id uuid, distance integer) LANGUAGE plpgsql STABLE AS $$
DECLARE
    seen uuid[] := ARRAY(SELECT DISTINCT s FROM unnest(p_seeds) AS s WHERE s IS NOT NULL);
    frontier uuid[] := seen;
    d integer := 0;
BEGIN
    PERFORM pgmemory.require_group_entities(p_groups, seen, 'bfs seed');
    RETURN QUERY SELECT s, 0 FROM unnest(seen) AS s;
    WHILE d < p_depth AND cardinality(frontier) > 0
          AND (p_max_entities IS NULL OR cardinality(seen) < p_max_entities) LOOP
        d := d + 1;
        frontier := ARRAY(
            SELECT DISTINCT x.n FROM (
                SELECT f.target_id AS n FROM pgmemory.facts f
                 WHERE f.source_id = ANY (frontier) AND f.group_id = ANY (p_groups)
                   AND (CASE WHEN p_known_at IS NULL THEN upper_inf(f.recorded) ELSE f.recorded @> p_known_at END)
                   AND pgmemory.holds_at(f.valid, f.is_event, p_as_of)
                UNION ALL
                SELECT f.source_id FROM pgmemory.facts f
                 WHERE f.target_id = ANY (frontier) AND f.group_id = ANY (p_groups)
                   AND (CASE WHEN p_known_at IS NULL THEN upper_inf(f.recorded) ELSE f.recorded @> p_known_at END)
                   AND pgmemory.holds_at(f.valid, f.is_event, p_as_of)) x
             WHERE x.n <> ALL (seen));
        seen := seen || frontier;
        RETURN QUERY SELECT n, d FROM unnest(frontier) AS n;
    END LOOP;
END
$$;

-- Is a fact version in view: believed at p_known_at (now when NULL, or any time
-- when superseded versions are wanted), valid at p_point (any time when NULL),
-- of one of p_relations (any when empty), with its four time fields inside
-- p_bounds (see search_candidates). Inlined by the planner.
CREATE OR REPLACE FUNCTION pgmemory.fact_in_view(
    p_valid tstzrange, p_recorded tstzrange, p_relation text, p_point timestamptz,
    p_known_at timestamptz, p_superseded boolean, p_relations text[], p_bounds timestamptz[],
    p_event boolean DEFAULT false)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p_known_at IS NOT NULL THEN p_recorded @> p_known_at
                 ELSE p_superseded OR upper_inf(p_recorded) END)
       AND pgmemory.holds_at(p_valid, p_event, p_point)
       AND (cardinality(p_relations) = 0 OR p_relation = ANY (p_relations))
       AND (p_bounds[1] IS NULL OR lower(p_valid) >= p_bounds[1])
       AND (p_bounds[2] IS NULL OR lower(p_valid) <= p_bounds[2])
       AND (p_bounds[3] IS NULL OR upper(p_valid) >= p_bounds[3])
       AND (p_bounds[4] IS NULL OR upper(p_valid) <= p_bounds[4])
       AND (p_bounds[5] IS NULL OR lower(p_recorded) >= p_bounds[5])
       AND (p_bounds[6] IS NULL OR lower(p_recorded) <= p_bounds[6])
       AND (p_bounds[7] IS NULL OR upper(p_recorded) >= p_bounds[7])
       AND (p_bounds[8] IS NULL OR upper(p_recorded) <= p_bounds[8])
$$;

CREATE OR REPLACE FUNCTION pgmemory.search_candidates(
    p_groups text[], p_query text, p_embedding vector, p_opts jsonb)
RETURNS TABLE (kind text, id uuid, version_id bigint, ranks jsonb, detail jsonb)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
AS $$
#variable_conflict use_column
DECLARE
    k integer := coalesce((p_opts->>'candidates')::integer, 30);
    kinds text[] := coalesce(NULLIF(ARRAY(SELECT jsonb_array_elements_text(p_opts->'kinds')), '{}'),
                             ARRAY['facts', 'entities', 'communities', 'episodes']);
    methods text[] := coalesce(NULLIF(ARRAY(SELECT jsonb_array_elements_text(p_opts->'methods')), '{}'),
                               ARRAY['cosine', 'fulltext']);
    as_of timestamptz := (p_opts->>'as_of')::timestamptz;
    known_at timestamptz := (p_opts->>'known_at')::timestamptz;
    -- An as-of search shows entities through the slice of facts (sql/65_entities_as_of.sql).
    as_of_view boolean := as_of IS NOT NULL OR known_at IS NOT NULL;
    include_invalid boolean := coalesce((p_opts->>'include_invalidated')::boolean, false);
    include_superseded boolean := coalesce((p_opts->>'include_superseded')::boolean, false);
    relations text[] := ARRAY(SELECT jsonb_array_elements_text(p_opts->'relation_types'));
    want_labels text[] := ARRAY(SELECT jsonb_array_elements_text(p_opts->'labels'));
    -- valid_at, invalid_at, created_at, expired_at ranges: [from, to] each (NULL = open)
    bounds timestamptz[] := ARRAY[
        (p_opts->>'valid_at_from')::timestamptz, (p_opts->>'valid_at_to')::timestamptz,
        (p_opts->>'invalid_at_from')::timestamptz, (p_opts->>'invalid_at_to')::timestamptz,
        (p_opts->>'created_at_from')::timestamptz, (p_opts->>'created_at_to')::timestamptz,
        (p_opts->>'expired_at_from')::timestamptz, (p_opts->>'expired_at_to')::timestamptz];
    bfs_depth integer := coalesce((p_opts->>'bfs_depth')::integer, 2);
    bfs_recent integer := coalesce((p_opts->>'bfs_recent_episodes')::integer, 3);
    bfs_max integer := coalesce((p_opts->>'bfs_max_entities')::integer, 2000);
    seeds uuid[] := ARRAY(SELECT jsonb_array_elements_text(p_opts->'bfs_seeds')::uuid);
    center uuid := (p_opts->>'center')::uuid;
    point timestamptz;
    tq tsquery := pgmemory.or_tsquery(p_query);
BEGIN
    -- Every id the caller passes must be an entity of the searched groups.
    PERFORM pgmemory.require_group_entities(p_groups, seeds, 'bfs seed');
    PERFORM pgmemory.require_group_entities(p_groups, ARRAY[center], 'center');
    -- Without an explicit valid-time point, "now" unless ended facts are wanted.
    point := coalesce(as_of, CASE WHEN include_invalid THEN NULL ELSE now() END);
    IF 'bfs' = ANY (methods) AND cardinality(seeds) = 0 THEN
        seeds := ARRAY(
            SELECT DISTINCT m.entity_id FROM pgmemory.episode_mentions m
             WHERE (m.group_id, m.episode_id) IN (
                SELECT r.group_id, r.id FROM unnest(p_groups) AS g (gid)
                CROSS JOIN LATERAL (
                    SELECT e.group_id, e.id, e.valid_at FROM pgmemory.episodes e
                     WHERE e.group_id = g.gid AND e.status = 'done'
                       AND (known_at IS NULL OR e.recorded_at <= known_at)
                     ORDER BY e.valid_at DESC LIMIT bfs_recent) r
                 ORDER BY r.valid_at DESC LIMIT bfs_recent));
    END IF;

    RETURN QUERY
    WITH fact_cos AS (
        SELECT c.version_id, row_number() OVER (ORDER BY c.d)::integer AS r FROM (
            SELECT f.version_id, f.embedding <=> p_embedding AS d
              FROM pgmemory.facts f
             WHERE 'facts' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL
               AND f.group_id = ANY (p_groups)
               AND pgmemory.fact_in_view(f.valid, f.recorded, f.relation, point, known_at,
                                         include_superseded, relations, bounds, f.is_event)
             ORDER BY f.embedding <=> p_embedding
             LIMIT k) c
    ),
    fact_text AS (
        SELECT h.version_id, row_number() OVER (ORDER BY h.score DESC, h.version_id)::integer AS r
          FROM pgmemory.fact_text_hits(p_groups, p_query, k, point, known_at, include_superseded,
                                       relations, bounds) h
         WHERE 'facts' = ANY (kinds) AND 'fulltext' = ANY (methods) AND h.score > 0
    ),
    reach AS MATERIALIZED (
        SELECT b.entity_id, b.distance
          FROM pgmemory.bfs_entities(p_groups, seeds, bfs_depth, point, known_at, bfs_max) b
         WHERE 'bfs' = ANY (methods) AND cardinality(seeds) > 0
    ),
    fact_bfs AS (
        SELECT c.version_id, row_number() OVER (ORDER BY c.dist, c.rec DESC)::integer AS r FROM (
            SELECT f.version_id, least(rs.distance, rt.distance) AS dist, lower(f.recorded) AS rec
              FROM pgmemory.facts f
              JOIN reach rs ON rs.entity_id = f.source_id
              JOIN reach rt ON rt.entity_id = f.target_id
             WHERE 'facts' = ANY (kinds) AND f.group_id = ANY (p_groups)
               AND pgmemory.fact_in_view(f.valid, f.recorded, f.relation, point, known_at,
                                         include_superseded, relations, bounds, f.is_event)
             ORDER BY 2, 3 DESC
             LIMIT k) c
    ),
    fact_hits AS (
        SELECT h.version_id, jsonb_object_agg(h.method, h.r) AS ranks FROM (
            SELECT version_id, 'cosine' AS method, r FROM fact_cos
            UNION ALL SELECT version_id, 'fulltext', r FROM fact_text
            UNION ALL SELECT version_id, 'bfs', r FROM fact_bfs) h
         GROUP BY h.version_id
    ),
    ent_cos AS (
        SELECT c.id, row_number() OVER (ORDER BY c.d)::integer AS r FROM (
            SELECT e.id, e.name_embedding <=> p_embedding AS d FROM pgmemory.entities e
             WHERE 'entities' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL
               AND e.group_id = ANY (p_groups)
               AND (known_at IS NULL OR e.created_at <= known_at)
               AND (e.retired_at IS NULL OR e.retired_at > known_at)
               AND (cardinality(want_labels) = 0 OR e.labels && want_labels)
               AND (NOT as_of_view OR EXISTS (SELECT FROM pgmemory.slice_facts_of(e.group_id, e.id, point, known_at)))
             ORDER BY e.name_embedding <=> p_embedding
             LIMIT k) c
    ),
    ent_text AS (
        SELECT h.id, row_number() OVER (ORDER BY h.score DESC, h.id)::integer AS r
          FROM pgmemory.entity_text_hits(p_groups, p_query, k, known_at, want_labels) h
         WHERE NOT as_of_view AND 'entities' = ANY (kinds) AND 'fulltext' = ANY (methods) AND h.score > 0
        UNION ALL
        SELECT h.id, row_number() OVER (ORDER BY h.score DESC, h.id)::integer AS r
          FROM pgmemory.entity_text_hits_as_of(
                   p_groups, p_query, k, point, known_at, want_labels,
                   CASE WHEN 'facts' = ANY (kinds) AND NOT include_superseded
                        THEN ARRAY(SELECT fact_text.version_id FROM fact_text) END) h
         WHERE as_of_view AND 'entities' = ANY (kinds) AND 'fulltext' = ANY (methods) AND h.score > 0
    ),
    ent_bfs AS (
        SELECT rc.entity_id AS id, row_number() OVER (ORDER BY rc.distance, rc.entity_id)::integer AS r
          FROM reach rc JOIN pgmemory.entities e ON e.id = rc.entity_id
         WHERE 'entities' = ANY (kinds) AND e.group_id = ANY (p_groups)
           AND (known_at IS NULL OR e.created_at <= known_at)
           AND (e.retired_at IS NULL OR e.retired_at > known_at)
           AND (cardinality(want_labels) = 0 OR e.labels && want_labels)
           AND (NOT as_of_view OR EXISTS (SELECT FROM pgmemory.slice_facts_of(e.group_id, e.id, point, known_at)))
         LIMIT k
    ),
    ent_hits AS (
        SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks FROM (
            SELECT ent_cos.id, 'cosine' AS method, r FROM ent_cos
            UNION ALL SELECT ent_text.id, 'fulltext', r FROM ent_text
            UNION ALL SELECT ent_bfs.id, 'bfs', r FROM ent_bfs) h
         GROUP BY h.id
    ),
    com_hits AS (
        SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks FROM (
            SELECT c.id, 'cosine' AS method, row_number() OVER (ORDER BY c.d)::integer AS r FROM (
                SELECT cm.id, cm.name_embedding <=> p_embedding AS d FROM pgmemory.communities cm
                 WHERE 'communities' = ANY (kinds) AND NOT as_of_view AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL
                   AND cm.group_id = ANY (p_groups) AND (known_at IS NULL OR cm.created_at <= known_at)
                 ORDER BY cm.name_embedding <=> p_embedding LIMIT k) c
            UNION ALL
            SELECT c.id, 'fulltext', row_number() OVER (ORDER BY c.s DESC)::integer FROM (
                SELECT cm.id, ts_rank_cd(cm.tsv, tq) AS s FROM pgmemory.communities cm
                 WHERE 'communities' = ANY (kinds) AND NOT as_of_view AND 'fulltext' = ANY (methods)
                   AND cm.group_id = ANY (p_groups) AND cm.tsv @@ tq
                   AND (known_at IS NULL OR cm.created_at <= known_at)
                 ORDER BY 2 DESC LIMIT k) c) h
         GROUP BY h.id
    ),
    -- Distances from the node_distance reranker's centre entity (computed once, only with one).
    from_center AS MATERIALIZED (
        SELECT b.entity_id, b.distance FROM pgmemory.bfs_entities(p_groups, ARRAY[center], 3, point, known_at) b
         WHERE center IS NOT NULL
    ),
    -- Episodes that the best facts came from: graph evidence for the raw record.
    epi_from_facts AS (
        SELECT fe.episode_id AS id, row_number() OVER (ORDER BY min(fr.r), fe.episode_id)::integer AS r
          FROM (SELECT version_id, r FROM fact_cos UNION ALL SELECT version_id, r FROM fact_text) fr
          JOIN pgmemory.facts f ON f.version_id = fr.version_id
          JOIN pgmemory.fact_episodes fe ON fe.fact_id = f.id
          JOIN pgmemory.episodes ep ON ep.group_id = fe.group_id AND ep.id = fe.episode_id
         WHERE 'episodes' = ANY (kinds) AND fe.group_id = ANY (p_groups)
           AND (known_at IS NULL OR ep.recorded_at <= known_at)
           AND (as_of IS NULL OR ep.valid_at <= as_of)
         GROUP BY fe.episode_id
         LIMIT k
    ),
    epi_hits AS (
        SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks FROM (
            SELECT epi_from_facts.id, 'facts' AS method, r FROM epi_from_facts
            UNION ALL
            SELECT c.id, 'cosine', row_number() OVER (ORDER BY c.d)::integer FROM (
                SELECT ep.id, ep.embedding <=> p_embedding AS d FROM pgmemory.episodes ep
                 WHERE 'episodes' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL
                   AND ep.group_id = ANY (p_groups)
                   AND (known_at IS NULL OR ep.recorded_at <= known_at)
                   AND (as_of IS NULL OR ep.valid_at <= as_of)
                 ORDER BY ep.embedding <=> p_embedding LIMIT k) c
            UNION ALL
            SELECT h.id, 'fulltext', row_number() OVER (ORDER BY h.score DESC, h.id)::integer
              FROM pgmemory.episode_text_hits(p_groups, p_query, k, known_at, as_of) h
             WHERE 'episodes' = ANY (kinds) AND 'fulltext' = ANY (methods) AND h.score > 0) h
         GROUP BY h.id
    )
    SELECT 'fact'::text, f.id, f.version_id, fh.ranks, jsonb_build_object(
               'group_id', f.group_id, 'relation', f.relation, 'fact', f.fact,
               'source_id', f.source_id, 'source', coalesce(sv.name, s.name),
               'target_id', f.target_id, 'target', coalesce(tv.name, t.name),
               'valid_from', lower(f.valid), 'valid_to', upper(f.valid),
               'valid_from_unknown', lower_inf(f.valid),
               'recorded_from', lower(f.recorded), 'recorded_to', upper(f.recorded),
               'attributes', f.attributes,
               'episodes', (SELECT coalesce(jsonb_agg(fe.episode_id ORDER BY fe.created_at), '[]')
                              FROM pgmemory.fact_episodes fe WHERE fe.fact_id = f.id
                               AND (known_at IS NULL OR fe.created_at <= known_at)),
               'distance', (SELECT min(b.distance) FROM from_center b
                             WHERE b.entity_id IN (f.source_id, f.target_id)),
               'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN f.embedding::text END)
      FROM fact_hits fh
      JOIN pgmemory.facts f ON f.version_id = fh.version_id
      JOIN pgmemory.entities s ON s.id = f.source_id
      JOIN pgmemory.entities t ON t.id = f.target_id
      LEFT JOIN LATERAL pgmemory.entity_version_at(s.group_id, s.id, known_at) sv ON true
      LEFT JOIN LATERAL pgmemory.entity_version_at(t.group_id, t.id, known_at) tv ON true
    UNION ALL
    SELECT 'entity', e.id, NULL::bigint, eh.ranks, jsonb_build_object(
               'group_id', e.group_id, 'name', coalesce(ev.name, e.name),
               'summary', CASE WHEN as_of_view THEN (SELECT sm.summary FROM pgmemory.entity_summary_at(
                                   e.group_id, e.id, point, known_at) sm)
                               ELSE e.summary END,
               'labels', coalesce(ev.labels, e.labels), 'attributes', coalesce(ev.attributes, e.attributes),
               'mentions', (SELECT count(*) FROM pgmemory.episode_mentions m WHERE m.entity_id = e.id),
               'distance', (SELECT b.distance FROM from_center b WHERE b.entity_id = e.id),
               'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN e.name_embedding::text END)
      FROM ent_hits eh JOIN pgmemory.entities e ON e.id = eh.id
      LEFT JOIN LATERAL pgmemory.entity_version_at(e.group_id, e.id, known_at) ev ON true
    UNION ALL
    SELECT 'community', cm.id, NULL::bigint, ch.ranks, jsonb_build_object(
               'group_id', cm.group_id, 'name', cm.name, 'summary', cm.summary,
               'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN cm.name_embedding::text END)
      FROM com_hits ch JOIN pgmemory.communities cm ON cm.id = ch.id
    UNION ALL
    SELECT 'episode', ep.id, NULL::bigint, eph.ranks, jsonb_build_object(
               'group_id', ep.group_id, 'content', ep.content, 'kind', ep.kind, 'actor', ep.actor,
               'valid_at', ep.valid_at, 'recorded_at', ep.recorded_at,
               'source_description', ep.source_description,
               'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN ep.embedding::text END)
      FROM epi_hits eph JOIN pgmemory.episodes ep ON ep.id = eph.id AND ep.group_id = ANY (p_groups);
END
$$;
