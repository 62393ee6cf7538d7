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
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_terms(p_kind text, p_groups text[], p_query text, p_k integer)
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
DROP FUNCTION IF EXISTS pgmemory_internal.bm25_terms(text, text[], text);

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
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_term(p_tf double precision, p_len integer, p_avgdl double precision)
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

-- Facts go further (the edge-only recipe's full text, and at 100k facts most of a search):
-- exact top p_k by upper bounds over sets of lexemes. A lexeme's share is below 1.3 x idf, so
-- a fact can beat the current p_k-th score (theta) only if the bounds of the lexemes it holds
-- add up to theta. The query's lexemes (at most 10 units: beyond that the commonest form one
-- unit, any of them) are combined into every set, highest bound first:
--   1. the facts holding every unit of each of the first 2 x n sets (GIN intersections, few
--      rows) are scored and theta raised, while a set's bound can still beat theta; then,
--      while fewer than p_k facts are scored, the facts of single units, rarest first;
--   2. one query reads the facts not scored yet that hold a (smallest) set whose bound reaches
--      theta (with theta 0: any unit); a set holding one read whole in step 1 is left out.
-- Each step reads the GIN index alone (a MATERIALIZED step without the view test, which the
-- planner otherwise ANDs with the bitmap of a partial index on current facts: ~97k entries per
-- lexeme at 100k facts), carrying the tsvector, so scoring needs no second visit to the table.
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    terms_group text[];
    terms_idf double precision[];
    terms_tq tsquery[];
    terms_avgdl double precision[];
    unit_tq tsquery[];           -- the lexemes, rarest first; the last may be several (OR)
    unit_bound double precision[];
    n integer;
    masks integer[];             -- every non-empty set of units, highest bound first
    mask_bound double precision[];
    theta double precision := 0;
    seen bigint[] := '{}';
    seen_score double precision[] := '{}';
    done integer[] := '{}';      -- the sets whose facts are all scored
    probe tsquery;
    i integer;
    j integer;
BEGIN
    SELECT array_agg(t.group_id ORDER BY t.df, t.tq::text), array_agg(t.idf ORDER BY t.df, t.tq::text),
           array_agg(t.tq ORDER BY t.df, t.tq::text), array_agg(t.avgdl ORDER BY t.df, t.tq::text)
      INTO terms_group, terms_idf, terms_tq, terms_avgdl
      FROM pgmemory_internal.bm25_terms('facts', p_groups, p_query, p_k) t;
    IF terms_tq IS NULL OR p_k < 1 THEN
        RETURN;
    END IF;
    -- Units: one per lexeme (statistics are per group: a lexeme of several groups is one unit with
    -- the largest bound), the commonest merged into the tenth.
    SELECT array_agg(u.tq ORDER BY u.r), array_agg(u.b ORDER BY u.r) INTO unit_tq, unit_bound
      FROM (SELECT least(x.r, 10) AS r, string_agg(x.tq::text, ' | ')::tsquery AS tq, sum(x.b) AS b
              FROM (SELECT row_number() OVER (ORDER BY min(w.ord)) AS r, w.tq, max(1.3 * w.idf) AS b
                      FROM unnest(terms_tq, terms_idf) WITH ORDINALITY AS w (tq, idf, ord)
                     GROUP BY w.tq) x
             GROUP BY least(x.r, 10)) u;
    n := cardinality(unit_tq);
    SELECT array_agg(m.mask ORDER BY m.b DESC, m.mask), array_agg(m.b ORDER BY m.b DESC, m.mask)
      INTO masks, mask_bound
      FROM (SELECT g AS mask, (SELECT sum(unit_bound[b + 1]) FROM generate_series(0, n - 1) AS b
                                WHERE g & (1 << b) <> 0) AS b
              FROM generate_series(1, (1 << n) - 1) AS g) m;
    -- Step 1: the facts holding whole sets, best sets first (at most 2 x n sets), then, while
    -- fewer than p_k facts are scored, single units, rarest first.
    FOR i IN 1 .. cardinality(masks) + n LOOP
        IF i <= cardinality(masks) THEN
            j := masks[i];
            EXIT WHEN i > 2 * n AND cardinality(seen) >= p_k;
            CONTINUE WHEN i > 2 * n;
            EXIT WHEN mask_bound[i] < theta OR (theta > 0 AND mask_bound[i] = theta);
        ELSE
            EXIT WHEN cardinality(seen) >= p_k;
            j := 1 << (i - cardinality(masks) - 1);
            CONTINUE WHEN j = ANY (done);
        END IF;
        probe := (SELECT string_agg('(' || unit_tq[b + 1]::text || ')', ' & ')::tsquery
                    FROM generate_series(0, n - 1) AS b WHERE j & (1 << b) <> 0);
        WITH found AS MATERIALIZED (
            SELECT f0.version_id, f0.group_id, f0.tsv, f0.valid, f0.recorded, f0.relation, f0.is_event
              FROM pgmemory.facts f0
             WHERE f0.group_id = ANY (p_groups) AND f0.tsv @@ probe
               AND NOT EXISTS (SELECT FROM unnest(seen) AS y (id) WHERE y.id = f0.version_id)),
        fresh AS (
            SELECT x.version_id, sum(w.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], x.tsv, w.tq, 0),
                                                                length(x.tsv), w.avgdl)) AS s
              FROM found x
              JOIN unnest(terms_group, terms_idf, terms_tq, terms_avgdl) AS w (group_id, idf, tq, avgdl)
                ON w.group_id = x.group_id AND x.tsv @@ w.tq
             WHERE pgmemory_internal.fact_in_view(x.valid, x.recorded, x.relation, p_point, p_known_at,
                                         p_superseded, p_relations, p_bounds, x.is_event)
             GROUP BY x.version_id)
        SELECT seen || coalesce(array_agg(fresh.version_id), '{}'), seen_score || coalesce(array_agg(fresh.s), '{}')
          INTO seen, seen_score FROM fresh;
        done := done || j;
        IF cardinality(seen) >= p_k THEN
            theta := (SELECT s FROM unnest(seen_score) AS s ORDER BY s DESC OFFSET p_k - 1 LIMIT 1);
        END IF;
    END LOOP;
    -- Step 2: every other fact that could still reach theta: it holds a set whose bound does
    -- (the smallest such sets suffice; with theta 0, any single unit).
    probe := (SELECT string_agg('(' || (SELECT string_agg('(' || unit_tq[b + 1]::text || ')', ' & ')
                                          FROM generate_series(0, n - 1) AS b WHERE m.mask & (1 << b) <> 0) || ')', ' | ')
                FROM unnest(masks, mask_bound) AS m (mask, bound)
               WHERE m.bound >= theta AND (theta = 0 AND m.mask & (m.mask - 1) = 0
                     OR theta > 0 AND NOT EXISTS (  -- minimal: no unit can be left out
                         SELECT FROM generate_series(0, n - 1) AS b
                          WHERE m.mask & (1 << b) <> 0 AND m.bound - unit_bound[b + 1] >= theta))
                 -- a set none of whose facts is unscored: it holds a set read whole in step 1
                 AND NOT EXISTS (SELECT FROM unnest(done) AS d WHERE d & m.mask = d))::tsquery;
    RETURN QUERY
    WITH found AS MATERIALIZED (
        SELECT f0.version_id, f0.group_id, f0.tsv, f0.valid, f0.recorded, f0.relation, f0.is_event
          FROM pgmemory.facts f0
         WHERE probe IS NOT NULL AND f0.group_id = ANY (p_groups) AND f0.tsv @@ probe
           AND NOT EXISTS (SELECT FROM unnest(seen) AS y (id) WHERE y.id = f0.version_id)),
    fresh AS (
        SELECT x.version_id, sum(w.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], x.tsv, w.tq, 0),
                                                            length(x.tsv), w.avgdl)) AS s
          FROM found x
          JOIN unnest(terms_group, terms_idf, terms_tq, terms_avgdl) AS w (group_id, idf, tq, avgdl)
            ON w.group_id = x.group_id AND x.tsv @@ w.tq
         WHERE pgmemory_internal.fact_in_view(x.valid, x.recorded, x.relation, p_point, p_known_at,
                                     p_superseded, p_relations, p_bounds, x.is_event)
         GROUP BY x.version_id)
    SELECT a.version_id, a.s FROM (
        SELECT fresh.version_id, fresh.s FROM fresh
        UNION ALL SELECT * FROM unnest(seen, seen_score)) a (version_id, s)
     ORDER BY a.s DESC, a.version_id LIMIT p_k;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    WITH t AS MATERIALIZED (SELECT * FROM pgmemory_internal.bm25_terms('entities', p_groups, p_query, p_k)),
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
        SELECT e.group_id, e.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0),
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
    SELECT e.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0),
                                                   length(e.tsv), t.avgdl))
      FROM more d JOIN pgmemory.entities e ON e.group_id = ANY (p_groups) AND e.group_id = d.group_id AND e.id = d.id
      JOIN t ON t.group_id = e.group_id AND e.tsv @@ t.tq
     GROUP BY e.group_id, e.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    WITH t AS MATERIALIZED (SELECT * FROM pgmemory_internal.bm25_terms('episodes', p_groups, p_query, p_k)),
    how AS MATERIALIZED (SELECT coalesce(sum(t.df) FILTER (WHERE t.common), 0) >= 50 * p_k AS prune FROM t),
    todo AS MATERIALIZED (  -- step 1: documents with a rare lexeme (with any lexeme, unpruned)
        SELECT DISTINCT ep0.group_id, ep0.id FROM t
          JOIN pgmemory.episodes ep0 ON ep0.group_id = t.group_id AND ep0.tsv @@ t.tq
         AND ep0.group_id = ANY (p_groups)
         WHERE (NOT t.common OR NOT (SELECT prune FROM how))
           AND (p_known_at IS NULL OR ep0.recorded_at <= p_known_at)
           AND (p_as_of IS NULL OR ep0.valid_at <= p_as_of)),
    scored AS MATERIALIZED (
        SELECT ep.group_id, ep.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
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
    SELECT ep.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
                                                   length(ep.tsv), t.avgdl))
      FROM more d JOIN pgmemory.episodes ep ON ep.group_id = ANY (p_groups) AND ep.group_id = d.group_id AND ep.id = d.id
      JOIN t ON t.group_id = ep.group_id AND ep.tsv @@ t.tq
     GROUP BY ep.group_id, ep.id
     ORDER BY 2 DESC, 1 LIMIT p_k
$$;
