-- Full-text candidates ranked by Okapi BM25 computed from Postgres' own tsvector (the
-- default mode; needs no extension, cannot hang). Corpus statistics per group come from
-- pgmemory.text_stats / term_stats (kept by sql/fulltext/text_stats.sql); candidates are the
-- rows matching any query lexeme (GIN). sql/fulltext/bm25.sql defines the same functions
-- with pg_textsearch (opt-in).
--
-- k1 = 0.3 and b = 0.1 were chosen on the two LoCoMo dev conversations
-- (bench/fulltext_ranking.py, cross-validated between them; figures in bench/README.md):
-- short chat turns want term frequency to saturate fast and length to matter little.

-- Each group's BM25 weights of the query's lexemes: idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
CREATE OR REPLACE FUNCTION pgmemory.bm25_weights(p_kind text, p_groups text[], p_query text)
RETURNS TABLE (group_id text, terms text[], idf double precision[], avgdl double precision)
LANGUAGE sql STABLE AS $$
    SELECT s.group_id, array_agg(t.term ORDER BY t.term),
           array_agg(ln(1 + (s.docs - t.docs + 0.5) / (t.docs + 0.5)) ORDER BY t.term),
           greatest(s.total_len::double precision / greatest(s.docs, 1), 1)
      FROM pgmemory.text_stats s
      JOIN pgmemory.term_stats t ON t.group_id = s.group_id AND t.kind = s.kind
     WHERE s.kind = p_kind AND s.group_id = ANY (p_groups) AND t.docs > 0
       AND t.term = ANY (tsvector_to_array(to_tsvector('english', p_query)))
     GROUP BY s.group_id, s.docs, s.total_len
$$;

-- Okapi BM25 of one document (k1 = 0.3, b = 0.1); tf is a lexeme's position count and the
-- document length the sum of them (stop words excluded).
CREATE OR REPLACE FUNCTION pgmemory.bm25_score(
    p_tsv tsvector, p_terms text[], p_idf double precision[], p_avgdl double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(q.idf * d.tf * (0.3 + 1) / (d.tf + 0.3 * (1 - 0.1 + 0.1 * d.dl / p_avgdl))), 0)
      FROM (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1)::double precision AS tf,
                   sum(coalesce(array_length(u.positions, 1), 1)) OVER ()::double precision AS dl
              FROM unnest(p_tsv) u) d
      JOIN unnest(p_terms, p_idf) AS q (term, idf) ON q.term = d.lexeme
$$;

CREATE OR REPLACE FUNCTION pgmemory.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    SELECT f.version_id, pgmemory.bm25_score(f.tsv, w.terms, w.idf, w.avgdl)
      FROM pgmemory.bm25_weights('facts', p_groups, p_query) w
      JOIN pgmemory.facts f ON f.group_id = ANY (p_groups) AND f.group_id = w.group_id,
           (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE f.tsv @@ q.tq
       AND pgmemory.fact_in_view(f.valid, f.recorded, f.relation, p_point, p_known_at,
                                 p_superseded, p_relations, p_bounds, f.is_event)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT e.id, pgmemory.bm25_score(e.tsv, w.terms, w.idf, w.avgdl)
      FROM pgmemory.bm25_weights('entities', p_groups, p_query) w
      JOIN pgmemory.entities e ON e.group_id = ANY (p_groups) AND e.group_id = w.group_id,
           (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE e.tsv @@ q.tq
       AND (p_known_at IS NULL OR e.created_at <= p_known_at)
       AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
       AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT ep.id, pgmemory.bm25_score(ep.tsv, w.terms, w.idf, w.avgdl)
      FROM pgmemory.bm25_weights('episodes', p_groups, p_query) w
      JOIN pgmemory.episodes ep ON ep.group_id = ANY (p_groups) AND ep.group_id = w.group_id,
           (SELECT pgmemory.or_tsquery(p_query) AS tq) q
     WHERE ep.tsv @@ q.tq
       AND (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
       AND (p_as_of IS NULL OR ep.valid_at <= p_as_of)
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;
