-- Candidate sets for ingestion. Postgres narrows the choices; the extractor
-- (offline rules or the LLM) decides among them.

-- Existing entities of p_group that may be the same as each new name:
-- exact (case-insensitive) name matches or, without one, the nearest name
-- embeddings (cosine, pgmemory.entity_name_vectors) and full-text matches on name + summary. One row per
-- (input index, candidate).
-- Two functions of one body (written once below): entity_candidates takes the limits as
-- parameters and is planned for each call with the group's value (custom plans: the nearest-name
-- read's plan needs its LIMIT's value to use the HNSW index, and a small group of a large shared
-- table is read exactly by its key, where the HNSW read filtered to the group would stop after
-- hnsw.max_scan_tuples before meeting its names); entity_candidates_generic has the default limits
-- (5, 0.6) as constants, so one generic plan, cached per session (sql/90_write_plans.sql), is the
-- plan a custom one would be when the group holds most of the table (read_entity_candidates picks
-- it then): planning was ~0.8 of the ~1.4 ms per call (bench/README.md, "Issue 9, session 10").
-- Candidates that tie (two "Iris" equally similar) come by name, then id: the same pick on every
-- plan and node (a cluster resolved "Iris" to another entity than one node did); so do the
-- full-text matches that tie at the LIMIT (short names often rank the same), which were the first
-- five in whatever order the rows were read.
DO $define$
DECLARE
    body constant text := $body$
    SELECT i.idx::integer, e.id, e.name, e.labels, e.summary,
           lower(e.name) = lower(i.name) AS exact,
           coalesce(1 - (nv.name_embedding <=> i.embedding), 0) AS similarity
      FROM unnest(p_names, p_embeddings) WITH ORDINALITY AS i (name, embedding, idx)
      -- An exact name match decides at once: the other searches only run without one.
      CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM pgmemory.entities x
                                          WHERE x.group_id = p_group AND lower(x.name) = lower(i.name)
                                            AND x.retired_at IS NULL)
                                 AS found) exact
      CROSS JOIN LATERAL (
            SELECT x.id FROM pgmemory.entities x
             WHERE x.group_id = p_group AND lower(x.name) = lower(i.name) AND x.retired_at IS NULL
            UNION
            (SELECT x.id FROM pgmemory.entity_name_vectors v
               JOIN pgmemory.entities x ON x.group_id = p_group AND x.id = v.entity_id
              WHERE v.group_id = p_group AND i.embedding IS NOT NULL AND NOT exact.found AND x.retired_at IS NULL
              ORDER BY v.name_embedding <=> i.embedding
              LIMIT %1$s)
            UNION
            (SELECT x.id FROM pgmemory.entities x
              WHERE x.group_id = p_group AND NOT exact.found AND x.retired_at IS NULL
                AND x.tsv @@ plainto_tsquery('english', i.name)
              ORDER BY ts_rank_cd(x.tsv, plainto_tsquery('english', i.name)) DESC, x.name, x.id
              LIMIT %1$s)) c
      JOIN pgmemory.entities e ON e.group_id = p_group AND e.id = c.id
      LEFT JOIN pgmemory.entity_name_vectors nv ON nv.group_id = p_group AND nv.entity_id = e.id
     WHERE lower(e.name) = lower(i.name)
        OR coalesce(1 - (nv.name_embedding <=> i.embedding), 0) >= %2$s
        OR e.tsv @@ plainto_tsquery('english', i.name)
     ORDER BY 1, 6 DESC, 7 DESC, e.name, e.id
$body$;
    result constant text := 'RETURNS TABLE (idx integer, entity_id uuid, name text, labels text[], summary text,'
                            ' exact boolean, similarity double precision)'
                            ' LANGUAGE sql STABLE SET hnsw.iterative_scan = ''relaxed_order''';
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION pgmemory_internal.entity_candidates(p_group text, p_names text[],'
                   ' p_embeddings vector[], p_k integer DEFAULT 5, p_min_similarity double precision DEFAULT 0.6)'
                   ' %s AS %L', result, format(body, 'p_k', 'p_min_similarity'));
    EXECUTE format('CREATE OR REPLACE FUNCTION pgmemory_internal.entity_candidates_generic(p_group text,'
                   ' p_names text[], p_embeddings vector[]) %s AS %L', result, format(body, '5', '0.6'));
END
$define$;

-- Whether p_group holds at least half of the entity name vectors (its entity count in text_stats
-- against the table's row count in the planner's statistics): then the plan made without the
-- group's value (entity_candidates_generic) is the one made with it. Unknown counts (a group
-- whose statistics row the caller cannot see) answer false: planned per call, as always. Two
-- statements (PL/pgSQL), so no query joins a distributed table with the catalog on Citus.
CREATE OR REPLACE FUNCTION pgmemory_internal.holds_most_entities(p_group text)
RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_docs bigint := (SELECT s.docs FROM pgmemory.text_stats s WHERE s.group_id = p_group AND s.kind = 'entities');
BEGIN
    RETURN coalesce(v_docs * 2 >= (SELECT greatest(c.reltuples, 0) FROM pg_class c
                                    WHERE c.oid = 'pgmemory.entity_name_vectors'::regclass), false);
END
$$;

-- Believed facts between the same entity pair (either direction): the only
-- scope in which a new fact can be a duplicate. One row per (input index, fact).
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_candidates(
    p_group text, p_sources uuid[], p_targets uuid[])
RETURNS TABLE (idx integer, fact_id uuid, source_id uuid, target_id uuid, source_name text,
               target_name text, relation text, fact text, valid_from timestamptz,
               valid_to timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT i::integer, f.id, f.source_id, f.target_id, s.name, t.name, f.relation, f.fact,
           lower(f.valid), upper(f.valid)
      FROM generate_subscripts(p_sources, 1) AS i
      JOIN pgmemory.facts f
        ON f.group_id = p_group AND upper_inf(f.recorded)
       AND ((f.source_id = p_sources[i] AND f.target_id = p_targets[i])
         OR (f.source_id = p_targets[i] AND f.target_id = p_sources[i]))
      JOIN pgmemory.entities s ON s.group_id = p_group AND s.id = f.source_id
      JOIN pgmemory.entities t ON t.group_id = p_group AND t.id = f.target_id
     ORDER BY 1, lower(f.recorded)
$$;

-- Believed facts that may contradict each new fact: among the 100 most
-- recently recorded still-valid facts touching its source or target, the
-- p_k nearest in meaning; plus every believed fact with the same source and
-- relation type (one employer, ...) that has not ended by the new fact's place in
-- the fold (p_starts: an assertion's evidence start, a negation's end; NULL: ended or
-- not). One that ended before it is neither ended nor capped by it
-- (sql/35_fact_rules.sql), and a person's past employers grow with
-- the conversation: all of them were read, and put to the judge, for every "works
-- at X" (196 for one speaker at 10k episodes). Should a later statement move the new
-- fact's start back over such an old one, that statement is judged against it then. Those
-- past ones are not read either: the index facts_current_source_end holds each believed fact's
-- end, so only the facts still valid after the new fact's place are visited.
-- Each "100 most recent" is the top 100 of the two endpoints' own top 100s, each read in the
-- order of its index (facts_current_*_recent), so a hub entity's still-valid facts are not all
-- read and sorted (they grow with the group). The rows carry their columns out of the union
-- (no second lookup of each fact by version).
DROP FUNCTION IF EXISTS pgmemory_internal.read_fact_candidates(text, uuid[], uuid[], text[], vector[]);
DROP FUNCTION IF EXISTS pgmemory_internal.contradiction_candidates(text, uuid[], uuid[], text[], vector[], integer);
CREATE OR REPLACE FUNCTION pgmemory_internal.contradiction_candidates(
    p_group text, p_sources uuid[], p_targets uuid[], p_relations text[], p_embeddings vector[],
    p_starts timestamptz[], p_k integer DEFAULT 10)
RETURNS TABLE (idx integer, fact_id uuid, source_id uuid, target_id uuid, source_name text,
               target_name text, relation text, fact text, valid_from timestamptz,
               valid_to timestamptz, similarity double precision)
LANGUAGE sql STABLE AS $$
    SELECT i.idx::integer, c.id, c.source_id, c.target_id, s.name, t.name, c.relation, c.fact,
           lower(c.valid), upper(c.valid), coalesce(1 - c.dist, 0)
      FROM unnest(p_sources, p_targets, p_relations, p_embeddings, p_starts)
           WITH ORDINALITY AS i (source_id, target_id, relation, embedding, start, idx)
      CROSS JOIN LATERAL (
            SELECT DISTINCT ON (u.version_id) u.* FROM (
                (SELECT near.version_id, near.id, near.source_id, near.target_id, near.relation, near.fact,
                        near.valid, near.embedding <=> i.embedding AS dist
                   FROM ((SELECT * FROM (
                            (SELECT r.version_id, r.id, r.source_id, r.target_id, r.relation, r.fact, r.valid,
                                    r.embedding, lower(r.recorded) AS rec FROM pgmemory.facts r
                              WHERE r.group_id = p_group AND r.source_id = i.source_id
                                AND upper_inf(r.recorded) AND upper_inf(r.valid)
                              ORDER BY lower(r.recorded) DESC LIMIT 100)
                            UNION ALL
                            (SELECT r.version_id, r.id, r.source_id, r.target_id, r.relation, r.fact, r.valid,
                                    r.embedding, lower(r.recorded) FROM pgmemory.facts r
                              WHERE r.group_id = p_group AND r.source_id = i.target_id
                                AND i.target_id IS DISTINCT FROM i.source_id
                                AND upper_inf(r.recorded) AND upper_inf(r.valid)
                              ORDER BY lower(r.recorded) DESC LIMIT 100)) by_source
                          ORDER BY by_source.rec DESC LIMIT 100)
                         UNION ALL
                         (SELECT * FROM (
                            (SELECT r.version_id, r.id, r.source_id, r.target_id, r.relation, r.fact, r.valid,
                                    r.embedding, lower(r.recorded) AS rec FROM pgmemory.facts r
                              WHERE r.group_id = p_group AND r.target_id = i.source_id
                                AND upper_inf(r.recorded) AND upper_inf(r.valid)
                              ORDER BY lower(r.recorded) DESC LIMIT 100)
                            UNION ALL
                            (SELECT r.version_id, r.id, r.source_id, r.target_id, r.relation, r.fact, r.valid,
                                    r.embedding, lower(r.recorded) FROM pgmemory.facts r
                              WHERE r.group_id = p_group AND r.target_id = i.target_id
                                AND i.target_id IS DISTINCT FROM i.source_id
                                AND upper_inf(r.recorded) AND upper_inf(r.valid)
                              ORDER BY lower(r.recorded) DESC LIMIT 100)) by_target
                          ORDER BY by_target.rec DESC LIMIT 100)) near
                  ORDER BY near.embedding <=> i.embedding NULLS LAST
                  LIMIT p_k)
                UNION ALL
                SELECT same.version_id, same.id, same.source_id, same.target_id, same.relation, same.fact,
                       same.valid, same.embedding <=> i.embedding
                  FROM pgmemory.facts same
                 WHERE same.group_id = p_group AND same.source_id = i.source_id AND same.relation = i.relation
                   AND upper_inf(same.recorded)
                   -- (i.start IS NULL OR upper_inf(valid) OR upper(valid) > i.start), as the
                   -- index facts_current_source_end reads it: an open end is +infinity
                   AND coalesce(upper(same.valid), 'infinity'::timestamptz)
                       > coalesce(i.start, '-infinity'::timestamptz)) u
             ORDER BY u.version_id) c
      JOIN pgmemory.entities s ON s.group_id = p_group AND s.id = c.source_id
      JOIN pgmemory.entities t ON t.group_id = p_group AND t.id = c.target_id
     ORDER BY 1, 11 DESC
$$;

-- The group's change counter: read before candidates are read, compared under
-- the group lock before decisions are applied.
CREATE OR REPLACE FUNCTION pgmemory_internal.group_version(p_group text)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT v.version FROM pgmemory.group_versions v WHERE v.group_id = p_group), 0)
$$;

-- Count one change of a group, for a writer that holds the group's write lock (lock_group):
-- apply_if_unchanged, add_fact, retract_fact, delete_episode, erase_history.
CREATE OR REPLACE FUNCTION pgmemory_internal.count_group_change(p_group text)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    INSERT INTO pgmemory.group_versions AS v (group_id, version) VALUES (p_group, 1)
    ON CONFLICT (group_id) DO UPDATE SET version = v.version + 1
    RETURNING v.version
$$;

-- Count one change of a group (call inside the writing transaction). It takes the group's write
-- lock first (held until the transaction ends): a writer outside apply_episode that only bumps
-- (README) would otherwise let an apply check the counter before its commit and apply decisions
-- read without its rows (a second entity of one name beside its own). pgmemory's own writers,
-- which hold the lock already, count with count_group_change.
-- (PL/pgSQL: lock_group is defined in a later file.)
CREATE OR REPLACE FUNCTION pgmemory.bump_group_version(p_group text)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.lock_group(p_group);  -- (checks the group, check_group)
    RETURN pgmemory_internal.count_group_change(p_group);
END
$$;

-- The read phase of one episode in few round trips (issue 9; on Citus each is one delegated
-- call to the group's worker). First: the group's change counter and the entity candidates,
-- read in one snapshot, so a change committed after this read is always seen by the counter
-- check under the group lock. One row per (input index, candidate), or one row with a NULL
-- idx when there is none (the counter is on every row).
CREATE OR REPLACE FUNCTION pgmemory_internal.read_entity_candidates(
    p_group text, p_names text[], p_embeddings vector[])
RETURNS TABLE (version bigint, idx integer, entity_id uuid, name text, labels text[], summary text,
               exact boolean, similarity double precision)
LANGUAGE sql STABLE AS $$
    SELECT v.version, c.idx, c.entity_id, c.name, c.labels, c.summary, c.exact, c.similarity
      FROM (SELECT pgmemory_internal.group_version(p_group) AS version,
                   pgmemory_internal.holds_most_entities(p_group) AS most) v
      -- Only one of the two runs (each arm is gated on v.most before its function is called).
      LEFT JOIN LATERAL (
            SELECT * FROM pgmemory_internal.entity_candidates_generic(p_group, coalesce(p_names, '{}'),
                                                                      coalesce(p_embeddings, '{}'))
             WHERE v.most
            UNION ALL
            SELECT * FROM pgmemory_internal.entity_candidates(p_group, coalesce(p_names, '{}'),
                                                              coalesce(p_embeddings, '{}'))
             WHERE NOT v.most) c ON true
$$;

-- Then, once entities are resolved: both candidate sets of the new facts in one call, each row
-- marked 'duplicate' (fact_candidates: same entity pair) or 'contradiction'
-- (contradiction_candidates; similarity is NULL on duplicate rows).
CREATE OR REPLACE FUNCTION pgmemory_internal.read_fact_candidates(
    p_group text, p_sources uuid[], p_targets uuid[], p_relations text[], p_embeddings vector[],
    p_starts timestamptz[])
RETURNS TABLE (kind text, idx integer, fact_id uuid, source_id uuid, target_id uuid, source_name text,
               target_name text, relation text, fact text, valid_from timestamptz,
               valid_to timestamptz, similarity double precision)
LANGUAGE sql STABLE AS $$
    SELECT 'duplicate', d.*, NULL::double precision
      FROM pgmemory_internal.fact_candidates(p_group, p_sources, p_targets) d
    UNION ALL
    SELECT 'contradiction', c.*
      FROM pgmemory_internal.contradiction_candidates(p_group, p_sources, p_targets, p_relations, p_embeddings,
                                                      p_starts) c
$$;
