-- Entities as of a slice of time (issue 18.4): the slice is the fact versions
-- valid at T (p_point; any time when NULL) and believed at T' (p_known_at; now
-- when NULL). In an as-of search an entity is shown only if a fact of the
-- slice touches it, with its name/labels/attributes as recorded at T' and a
-- summary built from slice facts only, so no text from outside the slice (a
-- later job, a fact learned after T') reaches the answer. Communities are not
-- part of as-of answers (nothing versions them yet).

-- Is a fact version in the slice (valid at p_point, believed at p_known_at)?
CREATE OR REPLACE FUNCTION pgmemory.fact_in_slice(
    p_valid tstzrange, p_recorded tstzrange, p_point timestamptz, p_known_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p_known_at IS NULL THEN upper_inf(p_recorded) ELSE p_recorded @> p_known_at END)
       AND (p_point IS NULL OR p_valid @> p_point)
$$;

-- Does a fact of the slice touch the entity?
CREATE OR REPLACE FUNCTION pgmemory.entity_in_slice(
    p_group text, p_entity uuid, p_point timestamptz, p_known_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgmemory.facts f
                    WHERE f.group_id = p_group AND f.source_id = p_entity
                      AND pgmemory.fact_in_slice(f.valid, f.recorded, p_point, p_known_at))
        OR EXISTS (SELECT 1 FROM pgmemory.facts f
                    WHERE f.group_id = p_group AND f.target_id = p_entity
                      AND pgmemory.fact_in_slice(f.valid, f.recorded, p_point, p_known_at))
$$;

-- The entity's summary in the slice: its five most recently recorded slice
-- facts (as source or target), newest first, as derive_summaries writes the
-- current one; '' when the slice has none.
CREATE OR REPLACE FUNCTION pgmemory.entity_summary_at(
    p_group text, p_entity uuid, p_point timestamptz, p_known_at timestamptz)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(s.fact, ' ' ORDER BY s.rec DESC, s.version_id DESC), '')
      FROM (SELECT u.fact, u.rec, u.version_id FROM (
                (SELECT f.fact, lower(f.recorded) AS rec, f.version_id FROM pgmemory.facts f
                  WHERE f.group_id = p_group AND f.source_id = p_entity
                    AND pgmemory.fact_in_slice(f.valid, f.recorded, p_point, p_known_at)
                  ORDER BY lower(f.recorded) DESC, f.version_id DESC LIMIT 5)
                UNION ALL
                (SELECT f.fact, lower(f.recorded), f.version_id FROM pgmemory.facts f
                  WHERE f.group_id = p_group AND f.target_id = p_entity
                    AND pgmemory.fact_in_slice(f.valid, f.recorded, p_point, p_known_at)
                  ORDER BY lower(f.recorded) DESC, f.version_id DESC LIMIT 5)) u
             ORDER BY u.rec DESC, u.version_id DESC LIMIT 5) s
$$;

-- The entity's name, labels and attributes as recorded at p_known_at, when
-- they have changed since (no row: the current row was already current then).
CREATE OR REPLACE FUNCTION pgmemory.entity_version_at(p_group text, p_entity uuid, p_known_at timestamptz)
RETURNS TABLE (name text, labels text[], attributes jsonb) LANGUAGE sql STABLE AS $$
    SELECT v.name, v.labels, v.attributes FROM pgmemory.entity_versions v
     WHERE p_known_at IS NOT NULL AND v.entity_id = p_entity AND v.group_id = p_group
       AND v.recorded @> p_known_at
     LIMIT 1
$$;

-- Full-text entity candidates of an as-of search: entities whose name matches,
-- or that a matching slice fact touches, scored on name + slice summary (the
-- text an as-of answer shows), never on the stored, current summary.
CREATE OR REPLACE FUNCTION pgmemory.entity_text_hits_as_of(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    tq tsquery := pgmemory.or_tsquery(p_query);
BEGIN
    RETURN QUERY
    WITH named AS (
        SELECT e.id FROM pgmemory.entities e
         WHERE e.group_id = ANY (p_groups) AND to_tsvector('english', e.name) @@ tq
           AND (p_known_at IS NULL OR e.created_at <= p_known_at)
         ORDER BY ts_rank_cd(to_tsvector('english', e.name), tq) DESC, e.id
         LIMIT p_k
    ), described AS (
        SELECT x.id FROM pgmemory.fact_text_hits(p_groups, p_query, p_k, p_point, p_known_at, false,
                                                 '{}'::text[], '{}'::timestamptz[]) h
          JOIN pgmemory.facts f ON f.version_id = h.version_id
         CROSS JOIN LATERAL (VALUES (f.source_id), (f.target_id)) AS x (id)
         WHERE h.score > 0
    ), scored AS (
        SELECT e.id, ts_rank_cd(to_tsvector('english', e.name || ' ' ||
                   pgmemory.entity_summary_at(e.group_id, e.id, p_point, p_known_at)), tq)::double precision AS s
          FROM (SELECT named.id FROM named UNION SELECT described.id FROM described) c
          JOIN pgmemory.entities e ON e.id = c.id AND e.group_id = ANY (p_groups)
         WHERE (p_known_at IS NULL OR e.created_at <= p_known_at)
           AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
           AND pgmemory.entity_in_slice(e.group_id, e.id, p_point, p_known_at)
    )
    SELECT scored.id, scored.s FROM scored ORDER BY scored.s DESC, scored.id LIMIT p_k;
END
$$;
