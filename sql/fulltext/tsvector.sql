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

-- The per-row scorer of earlier versions (it unnested every candidate's tsvector): gone.
DROP FUNCTION IF EXISTS pgmemory.bm25_score(tsvector, text[], double precision[], double precision);

-- The Okapi BM25 share of one query lexeme occurring p_tf times in a document of p_len
-- distinct lexemes (k1 = 0.3, b = 0.1). The candidate functions below find documents term by
-- term through the GIN index (tsv @@ one lexeme), read tf with ts_rank_cd (with unit weights
-- and no normalisation, a one-lexeme query's cover density is its occurrence count) and sum
-- per document, so no tsvector is unnested per row: that cost ~80 us a row, 30 ms for a
-- LoCoMo question naming a speaker (issue 17). The length counts distinct lexemes, not
-- positions; with b = 0.1 that moves a score by a fraction of a percent (same recall on the
-- LoCoMo dev file, bench/fulltext_ranking.py).
CREATE OR REPLACE FUNCTION pgmemory.bm25_term(p_tf double precision, p_len integer, p_avgdl double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_tf * (0.3 + 1) / (p_tf + 0.3 * (1 - 0.1 + 0.1 * p_len / p_avgdl))
$$;
DROP FUNCTION IF EXISTS pgmemory.bm25_norm(integer, double precision);

-- The query lexemes known to the group's statistics, each with its idf and one-lexeme tsquery.
CREATE OR REPLACE FUNCTION pgmemory.bm25_terms(p_kind text, p_groups text[], p_query text)
RETURNS TABLE (group_id text, idf double precision, tq tsquery, avgdl double precision)
LANGUAGE sql STABLE AS $$
    SELECT w.group_id, t.idf, quote_literal(t.term)::tsquery, w.avgdl
      FROM pgmemory.bm25_weights(p_kind, p_groups, p_query) w
     CROSS JOIN LATERAL unnest(w.terms, w.idf) AS t (term, idf)
$$;

-- Each query lexeme (bm25_terms) joined to the rows containing it, summed per row.
CREATE OR REPLACE FUNCTION pgmemory.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    SELECT f.version_id,
           sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], f.tsv, t.tq, 0), length(f.tsv), t.avgdl))
      FROM pgmemory.bm25_terms('facts', p_groups, p_query) t
      JOIN pgmemory.facts f ON f.group_id = t.group_id AND f.tsv @@ t.tq
     WHERE pgmemory.fact_in_view(f.valid, f.recorded, f.relation, p_point, p_known_at,
                                 p_superseded, p_relations, p_bounds, f.is_event)
     GROUP BY f.version_id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT e.id,
           sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0), length(e.tsv), t.avgdl))
      FROM pgmemory.bm25_terms('entities', p_groups, p_query) t
      JOIN pgmemory.entities e ON e.group_id = t.group_id AND e.tsv @@ t.tq
     WHERE (p_known_at IS NULL OR e.created_at <= p_known_at)
       AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
     GROUP BY e.group_id, e.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT ep.id,
           sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0), length(ep.tsv), t.avgdl))
      FROM pgmemory.bm25_terms('episodes', p_groups, p_query) t
      JOIN pgmemory.episodes ep ON ep.group_id = t.group_id AND ep.tsv @@ t.tq
     WHERE (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
       AND (p_as_of IS NULL OR ep.valid_at <= p_as_of)
     GROUP BY ep.group_id, ep.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;
