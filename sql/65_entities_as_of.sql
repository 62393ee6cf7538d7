-- Entities as of a slice of time (issue 18.4): the slice is the fact versions
-- that hold at T (pgmemory.holds_at: states valid then, events that had
-- happened by then; p_point, any time when NULL) and were believed at T'
-- (p_known_at; now when NULL). In an as-of search an entity is shown only if a fact of the
-- slice touches it, with its name/labels/attributes as recorded at T' and a
-- summary built from slice facts only, so no text from outside the slice (a
-- later job, a fact learned after T') reaches the answer. Communities are not
-- part of as-of answers (nothing versions them yet).

-- Is a fact version in the slice (holds at p_point, believed at p_known_at)?
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_in_slice(
    p_valid tstzrange, p_recorded tstzrange, p_point timestamptz, p_known_at timestamptz,
    p_event boolean DEFAULT false)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p_known_at IS NULL THEN upper_inf(p_recorded) ELSE p_recorded @> p_known_at END)
       AND pgmemory.holds_at(p_valid, p_event, p_point)
$$;

-- The same test, worded so that the planner cannot match the partial indexes
-- on believed facts (WHERE upper_inf(recorded)): for "latest-started slice
-- facts of one entity" it would pick them on a row estimate of one and then
-- read and sort all of a hub's facts, instead of a few entries of
-- facts_source_started / facts_target_started (measured: 5x slower).
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_in_slice_unindexed(
    p_valid tstzrange, p_recorded tstzrange, p_point timestamptz, p_known_at timestamptz,
    p_event boolean DEFAULT false)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p_known_at IS NULL THEN upper(p_recorded) IS NULL ELSE p_recorded @> p_known_at END)
       AND pgmemory.holds_at(p_valid, p_event, p_point)
$$;

-- The slice facts touching an entity (as source or target). A set-returning
-- SQL function, so the planner inlines it: `EXISTS (SELECT FROM
-- pgmemory_internal.slice_facts_of(...))` is a plain subquery planned once per search,
-- with no per-row function call.
CREATE OR REPLACE FUNCTION pgmemory_internal.slice_facts_of(
    p_group text, p_entity uuid, p_point timestamptz, p_known_at timestamptz)
RETURNS TABLE (fact text, rec timestamptz, version_id bigint) LANGUAGE sql STABLE AS $$
    SELECT f.fact, lower(f.recorded), f.version_id FROM pgmemory.facts f
     WHERE f.group_id = p_group AND f.source_id = p_entity
       AND pgmemory_internal.fact_in_slice(f.valid, f.recorded, p_point, p_known_at, f.is_event)
    UNION ALL
    SELECT f.fact, lower(f.recorded), f.version_id FROM pgmemory.facts f
     WHERE f.group_id = p_group AND f.target_id = p_entity
       AND pgmemory_internal.fact_in_slice(f.valid, f.recorded, p_point, p_known_at, f.is_event)
$$;

-- The entity's summary in the slice: its five slice facts (as source or
-- target) that started last (unknown starts after known ones; then the most
-- recently recorded), '' when the slice has none. Latest-started first reads
-- facts_source_started / facts_target_started from T downwards, so a hub with
-- thousands of facts costs a few index entries. One row; inlined like the above. Each branch
-- breaks ties as the final order does, so which five facts it keeps never depends on the plan.
CREATE OR REPLACE FUNCTION pgmemory_internal.entity_summary_at(
    p_group text, p_entity uuid, p_point timestamptz, p_known_at timestamptz)
RETURNS TABLE (summary text) LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(s.fact, ' ' ORDER BY s.started DESC NULLS LAST, s.rec DESC, s.version_id DESC), '')
      FROM (SELECT u.* FROM (
                (SELECT f.fact, lower(f.valid) AS started, lower(f.recorded) AS rec, f.version_id
                   FROM pgmemory.facts f
                  WHERE f.source_id = p_entity AND f.group_id = p_group
                    AND lower(f.valid) <= coalesce(p_point, 'infinity')
                    AND pgmemory_internal.fact_in_slice_unindexed(f.valid, f.recorded, p_point, p_known_at, f.is_event)
                  ORDER BY lower(f.valid) DESC NULLS LAST, lower(f.recorded) DESC, f.version_id DESC LIMIT 5)
                UNION ALL
                (SELECT f.fact, lower(f.valid), lower(f.recorded), f.version_id FROM pgmemory.facts f
                  WHERE f.target_id = p_entity AND f.group_id = p_group
                    AND lower(f.valid) <= coalesce(p_point, 'infinity')
                    AND pgmemory_internal.fact_in_slice_unindexed(f.valid, f.recorded, p_point, p_known_at, f.is_event)
                  ORDER BY lower(f.valid) DESC NULLS LAST, lower(f.recorded) DESC, f.version_id DESC LIMIT 5)
                UNION ALL
                (SELECT f.fact, NULL, lower(f.recorded), f.version_id FROM pgmemory.facts f
                  WHERE f.source_id = p_entity AND f.group_id = p_group AND lower(f.valid) IS NULL
                    AND pgmemory_internal.fact_in_slice_unindexed(f.valid, f.recorded, p_point, p_known_at, f.is_event)
                  ORDER BY lower(f.recorded) DESC, f.version_id DESC LIMIT 5)
                UNION ALL
                (SELECT f.fact, NULL, lower(f.recorded), f.version_id FROM pgmemory.facts f
                  WHERE f.target_id = p_entity AND f.group_id = p_group AND lower(f.valid) IS NULL
                    AND pgmemory_internal.fact_in_slice_unindexed(f.valid, f.recorded, p_point, p_known_at, f.is_event)
                  ORDER BY lower(f.recorded) DESC, f.version_id DESC LIMIT 5)) u
             ORDER BY u.started DESC NULLS LAST, u.rec DESC, u.version_id DESC LIMIT 5) s
$$;

-- Full-text entity candidates of an as-of search: entities whose name matches
-- (and that a slice fact touches), or that a matching slice fact touches,
-- scored on the name plus the matching slice facts — never on the stored,
-- current summary, which may describe later events. p_fact_versions: the slice
-- facts the search's own full text already found (NULL: search them here).
CREATE OR REPLACE FUNCTION pgmemory_internal.entity_text_hits_as_of(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_labels text[], p_fact_versions bigint[] DEFAULT NULL)
RETURNS TABLE (id uuid, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    tq tsquery := pgmemory_internal.or_tsquery(p_query);
BEGIN
    -- a long query (an OR of n lexemes has 2n - 1 nodes): its rarest lexemes among the entities,
    -- as entity_text_hits keeps them
    IF numnode(tq) > 2 * pgmemory_internal.text_max_lexemes() - 1 AND pgmemory_internal.text_max_lexemes() > 0 THEN
        tq := pgmemory_internal.or_tsquery(p_groups, 'entities', p_query);
    END IF;
    RETURN QUERY
    WITH named AS (
        SELECT e.id, ''::text AS fact FROM pgmemory.entities e
         WHERE e.group_id = ANY (p_groups) AND to_tsvector('english', e.name) @@ tq
           AND EXISTS (SELECT FROM pgmemory_internal.slice_facts_of(e.group_id, e.id, p_point, p_known_at))
         ORDER BY ts_rank_cd(to_tsvector('english', e.name), tq) DESC, e.id
         LIMIT p_k
    ), matched AS (
        SELECT unnest(p_fact_versions) AS version_id WHERE p_fact_versions IS NOT NULL
        UNION ALL
        SELECT h.version_id FROM pgmemory_internal.fact_text_hits(p_groups, p_query, p_k, p_point, p_known_at, false,
                                                         '{}'::text[], '{}'::timestamptz[]) h
         WHERE p_fact_versions IS NULL AND h.score > 0
    ), described AS (
        SELECT x.id, f.fact FROM matched h
          JOIN pgmemory.facts f ON f.group_id = ANY (p_groups) AND f.version_id = h.version_id
         CROSS JOIN LATERAL (VALUES (f.source_id), (f.target_id)) AS x (id)
    ), scored AS (
        SELECT e.id, ts_rank_cd(to_tsvector('english', e.name || ' ' || string_agg(c.fact, ' ' ORDER BY c.fact)), tq)::double precision AS s
          FROM (SELECT named.id, named.fact FROM named UNION ALL SELECT described.id, described.fact FROM described) c
          JOIN pgmemory.entities e ON e.id = c.id AND e.group_id = ANY (p_groups)
         WHERE (p_known_at IS NULL OR e.created_at <= p_known_at)
           AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
           AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
         GROUP BY e.id, e.name
    )
    SELECT scored.id, scored.s FROM scored ORDER BY scored.s DESC, scored.id LIMIT p_k;
END
$$;
