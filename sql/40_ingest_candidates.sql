-- Candidate sets for ingestion. Postgres narrows the choices; the extractor
-- (offline rules or the LLM) decides among them.

-- Existing entities of p_group that may be the same as each new name:
-- exact (case-insensitive) name matches, nearest name embeddings (cosine) and
-- full-text matches on name + summary. One row per (input index, candidate).
CREATE OR REPLACE FUNCTION pgmemory.entity_candidates(
    p_group text, p_names text[], p_embeddings vector[], p_k integer DEFAULT 5,
    p_min_similarity double precision DEFAULT 0.6)
RETURNS TABLE (idx integer, entity_id uuid, name text, labels text[], summary text,
               exact boolean, similarity double precision)
LANGUAGE sql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
AS $$
    SELECT i.idx::integer, e.id, e.name, e.labels, e.summary,
           lower(e.name) = lower(i.name) AS exact,
           coalesce(1 - (e.name_embedding <=> i.embedding), 0) AS similarity
      FROM unnest(p_names, p_embeddings) WITH ORDINALITY AS i (name, embedding, idx)
      CROSS JOIN LATERAL (
            SELECT x.id FROM pgmemory.entities x
             WHERE x.group_id = p_group AND lower(x.name) = lower(i.name)
            UNION
            (SELECT x.id FROM pgmemory.entities x
              WHERE x.group_id = p_group AND i.embedding IS NOT NULL
              ORDER BY x.name_embedding <=> i.embedding
              LIMIT p_k)
            UNION
            (SELECT x.id FROM pgmemory.entities x
              WHERE x.group_id = p_group AND x.tsv @@ plainto_tsquery('english', i.name)
              ORDER BY ts_rank_cd(x.tsv, plainto_tsquery('english', i.name)) DESC
              LIMIT p_k)) c
      JOIN pgmemory.entities e ON e.id = c.id
     WHERE lower(e.name) = lower(i.name)
        OR coalesce(1 - (e.name_embedding <=> i.embedding), 0) >= p_min_similarity
        OR e.tsv @@ plainto_tsquery('english', i.name)
     ORDER BY 1, 6 DESC, 7 DESC
$$;

-- Believed facts between the same entity pair (either direction): the only
-- scope in which a new fact can be a duplicate. One row per (input index, fact).
CREATE OR REPLACE FUNCTION pgmemory.fact_candidates(
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
      JOIN pgmemory.entities s ON s.id = f.source_id
      JOIN pgmemory.entities t ON t.id = f.target_id
     ORDER BY 1, lower(f.recorded)
$$;

-- Believed facts that may contradict each new fact: those touching its source
-- or target entity, nearest in meaning first (up to p_k each), plus every
-- believed fact with the same source and relation type (one employer, ...).
CREATE OR REPLACE FUNCTION pgmemory.contradiction_candidates(
    p_group text, p_sources uuid[], p_targets uuid[], p_relations text[], p_embeddings vector[],
    p_k integer DEFAULT 10)
RETURNS TABLE (idx integer, fact_id uuid, source_id uuid, target_id uuid, source_name text,
               target_name text, relation text, fact text, valid_from timestamptz,
               valid_to timestamptz, similarity double precision)
LANGUAGE sql STABLE AS $$
    SELECT i::integer, f.id, f.source_id, f.target_id, s.name, t.name, f.relation, f.fact,
           lower(f.valid), upper(f.valid), coalesce(1 - (f.embedding <=> p_embeddings[i]), 0)
      FROM generate_subscripts(p_sources, 1) AS i
      CROSS JOIN LATERAL (
            (SELECT near.version_id FROM pgmemory.facts near
             WHERE near.group_id = p_group AND upper_inf(near.recorded)
               AND (near.source_id IN (p_sources[i], p_targets[i])
                 OR near.target_id IN (p_sources[i], p_targets[i]))
             ORDER BY near.embedding <=> p_embeddings[i] NULLS LAST
             LIMIT p_k)
            UNION
            SELECT same.version_id FROM pgmemory.facts same
             WHERE same.group_id = p_group AND upper_inf(same.recorded)
               AND same.source_id = p_sources[i] AND same.relation = p_relations[i]) c
      JOIN pgmemory.facts f ON f.version_id = c.version_id
      JOIN pgmemory.entities s ON s.id = f.source_id
      JOIN pgmemory.entities t ON t.id = f.target_id
     ORDER BY 1, 11 DESC
$$;
