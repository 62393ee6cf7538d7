-- Full-text candidates ranked by Okapi BM25 computed from Postgres' own tsvector (the
-- default mode; needs no extension, cannot hang). Corpus statistics per group come from
-- pgmemory.text_stats / term_stats (kept by sql/fulltext/text_stats.sql); candidates are the
-- rows matching any query lexeme (GIN). sql/fulltext/bm25.sql defines the same functions
-- with pg_textsearch (opt-in).
--
-- k1 = 0.3 and b = 0.1 were chosen on the two LoCoMo dev conversations
-- (bench/fulltext_ranking.py, cross-validated between them; figures in bench/README.md):
-- short chat turns want term frequency to saturate fast and length to matter little.

-- The query's lexemes known to each searched group: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
-- a one-lexeme tsquery, the group's mean document length, df, and whether the lexeme is
-- common for a top p_k: the rarest lexemes are rare until they hold 2 x p_k documents
-- together, the rest is common (a speaker's name in a chat, a common word in 100k facts).
CREATE OR REPLACE FUNCTION pgmemory.bm25_terms(p_kind text, p_groups text[], p_query text, p_k integer)
RETURNS TABLE (group_id text, idf double precision, tq tsquery, avgdl double precision, df bigint,
               common boolean)
LANGUAGE sql STABLE AS $$
    SELECT s.group_id, ln(1 + (s.docs - t.docs + 0.5) / (t.docs + 0.5)), quote_literal(t.term)::tsquery,
           greatest(s.total_len::double precision / greatest(s.docs, 1), 1), t.docs::bigint,
           sum(t.docs) OVER (PARTITION BY s.group_id ORDER BY t.docs, t.term ROWS UNBOUNDED PRECEDING)
               - t.docs >= 2 * p_k
      FROM pgmemory.text_stats s
      JOIN pgmemory.term_stats t ON t.group_id = s.group_id AND t.kind = s.kind
     WHERE s.kind = p_kind AND s.group_id = ANY (p_groups) AND t.docs > 0
       AND t.term = ANY (tsvector_to_array(to_tsvector('english', p_query)))
$$;
DROP FUNCTION IF EXISTS pgmemory.bm25_weights(text, text[], text);
DROP FUNCTION IF EXISTS pgmemory.bm25_terms(text, text[], text);

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

-- Each function finds documents term by term (GIN: tsv @@ one lexeme) and scores a document
-- by all the query's lexemes it contains: exact Okapi BM25, top p_k, with MaxScore pruning
-- when the common lexemes' lists are long (together at least 50 x p_k rows; not a speaker's
-- name in a 400-turn chat, where reading them is cheaper than pruning):
--   1. the documents with a rare lexeme are scored; theta = the p_k-th best score (0 if fewer);
--   2. the commonest lexemes whose bounds add up to less than theta are never read (a
--      lexeme's share is below 1.3 x idf, so a document with only those scores < theta);
--   3. the documents with any other common lexeme are scored too.
-- Without pruning, every matching document is scored (step 1 with every lexeme).
-- Facts: each lexeme's rows are read from the GIN index alone (a MATERIALIZED step without the
-- view test, which the planner otherwise ANDs with the bitmap of a partial index on current
-- facts: ~97k entries read per lexeme at 100k facts, most of the call), carrying the tsvector,
-- so scoring needs no second visit to the table.
CREATE OR REPLACE FUNCTION pgmemory.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    WITH t AS MATERIALIZED (SELECT * FROM pgmemory.bm25_terms('facts', p_groups, p_query, p_k)),
    how AS MATERIALIZED (SELECT coalesce(sum(t.df) FILTER (WHERE t.common), 0) >= 50 * p_k AS prune FROM t),
    found AS MATERIALIZED (  -- step 1: rows with a rare lexeme (with any lexeme, unpruned)
        SELECT f0.version_id, f0.group_id, f0.tsv, f0.valid, f0.recorded, f0.relation, f0.is_event FROM t
          JOIN pgmemory.facts f0 ON f0.group_id = t.group_id AND f0.tsv @@ t.tq
         AND f0.group_id = ANY (p_groups)
         WHERE NOT t.common OR NOT (SELECT prune FROM how)),
    todo AS MATERIALIZED (
        SELECT DISTINCT ON (x.version_id) x.version_id, x.group_id, x.tsv FROM found x
         WHERE pgmemory.fact_in_view(x.valid, x.recorded, x.relation, p_point, p_known_at,
                                     p_superseded, p_relations, p_bounds, x.is_event)),
    scored AS MATERIALIZED (
        SELECT d.version_id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], d.tsv, t.tq, 0),
                                                     length(d.tsv), t.avgdl)) AS score
          FROM todo d JOIN t ON t.group_id = d.group_id AND d.tsv @@ t.tq
         GROUP BY d.version_id),
    theta AS MATERIALIZED (
        SELECT coalesce((SELECT x.score FROM scored x ORDER BY x.score DESC OFFSET p_k - 1 LIMIT 1), 0) AS v),
    essential AS MATERIALIZED (  -- step 2: the common lexemes that are read after all
        SELECT c.group_id, c.tq FROM (
            SELECT t.group_id, t.tq, sum(1.3 * t.idf) OVER (PARTITION BY t.group_id ORDER BY t.df DESC, t.tq::text
                                                            ROWS UNBOUNDED PRECEDING) AS bound
              FROM t WHERE t.common AND (SELECT prune FROM how)) c
         WHERE c.bound >= (SELECT v FROM theta)),
    found_more AS MATERIALIZED (  -- step 3
        SELECT f0.version_id, f0.group_id, f0.tsv, f0.valid, f0.recorded, f0.relation, f0.is_event FROM essential t
          JOIN pgmemory.facts f0 ON f0.group_id = t.group_id AND f0.tsv @@ t.tq
         AND f0.group_id = ANY (p_groups)),
    more AS MATERIALIZED (
        SELECT DISTINCT ON (x.version_id) x.version_id, x.group_id, x.tsv FROM found_more x
         WHERE NOT EXISTS (SELECT FROM todo y WHERE y.version_id = x.version_id)
           AND pgmemory.fact_in_view(x.valid, x.recorded, x.relation, p_point, p_known_at,
                                     p_superseded, p_relations, p_bounds, x.is_event))
    SELECT x.version_id, x.score FROM scored x
    UNION ALL
    SELECT d.version_id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], d.tsv, t.tq, 0),
                                                   length(d.tsv), t.avgdl))
      FROM more d JOIN t ON t.group_id = d.group_id AND d.tsv @@ t.tq
     GROUP BY d.version_id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    WITH t AS MATERIALIZED (SELECT * FROM pgmemory.bm25_terms('entities', p_groups, p_query, p_k)),
    how AS MATERIALIZED (SELECT coalesce(sum(t.df) FILTER (WHERE t.common), 0) >= 50 * p_k AS prune FROM t),
    todo AS MATERIALIZED (  -- step 1: documents with a rare lexeme (with any lexeme, unpruned)
        SELECT DISTINCT e0.group_id, e0.id FROM t
          JOIN pgmemory.entities e0 ON e0.group_id = t.group_id AND e0.tsv @@ t.tq
         AND e0.group_id = ANY (p_groups)
         WHERE (NOT t.common OR NOT (SELECT prune FROM how))
           AND (p_known_at IS NULL OR e0.created_at <= p_known_at)
           AND (e0.retired_at IS NULL OR e0.retired_at > p_known_at)
           AND (cardinality(p_labels) = 0 OR e0.labels && p_labels)),
    scored AS MATERIALIZED (
        SELECT e.group_id, e.id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0),
                                                     length(e.tsv), t.avgdl)) AS score
          FROM todo d JOIN pgmemory.entities e ON e.group_id = ANY (p_groups) AND e.group_id = d.group_id AND e.id = d.id
          JOIN t ON t.group_id = e.group_id AND e.tsv @@ t.tq
         GROUP BY e.group_id, e.id),
    theta AS MATERIALIZED (
        SELECT coalesce((SELECT x.score FROM scored x ORDER BY x.score DESC OFFSET p_k - 1 LIMIT 1), 0) AS v),
    essential AS MATERIALIZED (  -- step 2: the common lexemes that are read after all
        SELECT c.group_id, c.tq FROM (
            SELECT t.group_id, t.tq, sum(1.3 * t.idf) OVER (PARTITION BY t.group_id ORDER BY t.df DESC, t.tq::text
                                                            ROWS UNBOUNDED PRECEDING) AS bound
              FROM t WHERE t.common AND (SELECT prune FROM how)) c
         WHERE c.bound >= (SELECT v FROM theta)),
    more AS MATERIALIZED (  -- step 3
        SELECT DISTINCT e0.group_id, e0.id FROM essential t
          JOIN pgmemory.entities e0 ON e0.group_id = t.group_id AND e0.tsv @@ t.tq
         AND e0.group_id = ANY (p_groups)
         WHERE NOT EXISTS (SELECT FROM todo x WHERE x.group_id = e0.group_id AND x.id = e0.id)
           AND (p_known_at IS NULL OR e0.created_at <= p_known_at)
           AND (e0.retired_at IS NULL OR e0.retired_at > p_known_at)
           AND (cardinality(p_labels) = 0 OR e0.labels && p_labels))
    SELECT x.id, x.score FROM scored x
    UNION ALL
    SELECT e.id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0),
                                                   length(e.tsv), t.avgdl))
      FROM more d JOIN pgmemory.entities e ON e.group_id = ANY (p_groups) AND e.group_id = d.group_id AND e.id = d.id
      JOIN t ON t.group_id = e.group_id AND e.tsv @@ t.tq
     GROUP BY e.group_id, e.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    WITH t AS MATERIALIZED (SELECT * FROM pgmemory.bm25_terms('episodes', p_groups, p_query, p_k)),
    how AS MATERIALIZED (SELECT coalesce(sum(t.df) FILTER (WHERE t.common), 0) >= 50 * p_k AS prune FROM t),
    todo AS MATERIALIZED (  -- step 1: documents with a rare lexeme (with any lexeme, unpruned)
        SELECT DISTINCT ep0.group_id, ep0.id FROM t
          JOIN pgmemory.episodes ep0 ON ep0.group_id = t.group_id AND ep0.tsv @@ t.tq
         AND ep0.group_id = ANY (p_groups)
         WHERE (NOT t.common OR NOT (SELECT prune FROM how))
           AND (p_known_at IS NULL OR ep0.recorded_at <= p_known_at)
           AND (p_as_of IS NULL OR ep0.valid_at <= p_as_of)),
    scored AS MATERIALIZED (
        SELECT ep.group_id, ep.id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
                                                     length(ep.tsv), t.avgdl)) AS score
          FROM todo d JOIN pgmemory.episodes ep ON ep.group_id = ANY (p_groups) AND ep.group_id = d.group_id AND ep.id = d.id
          JOIN t ON t.group_id = ep.group_id AND ep.tsv @@ t.tq
         GROUP BY ep.group_id, ep.id),
    theta AS MATERIALIZED (
        SELECT coalesce((SELECT x.score FROM scored x ORDER BY x.score DESC OFFSET p_k - 1 LIMIT 1), 0) AS v),
    essential AS MATERIALIZED (  -- step 2: the common lexemes that are read after all
        SELECT c.group_id, c.tq FROM (
            SELECT t.group_id, t.tq, sum(1.3 * t.idf) OVER (PARTITION BY t.group_id ORDER BY t.df DESC, t.tq::text
                                                            ROWS UNBOUNDED PRECEDING) AS bound
              FROM t WHERE t.common AND (SELECT prune FROM how)) c
         WHERE c.bound >= (SELECT v FROM theta)),
    more AS MATERIALIZED (  -- step 3
        SELECT DISTINCT ep0.group_id, ep0.id FROM essential t
          JOIN pgmemory.episodes ep0 ON ep0.group_id = t.group_id AND ep0.tsv @@ t.tq
         AND ep0.group_id = ANY (p_groups)
         WHERE NOT EXISTS (SELECT FROM todo x WHERE x.group_id = ep0.group_id AND x.id = ep0.id)
           AND (p_known_at IS NULL OR ep0.recorded_at <= p_known_at)
           AND (p_as_of IS NULL OR ep0.valid_at <= p_as_of))
    SELECT x.id, x.score FROM scored x
    UNION ALL
    SELECT ep.id, sum(t.idf * pgmemory.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
                                                   length(ep.tsv), t.avgdl))
      FROM more d JOIN pgmemory.episodes ep ON ep.group_id = ANY (p_groups) AND ep.group_id = d.group_id AND ep.id = d.id
      JOIN t ON t.group_id = ep.group_id AND ep.tsv @@ t.tq
     GROUP BY ep.group_id, ep.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;
