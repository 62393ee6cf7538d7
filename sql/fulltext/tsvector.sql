-- Full-text candidates with tsvector ranking (ts_rank_cd over an OR of the
-- query's lexemes, GIN-indexed). Applied by init when pg_textsearch is absent;
-- sql/fulltext/bm25.sql defines the same functions with BM25.

CREATE OR REPLACE FUNCTION pgmemory.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    SELECT f.version_id, ts_rank_cd(f.tsv, q.tq)
      FROM pgmemory.facts f, (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE f.group_id = ANY (p_groups) AND f.tsv @@ q.tq
       AND pgmemory.fact_in_view(f.valid, f.recorded, f.relation, p_point, p_known_at,
                                 p_superseded, p_relations, p_bounds)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT e.id, ts_rank_cd(e.tsv, q.tq)
      FROM pgmemory.entities e, (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE e.group_id = ANY (p_groups) AND e.tsv @@ q.tq
       AND (p_known_at IS NULL OR e.created_at <= p_known_at)
       AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT ep.id, ts_rank_cd(ep.tsv, q.tq)
      FROM pgmemory.episodes ep, (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE ep.group_id = ANY (p_groups) AND ep.tsv @@ q.tq
       AND (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
       AND (p_as_of IS NULL OR ep.valid_at <= p_as_of)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;
